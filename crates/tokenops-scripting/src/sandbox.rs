//! Running a script: the limits of the sandbox, the host API the script calls (`Host`), and the
//! outcome of a run with its error named by kind.
//!
//! A run is synchronous and CPU-bound, and the host's calls block: callers run it on a thread
//! of its own with a stack of [`RUN_STACK_BYTES`], never on an async worker, nor on the
//! blocking pool, whose 2 MiB stacks a script can overflow. The run must stay on that thread
//! from start to end: its memory is that thread's allocations (`memory`).
//!
//! What the script may reach: the standard library of the language (no file, network, process
//! or clock beyond `timestamp()`), the scripts it imports, its parameters as constants, `event`,
//! the host functions below, and `print`/`debug`, which write to the run's log.
//!
//! | function | returns |
//! |---|---|
//! | `balance(account_ref)` | the account's balance as the API shows it (a map; amounts are strings) |
//! | `account(account_ref)` | the account (a map) |
//! | `operation(id)` | the operation (a map) |
//! | `operations(filter)`, `operations()` | a list of operations matching the filter map |
//! | `locks(account_ref)` | the account's locks (a list of maps) |
//! | `submit(request)` | submits a transaction (the body of `POST /api/transactions`); the result |
//! | `log(line)` | writes a line to the run's log |
//! | `decimal_add(a, b)`, `decimal_sub(a, b)` | exact sums of decimal strings, as a decimal string |
//! | `decimal_cmp(a, b)` | -1, 0 or 1 |
//! | `decimal(n)` | an integer as a decimal string |

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicIsize, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rhai::{
    Array, Dynamic, Engine, EvalAltResult, INT, ImmutableString, Map, Module, OptimizationLevel, Position, Scope,
};

use crate::Compiler;
use crate::compile::{DependencySource, EVENT_VARIABLE, configure, parse, resolve_imports};
use crate::convert::{MAX_VALUE_DEPTH, to_dynamic, to_json};
use crate::decimal::{Decimal, compare};
use crate::memory;
use crate::params::ParamValue;

/// The sandbox's bounds. Each ends a run that passes it with `LimitExceeded` (or `Timeout`).
/// Zero means no bound for the ones Rhai enforces (operations, call depth, expression depth,
/// sizes, variables, modules, functions), as Rhai has it, and nothing allowed for log lines,
/// submissions and memory: settings should refuse zero.
///
/// Memory is measured: the bytes the run's thread holds beyond what it held when the run
/// started, as the allocator counts them (`memory`), are checked before every operation, and
/// past `max_memory` the run ends. That bounds whatever holds them: values in variables, in
/// the frames of a recursion, in a function pointer's curried arguments or a closure's captured
/// ones, the engine and the compiled script, the run's log. Memory the process holds for a run
/// but the allocator does not count is outside the budget: the allocator's own overhead, the
/// thread's stack, and what the host's calls allocate and free for themselves (see
/// `RunState::call_host`). A binary without the counting allocator does not enforce it.
///
/// The sizes bound each value on its own, so that one operation cannot allocate much past the
/// budget before the next check: one value holds at most `max_string_len` bytes of text,
/// `max_array_len` array items and `max_map_len` map entries, nested values counting towards
/// their container (so a host result must fit too), and at most `max_variables` values are
/// alive at once. Rhai 1.27 does not check a map's size when `m[key] = value` adds a key, nor a
/// value copied by `let b = a`; the sandbox checks every array or map when a variable is read
/// (`guard_sizes`), so such a map can outgrow its bound by one entry and is refused at its next
/// use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Rhai's operations (roughly: expressions evaluated, loop turns, calls).
    pub max_operations: u64,
    /// Nested function calls, recursion included.
    pub max_call_depth: usize,
    /// Nesting of expressions and statements, checked when compiling.
    pub max_expr_depth: usize,
    /// Bytes of one string.
    pub max_string_len: usize,
    pub max_array_len: usize,
    pub max_map_len: usize,
    pub max_variables: usize,
    /// Scripts a run may import, directly or not.
    pub max_modules: usize,
    /// Functions one script may define.
    pub max_functions: usize,
    /// Lines of the run's log (`log`, `print`, `debug`).
    pub max_log_lines: usize,
    /// Transactions one run may submit.
    pub max_submissions: usize,
    /// Wall-clock time of the run, the host's calls included.
    pub max_wall: Duration,
    /// Bytes the run may hold at once, as the allocator counts them (see above).
    pub max_memory: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_operations: 1_000_000,
            max_call_depth: 64,
            max_expr_depth: 64,
            // A page of a hundred operations from `operations()` is some 60 KB of text.
            max_string_len: 256 * 1024,
            max_array_len: 10_000,
            max_map_len: 10_000,
            max_variables: 128,
            max_modules: 32,
            max_functions: 256,
            max_log_lines: 1_000,
            max_submissions: 100,
            max_wall: Duration::from_secs(30),
            // Room for many values as large as the sizes allow; a node is sized for this many
            // bytes times the runs it makes at once.
            max_memory: 64 * 1024 * 1024,
        }
    }
}

