//! The scripts benchmark (`scripts/bench scripts [sqlite|postgres]`): through the real binary,
//! runs per second of a trivial script as an ON_DEMAND automation's runs (requested over HTTP,
//! each a durable job: QUEUED, RUNNING, the sandbox, SUCCEEDED with its audit record), dry runs
//! per second of the same script, and the service's resident memory before and at its peak
//! during dry runs of a script that fills every variable the default limits allow with the
//! largest value they allow: what one run may take.

use crate::memory::Peak;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokenops_testkit::{Backend, ServiceProcess, Testbed};

/// Runs requested on demand, and how many requests are in flight at once.
const RUNS: usize = 2_000;
const IN_FLIGHT: usize = 16;
/// Dry runs of the trivial script, one at a time and four at once.
const DRY_RUNS: usize = 1_000;

const TRIVIAL: &str = "// @param target: decimal = \"100\"\nlog(\"tick\");\ndecimal_cmp(\"10.00\", target)";

/// The largest string, array and map a value may be (the default limits), then copies of them in
/// as many variables as the limits allow: the most memory one run can hold.
fn hog() -> String {
    let limits = tokenops_scripting::Limits::default();
    let mut hog = format!(
        "let s = \"x\"; while s.len() * 2 <= {} {{ s += s; }}\n\
         let a = []; for i in 0..{} {{ a.push(i); }}\n\
         let m = #{{}}; for i in 0..{} {{ m[`k${{i}}`] = i; }}\n",
        limits.max_string_len, limits.max_array_len, limits.max_map_len
    );
    for i in 0..limits.max_variables.saturating_sub(8) {
        let source = ["s", "a", "m"][i % 3];
        hog.push_str(&format!("let v{i} = {source};\n"));
    }
    hog.push_str("\"held\"");
    hog
}

/// POSTs `{}` to `path` `total` times, `in_flight` at a time; each answer must have `status`
/// and pass `check`.
async fn post_repeatedly(
    client: &Arc<Client>,
    path: &str,
    total: usize,
    in_flight: usize,
    status: u16,
    check: fn(&Value) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut callers = Vec::new();
    for _ in 0..in_flight {
        let (client, next, path) = (client.clone(), next.clone(), path.to_owned());
        callers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < total as u64 {
                check(&client.expect(reqwest::Method::POST, &path, Some(&json!({})), status).await?)?;
            }
            anyhow::Ok(())
        }));
    }
    for caller in callers {
        caller.await??;
    }
    Ok(())
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .header("API-Version", "1.0.0")
            .bearer_auth(&self.token);
        if method != reqwest::Method::GET {
            request = request.header("Idempotency-Key", uuid::Uuid::now_v7().to_string());
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let reply = request.send().await?;
        let status = reply.status().as_u16();
        let body = reply.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    async fn expect(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        want: u16,
    ) -> anyhow::Result<Value> {
        let (status, body) = self.send(method, path, body).await?;
        if status != want {
            bail!("{path}: {status} {body}");
        }
        Ok(body)
    }

    /// A published script of `source`; its id.
    async fn script(&self, name: &str, source: &str) -> anyhow::Result<String> {
        use reqwest::Method;
        let made =
            self.expect(Method::POST, "/api/scripts", Some(&json!({ "name": name, "source": source })), 201).await?;
        let id = made["scriptId"].as_str().context("scriptId")?.to_owned();
        self.expect(Method::PATCH, &format!("/api/scripts/{id}"), Some(&json!({ "status": "PUBLISHED" })), 200).await?;
        Ok(id)
    }
}

