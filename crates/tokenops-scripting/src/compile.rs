//! Compiling a script for publication: the Rhai compiler's verdict with its position, the
//! declared parameters, and the imports, each resolved (transitively, without cycles) against
//! the scripts the caller knows.

use std::collections::BTreeMap;

use rhai::packages::{Package, StandardPackage};
use std::sync::Arc;

use rhai::{AST, ASTNode, Engine, Expr, Module, OptimizationLevel, Position, Scope, Stmt};

use crate::ScriptError;
use crate::params::{self, ParamDecl, ParamKind, ParamValue};
use crate::sandbox::Limits;

/// Where imports are looked up: another script's source by the name it is imported with.
pub trait DependencySource {
    fn source_of(&self, name: &str) -> Option<String>;
}

/// No dependencies at all.
impl DependencySource for () {
    fn source_of(&self, _name: &str) -> Option<String> {
        None
    }
}

impl DependencySource for std::collections::BTreeMap<String, String> {
    fn source_of(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

impl DependencySource for std::collections::HashMap<String, String> {
    fn source_of(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// What publishing a script records about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    pub params: Vec<ParamDecl>,
    /// The scripts this one imports directly, in the order of their first import, each once.
    /// Their own imports were checked too, but are theirs to record.
    pub imports: Vec<String>,
}

/// The sandbox's engine, configured once: the language, the limits and the standard library
/// (shared by every run). Building one takes a few hundred microseconds; keep one per process.
pub struct Compiler {
    pub(crate) engine: Engine,
    pub(crate) package: Arc<Module>,
    pub(crate) limits: Limits,
}

impl std::fmt::Debug for Compiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiler").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl Default for Compiler {
    fn default() -> Compiler {
        Compiler::new(Limits::default())
    }
}

/// The name the event of an EVENT automation has in the script (`()` for other triggers).
pub const EVENT_VARIABLE: &str = "event";

impl Compiler {
    pub fn new(limits: Limits) -> Compiler {
        let package = StandardPackage::new().as_shared_module();
        let mut engine = Engine::new_raw();
        engine.register_global_module(package.clone());
        configure(&mut engine, &limits);
        // Checking only: constants are not folded into an AST nobody runs.
        engine.set_optimization_level(OptimizationLevel::None);
        Compiler { engine, package, limits }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Compiles `source`, the script called `name`, and every script it imports.
    pub fn compile(&self, name: &str, source: &str, deps: &dyn DependencySource) -> Result<Compiled, ScriptError> {
        let params = params::extract(source)?;
        let mut scope = Scope::new();
        for decl in &params {
            scope.push_constant_dynamic(decl.name.as_str(), sample(decl).to_dynamic());
        }
        scope.push_constant(EVENT_VARIABLE, ());
        let ast = parse(&self.engine, &scope, source)?;
        let imports = resolve_imports(&self.engine, name, &ast, deps)?.direct;
        Ok(Compiled { params, imports })
    }
}

/// The sandbox, applied to every engine that compiles or runs a script.
pub(crate) fn configure(engine: &mut Engine, limits: &Limits) {
    engine
        .set_max_operations(limits.max_operations)
        .set_max_call_levels(limits.max_call_depth)
        .set_max_expr_depths(limits.max_expr_depth, limits.max_expr_depth)
        .set_max_string_size(limits.max_string_len)
        .set_max_array_size(limits.max_array_len)
        .set_max_map_size(limits.max_map_len)
        .set_max_variables(limits.max_variables)
        .set_max_modules(limits.max_modules)
        .set_max_functions(limits.max_functions)
        // A typo in a variable name is a compile error at publication, not a failed run at 17:00.
        .set_strict_variables(true);
    // `eval` would compile code the publication never saw.
    engine.disable_symbol("eval");
    // Imports resolve only to published scripts: never the file system (Rhai's default).
    engine.set_module_resolver(rhai::module_resolvers::DummyModuleResolver::new());
    engine.on_print(|_| {});
    engine.on_debug(|_, _, _| {});
}

/// A value of the declared type, for checking the script with its parameters in scope.
fn sample(decl: &ParamDecl) -> ParamValue {
    decl.default.clone().unwrap_or(match decl.kind {
        ParamKind::String => ParamValue::String(String::new()),
        ParamKind::Integer => ParamValue::Integer(0),
        ParamKind::Decimal => ParamValue::Decimal("0".into()),
        ParamKind::Boolean => ParamValue::Boolean(false),
    })
}

/// The scope a dependency's top level runs in (checked at publication, run as a module when
/// imported): its own declared parameters as constants at their defaults (without one, the
/// type's empty value), and no event. So a script published on its own, using its parameters,
/// can also be imported.
pub(crate) fn module_scope(source: &str) -> Result<Scope<'static>, ScriptError> {
    let mut scope = Scope::new();
    for decl in params::extract(source)? {
        scope.push_constant_dynamic(decl.name.clone(), sample(&decl).to_dynamic());
    }
    Ok(scope)
}

pub(crate) fn parse(engine: &Engine, scope: &Scope, source: &str) -> Result<AST, ScriptError> {
    engine.compile_with_scope(scope, source).map_err(|err| ScriptError::at_position(err.0.to_string(), err.1))
}

/// The scripts reached from one through imports.
pub(crate) struct Graph {
    /// Direct imports, in order of first import, each once.
    pub direct: Vec<String>,
    /// Every script reached, directly or not, by name.
    pub sources: BTreeMap<String, String>,
}

/// The imports of one AST with their positions, in source order; an import whose path is not
/// a string literal cannot be resolved at publication and is refused.
fn imports_of(ast: &AST) -> Result<Vec<(String, Position)>, ScriptError> {
    let mut found = Vec::new();
    let mut dynamic = None;
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Stmt(Stmt::Import(import, pos))) = path.last() {
            match &import.0 {
                Expr::StringConstant(name, _) => found.push((name.to_string(), *pos)),
                _ => dynamic = Some(*pos),
            }
        }
        true
    });
    match dynamic {
        Some(pos) => {
            Err(ScriptError::at_position("an import names a script in double quotes: import \"name\" as alias;", pos))
        }
        None => Ok(found),
    }
}

