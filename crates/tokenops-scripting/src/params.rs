//! Script parameters: their one declaration form, read from the script's own source, and the
//! fitting of a run's overrides to those declarations.
//!
//! A parameter is declared on a line comment of its own, which the Rhai compiler ignores:
//!
//! ```text
//! // @param NAME: TYPE [= DEFAULT] [-- DESCRIPTION]
//! // @param target: decimal = "1000.00" -- the balance to keep in the account
//! // @param account: string -- the account to sweep (required: no default)
//! // @param dry: boolean = false
//! ```
//!
//! - NAME: `[a-zA-Z_][a-zA-Z0-9_]{0,63}`, unique in the script; the script sees it as a
//!   constant of that name. Not `event` (the event of an EVENT automation) nor a word of the
//!   language (`let`, `fn`, `true`, …).
//! - TYPE: `string`, `integer`, `decimal` or `boolean` (lower case in the source; the API
//!   spells them `STRING`, `INTEGER`, `DECIMAL`, `BOOLEAN`).
//! - DEFAULT, optional, a Rhai literal of the type: a string in double quotes (escapes `\"`,
//!   `\\`, `\n`, `\r`, `\t`); an integer (`-12`, 64-bit); a decimal as a quoted string of digits
//!   with an optional point and at most 18 fraction digits (`"1000.00"`), which the script
//!   receives as a string in canonical form (`"1000"`); `true` or `false`. A parameter without
//!   a default is required: every run must give it a value.
//! - DESCRIPTION, optional, the rest of the line after `--`.
//!
//! The comment must start its line (indentation allowed) as `//`, spaces, then `@param`; any
//! other comment, `///` doc comments included, is left alone.

use std::collections::{BTreeMap, BTreeSet};

use crate::ScriptError;
use crate::decimal::Decimal;

pub const MAX_NAME_LEN: usize = 64;

/// Names a parameter cannot take: the event's variable and the words of the language.
const RESERVED: &[&str] = &[
    "event",
    "true",
    "false",
    "let",
    "const",
    "if",
    "else",
    "switch",
    "do",
    "while",
    "until",
    "loop",
    "for",
    "in",
    "continue",
    "break",
    "return",
    "throw",
    "try",
    "catch",
    "import",
    "export",
    "as",
    "global",
    "fn",
    "private",
    "this",
    "print",
    "debug",
    "type_of",
    "eval",
    "Fn",
    "call",
    "curry",
    "is_shared",
    "is_def_var",
    "is_def_fn",
    "_",
];
pub const MAX_DESCRIPTION_LEN: usize = 500;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamDecl {
    pub name: String,
    pub kind: ParamKind,
    pub default: Option<ParamValue>,
    pub description: Option<String>,
}

impl ParamDecl {
    pub fn required(&self) -> bool {
        self.default.is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParamKind {
    String,
    Integer,
    Decimal,
    Boolean,
}

impl ParamKind {
    pub const ALL: [ParamKind; 4] = [ParamKind::String, ParamKind::Integer, ParamKind::Decimal, ParamKind::Boolean];

    /// The API's spelling, upper case like every enumeration of the API.
    pub fn as_str(self) -> &'static str {
        match self {
            ParamKind::String => "STRING",
            ParamKind::Integer => "INTEGER",
            ParamKind::Decimal => "DECIMAL",
            ParamKind::Boolean => "BOOLEAN",
        }
    }

    /// Either spelling, case-insensitively: the API's `DECIMAL` and the source's `decimal`.
    pub fn parse(text: &str) -> Option<ParamKind> {
        ParamKind::ALL.into_iter().find(|kind| kind.as_str().eq_ignore_ascii_case(text))
    }
}

impl std::fmt::Display for ParamKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamValue {
    String(String),
    Integer(i64),
    /// Canonical form (see `Decimal::canonical`).
    Decimal(String),
    Boolean(bool),
}

impl ParamValue {
    pub fn kind(&self) -> ParamKind {
        match self {
            ParamValue::String(_) => ParamKind::String,
            ParamValue::Integer(_) => ParamKind::Integer,
            ParamValue::Decimal(_) => ParamKind::Decimal,
            ParamValue::Boolean(_) => ParamKind::Boolean,
        }
    }