impl Limits {
    /// What passing `which` means, with its bound: the message of the run's error.
    pub fn describe(&self, which: Limit) -> String {
        match which {
            Limit::Operations => format!("more than {} operations", self.max_operations),
            Limit::CallDepth => format!("function calls nested deeper than {}", self.max_call_depth),
            Limit::StringLength => format!("more than {} bytes of text in one value", self.max_string_len),
            Limit::ArrayLength => format!("more than {} array items in one value", self.max_array_len),
            Limit::MapSize => format!("more than {} map entries in one value", self.max_map_len),
            Limit::ValueDepth => format!("arrays and maps nested deeper than {MAX_VALUE_DEPTH} in one value"),
            Limit::Variables => format!("more than {} variables", self.max_variables),
            Limit::Modules => format!("more than {} imported scripts", self.max_modules),
            Limit::LogLines => format!("more than {} log lines", self.max_log_lines),
            Limit::Submissions => format!("more than {} submissions", self.max_submissions),
            Limit::Memory => format!("more than {} bytes of memory", self.max_memory),
        }
    }
}

/// The stack a run's thread needs: the interpreter walks a value once per level of nesting
/// (printing it, dropping it), and values built through calls nest a thousand levels and more
/// before the depth check on variable reads sees them; on a 2 MiB stack such a script aborts
/// the process. Virtual memory: only what a run uses is committed.
pub const RUN_STACK_BYTES: usize = 64 * 1024 * 1024;

/// The limit a run passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Operations,
    CallDepth,
    StringLength,
    ArrayLength,
    MapSize,
    ValueDepth,
    Variables,
    Modules,
    LogLines,
    Submissions,
    Memory,
}

impl Limit {
    /// The limits the sandbox checks itself, outside Rhai.
    const STOPPING: [Limit; 3] = [Limit::LogLines, Limit::Submissions, Limit::Memory];

    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Operations => "OPERATIONS",
            Limit::CallDepth => "CALL_DEPTH",
            Limit::StringLength => "STRING_LENGTH",
            Limit::ArrayLength => "ARRAY_LENGTH",
            Limit::MapSize => "MAP_SIZE",
            Limit::ValueDepth => "VALUE_DEPTH",
            Limit::Variables => "VARIABLES",
            Limit::Modules => "MODULES",
            Limit::LogLines => "LOG_LINES",
            Limit::Submissions => "SUBMISSIONS",
            Limit::Memory => "MEMORY",
        }
    }
}

/// The host API a script calls, for one run. Calls are synchronous from the script's point of
/// view; an `Err` is the host's refusal, which ends the run as `HostError` unless the script
/// catches it (`try { … } catch (e) { e.message }`, with `e.function` naming the call).
///
/// The wall-time limit is checked between the script's operations: a host call that blocks
/// is not interrupted, so the host bounds its own calls.
pub trait Host: Send + Sync {
    fn balance(&self, account_ref: &str) -> Result<serde_json::Value, String>;
    fn account(&self, account_ref: &str) -> Result<serde_json::Value, String>;
    fn operation(&self, id: &str) -> Result<serde_json::Value, String>;
    /// `filter` is a JSON object of the operations list's query parameters.
    fn operations(&self, filter: &serde_json::Value) -> Result<serde_json::Value, String>;
    fn locks(&self, account_ref: &str) -> Result<serde_json::Value, String>;
    /// A transaction body as `POST /api/transactions` takes it. The host derives the
    /// idempotency key from the execution and the submission's ordinal, so a rerun of the same
    /// execution submits nothing twice.
    fn submit(&self, request: &serde_json::Value) -> Result<serde_json::Value, String>;
    fn log(&self, line: &str);
}

