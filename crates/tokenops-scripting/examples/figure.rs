//! The sandbox's figures: runs per second of a trivial script on one thread, and the peak
//! memory of a run that fills every variable the default limits allow with the largest value
//! they allow. `cargo run --release -p tokenops-scripting --example figure`

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokenops_scripting::params::{extract, fit};
use tokenops_scripting::{Compiler, Host, Limits, RunOutcome};

struct Quiet;

impl Host for Quiet {
    fn balance(&self, _: &str) -> Result<Value, String> {
        Ok(serde_json::json!({"available": "10.00"}))
    }
    fn account(&self, _: &str) -> Result<Value, String> {
        Ok(Value::Null)
    }
    fn operation(&self, _: &str) -> Result<Value, String> {
        Ok(Value::Null)
    }
    fn operations(&self, _: &Value) -> Result<Value, String> {
        Ok(Value::Array(Vec::new()))
    }
    fn locks(&self, _: &str) -> Result<Value, String> {
        Ok(Value::Array(Vec::new()))
    }
    fn submit(&self, request: &Value) -> Result<Value, String> {
        Ok(request.clone())
    }
    fn log(&self, _: &str) {}
}

/// Peak resident memory of this process so far, in KiB (Linux).
fn peak_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let compiler = Compiler::default();
    let limits = Limits::default();
    let host: Arc<dyn Host> = Arc::new(Quiet);

    let trivial = "// @param target: decimal = \"100\"\nlet b = balance(\"acc\");\ndecimal_cmp(b.available, target)";
    let params = fit(&extract(trivial).unwrap_or_default(), &[]).unwrap_or_default();
    let started = Instant::now();
    let mut runs = 0u32;
    while started.elapsed() < Duration::from_secs(3) {
        let outcome = compiler.run(trivial, &(), &params, None, host.clone(), &limits);
        assert!(matches!(outcome, RunOutcome::Completed { .. }), "{outcome:?}");
        runs += 1;
    }
    let rate = f64::from(runs) / started.elapsed().as_secs_f64();
    println!("trivial script: {rate:.0} runs/s on one thread (engine built per run, compile included)");
    let before = peak_kib().unwrap_or(0);
    println!("peak RSS after the trivial runs: {before} KiB");

    // The largest string, array and map one value may be, then as many copies as variables allow.
    let mut hog = String::from(
        "let s = \"x\"; while s.len() * 2 <= MAX_S { s += s; }\n\
         let a = []; for i in 0..MAX_A { a.push(i); }\n\
         let m = #{}; for i in 0..MAX_M { m[`k${i}`] = i; }\n",
    )
    .replace("MAX_S", &limits.max_string_len.to_string())
    .replace("MAX_A", &limits.max_array_len.to_string())
    .replace("MAX_M", &limits.max_map_len.to_string());
    for i in 0..limits.max_variables.saturating_sub(8) {
        let source = ["s", "a", "m"][i % 3];
        hog.push_str(&format!("let v{i} = {source};\n"));
    }
    let started = Instant::now();
    let outcome = compiler.run(&hog, &(), &BTreeMap::new(), None, host.clone(), &limits);
    let after = peak_kib().unwrap_or(0);
    println!(
        "a run holding {} maximal values: {:?} in {:?}; peak RSS {after} KiB (+{} KiB)",
        limits.max_variables.saturating_sub(8),
        match outcome {
            RunOutcome::Completed { .. } => "completed".to_owned(),
            RunOutcome::Failed { error } => error.to_string(),
        },
        started.elapsed(),
        after.saturating_sub(before)
    );

    // A map grown key by key past its bound, then copied: the copies are refused at the first
    // read of the oversized map.
    let mut grow = String::from("let m = #{}; let i = 0; while i < 60000 { m[`k${i}`] = i; i += 1; }\n");
    for i in 0..limits.max_variables.saturating_sub(8) {
        grow.push_str(&format!("let c{i} = m;\n"));
    }
    let started = Instant::now();
    let outcome = compiler.run(&grow, &(), &BTreeMap::new(), None, host, &limits);
    let last = peak_kib().unwrap_or(0);
    println!(
        "a map grown by index then copied: {} in {:?}; peak RSS {last} KiB (+{} KiB)",
        match outcome {
            RunOutcome::Completed { .. } => "completed".to_owned(),
            RunOutcome::Failed { error } => error.to_string(),
        },
        started.elapsed(),
        last.saturating_sub(after)
    );

    // The price of the sandbox's size check on every read: a list built to its bound.
    let build = format!("let a = []; for i in 0..{} {{ a.push(i); }} a.len()", limits.max_array_len);
    let started = Instant::now();
    let outcome = compiler.run(&build, &(), &BTreeMap::new(), None, Arc::new(Quiet), &limits);
    println!("a list of {} items built by push: {outcome:?} in {:?}", limits.max_array_len, started.elapsed());
}
