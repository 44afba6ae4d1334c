//! The sandbox's own tests, against a test double of the host port.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::params::{Override, extract, fit};
use crate::{Compiler, Host, Limit, Limits, RUN_STACK_BYTES, RunError, RunErrorKind, RunOutcome};

#[derive(Default)]
struct FakeHost {
    calls: Mutex<Vec<String>>,
    logs: Mutex<Vec<String>>,
    submitted: Mutex<Vec<Value>>,
    refuse_submit: bool,
    /// `balance` answers with a 64 KB `blob`, built on another thread, as the store's answers are.
    big_answers: bool,
}

impl FakeHost {
    fn called(&self, call: String) {
        self.calls.lock().expect("lock").push(call);
    }
}

impl Host for FakeHost {
    fn balance(&self, account_ref: &str) -> Result<Value, String> {
        self.called(format!("balance {account_ref}"));
        if account_ref == "missing" {
            return Err("no such account".into());
        }
        if self.big_answers {
            return std::thread::spawn(|| json!({"blob": "b".repeat(64 * 1024)}))
                .join()
                .map_err(|_| "the answering thread panicked".to_owned());
        }
        Ok(json!({"accountRef": account_ref, "available": "1500.25", "locked": "0.00", "asset": "USD"}))
    }
    fn account(&self, account_ref: &str) -> Result<Value, String> {
        self.called(format!("account {account_ref}"));
        Ok(json!({"accountRef": account_ref, "status": "ACTIVE"}))
    }
    fn operation(&self, id: &str) -> Result<Value, String> {
        self.called(format!("operation {id}"));
        Ok(json!({"id": id, "status": "CONFIRMED", "amount": "5.00"}))
    }
    fn operations(&self, filter: &Value) -> Result<Value, String> {
        self.called(format!("operations {filter}"));
        Ok(json!([{"id": "op-1", "amount": "1.10"}, {"id": "op-2", "amount": "2.20"}]))
    }
    fn locks(&self, account_ref: &str) -> Result<Value, String> {
        self.called(format!("locks {account_ref}"));
        Ok(json!([{"id": "lock-1", "amount": "3.00"}]))
    }
    fn submit(&self, request: &Value) -> Result<Value, String> {
        if self.refuse_submit {
            return Err("policy DENY: transfers above 100.00 need approval".into());
        }
        self.submitted.lock().expect("lock").push(request.clone());
        Ok(json!({"id": "op-new", "status": "PENDING"}))
    }
    fn log(&self, line: &str) {
        self.logs.lock().expect("lock").push(line.to_owned());
    }
}

fn run_with(source: &str, host: &Arc<FakeHost>, limits: &Limits) -> RunOutcome {
    let compiler = Compiler::new(limits.clone());
    let decls = extract(source).expect("declarations");
    let params = fit(&decls, &[]).expect("defaults");
    compiler.run(source, &(), &params, None, host.clone(), limits)
}

fn run(source: &str) -> RunOutcome {
    run_with(source, &Arc::new(FakeHost::default()), &Limits::default())
}