#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// `value` is what the script's last expression gave: a string as itself, anything else as
    /// JSON; `None` for `()`.
    Completed {
        value: Option<String>,
    },
    Failed {
        error: RunError,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunError {
    pub kind: RunErrorKind,
    pub message: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunErrorKind {
    /// The script or a dependency no longer compiles, or a dependency is missing.
    CompileError,
    LimitExceeded {
        which: Limit,
    },
    /// Past `max_wall`.
    Timeout,
    /// A host function refused, and the script did not catch it.
    HostError,
    /// Any other runtime error: `throw`, a type mismatch, an unknown function, …
    ScriptError,
}

impl RunErrorKind {
    /// The code a run record shows.
    pub fn code(self) -> &'static str {
        match self {
            RunErrorKind::CompileError => "COMPILE_ERROR",
            RunErrorKind::LimitExceeded { .. } => "LIMIT_EXCEEDED",
            RunErrorKind::Timeout => "TIMEOUT",
            RunErrorKind::HostError => "HOST_ERROR",
            RunErrorKind::ScriptError => "SCRIPT_ERROR",
        }
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.kind.code())?;
        if let RunErrorKind::LimitExceeded { which } = self.kind {
            write!(f, " ({})", which.as_str())?;
        }
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, " at line {line}, column {column}")?,
            (Some(line), None) => write!(f, " at line {line}")?,
            _ => {}
        }
        write!(f, ": {}", self.message)
    }
}

/// The marker of a host's refusal in the value a host function throws, so the end of the run
/// can tell it from the script's own `throw`.
const HOST_ERROR: &str = "HOST_ERROR";
const TIMEOUT_TOKEN: &str = "TIMEOUT";

/// What the callbacks of one run share.
struct RunState {
    host: Arc<dyn Host>,
    log_lines: AtomicUsize,
    submissions: AtomicUsize,
    max_log_lines: usize,
    max_submissions: usize,
    /// Set by a callback that cannot fail on its own (`print`); the next operation ends the run.
    /// 0, or 1 + the index of the limit in `Limit::STOPPING`. Read on every operation, so an
    /// atomic rather than a lock.
    stop: AtomicU8,
    /// The run's thread's count (`memory::thread_bytes`) when the run started.
    baseline: isize,
    /// What the host's calls changed of that count, not the run's to hold (`call_host`).
    outside: AtomicIsize,
    max_memory: isize,
}

/// The longest log line kept, in bytes: a run's log is stored with its execution and answered
/// by its history, so a longer line is cut (at a character boundary) and says how much went.
pub const MAX_LOG_LINE_BYTES: usize = 2_048;

fn clipped(line: &str) -> std::borrow::Cow<'_, str> {
    if line.len() <= MAX_LOG_LINE_BYTES {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut end = MAX_LOG_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}… ({} more bytes not kept)", &line[..end], line.len() - end))
}

impl RunState {
    fn log(&self, line: &str) -> Result<(), Limit> {
        if self.log_lines.fetch_add(1, Ordering::Relaxed) >= self.max_log_lines {
            return Err(Limit::LogLines);
        }
        self.host.log(&clipped(line));
        Ok(())
    }

    fn stop_with(&self, limit: Limit) {
        if let Some(index) = Limit::STOPPING.iter().position(|l| *l == limit) {
            let code = u8::try_from(index + 1).unwrap_or(u8::MAX);
            let _ = self.stop.compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    fn stopped(&self) -> Option<Limit> {
        match self.stop.load(Ordering::Relaxed) {
            0 => None,
            code => Limit::STOPPING.get(usize::from(code) - 1).copied(),
        }
    }

    /// Bytes the run holds now. Read on every operation: a thread-local and an atomic load.
    /// Only meaningful on the run's thread.
    fn memory_held(&self) -> isize {
        memory::thread_bytes().wrapping_sub(self.baseline).wrapping_sub(self.outside.load(Ordering::Relaxed))
    }

    /// Calls the host and converts its answer for the script. The count is per thread, and a
    /// host call crosses threads: the app's host waits here for work done on others, whose
    /// answers (the store's rows) are allocated there and freed here, and its requests the other
    /// way. Counted as they fall, a loop of calls would drift the run's count, down (leaving
    /// room to hold more than the budget) or up (failing a run that holds little). So what the
    /// call changes of the count, its answer's freeing included, is left out of the run's; what
    /// the conversion allocates is the script's value and stays in.
    fn call_host(
        &self,
        function: &str,
        call: impl FnOnce(&dyn Host) -> Result<serde_json::Value, String>,
    ) -> RhaiResult<Dynamic> {
        let before = memory::thread_bytes();
        let answer = call(&*self.host);
        let answered = memory::thread_bytes();
        let converted = match &answer {
            Ok(value) => Ok(to_dynamic(value)),
            Err(message) => Err(host_error(function, message.clone())),
        };
        let kept = memory::thread_bytes().wrapping_sub(answered);
        drop(answer);
        let outside = memory::thread_bytes().wrapping_sub(before).wrapping_sub(kept);
        self.outside.fetch_add(outside, Ordering::Relaxed);
        converted
    }
}

type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

fn limit_error(limit: Limit) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorTerminated(Dynamic::from(limit.as_str()), Position::NONE))
}