    /// The value as the API shows it: a decimal stays a string.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            ParamValue::String(s) | ParamValue::Decimal(s) => serde_json::Value::String(s.clone()),
            ParamValue::Integer(i) => serde_json::Value::from(*i),
            ParamValue::Boolean(b) => serde_json::Value::Bool(*b),
        }
    }

    pub(crate) fn to_dynamic(&self) -> rhai::Dynamic {
        match self {
            ParamValue::String(s) | ParamValue::Decimal(s) => rhai::Dynamic::from(s.clone()),
            ParamValue::Integer(i) => rhai::Dynamic::from(*i),
            ParamValue::Boolean(b) => rhai::Dynamic::from(*b),
        }
    }
}

/// Reads every `@param` declaration of `source`, in order.
pub fn extract(source: &str) -> Result<Vec<ParamDecl>, ScriptError> {
    let mut decls: Vec<ParamDecl> = Vec::new();
    for (index, line) in source.lines().enumerate() {
        let line_no = index + 1;
        let indent = line.len() - line.trim_start().len();
        let Some(after_slashes) = line[indent..].strip_prefix("//") else { continue };
        if after_slashes.starts_with('/') || after_slashes.starts_with('!') {
            continue;
        }
        let spaces = after_slashes.len() - after_slashes.trim_start().len();
        let Some(rest) = after_slashes[spaces..].strip_prefix("@param") else { continue };
        // `@parameters` and the like are prose, not a declaration.
        if rest.chars().next().is_some_and(|c| !c.is_whitespace()) {
            continue;
        }
        let offset = indent + 2 + spaces + "@param".len();
        let mut cursor = Cursor { line, pos: offset, line_no };
        let decl = cursor.declaration()?;
        if decls.iter().any(|d| d.name == decl.name) {
            return Err(ScriptError::at(
                format!("parameter \"{}\" is declared twice", decl.name),
                line_no,
                column_of(line, offset) + 1,
            ));
        }
        decls.push(decl);
    }
    Ok(decls)
}

/// 1-based character column of byte offset `at`.
fn column_of(line: &str, at: usize) -> usize {
    line[..at.min(line.len())].chars().count() + 1
}

struct Cursor<'a> {
    line: &'a str,
    pos: usize,
    line_no: usize,
}

const FORM: &str = "expected `// @param NAME: TYPE [= DEFAULT] [-- DESCRIPTION]`";

impl Cursor<'_> {
    fn error(&self, message: impl Into<String>) -> ScriptError {
        ScriptError::at(message, self.line_no, column_of(self.line, self.pos))
    }

    fn rest(&self) -> &str {
        &self.line[self.pos..]
    }

    fn skip_spaces(&mut self) -> usize {
        let rest = self.rest();
        let skipped = rest.len() - rest.trim_start().len();
        self.pos += skipped;
        skipped
    }

    fn word(&mut self) -> &str {
        let rest = &self.line[self.pos..];
        let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    fn declaration(&mut self) -> Result<ParamDecl, ScriptError> {
        if self.skip_spaces() == 0 {
            return Err(self.error(FORM));
        }
        let name_at = self.pos;
        let name = self.word().to_owned();
        let valid =
            name.len() <= MAX_NAME_LEN && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if RESERVED.contains(&name.as_str()) {
            self.pos = name_at;
            return Err(self.error(format!("\"{name}\" is reserved and cannot name a parameter")));
        }
        if !valid {
            self.pos = name_at;
            return Err(self.error(format!(
                "a parameter name is a letter or `_` then up to {} letters, digits or `_`; {FORM}",
                MAX_NAME_LEN - 1
            )));
        }
        self.skip_spaces();
        if !self.rest().starts_with(':') {
            return Err(self.error(format!("expected `:` after the parameter name; {FORM}")));
        }
        self.pos += 1;
        self.skip_spaces();
        let kind_at = self.pos;
        let kind_word = self.word().to_owned();
        let kind =
            ParamKind::ALL.into_iter().find(|k| k.as_str().to_ascii_lowercase() == kind_word).ok_or_else(|| {
                self.pos = kind_at;
                self.error(format!(
                    "unknown parameter type \"{}\": expected string, integer, decimal or boolean",
                    kind_of_rest(&self.line[kind_at..])
                ))
            })?;
        self.skip_spaces();
        let default = if self.rest().starts_with('=') {
            self.pos += 1;
            self.skip_spaces();
            Some(self.literal(kind, &name)?)
        } else {
            None
        };
        self.skip_spaces();
        let description = if self.rest().is_empty() {
            None
        } else if let Some(text) = self.rest().strip_prefix("--") {
            let text = text.trim();
            if text.chars().count() > MAX_DESCRIPTION_LEN {
                self.pos += 2;
                return Err(self.error(format!("a parameter description has at most {MAX_DESCRIPTION_LEN} characters")));
            }
            (!text.is_empty()).then(|| text.to_owned())
        } else {
            return Err(self.error(format!("unexpected text; {FORM}")));
        };
        Ok(ParamDecl { name, kind, default, description })
    }

    fn literal(&mut self, kind: ParamKind, name: &str) -> Result<ParamValue, ScriptError> {
        let at = self.pos;
        let misfit = |cursor: &mut Cursor<'_>, expected: &str| {
            cursor.pos = at;
            cursor.error(format!("the default of \"{name}\" must be {expected}"))
        };
        match kind {
            ParamKind::String => {
                self.quoted().map(ParamValue::String).ok_or_else(|| misfit(self, "a string in double quotes"))
            }
            ParamKind::Decimal => {
                let text = self.quoted();
                match text.as_deref().and_then(|t| Decimal::parse(t, false)) {
                    Some(d) => Ok(ParamValue::Decimal(d.canonical())),
                    None => Err(misfit(
                        self,
                        "a decimal in double quotes: digits with an optional point and at most 18 fraction digits",
                    )),
                }
            }
            ParamKind::Integer => {
                let rest = self.rest();
                let len = rest.find(char::is_whitespace).unwrap_or(rest.len());
                match rest[..len].parse::<i64>() {
                    Ok(value) => {
                        self.pos += len;
                        Ok(ParamValue::Integer(value))
                    }
                    Err(_) => Err(misfit(self, "a 64-bit integer")),
                }
            }
            ParamKind::Boolean => match self.word() {
                "true" => Ok(ParamValue::Boolean(true)),
                "false" => Ok(ParamValue::Boolean(false)),
                _ => Err(misfit(self, "true or false")),
            },
        }
    }

    /// A double-quoted string with the common escapes; `None` (cursor unmoved) if there is none.
    fn quoted(&mut self) -> Option<String> {
        let rest = self.rest().strip_prefix('"')?;
        let mut out = String::new();
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += 1 + i + 1;
                    return Some(out);
                }
                '\\' => out.push(match chars.next()?.1 {
                    '"' => '"',
                    '\\' => '\\',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    _ => return None,
                }),
                c => out.push(c),
            }
        }
        None
    }
}