/// The direct imports of `root`, after checking the whole graph below it: each import names a
/// script that exists and compiles, and no chain of imports comes back to a script on it.
/// Errors point at the root's import through which the fault is reached.
pub(crate) fn resolve_imports(
    engine: &Engine,
    root: &str,
    ast: &AST,
    deps: &dyn DependencySource,
) -> Result<Graph, ScriptError> {
    let mut direct: Vec<String> = Vec::new();
    let mut sources = BTreeMap::new();
    for (name, pos) in imports_of(ast)? {
        if direct.contains(&name) {
            continue;
        }
        let mut chain = vec![root.to_owned()];
        visit(engine, &name, deps, &mut chain, &mut sources)
            .map_err(|message| ScriptError::at_position(message, pos))?;
        direct.push(name);
    }
    Ok(Graph { direct, sources })
}

/// Checks `name` and what it imports, adding each to `checked`. `chain` is the path of imports
/// that led here, for naming a cycle.
fn visit(
    engine: &Engine,
    name: &str,
    deps: &dyn DependencySource,
    chain: &mut Vec<String>,
    checked: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    if chain.iter().any(|c| c == name) {
        return Err(format!("import cycle: {} → {name}", chain.join(" → ")));
    }
    let Some(source) = deps.source_of(name) else {
        return Err(match chain.as_slice() {
            [_] => format!("missing dependency \"{name}\": no such script"),
            [.., via] => format!("missing dependency \"{name}\" (imported by \"{via}\"): no such script"),
            [] => format!("missing dependency \"{name}\""),
        });
    };
    if checked.contains_key(name) {
        return Ok(());
    }
    let ast = module_scope(&source)
        .and_then(|scope| parse(engine, &scope, &source))
        .map_err(|err| format!("dependency \"{name}\" does not compile: {err}"))?;
    let imports = imports_of(&ast).map_err(|err| format!("dependency \"{name}\": {err}"))?;
    chain.push(name.to_owned());
    for (import, _) in imports {
        visit(engine, &import, deps, chain, checked)?;
    }
    chain.pop();
    checked.insert(name.to_owned(), source);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scripts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(n, s)| (n.to_string(), s.to_string())).collect()
    }

    /// Why script `s` of `source` does not compile, its imports read from `deps`.
    fn refusal(source: &str, deps: &dyn DependencySource) -> ScriptError {
        Compiler::default().compile("s", source, deps).expect_err("an error")
    }

    #[test]
    fn compiles_with_parameters_and_imports() {
        let deps = scripts(&[
            ("util", "fn half(x) { x / 2 }"),
            ("fmt", "import \"util\" as u; fn show(x) { `${u::half(x)}` }"),
        ]);
        let source = r#"
// @param target: decimal = "10.00" -- keep this much
// @param rounds: integer
import "fmt" as f;
import "util" as u;
import "fmt" as again;
let n = u::half(rounds);
f::show(n) + target + event
"#;
        let compiled = Compiler::default().compile("main", source, &deps).expect("a value");
        assert_eq!(compiled.imports, ["fmt", "util"]);
        assert_eq!(compiled.params.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["target", "rounds"]);
    }

    #[test]
    fn a_compile_error_has_the_compilers_message_and_position() {
        let err = refusal("let a = 1;\nlet b = ;\n", &());
        assert_eq!((err.line, err.column), (Some(2), Some(9)), "{err}");
        assert!(err.to_string().starts_with("line 2, column 9: "), "{err}");
        let err = refusal("let a = 1;\n  a + undefined_name\n", &());
        assert_eq!(err.line, Some(2), "strict variables: {err}");
        assert!(err.message.contains("undefined_name"), "{err}");
    }

    #[test]
    fn a_missing_import_is_named_at_its_import() {
        let err = refusal("let x = 1;\n   import \"nowhere\" as n;\n", &());
        assert_eq!((err.line, err.column), (Some(2), Some(4)), "{err}");
        assert!(err.message.contains("missing dependency \"nowhere\""), "{err}");
    }

    #[test]
    fn transitive_imports_must_resolve_and_compile() {
        let deps = scripts(&[("a", "import \"b\" as b; fn f() { 1 }"), ("b", "import \"c\" as c;")]);
        let err = refusal("import \"a\" as a;", &deps);
        assert!(err.message.contains("missing dependency \"c\" (imported by \"b\")"), "{err}");
        assert_eq!(err.line, Some(1));
        let deps = scripts(&[("a", "import \"b\" as b;"), ("b", "let = 2;")]);
        let err = refusal("import \"a\" as a;", &deps);
        assert!(err.message.contains("dependency \"b\" does not compile: line 1"), "{err}");
    }

    #[test]
    fn a_dependency_sees_its_own_parameters_at_their_defaults() {
        let deps =
            scripts(&[("lib", "// @param limit: integer = 5\n// @param label: string\nlet cap = limit + 1;\nlabel")]);
        let compiled = Compiler::default().compile("s", "import \"lib\" as l;\nl::cap", &deps).expect("compiles");
        assert_eq!(compiled.imports, ["lib"]);
        let deps = scripts(&[("lib", "let cap = limit + 1;")]);
        let err = refusal("import \"lib\" as l;", &deps);
        assert!(err.message.contains("dependency \"lib\" does not compile"), "undeclared stays an error: {err}");
    }

    #[test]
    fn an_import_cycle_is_refused() {
        let deps = scripts(&[("a", "import \"b\" as b;"), ("b", "import \"a\" as a;")]);
        let err = refusal("import \"a\" as a;", &deps);
        assert!(err.message.contains("import cycle: s → a → b → a"), "{err}");
        let deps = scripts(&[("a", "import \"s\" as s;")]);
        let err = refusal("import \"a\" as a;", &deps);
        assert!(err.message.contains("import cycle: s → a → s"), "{err}");
        let err = refusal("import \"s\" as me;", &scripts(&[("s", "")]));
        assert!(err.message.contains("import cycle: s → s"), "{err}");
    }

    #[test]
    fn an_import_path_must_be_a_literal_name() {
        let err = refusal("let n = \"a\";\nimport n as a;", &());
        assert!(err.message.contains("double quotes"), "{err}");
        assert_eq!(err.line, Some(2));
    }

    #[test]
    fn eval_does_not_compile() {
        let err = refusal("eval(\"1 + 1\")", &());
        assert_eq!(err.line, Some(1), "{err}");
    }

    #[test]
    fn a_malformed_param_is_a_compile_error() {
        let err = refusal("1\n// @param x: float\n", &());
        assert_eq!((err.line, err.column), (Some(2), Some(14)));
    }
}