fn host_error(function: &str, message: String) -> Box<EvalAltResult> {
    let mut map = Map::new();
    map.insert("error".into(), Dynamic::from(HOST_ERROR));
    map.insert("function".into(), Dynamic::from(function.to_owned()));
    map.insert("message".into(), Dynamic::from(message));
    Box::new(EvalAltResult::ErrorRuntime(Dynamic::from_map(map), Position::NONE))
}

fn decimal_arg(text: &str) -> RhaiResult<Decimal> {
    Decimal::parse(text, true).ok_or_else(|| format!("\"{text}\" is not a decimal such as \"12.50\"").into())
}

fn register_host(engine: &mut Engine, state: &Arc<RunState>) {
    let s = Arc::clone(state);
    engine.register_fn("balance", move |account_ref: &str| s.call_host("balance", |h| h.balance(account_ref)));
    let s = Arc::clone(state);
    engine.register_fn("account", move |account_ref: &str| s.call_host("account", |h| h.account(account_ref)));
    let s = Arc::clone(state);
    engine.register_fn("operation", move |id: &str| s.call_host("operation", |h| h.operation(id)));
    let s = Arc::clone(state);
    engine.register_fn("operations", move |filter: Map| {
        // Made before the call and dropped after it (the host borrows it): what the run's thread
        // frees inside the call is booked as the host's, so the script's own values must not be.
        let filter = to_json(&Dynamic::from_map(filter)).map_err(|m| host_error("operations", m))?;
        s.call_host("operations", |h| h.operations(&filter))
    });
    let s = Arc::clone(state);
    engine.register_fn("operations", move || s.call_host("operations", |h| h.operations(&serde_json::json!({}))));
    let s = Arc::clone(state);
    engine.register_fn("locks", move |account_ref: &str| s.call_host("locks", |h| h.locks(account_ref)));
    let s = Arc::clone(state);
    engine.register_fn("submit", move |request: Map| {
        if s.submissions.fetch_add(1, Ordering::Relaxed) >= s.max_submissions {
            return Err(limit_error(Limit::Submissions));
        }
        // Made before the call and dropped after it, as `operations`' filter.
        let request = to_json(&Dynamic::from_map(request)).map_err(|m| host_error("submit", m))?;
        s.call_host("submit", |h| h.submit(&request))
    });
    let s = Arc::clone(state);
    engine.register_fn("log", move |line: ImmutableString| s.log(&line).map_err(limit_error));
    let s = Arc::clone(state);
    engine.register_fn("log", move |value: Dynamic| s.log(&value.to_string()).map_err(limit_error));
    let s = Arc::clone(state);
    engine.on_print(move |line| {
        if let Err(limit) = s.log(line) {
            s.stop_with(limit);
        }
    });
    let s = Arc::clone(state);
    engine.on_debug(move |line, _source, _pos| {
        if let Err(limit) = s.log(line) {
            s.stop_with(limit);
        }
    });
}

/// Checks the array or map a variable holds each time it is read (see `Limits`). The cost is
/// the size of the value, which the limits bound.
fn guard_sizes(engine: &mut Engine, limits: &Limits) {
    let bounds = Sizes {
        array: limits.max_array_len,
        map: limits.max_map_len,
        string: limits.max_string_len,
        deepest: MAX_VALUE_DEPTH,
    };
    // `on_var` is marked deprecated only as "volatile"; it is the one hook that sees every read.
    #[allow(deprecated)]
    engine.on_var(move |name, _index, context| {
        if let Some(value) = context.scope().get(name) {
            let mut sizes = Sizes::default();
            if !sizes.add(value, &bounds, 0) {
                let what = if sizes.deepest > MAX_VALUE_DEPTH {
                    "Depth of nested arrays and object maps"
                } else if sizes.array > bounds.array {
                    "Size of array"
                } else if sizes.map > bounds.map {
                    "Size of object map"
                } else {
                    "Length of string"
                };
                return Err(Box::new(EvalAltResult::ErrorDataTooLarge(what.to_owned(), Position::NONE)));
            }
        }
        Ok(None)
    });
}