fn failure(outcome: RunOutcome) -> RunError {
    match outcome {
        RunOutcome::Failed { error } => error,
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn completed(outcome: RunOutcome) -> Option<String> {
    match outcome {
        RunOutcome::Completed { value } => value,
        RunOutcome::Failed { error } => panic!("expected completion, got {error}"),
    }
}

#[test]
fn a_trivial_script_completes_with_its_value() {
    assert_eq!(completed(run("40 + 2")).as_deref(), Some("42"));
    assert_eq!(completed(run("\"done\"")).as_deref(), Some("done"));
    assert_eq!(completed(run("#{a: 1}")).as_deref(), Some("{\"a\":1}"));
    assert_eq!(completed(run("let x = 1;")), None);
}

#[test]
fn an_endless_loop_ends_at_the_wall_limit() {
    let limits = Limits { max_operations: u64::MAX, max_wall: Duration::from_millis(300), ..Limits::default() };
    let started = Instant::now();
    let error = failure(run_with("loop { }", &Arc::new(FakeHost::default()), &limits));
    let took = started.elapsed();
    assert_eq!(error.kind, RunErrorKind::Timeout, "{error}");
    assert!(took < Duration::from_secs(2), "stopped after {took:?}");
    assert!(took >= Duration::from_millis(300));
}

#[test]
fn an_endless_loop_ends_at_the_operation_limit() {
    let error = failure(run("let i = 0; while true { i += 1; }"));
    assert_eq!(error.kind, RunErrorKind::LimitExceeded { which: Limit::Operations }, "{error}");
    assert_eq!(error.line, Some(1));
}

#[test]
fn deep_recursion_ends_at_the_call_depth_limit() {
    let error = failure(run("fn down(n) { down(n + 1) }\ndown(0)"));
    assert_eq!(error.kind, RunErrorKind::LimitExceeded { which: Limit::CallDepth }, "{error}");
}

#[test]
fn a_huge_string_array_or_map_ends_at_its_limit() {
    let error = failure(run("let s = \"x\"; loop { s += s; }"));
    assert_eq!(error.kind, RunErrorKind::LimitExceeded { which: Limit::StringLength }, "{error}");
    // Small bounds keep the test quick: each read of the array sizes it.
    let small = Limits { max_map_len: 100, max_array_len: 100, ..Limits::default() };
    let error = failure(run_with("let a = []; loop { a.push(1); }", &Arc::new(FakeHost::default()), &small));
    assert_eq!(error.kind, RunErrorKind::LimitExceeded { which: Limit::ArrayLength }, "{error}");
    let error = failure(run_with(
        "let m = #{}; let i = 0; loop { let x = #{}; x[`k${i}`] = i; m += x; i += 1; }",
        &Arc::new(FakeHost::default()),
        &small,
    ));
    assert_eq!(error.kind, RunErrorKind::LimitExceeded { which: Limit::MapSize }, "{error}");
    // Rhai 1.27 checks the value stored by `m[key] = value`, not the map's new size; the
    // sandbox's own check at the next read of `m` ends it.
    let error = failure(run_with(
        "let m = #{}; let i = 0; loop { m[`k${i}`] = i; i += 1; }",
        &Arc::new(FakeHost::default()),
        &small,
    ));
    assert_eq!(error.kind, RunErrorKind::LimitExceeded { which: Limit::MapSize }, "{error}");
    let error = failure(run_with(
        "let m = #{}; let f = || m.len(); let i = 0; loop { m[`k${i}`] = i; i += 1; }",
        &Arc::new(FakeHost::default()),
        &small,
    ));
    assert_eq!(
        error.kind,
        RunErrorKind::LimitExceeded { which: Limit::MapSize },
        "a captured (shared) map too: {error}"
    );
    let error = failure(run_with(
        "let s = \"\"; for i in 0..40 { s += \"0123456789\"; }\nlet a = []; for i in 0..5 { a.push(\"\"); }\nfor i in 0..5 { a[i] = s; }\na",
        &Arc::new(FakeHost::default()),
        &Limits { max_string_len: 1000, ..small.clone() },
    ));
    assert_eq!(
        error.kind,
        RunErrorKind::LimitExceeded { which: Limit::StringLength },
        "text inside an array counts: {error}"
    );
}

#[test]
fn eval_file_network_and_process_access_fail_clearly() {
    let error = failure(run("eval(\"40 + 2\")"));
    assert_eq!(error.kind, RunErrorKind::CompileError, "{error}");
    for attempt in [
        "open_file(\"/etc/passwd\")",
        "read_file(\"/etc/passwd\")",
        "http_get(\"http://example.com\")",
        "system(\"ls\")",
    ] {
        let error = failure(run(attempt));
        assert_eq!(error.kind, RunErrorKind::ScriptError, "{attempt}: {error}");
        assert!(error.message.contains("Function not found"), "{attempt}: {error}");
    }
    for nap in ["sleep(3600)", "sleep(0.5)"] {
        let started = Instant::now();
        let error = failure(run(nap));
        assert_eq!(error.kind, RunErrorKind::ScriptError, "{error}");
        assert!(error.message.contains("sleep is not available"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }
    let error = failure(run("import \"/etc/passwd\" as p;"));
    assert_eq!(error.kind, RunErrorKind::CompileError, "{error}");
    assert!(error.message.contains("missing dependency \"/etc/passwd\""), "{error}");
}

#[test]
fn a_host_refusal_is_a_host_error_unless_caught() {
    let error = failure(run("let b = balance(\"missing\");\nb"));
    assert_eq!(error.kind, RunErrorKind::HostError, "{error}");
    assert_eq!(error.message, "balance: no such account");
    assert_eq!((error.line, error.column), (Some(1), Some(9)));
    let caught =
        run("let r = \"\";\ntry { balance(\"missing\"); } catch (e) { r = `caught ${e.function}: ${e.message}`; }\nr");
    assert_eq!(completed(caught).as_deref(), Some("caught balance: no such account"));
    let host = Arc::new(FakeHost { refuse_submit: true, ..FakeHost::default() });
    let error = failure(run_with("submit(#{type: \"TRANSFER\"})", &host, &Limits::default()));
    assert_eq!(error.kind, RunErrorKind::HostError);
    assert!(error.message.starts_with("submit: policy DENY"), "{error}");
}

#[test]
fn a_thrown_value_is_a_script_error() {
    let error = failure(run("let x = 1;\nthrow \"stop here\";"));
    assert_eq!(error.kind, RunErrorKind::ScriptError);
    assert!(error.message.contains("stop here"), "{error}");
    assert_eq!(error.line, Some(2));
}

#[test]
fn a_float_cannot_reach_the_host() {
    let host = Arc::new(FakeHost::default());
    let error = failure(run_with("submit(#{amount: 12.5})", &host, &Limits::default()));
    assert_eq!(error.kind, RunErrorKind::HostError, "{error}");
    assert!(error.message.contains("decimal strings"), "{error}");
    assert!(host.submitted.lock().expect("lock").is_empty());
}

#[test]
fn every_host_function_with_its_log() {
    let source = r#"
// @param account: string = "acc-1"
// @param target: decimal = "1000.00"
let b = balance(account);
let a = account(account);
let o = operation("op-9");
let list = operations(#{status: "CONFIRMED", accountRef: account});
let all = operations();
let l = locks(account);
log(`balance ${b.available} of ${a.accountRef}, ${a.status}`);
print(`op ${o.id} ${o.amount}; ${list.len()} listed, ${all.len()} in all; lock ${l[0].amount}`);
debug("checked");
log(42);
let excess = decimal_sub(b.available, target);
if decimal_cmp(excess, "0") > 0 {
    let r = submit(#{type: "TRANSFER", accountRef: account, to: "acc-sweep", amount: excess, asset: b.asset});
    r.id
}
"#;
    let host = Arc::new(FakeHost::default());
    assert_eq!(completed(run_with(source, &host, &Limits::default())).as_deref(), Some("op-new"));
    let calls = host.calls.lock().expect("lock").clone();
    assert_eq!(
        calls,
        [
            "balance acc-1",
            "account acc-1",
            "operation op-9",
            "operations {\"accountRef\":\"acc-1\",\"status\":\"CONFIRMED\"}",
            "operations {}",
            "locks acc-1"
        ]
    );
    let submitted = host.submitted.lock().expect("lock").clone();
    assert_eq!(
        submitted,
        [json!({"accountRef": "acc-1", "amount": "500.25", "asset": "USD", "to": "acc-sweep", "type": "TRANSFER"})]
    );
    let logs = host.logs.lock().expect("lock").clone();
    assert_eq!(
        logs,
        ["balance 1500.25 of acc-1, ACTIVE", "op op-9 5.00; 2 listed, 2 in all; lock 3.00", "\"checked\"", "42"]
    );
}

#[test]
fn parameters_and_the_event_are_visible_by_name() {
    let source = "// @param target: decimal = \"10.50\"\n// @param n: integer\n// @param on: boolean = true\n`${target} ${n} ${on} ${event.type} ${event.data.amount}`";
    let decls = extract(source).expect("a value");
    let overrides = [Override { key: "n".into(), value: json!(3), kind: "INTEGER".into() }];
    let params = fit(&decls, &overrides).expect("a value");
    let event = json!({"type": "OPERATION_CONFIRMED", "data": {"amount": "7.00"}});
    let outcome =
        Compiler::default().run(source, &(), &params, Some(event), Arc::new(FakeHost::default()), &Limits::default());
    assert_eq!(completed(outcome).as_deref(), Some("10.5 3 true OPERATION_CONFIRMED 7.00"));
    let error = failure(Compiler::default().run(
        "target = 1;\n// @param target: integer = 2",
        &(),
        &fit(&extract("// @param target: integer = 2").expect("a value"), &[]).expect("a value"),
        None,
        Arc::new(FakeHost::default()),
        &Limits::default(),
    ));
    assert_eq!(error.kind, RunErrorKind::ScriptError, "a parameter is a constant: {error}");
    assert!(error.message.contains("Cannot modify constant target"), "{error}");
    assert_eq!(completed(run("event == ()")).as_deref(), Some("true"));
}

#[test]
fn dependencies_run_as_modules() {
    let deps: BTreeMap<String, String> = [
        ("treasury".to_string(), "import \"math\" as m;\nfn excess(balance, target) { m::minus(balance, target) }\nexport const NAME = \"treasury\";".to_string()),
        ("math".to_string(), "fn minus(a, b) { decimal_sub(a, b) }\nfn boom() { throw \"boom\" }".to_string()),
    ]
    .into_iter()
    .collect();
    let source = "import \"treasury\" as t;\nimport \"math\" as m;\n`${t::NAME}: ${t::excess(\"12.50\", \"10\")}`";
    let compiler = Compiler::default();
    assert!(compiler.compile("main", source, &deps).is_ok());
    let outcome =
        compiler.run(source, &deps, &BTreeMap::new(), None, Arc::new(FakeHost::default()), &Limits::default());
    assert_eq!(completed(outcome).as_deref(), Some("treasury: 2.5"));
    let outcome = compiler.run(
        "import \"math\" as m;\nm::boom()",
        &deps,
        &BTreeMap::new(),
        None,
        Arc::new(FakeHost::default()),
        &Limits::default(),
    );
    let error = failure(outcome);
    assert_eq!(error.kind, RunErrorKind::ScriptError, "{error}");
    assert!(error.message.contains("boom"), "{error}");
}

#[test]
fn a_long_log_line_is_cut_and_says_so() {
    let host = Arc::new(FakeHost::default());
    let outcome = run_with("let s = \"é\"; s.pad(3000, \"x\"); log(s); log(\"short\")", &host, &Limits::default());
    assert!(matches!(outcome, RunOutcome::Completed { .. }), "{outcome:?}");
    let logs = host.logs.lock().expect("lock").clone();
    assert!(logs[0].len() < crate::sandbox::MAX_LOG_LINE_BYTES + 64, "{}", logs[0].len());
    assert!(logs[0].starts_with('é') && logs[0].ends_with("(953 more bytes not kept)"), "{}", &logs[0][2_040..]);
    assert_eq!(logs[1], "short");
}

#[test]
fn log_lines_and_submissions_are_bounded() {
    let limits = Limits { max_log_lines: 3, max_submissions: 2, ..Limits::default() };
    let host = Arc::new(FakeHost::default());
    let error = failure(run_with("for i in 0..10 { log(i) }", &host, &limits));
    assert_eq!(error.kind, RunErrorKind::LimitExceeded { which: Limit::LogLines }, "{error}");
    assert_eq!(host.logs.lock().expect("lock").len(), 3);
    let error = failure(run_with("for i in 0..10 { print(i) }", &Arc::new(FakeHost::default()), &limits));
    assert_eq!(error.kind, RunErrorKind::LimitExceeded { which: Limit::LogLines }, "{error}");
    let host = Arc::new(FakeHost::default());
    let error = failure(run_with("for i in 0..10 { submit(#{n: i}) }", &host, &limits));
    assert_eq!(error.kind, RunErrorKind::LimitExceeded { which: Limit::Submissions }, "{error}");
    assert_eq!(host.submitted.lock().expect("lock").len(), 2);
    let error = failure(run_with(
        "for i in 0..10 { try { submit(#{n: i}) } catch { } }",
        &Arc::new(FakeHost::default()),
        &limits,
    ));
    assert_eq!(
        error.kind,
        RunErrorKind::LimitExceeded { which: Limit::Submissions },
        "a limit cannot be caught: {error}"
    );
}

#[test]
fn decimals_are_exact_strings() {
    assert_eq!(completed(run("decimal_add(\"0.1\", \"0.2\")")).as_deref(), Some("0.3"));
    assert_eq!(completed(run("decimal_sub(\"10\", \"10.01\")")).as_deref(), Some("-0.01"));
    assert_eq!(completed(run("decimal_cmp(\"2.50\", \"2.5\")")).as_deref(), Some("0"));
    assert_eq!(completed(run("decimal(7)")).as_deref(), Some("7"));
    let error = failure(run("decimal_add(\"1e3\", \"1\")"));
    assert_eq!(error.kind, RunErrorKind::ScriptError);
    assert!(error.message.contains("not a decimal"), "{error}");
}

/// The figure for the closing note: runs per second of a trivial script, one thread, with the
/// engine built per run as `run` does. `cargo test -p tokenops-scripting --release runs_per_second -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn runs_per_second() {
    let compiler = Compiler::default();
    let source =
        "// @param target: decimal = \"100\"\nlet x = 0; for i in 0..10 { x += i; } decimal_add(target, \"1\")";
    let params = fit(&extract(source).expect("a value"), &[]).expect("a value");
    let host: Arc<dyn Host> = Arc::new(FakeHost::default());
    let limits = Limits::default();
    let started = Instant::now();
    let mut runs = 0u32;
    while started.elapsed() < Duration::from_secs(3) {
        let outcome = compiler.run(source, &(), &params, None, host.clone(), &limits);
        assert!(matches!(outcome, RunOutcome::Completed { .. }));
        runs += 1;
    }
    let rate = f64::from(runs) / started.elapsed().as_secs_f64();
    eprintln!("{runs} runs, {rate:.0} runs/s on one thread");
}

#[test]
fn a_compiler_is_shared_across_threads() {
    fn shared<T: Send + Sync>(_: &T) {}
    let compiler = Arc::new(Compiler::default());
    shared(&*compiler);
    let worker = Arc::clone(&compiler);
    let outcome = std::thread::spawn(move || {
        worker.run("1 + 1", &(), &BTreeMap::new(), None, Arc::new(FakeHost::default()), &Limits::default())
    })
    .join()
    .expect("the run's thread");
    assert_eq!(completed(outcome).as_deref(), Some("2"));
}

#[test]
fn exit_ends_the_run_with_its_value() {
    assert_eq!(completed(run("let x = 1;\nif x == 1 { exit(\"early\"); }\n\"late\"")).as_deref(), Some("early"));
    assert_eq!(completed(run("exit(); 3")), None);
    assert_eq!(completed(run("fn stop() { exit(7) }\nstop(); 3")).as_deref(), Some("7"));
}

#[test]
fn padding_is_bounded_before_it_allocates() {
    for (script, which) in [
        ("let s = \"\"; s.pad(100000000, \"x\"); s", Limit::StringLength),
        ("let a = []; a.pad(100000000, 0); a.len()", Limit::ArrayLength),
    ] {
        let started = Instant::now();
        let error = failure(run(script));
        assert_eq!(error.kind, RunErrorKind::LimitExceeded { which }, "{script}: {error}");
        assert!(started.elapsed() < Duration::from_secs(2), "{script}");
    }
}

#[test]
fn a_value_nested_deeper_than_the_host_keeps_ends_the_run_without_crashing_it() {
    // Built in a loop: stopped when it is read past the bound, however deep the loop would go.
    for depth in [33, 9_000] {
        let error = failure(run(&format!("let x = 1; for i in 0..{depth} {{ x = [x]; }} x")));
        assert_eq!(error.kind, RunErrorKind::LimitExceeded { which: Limit::ValueDepth }, "{error}");
    }
    // At the bound, kept as JSON.
    let fine = completed(run("let x = 1; for i in 0..32 { x = [x]; } x")).expect("a value");
    assert!(serde_json::from_str::<serde_json::Value>(&fine).is_ok(), "{fine}");
    // Built by calls and returned, no variable holding it: refused when kept, never printed.
    let returned = failure(run("fn f(n) { if n == 0 { 1 } else { [f(n - 1)] } } f(40)"));
    assert_eq!(returned.kind, RunErrorKind::ScriptError, "{returned}");
    assert!(returned.message.contains("cannot be kept"), "{returned}");
    // A float inside a value is kept as the script's text, as before.
    assert_eq!(completed(run("[1.5]")).as_deref(), Some("[1.5]"));
}

#[test]
fn printing_a_value_nested_thousands_deep_through_calls_does_not_overflow_the_stack() {
    // Each call nests 30 levels in one expression, 60 calls deep: 1,800 levels no variable
    // read ever measured: on a 2 MiB stack printing it aborts the process; on the stack a run's
    // thread is given it completes.
    let inner = format!("{}f(n - 1){}", "[".repeat(15), "]".repeat(15));
    let source = format!("fn f(n) {{ if n == 0 {{ 1 }} else {{ {inner} }} }} print(f(60)); 1");
    let outcome = std::thread::Builder::new()
        .stack_size(RUN_STACK_BYTES)
        .spawn(move || run(&source))
        .expect("thread")
        .join()
        .expect("the run did not crash");
    assert_eq!(completed(outcome).as_deref(), Some("1"));
}

/// Runs `source` on a thread with the stack a run gets in the service: dropping what the
/// memory scripts below build (a chain of closures) walks it once per link.
fn run_on_run_stack(source: String, host: Arc<FakeHost>, limits: Limits) -> RunOutcome {
    std::thread::Builder::new()
        .stack_size(RUN_STACK_BYTES)
        .spawn(move || run_with(&source, &host, &limits))
        .expect("thread")
        .join()
        .expect("the run did not crash")
}

#[track_caller]
fn assert_out_of_memory(outcome: RunOutcome, limits: &Limits) {
    let error = failure(outcome);
    assert_eq!(error.kind, RunErrorKind::LimitExceeded { which: Limit::Memory }, "{error}");
    assert_eq!(error.kind.code(), "LIMIT_EXCEEDED");
    assert_eq!(error.message, format!("more than {} bytes of memory", limits.max_memory), "{error}");
    assert!(error.to_string().starts_with("LIMIT_EXCEEDED (MEMORY)"), "{error}");
}

#[test]
fn values_held_where_no_size_check_looks_end_at_the_memory_limit() {
    let limits = Limits::default();
    // A function pointer's curried arguments: 3,000 strings of 32 to 160 KB, some 400 MB.
    let curried = "fn id(x) { x }\nlet f = Fn(\"id\");\nfor i in 0..3000 { let s = \"a\" + i; for j in 0..15 { s += s; } f = f.curry(s); }\n()";
    // Closures, each capturing such a string and the closure before it.
    let captured = "let keep = || 0;\nfor i in 0..3000 { let s = \"a\" + i; for j in 0..15 { s += s; } let before = keep; keep = || before.call() + s.len(); }\n()";
    // The frames of a recursion, each with 100 variables of 128 KB: 60 frames, some 780 MB.
    let lets: String = (0..100).map(|i| format!("let v{i} = s + \"{i}\";\n")).collect();
    let recursion = format!(
        "fn hold(n) {{\nlet s = \"x\"; for j in 0..17 {{ s += s; }}\n{lets}if n < 60 {{ hold(n + 1) }} else {{ 0 }}\n}}\nhold(0)"
    );
    for (route, source) in
        [("curried", curried.to_owned()), ("captured", captured.to_owned()), ("recursion", recursion)]
    {
        let started = Instant::now();
        let outcome = run_on_run_stack(source, Arc::new(FakeHost::default()), limits.clone());
        assert_out_of_memory(outcome, &limits);
        // Long before the 30 s wall limit: stopped by the budget, not the clock.
        assert!(started.elapsed() < Duration::from_secs(20), "{route}: {:?}", started.elapsed());
    }
    // The bound is the setting's: an 8 MiB budget stops the same script sooner.
    let small = Limits { max_memory: 8 * 1024 * 1024, ..Limits::default() };
    assert_out_of_memory(run_on_run_stack(curried.to_owned(), Arc::new(FakeHost::default()), small.clone()), &small);
}

#[test]
fn the_runs_log_is_bounded_in_bytes() {
    // 1,000 lines of 200 KB are within the log's line bound; cut, they keep 2 MB, not 200 MB.
    let source = "let s = \"\"; s.pad(200000, \"x\"); for i in 0..1000 { log(s) }";
    let host = Arc::new(FakeHost::default());
    let outcome = run_with(source, &host, &Limits::default());
    assert!(matches!(outcome, RunOutcome::Completed { .. }), "{outcome:?}");
    let logs = host.logs.lock().expect("lock");
    assert_eq!(logs.len(), 1000);
    assert!(logs.iter().map(String::len).sum::<usize>() < 1000 * (crate::sandbox::MAX_LOG_LINE_BYTES + 64));
}

#[test]
fn host_answers_made_on_another_thread_count_as_the_script_holds_them() {
    // Each answer is built on another thread and freed on the run's: counted as they fall, each
    // call would leave the run's count where it was while the script keeps a 64 KB copy.
    let source = "fn id(x) { x }\nlet f = Fn(\"id\");\nfor i in 0..2000 { f = f.curry(balance(\"acc-1\").blob); }\n()";
    let limits = Limits { max_memory: 16 * 1024 * 1024, ..Limits::default() };
    let host = Arc::new(FakeHost { big_answers: true, ..FakeHost::default() });
    assert_out_of_memory(run_on_run_stack(source.to_owned(), host, limits.clone()), &limits);
    // Answers the script drops leave nothing: 2,000 of them (128 MB) within 16 MB.
    let dropped = "let n = 0; for i in 0..2000 { n += balance(\"acc-1\").blob.len(); }\nn";
    let host = Arc::new(FakeHost { big_answers: true, ..FakeHost::default() });
    let outcome = run_on_run_stack(dropped.to_owned(), host, limits);
    assert_eq!(completed(outcome).as_deref(), Some("131072000"));
}

#[test]
fn memory_allocated_and_freed_over_a_run_is_not_held() {
    // 10,000 strings of 200 KB, 2 GB in all, one alive at a time: the budget is what is held.
    let source = "let base = \"\"; base.pad(200000, \"x\");\nlet n = 0;\nfor i in 0..10000 { let t = base + i; n += t.len() - 200000; }\nn";
    assert_eq!(completed(run(source)).as_deref(), Some("38890"));
    // The least budget the settings take, 1 MiB, leaves room for the engine and a small script.
    let least = Limits { max_memory: 1024 * 1024, ..Limits::default() };
    let host = Arc::new(FakeHost::default());
    assert_eq!(
        completed(run_with("let a = []; for i in 0..1000 { a.push(`${i}`); } a.len()", &host, &least)).as_deref(),
        Some("1000")
    );
}