fn kind_of_rest(rest: &str) -> &str {
    let end = rest.find(|c: char| c.is_whitespace() || c == '=' || c == '-').unwrap_or(rest.len());
    &rest[..end]
}

/// One override of a run: `{key, value, type}` as the API takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    pub key: String,
    /// A JSON string, number or boolean (see `fit` for what each type accepts).
    pub value: serde_json::Value,
    /// The type the caller says the value has: `STRING`, `INTEGER`, `DECIMAL` or `BOOLEAN`,
    /// case-insensitive; it must be the declared type.
    pub kind: String,
}

/// Every declared parameter's value for a run: the override where one is given, else the
/// default. Each reason an override does not fit is one message (the API's 422 details):
/// an unknown or repeated key, a type other than the declared one, a value that does not parse
/// as that type, a required parameter left without a value.
///
/// What a value may be: STRING a JSON string; INTEGER a JSON integer or a string of one;
/// DECIMAL a string of digits with an optional point and at most 18 fraction digits, or a JSON
/// integer (a JSON fraction such as `12.5` is refused: it may already have lost digits as a
/// float); BOOLEAN `true`/`false` as JSON booleans or strings.
pub fn fit(decls: &[ParamDecl], overrides: &[Override]) -> Result<BTreeMap<String, ParamValue>, Vec<String>> {
    let mut errors = Vec::new();
    let mut given: BTreeMap<&str, ParamValue> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for o in overrides {
        if !seen.insert(o.key.as_str()) {
            errors.push(format!("parameter \"{}\" is given more than once", o.key));
            continue;
        }
        let Some(decl) = decls.iter().find(|d| d.name == o.key) else {
            errors.push(format!("the script declares no parameter \"{}\"", o.key));
            continue;
        };
        match ParamKind::parse(&o.kind) {
            None => {
                errors.push(format!(
                    "parameter \"{}\": unknown type \"{}\" (expected STRING, INTEGER, DECIMAL or BOOLEAN)",
                    o.key, o.kind
                ));
                continue;
            }
            Some(kind) if kind != decl.kind => {
                errors.push(format!("parameter \"{}\" is declared {}, not {}", o.key, decl.kind, kind));
                continue;
            }
            Some(_) => {}
        }
        match value_of(decl.kind, &o.value) {
            Some(value) => {
                given.insert(decl.name.as_str(), value);
            }
            None => errors.push(format!("parameter \"{}\": {} is not a valid {}", o.key, o.value, decl.kind)),
        }
    }
    let mut values = BTreeMap::new();
    for decl in decls {
        match given.remove(decl.name.as_str()).or_else(|| decl.default.clone()) {
            Some(value) => {
                values.insert(decl.name.clone(), value);
            }
            None if seen.contains(decl.name.as_str()) => {}
            None => errors.push(format!("parameter \"{}\" is required: it has no default", decl.name)),
        }
    }
    if errors.is_empty() { Ok(values) } else { Err(errors) }
}