/// Whether `value` nests arrays and maps deeper than `levels`; the walk stops one level past it.
fn nests_deeper_than(value: &Dynamic, levels: usize) -> bool {
    if let Some(array) = value.read_lock::<Array>() {
        levels == 0 || array.iter().any(|item| nests_deeper_than(item, levels - 1))
    } else if let Some(map) = value.read_lock::<Map>() {
        levels == 0 || map.values().any(|item| nests_deeper_than(item, levels - 1))
    } else {
        false
    }
}

#[derive(Default)]
struct Sizes {
    array: usize,
    map: usize,
    string: usize,
    /// The deepest nesting met; past [`MAX_VALUE_DEPTH`] the value could not be sent to the
    /// host, and a deeper one would cost every walk over it (this one, a drop) its stack.
    deepest: usize,
}

impl Sizes {
    /// Adds what `value`, found `depth` containers deep, holds, nested values included; `false`
    /// as soon as a bound is passed.
    fn add(&mut self, value: &Dynamic, bounds: &Sizes, depth: usize) -> bool {
        let nests = value.is_array() || value.is_map();
        if nests {
            self.deepest = self.deepest.max(depth + 1);
            if self.deepest > MAX_VALUE_DEPTH {
                return false;
            }
        }
        if let Some(array) = value.read_lock::<Array>() {
            for item in array.iter() {
                self.array += 1;
                if self.array > bounds.array || !self.add(item, bounds, depth + 1) {
                    return false;
                }
            }
        } else if let Some(map) = value.read_lock::<Map>() {
            for item in map.values() {
                self.map += 1;
                if self.map > bounds.map || !self.add(item, bounds, depth + 1) {
                    return false;
                }
            }
        } else if self.array > 0 || self.map > 0 {
            // A string on its own is checked by Rhai; inside a container it counts here.
            if let Some(text) = value.read_lock::<ImmutableString>() {
                self.string += text.len();
                return self.string <= bounds.string;
            }
        }
        true
    }
}

/// The standard library's `sleep` would hold the run's thread past any limit, since the wall
/// limit is checked between operations: a script that must wait is scheduled, not parked.
fn refuse_sleep(engine: &mut Engine) {
    const REFUSAL: &str = "sleep is not available in the sandbox: schedule the automation instead";
    engine.register_fn("sleep", |_: INT| -> RhaiResult<()> { Err(REFUSAL.into()) });
    engine.register_fn("sleep", |_: rhai::FLOAT| -> RhaiResult<()> { Err(REFUSAL.into()) });
}

fn register_decimals(engine: &mut Engine) {
    engine.register_fn("decimal_add", |a: &str, b: &str| -> RhaiResult<String> {
        decimal_arg(a)?.checked_add(decimal_arg(b)?).map(Decimal::canonical).ok_or_else(|| "decimal overflow".into())
    });
    engine.register_fn("decimal_sub", |a: &str, b: &str| -> RhaiResult<String> {
        decimal_arg(a)?.checked_sub(decimal_arg(b)?).map(Decimal::canonical).ok_or_else(|| "decimal overflow".into())
    });
    engine.register_fn("decimal_cmp", |a: &str, b: &str| -> RhaiResult<INT> {
        Ok(compare(decimal_arg(a)?, decimal_arg(b)?) as INT)
    });
    engine.register_fn("decimal", |n: INT| Decimal::from_integer(n).canonical());
}

/// Imports during a run: the scripts resolved at its start, each compiled and run as a module
/// the first time it is imported, with its own parameters at their defaults
/// (`compile::module_scope`).
struct RunResolver {
    sources: BTreeMap<String, String>,
    loaded: Mutex<BTreeMap<String, Arc<Module>>>,
}