pub async fn run(backend: Backend, binary: &str) -> anyhow::Result<()> {
    let name = super::store_name(backend);
    println!("== scripts, {name}");
    let bed = Testbed::start(backend).await;
    let env = bed.environment("all");
    let service = ServiceProcess::start(binary, &env).await;
    let pid = service.pid().context("the service's pid")?;
    let client = Arc::new(Client {
        http: reqwest::Client::new(),
        base: service.base_url.clone(),
        token: bed.tenant.token.clone(),
    });

    let trivial = client.script("trivial", TRIVIAL).await?;
    let made =
        client.expect(reqwest::Method::POST, "/api/automations", Some(&json!({ "scriptId": trivial })), 201).await?;
    let automation = made["automationId"].as_str().context("automationId")?.to_owned();

    // Runs on demand: requested IN_FLIGHT at a time; the clock stops when the last is final.
    let began = Instant::now();
    let executions = format!("/api/automations/{automation}/executions");
    post_repeatedly(&client, &executions, RUNS, IN_FLIGHT, 202, |_| Ok(())).await?;
    let requested = began.elapsed().as_secs_f64();
    let history = format!("/api/automations/{automation}/history?size=1&status=");
    loop {
        let done = client.expect(reqwest::Method::GET, &format!("{history}SUCCEEDED"), None, 200).await?;
        let failed = client.expect(reqwest::Method::GET, &format!("{history}FAILED"), None, 200).await?;
        if failed["totalElements"].as_u64().unwrap_or(0) > 0 {
            bail!("a run failed: {failed}");
        }
        if done["totalElements"].as_u64() == Some(RUNS as u64) {
            break;
        }
        if began.elapsed() > Duration::from_secs(600) {
            bail!("the runs did not finish in 10 minutes: {done}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seconds = began.elapsed().as_secs_f64();
    println!(
        "runs on demand: {RUNS} requested in {requested:.2} s ({:.0} requests/s, {IN_FLIGHT} in flight), all SUCCEEDED after {seconds:.2} s: {:.0} runs/s",
        RUNS as f64 / requested,
        RUNS as f64 / seconds
    );

    // Dry runs of the same script, answered in the request.
    for at_once in [1usize, 4] {
        let began = Instant::now();
        let dry_runs = format!("/api/scripts/{trivial}/dry-runs");
        post_repeatedly(&client, &dry_runs, DRY_RUNS, at_once, 200, |ran| {
            if ran["status"] != "SUCCEEDED" {
                bail!("a dry run failed: {ran}");
            }
            Ok(())
        })
        .await?;
        let seconds = began.elapsed().as_secs_f64();
        println!(
            "dry runs, {at_once} at a time: {DRY_RUNS} in {seconds:.2} s: {:.0} runs/s",
            DRY_RUNS as f64 / seconds
        );
    }

    // The most memory a run may hold: the hog, as a dry run, one and then four at once.
    let hog_id = client.script("hog", &hog()).await?;
    for at_once in [1usize, 4] {
        let memory = Peak::start(pid, Duration::from_millis(10))?;
        let began = Instant::now();
        let mut callers = Vec::new();
        for _ in 0..at_once {
            let (client, hog_id) = (client.clone(), hog_id.clone());
            callers.push(tokio::spawn(async move {
                client
                    .expect(reqwest::Method::POST, &format!("/api/scripts/{hog_id}/dry-runs"), Some(&json!({})), 200)
                    .await
            }));
        }
        let mut outcome = String::new();
        for caller in callers {
            let ran = caller.await??;
            outcome = format!("{} {}", ran["status"].as_str().unwrap_or("?"), ran["error"].as_str().unwrap_or(""));
        }
        let seconds = began.elapsed().as_secs_f64();
        let (before, peak) = memory.stop();
        println!(
            "largest run, {at_once} at once: {} in {seconds:.2} s; service resident memory {:.1} MiB before, {:.1} MiB at the peak (+{:.1} MiB, {:.1} MiB a run)",
            outcome.trim(),
            before as f64 / 1024.0,
            peak as f64 / 1024.0,
            peak.saturating_sub(before) as f64 / 1024.0,
            peak.saturating_sub(before) as f64 / 1024.0 / at_once as f64
        );
    }
    service.terminate().await;
    Ok(())
}