fn value_of(kind: ParamKind, value: &serde_json::Value) -> Option<ParamValue> {
    use serde_json::Value as J;
    match (kind, value) {
        (ParamKind::String, J::String(s)) => Some(ParamValue::String(s.clone())),
        (ParamKind::Integer, J::Number(n)) => n.as_i64().map(ParamValue::Integer),
        (ParamKind::Integer, J::String(s)) => s.parse().ok().map(ParamValue::Integer),
        (ParamKind::Decimal, J::String(s)) => Decimal::parse(s, false).map(|d| ParamValue::Decimal(d.canonical())),
        (ParamKind::Decimal, J::Number(n)) => n
            .as_u64()
            .and_then(|u| i64::try_from(u).ok())
            .map(|i| ParamValue::Decimal(Decimal::from_integer(i).canonical())),
        (ParamKind::Boolean, J::Bool(b)) => Some(ParamValue::Boolean(*b)),
        (ParamKind::Boolean, J::String(s)) => match s.as_str() {
            "true" => Some(ParamValue::Boolean(true)),
            "false" => Some(ParamValue::Boolean(false)),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(line: &str) -> Result<ParamDecl, ScriptError> {
        extract(line).map(|mut d| d.remove(0))
    }

    #[test]
    fn reads_every_form() {
        let source = r#"
// @param target: decimal = "1000.00" -- the balance to keep in the account
  //@param account: string -- the account to sweep
// @param dry: boolean = false
// @param rounds:integer=-3
// @param label: string = "a \"quoted\" -- not a description"
// @param note: string --
/// @param ignored: string
// @parameters: prose, not a declaration
let x = 1; // @param trailing: string (not at the start of a line)
"#;
        let decls = extract(source).expect("a value");
        let names: Vec<_> = decls.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["target", "account", "dry", "rounds", "label", "note"]);
        assert_eq!(decls[0].kind, ParamKind::Decimal);
        assert_eq!(decls[0].default, Some(ParamValue::Decimal("1000".into())));
        assert_eq!(decls[0].description.as_deref(), Some("the balance to keep in the account"));
        assert_eq!(decls[1].default, None);
        assert!(decls[1].required());
        assert_eq!(decls[2].default, Some(ParamValue::Boolean(false)));
        assert_eq!(decls[3].default, Some(ParamValue::Integer(-3)));
        assert_eq!(decls[4].default, Some(ParamValue::String("a \"quoted\" -- not a description".into())));
        assert_eq!(decls[4].description, None);
        assert_eq!(decls[5].description, None, "an empty description is none");
    }

    #[test]
    fn names_may_be_64_characters() {
        let name = format!("_{}", "a".repeat(63));
        assert_eq!(one(&format!("// @param {name}: integer")).expect("a value").name, name);
        let err = one(&format!("// @param {name}b: integer")).expect_err("an error");
        assert_eq!((err.line, err.column), (Some(1), Some(11)), "{err}");
    }

    #[test]
    fn each_malformed_declaration_is_an_error_at_its_place() {
        let cases = [
            ("// @param", 1, 10, "expected"),
            ("// @param 1x: integer", 1, 11, "parameter name"),
            ("// @param event: string", 1, 11, "\"event\" is reserved"),
            ("// @param let: string", 1, 11, "reserved"),
            ("// @param x integer", 1, 13, "expected `:`"),
            ("// @param x: money", 1, 14, "unknown parameter type \"money\""),
            ("// @param x: String", 1, 14, "unknown parameter type"),
            ("// @param x: integer = 1.5", 1, 24, "must be a 64-bit integer"),
            ("// @param x: integer = 99999999999999999999", 1, 24, "64-bit integer"),
            ("// @param x: decimal = 12.5", 1, 24, "a decimal in double quotes"),
            ("// @param x: decimal = \"-1\"", 1, 24, "a decimal"),
            ("// @param x: decimal = \"0.1234567890123456789\"", 1, 24, "at most 18"),
            ("// @param x: string = unquoted", 1, 23, "a string in double quotes"),
            ("// @param x: string = \"open", 1, 23, "a string in double quotes"),
            ("// @param x: boolean = yes", 1, 24, "true or false"),
            ("// @param x: boolean = true junk", 1, 29, "unexpected text"),
        ];
        for (line, l, c, needle) in cases {
            let err = one(line).expect_err("an error");
            assert_eq!((err.line, err.column), (Some(l), Some(c)), "{line}: {err}");
            assert!(err.message.contains(needle), "{line}: {err}");
        }
        let err = extract("let a = 1;\n// @param x: integer\n    // @param x: string\n").expect_err("an error");
        assert_eq!((err.line, err.column), (Some(3), Some(15)));
        assert!(err.message.contains("declared twice"), "{err}");
        assert_eq!(err.to_string(), "line 3, column 15: parameter \"x\" is declared twice");
    }

    #[test]
    fn kinds_print_upper_case_and_parse_either_case() {
        for kind in ParamKind::ALL {
            assert_eq!(ParamKind::parse(kind.as_str()), Some(kind));
            assert_eq!(ParamKind::parse(&kind.as_str().to_lowercase()), Some(kind));
        }
        assert_eq!(ParamKind::parse("float"), None);
    }

    fn decls() -> Vec<ParamDecl> {
        extract(
            "// @param target: decimal = \"1000.00\"\n// @param account: string\n// @param rounds: integer = 1\n// @param dry: boolean = false\n",
        )
        .expect("a value")
    }

    fn o(key: &str, value: serde_json::Value, kind: &str) -> Override {
        Override { key: key.into(), value, kind: kind.into() }
    }

    #[test]
    fn fit_takes_overrides_and_fills_defaults() {
        let values = fit(&decls(), &[o("account", json!("acc-1"), "STRING"), o("target", json!("250.50"), "decimal")])
            .expect("a value");
        assert_eq!(values["target"], ParamValue::Decimal("250.5".into()));
        assert_eq!(values["account"], ParamValue::String("acc-1".into()));
        assert_eq!(values["rounds"], ParamValue::Integer(1));
        assert_eq!(values["dry"], ParamValue::Boolean(false));
        let values = fit(
            &decls(),
            &[
                o("account", json!("a"), "STRING"),
                o("rounds", json!("7"), "INTEGER"),
                o("dry", json!("true"), "BOOLEAN"),
                o("target", json!(5), "DECIMAL"),
            ],
        )
        .expect("a value");
        assert_eq!(values["rounds"], ParamValue::Integer(7));
        assert_eq!(values["dry"], ParamValue::Boolean(true));
        assert_eq!(values["target"], ParamValue::Decimal("5".into()));
    }

    #[test]
    fn fit_names_each_reason_an_override_does_not_fit() {
        let cases: Vec<(Vec<Override>, &str)> = vec![
            (vec![o("nope", json!("1"), "STRING")], "declares no parameter \"nope\""),
            (vec![o("target", json!("1"), "INTEGER")], "declared DECIMAL, not INTEGER"),
            (vec![o("target", json!("1"), "MONEY")], "unknown type \"MONEY\""),
            (vec![o("target", json!("1.2.3"), "DECIMAL")], "is not a valid DECIMAL"),
            (vec![o("target", json!(12.5), "DECIMAL")], "is not a valid DECIMAL"),
            (vec![o("rounds", json!("x"), "INTEGER")], "is not a valid INTEGER"),
            (vec![o("dry", json!(1), "BOOLEAN")], "is not a valid BOOLEAN"),
            (vec![o("account", json!(1), "STRING")], "is not a valid STRING"),
            (vec![], "parameter \"account\" is required"),
            (vec![o("account", json!("a"), "STRING"), o("account", json!("b"), "STRING")], "more than once"),
        ];
        for (overrides, needle) in cases {
            let errors = fit(&decls(), &overrides).expect_err("an error");
            assert!(errors.iter().any(|e| e.contains(needle)), "{needle}: {errors:?}");
        }
        let errors =
            fit(&decls(), &[o("nope", json!(1), "STRING"), o("rounds", json!(true), "INTEGER")]).expect_err("an error");
        assert_eq!(errors.len(), 3, "every reason at once: {errors:?}");
    }
}