impl rhai::ModuleResolver for RunResolver {
    fn resolve(&self, engine: &Engine, _source: Option<&str>, path: &str, pos: Position) -> RhaiResult<Arc<Module>> {
        if let Some(module) = self.loaded.lock().ok().and_then(|loaded| loaded.get(path).cloned()) {
            return Ok(module);
        }
        let source =
            self.sources.get(path).ok_or_else(|| Box::new(EvalAltResult::ErrorModuleNotFound(path.to_owned(), pos)))?;
        let scope = crate::compile::module_scope(source).map_err(|err| {
            let cause = Box::new(EvalAltResult::ErrorRuntime(err.message.into(), pos));
            Box::new(EvalAltResult::ErrorInModule(path.to_owned(), cause, pos))
        })?;
        let mut ast = engine.compile_with_scope(&scope, source).map_err(|err| -> Box<EvalAltResult> { err.into() })?;
        ast.set_source(path);
        let module: Arc<Module> = Module::eval_ast_as_new(scope, &ast, engine)
            .map_err(|err| Box::new(EvalAltResult::ErrorInModule(path.to_owned(), err, pos)))?
            .into();
        if let Ok(mut loaded) = self.loaded.lock() {
            loaded.insert(path.to_owned(), module.clone());
        }
        Ok(module)
    }
}

impl Compiler {
    /// Runs `source` with `params` (every declared parameter's value: see `params::fit`) as
    /// constants, and `event` (the event of an EVENT automation) as `event`. Blocks until the
    /// run ends; see the module's note on threads.
    pub fn run(
        &self,
        source: &str,
        deps: &dyn DependencySource,
        params: &BTreeMap<String, ParamValue>,
        event: Option<serde_json::Value>,
        host: Arc<dyn Host>,
        limits: &Limits,
    ) -> RunOutcome {
        let deadline = Instant::now() + limits.max_wall;
        // Before anything of the run is allocated: the engine, the compiled script and the
        // imports count towards its memory too.
        let baseline = memory::thread_bytes();
        let state = Arc::new(RunState {
            host,
            log_lines: AtomicUsize::new(0),
            submissions: AtomicUsize::new(0),
            max_log_lines: limits.max_log_lines,
            max_submissions: limits.max_submissions,
            stop: AtomicU8::new(0),
            baseline,
            outside: AtomicIsize::new(0),
            max_memory: isize::try_from(limits.max_memory).unwrap_or(isize::MAX),
        });
        let mut engine = Engine::new_raw();
        engine.register_global_module(self.package.clone());
        configure(&mut engine, limits);
        engine.set_optimization_level(OptimizationLevel::Simple);
        refuse_sleep(&mut engine);
        register_decimals(&mut engine);
        register_host(&mut engine, &state);
        guard_sizes(&mut engine, limits);
        let progress = Arc::clone(&state);
        engine.on_progress(move |operations| {
            if let Some(limit) = progress.stopped() {
                return Some(Dynamic::from(limit.as_str()));
            }
            // Every operation, since one operation allocates about one value, which the sizes
            // bound: the run ends within about that of its budget.
            if progress.memory_held() > progress.max_memory {
                return Some(Dynamic::from(Limit::Memory.as_str()));
            }
            // Reading the clock every operation would cost more than the operation itself.
            (operations % 256 == 0 && Instant::now() >= deadline).then(|| Dynamic::from(TIMEOUT_TOKEN))
        });

        let mut scope = Scope::new();
        for (name, value) in params {
            scope.push_constant_dynamic(name.as_str(), value.to_dynamic());
        }
        scope.push_constant_dynamic(EVENT_VARIABLE, event.as_ref().map_or(Dynamic::UNIT, to_dynamic));

        let ast = match parse(&engine, &scope, source) {
            Ok(ast) => ast,
            Err(err) => return failed(RunErrorKind::CompileError, err.message, err.line, err.column),
        };
        let graph = match resolve_imports(&engine, "", &ast, deps) {
            Ok(graph) => graph,
            Err(err) => return failed(RunErrorKind::CompileError, err.message, err.line, err.column),
        };
        engine.set_module_resolver(RunResolver { sources: graph.sources, loaded: Mutex::new(BTreeMap::new()) });

        match engine.eval_ast_with_scope::<Dynamic>(&mut scope, &ast) {
            Ok(value) if value.is_unit() => RunOutcome::Completed { value: None },
            Ok(value) if value.is_string() => RunOutcome::Completed { value: Some(value.to_string()) },
            // Too deep to keep as JSON, and to print (printing walks it whole): the run fails.
            Ok(value) if nests_deeper_than(&value, MAX_VALUE_DEPTH) => failed(
                RunErrorKind::ScriptError,
                format!("the script's value cannot be kept: it nests deeper than {MAX_VALUE_DEPTH} levels"),
                None,
                None,
            ),
            // Otherwise JSON, or the script's own text for what JSON cannot carry (a float).
            Ok(value) => RunOutcome::Completed {
                value: Some(to_json(&value).map_or_else(|_| value.to_string(), |json| json.to_string())),
            },
            Err(err) => RunOutcome::Failed { error: classify(&err, limits) },
        }
    }
}

fn failed(kind: RunErrorKind, message: String, line: Option<usize>, column: Option<usize>) -> RunOutcome {
    RunOutcome::Failed { error: RunError { kind, message: storable(message), line, column } }
}

/// An error message, which may quote the script's own text (`throw "…"`), as it can be stored:
/// a NUL becomes U+FFFD, since PostgreSQL text holds no NUL and the run's end must be recorded
/// (log lines, the returned value among them, are kept as JSON, which escapes it). The same
/// rule as `tokenops_domain::audit::storable_text`, which this crate does not depend on.
fn storable(text: String) -> String {
    if text.contains('\0') { text.replace('\0', "\u{FFFD}") } else { text }
}

/// Names the error by its innermost cause, where the script actually failed.
fn classify(err: &EvalAltResult, limits: &Limits) -> RunError {
    let mut inner = err;
    let mut in_module = None;
    loop {
        match inner {
            EvalAltResult::ErrorInFunctionCall(_, _, cause, _) => inner = cause,
            EvalAltResult::ErrorInModule(name, cause, _) => {
                in_module.get_or_insert(name.clone());
                inner = cause;
            }
            _ => break,
        }
    }
    let pos = inner.position();
    let limit = |which: Limit| (RunErrorKind::LimitExceeded { which }, limits.describe(which));
    let (kind, message) = match inner {
        EvalAltResult::ErrorTooManyOperations(_) => limit(Limit::Operations),
        EvalAltResult::ErrorStackOverflow(_) => limit(Limit::CallDepth),
        EvalAltResult::ErrorTooManyVariables(_) => limit(Limit::Variables),
        EvalAltResult::ErrorTooManyModules(_) => limit(Limit::Modules),
        EvalAltResult::ErrorDataTooLarge(what, _) => limit(if what.starts_with("Depth") {
            Limit::ValueDepth
        } else if what.contains("string") {
            Limit::StringLength
        } else if what.contains("map") {
            Limit::MapSize
        } else {
            Limit::ArrayLength
        }),
        EvalAltResult::ErrorTerminated(token, _) => {
            let token = token.to_string();
            match Limit::STOPPING.into_iter().find(|l| l.as_str() == token) {
                Some(which) => limit(which),
                None => (RunErrorKind::Timeout, format!("the run took longer than {:?}", limits.max_wall)),
            }
        }
        EvalAltResult::ErrorRuntime(value, _) if is_host_error(value) => {
            let map = value.read_lock::<Map>();
            let field = |key: &str| map.as_ref().and_then(|m| m.get(key)).map(|v| v.to_string()).unwrap_or_default();
            (RunErrorKind::HostError, format!("{}: {}", field("function"), field("message")))
        }
        EvalAltResult::ErrorParsing(parse, _) => (RunErrorKind::CompileError, parse.to_string()),
        EvalAltResult::ErrorModuleNotFound(name, _) => {
            (RunErrorKind::CompileError, format!("missing dependency \"{name}\""))
        }
        other => (RunErrorKind::ScriptError, without_position(other)),
    };
    let message = match in_module {
        Some(module) => format!("in \"{module}\": {message}"),
        None => message,
    };
    RunError { kind, message: storable(message), line: pos.line(), column: pos.position() }
}

fn is_host_error(value: &Dynamic) -> bool {
    value.read_lock::<Map>().is_some_and(|map| map.get("error").is_some_and(|e| e.to_string() == HOST_ERROR))
}

/// Rhai's message without its trailing "(line l, position p)": the position has fields of its own.
fn without_position(err: &EvalAltResult) -> String {
    let text = err.to_string();
    match text.rfind(" (line ") {
        Some(at) if text.ends_with(')') => text[..at].to_owned(),
        _ => text,
    }
}

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;
