//! The webhook delivery benchmark (`scripts/bench webhooks [sqlite|postgres]`), through the real
//! binary and a local HTTPS receiver (testkit's `Sink`: its own throwaway CA, given to the
//! service as `TOKENOPS_WEBHOOK_CA_FILE`, answering 200 at once).
//!
//! - **Delivery rate and latency.** Events are made the way an integrator makes them: status
//!   changes of customers (`PATCH /api/customers/{ref}`, each emitting one
//!   `customer.status_changed` that every registration subscribes to), sent open loop at fixed
//!   offered rates. The latency is the event's `occurredAt` (stamped by the write that commits
//!   it) to the delivery's arrival at the receiver, and, as an upper bound that includes the
//!   API, the write's intended send time to the arrival. A rate is sustained when every write is
//!   answered 200, every delivery arrives, and event → delivery p99 stays under one second.
//! - **Memory under a backlog.** A million deliveries (with their events and jobs) written
//!   straight into a fresh store, all due, to a dead receiver (it accepts connections and never
//!   answers); the service is started on them and its resident memory sampled from /proc while
//!   its workers face the receiver.
//!
//! Counts and rates are overridable for quick runs: `TOKENOPS_BENCH_WEBHOOK_RATES` (comma-
//! separated offered events/s), `TOKENOPS_BENCH_WEBHOOK_SECS` (each rate's length, 30),
//! `TOKENOPS_BENCH_WEBHOOK_REGISTRATIONS` (deliveries per event, 1),
//! `TOKENOPS_BENCH_WEBHOOK_BACKLOG` (1,000,000; 0 skips that part) and
//! `TOKENOPS_BENCH_WEBHOOK_BACKLOG_SECS` (how long memory is sampled, 120).

use anyhow::{Context, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokenops_domain::{Clock, SystemClock, Timestamp};
use tokenops_testkit::webhook_receiver::{ALLOW_CIDRS, Sink};
use tokenops_testkit::{Backend, ServiceProcess, TestDb, Testbed};

const RATES: &[u64] = &[250, 500, 1_000, 1_500, 2_000, 2_500, 3_000];
const STEP_SECS: u64 = 30;
const P99_LIMIT: Duration = Duration::from_secs(1);
/// How long after its last write a step's deliveries may still arrive before the step fails.
const DRAIN: Duration = Duration::from_secs(30);
const BACKLOG: u64 = 1_000_000;
const BACKLOG_SECS: u64 = 120;
/// The backlog's deliveries are spread over this many registrations (one dead destination).
const BACKLOG_REGISTRATIONS: u64 = 10;
/// Writes of the setup (customers) in flight at once.
const SETUP_IN_FLIGHT: usize = 32;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

pub async fn run(backend: Backend, binary: &str) -> anyhow::Result<()> {
    throughput(backend, binary).await?;
    let backlog = env_u64("TOKENOPS_BENCH_WEBHOOK_BACKLOG", BACKLOG);
    if backlog > 0 {
        memory_under_backlog(backend, binary, backlog).await?;
    }
    Ok(())
}

/// The part of a delivery body the benchmark reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    occurred_at: String,
    idempotency_key: Option<String>,
}

fn micros_now() -> u64 {
    u64::try_from(SystemClock.now().as_micros()).unwrap_or(0)
}

/// `yyyy-MM-dd HH:mm:ss.SSS` (UTC) in µs since the epoch.
fn spaced_micros(text: &str) -> Option<u64> {
    let iso = format!("{}Z", text.replacen(' ', "T", 1));
    u64::try_from(Timestamp::parse_iso8601(&iso).ok()?.as_micros()).ok()
}

/// One offered rate's writes and what the receiver made of their deliveries. Write `seq`
/// (global, its key `bw-{seq}`) is slot `seq - first` here.
struct Step {
    first: u64,
    registrations: usize,
    /// Intended send time of each write, µs since the epoch.
    sent_at: Vec<AtomicU64>,
    /// Deliveries received per (write, registration).
    got: Vec<AtomicU8>,
    unique: AtomicU64,
    duplicates: AtomicU64,
    /// Deliveries of no write of this step (a step before it, or unreadable).
    stray: AtomicU64,
    last_arrival: AtomicU64,
    from_event: Mutex<Histogram<u64>>,
    from_send: Mutex<Histogram<u64>>,
}

impl Step {
    fn new(first: u64, writes: u64, registrations: usize) -> Self {
        let slots = usize::try_from(writes).unwrap_or(0);
        Self {
            first,
            registrations,
            sent_at: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            got: (0..slots * registrations).map(|_| AtomicU8::new(0)).collect(),
            unique: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            stray: AtomicU64::new(0),
            last_arrival: AtomicU64::new(0),
            from_event: Mutex::new(histogram()),
            from_send: Mutex::new(histogram()),
        }
    }

    fn received(&self, path: &str, body: &Bytes) {
        let arrived = micros_now();
        let parsed: Option<(u64, u64, usize)> = (|| {
            let body: Body = serde_json::from_slice(body).ok()?;
            let seq: u64 = body.idempotency_key?.strip_prefix("bw-")?.parse().ok()?;
            let registration: usize = path.strip_prefix("/r")?.parse().ok()?;
            Some((seq, spaced_micros(&body.occurred_at)?, registration))
        })();
        let Some((seq, occurred, registration)) = parsed else {
            self.stray.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some(slot) = seq.checked_sub(self.first).and_then(|s| usize::try_from(s).ok()) else {
            self.stray.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some(got) = self.got.get(slot * self.registrations + registration) else {
            self.stray.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if got.fetch_add(1, Ordering::Relaxed) > 0 {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.unique.fetch_add(1, Ordering::Relaxed);
        self.last_arrival.fetch_max(arrived, Ordering::Relaxed);
        record(&self.from_event, arrived.saturating_sub(occurred));
        let sent = self.sent_at[slot].load(Ordering::Relaxed);
        if sent > 0 {
            record(&self.from_send, arrived.saturating_sub(sent));
        }
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::<u64>::new(3).unwrap_or_else(|_| unreachable!("3 significant figures are allowed"))
}

fn record(histogram: &Mutex<Histogram<u64>>, micros: u64) {
    let _ = histogram.lock().unwrap_or_else(PoisonError::into_inner).record(micros.max(1));
}

fn ms(histogram: &Mutex<Histogram<u64>>, quantile: f64) -> f64 {
    histogram.lock().unwrap_or_else(PoisonError::into_inner).value_at_quantile(quantile) as f64 / 1_000.0
}

/// The step the receiver's deliveries are counted in now.
#[derive(Default)]
struct Recorder {
    current: Mutex<Option<Arc<Step>>>,
}

impl Recorder {
    fn begin(&self, step: Arc<Step>) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(step);
    }

    fn received(&self, path: &str, body: &Bytes) {
        let step = self.current.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(step) = step {
            step.received(path, body);
        }
    }
}

struct Api {
    client: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    async fn send(&self, method: reqwest::Method, path: &str, key: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        let reply = self
            .client
            .request(method, format!("{}{path}", self.base))
            .header("API-Version", "1.0.0")
            .header("Idempotency-Key", key)
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await?;
        let status = reply.status().as_u16();
        Ok((status, reply.json().await.unwrap_or(Value::Null)))
    }

    async fn expect(&self, method: reqwest::Method, path: &str, body: &Value, want: u16) -> anyhow::Result<Value> {
        let (status, reply) = self.send(method, path, &uuid::Uuid::now_v7().to_string(), body).await?;
        if status != want {
            bail!("{path}: {status} {reply}");
        }
        Ok(reply)
    }
}

/// The customers the writes flip, each with the status it has now (true: ACTIVE).
struct Customers {
    active: Vec<AtomicBool>,
}

/// Sends `rate` status flips per second for `secs`, open loop, writes `first..`; returns the
/// writes answered 200, the others, and the histogram of the answers' latency from each
/// write's intended send time.
async fn open_loop(
    api: &Arc<Api>,
    customers: &Arc<Customers>,
    step: &Arc<Step>,
    rate: u64,
    secs: u64,
) -> (u64, u64, Histogram<u64>) {
    let total = rate * secs;
    let period = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let answered = Arc::new(Mutex::new(histogram()));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let start_micros = micros_now() + 50_000;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..total {
        let offset = period * u32::try_from(i).unwrap_or(u32::MAX);
        tokio::time::sleep_until(start + offset).await;
        let intended = start + offset;
        let slot = usize::try_from(i).unwrap_or(usize::MAX);
        step.sent_at[slot].store(start_micros + u64::try_from(offset.as_micros()).unwrap_or(0), Ordering::Relaxed);
        let seq = step.first + i;
        let (api, customers, answered, ok, failed) =
            (api.clone(), customers.clone(), answered.clone(), ok.clone(), failed.clone());
        tasks.spawn(async move {
            let c = usize::try_from(seq % customers.active.len() as u64).unwrap_or(0);
            // A customer is flipped again only seconds later (there are rate × 2 of them), so
            // its status is known when the next flip is sent.
            let to_active = !customers.active[c].load(Ordering::Relaxed);
            let body = json!({ "status": if to_active { "ACTIVE" } else { "INACTIVE" } });
            let sent =
                api.send(reqwest::Method::PATCH, &format!("/api/customers/bc-{c}"), &format!("bw-{seq}"), &body).await;
            record(&answered, u64::try_from(intended.elapsed().as_micros()).unwrap_or(u64::MAX));
            if matches!(sent, Ok((200, _))) {
                customers.active[c].store(to_active, Ordering::Relaxed);
                ok.fetch_add(1, Ordering::Relaxed);
            } else {
                failed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let histogram = answered.lock().unwrap_or_else(PoisonError::into_inner).clone();
    (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed), histogram)
}

/// No dispatch or delivery job queued or running.
async fn quiet(db: &TestDb) -> bool {
    db.count("jobs", "status IN ('queued', 'running') AND kind IN ('event.dispatch', 'webhook.deliver')").await == 0
}

async fn throughput(backend: Backend, binary: &str) -> anyhow::Result<()> {
    let name = super::store_name(backend);
    let rates = super::rates_from_env("TOKENOPS_BENCH_WEBHOOK_RATES");
    let chosen = rates.is_some();
    let rates = rates.unwrap_or_else(|| RATES.to_vec());
    let secs = env_u64("TOKENOPS_BENCH_WEBHOOK_SECS", STEP_SECS).max(1);
    let registrations = usize::try_from(env_u64("TOKENOPS_BENCH_WEBHOOK_REGISTRATIONS", 1).max(1)).unwrap_or(1);
    let most = rates.iter().copied().max().unwrap_or(RATES[0]);
    let count = env_u64("TOKENOPS_BENCH_WEBHOOK_CUSTOMERS", (most * 2).max(100));
    println!(
        "== webhook deliveries, {name}: customer status changes at offered rates {rates:?}/s, {secs} s each, \
         {registrations} registration(s) per event, {count} customers"
    );
    let bed = Testbed::start(backend).await;
    let (db, tenant) = (&bed.db, &bed.tenant);
    let mut env = bed.environment("all");
    let recorder = Arc::new(Recorder::default());
    let sink = {
        let recorder = recorder.clone();
        Sink::start(Arc::new(move |path: &str, body: &Bytes| recorder.received(path, body))).await
    };
    let ca = db.dir().join("webhook-ca.pem");
    std::fs::write(&ca, sink.ca_pem()).context("the CA file")?;
    env.insert("TOKENOPS_WEBHOOK_ALLOW_CIDRS".to_owned(), ALLOW_CIDRS.to_owned());
    env.insert("TOKENOPS_WEBHOOK_CA_FILE".to_owned(), ca.display().to_string());
    super::service_settings_from_env(&mut env);
    let service = ServiceProcess::start(binary, &env).await;
    let client = reqwest::Client::builder().pool_max_idle_per_host(1_024).build()?;
    let api = Arc::new(Api { client, base: service.base_url.clone(), token: tenant.token.clone() });

    for r in 0..registrations {
        let body = json!({ "url": sink.url(&format!("/r{r}")), "eventTypes": ["customer.status_changed"] });
        api.expect(reqwest::Method::POST, "/api/webhooks", &body, 201).await?;
    }
    let mut setup = tokio::task::JoinSet::new();
    for c in 0..count {
        if setup.len() >= SETUP_IN_FLIGHT {
            setup.join_next().await.context("a setup write")???;
        }
        let api = api.clone();
        setup.spawn(async move {
            api.expect(reqwest::Method::POST, "/api/customers", &json!({ "customerRef": format!("bc-{c}") }), 201).await
        });
    }
    while let Some(done) = setup.join_next().await {
        done??;
    }
    let customers = Arc::new(Customers {
        active: (0..usize::try_from(count).unwrap_or(0)).map(|_| AtomicBool::new(true)).collect(),
    });

    let mut seq = 0;
    let mut best: Option<(u64, f64)> = None;
    // Two unmeasured seconds at the lowest rate first: connections, caches, the JWS key.
    let warm = rates.iter().copied().min().unwrap_or(RATES[0]);
    for (rate, length, measured) in
        std::iter::once((warm, 2, false)).chain(rates.iter().map(|&rate| (rate, secs, true)))
    {
        super::until("a quiet store", Duration::from_secs(300), async || Ok(quiet(db).await)).await?;
        let step = Arc::new(Step::new(seq, rate * length, registrations));
        seq += rate * length;
        recorder.begin(step.clone());
        let began = Instant::now();
        let began_micros = micros_now();
        let (ok, failed, answered) = open_loop(&api, &customers, &step, rate, length).await;
        let expected = ok * registrations as u64;
        let drained = Instant::now() + DRAIN;
        while step.unique.load(Ordering::Relaxed) < expected && Instant::now() < drained {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if !measured {
            continue;
        }
        let unique = step.unique.load(Ordering::Relaxed);
        let last = step.last_arrival.load(Ordering::Relaxed);
        let spread = Duration::from_micros(last.saturating_sub(began_micros))
            .max(began.elapsed().min(Duration::from_secs(length)));
        let per_second = unique as f64 / spread.as_secs_f64().max(0.001);
        let (p50, p99) = (ms(&step.from_event, 0.50), ms(&step.from_event, 0.99));
        println!(
            "  offered {rate:>5} events/s: {unique}/{expected} deliveries ({per_second:.0}/s), event → delivery \
             p50 {p50:.1} ms, p99 {p99:.1} ms; write sent → delivery p50 {:.1} ms, p99 {:.1} ms; write 200 p99 {:.1} ms, \
             not 200 {failed}; duplicates {}, stray {}",
            ms(&step.from_send, 0.50),
            ms(&step.from_send, 0.99),
            answered.value_at_quantile(0.99) as f64 / 1_000.0,
            step.duplicates.load(Ordering::Relaxed),
            step.stray.load(Ordering::Relaxed),
        );
        let sustained = failed == 0 && unique == expected && p99 < P99_LIMIT.as_secs_f64() * 1_000.0;
        if sustained {
            if best.is_none_or(|(r, _)| r < rate) {
                best = Some((rate, per_second));
            }
        } else if !chosen {
            break;
        }
    }
    drop(service);
    match best {
        Some((rate, per_second)) => println!(
            "  highest offered rate sustained for {secs} s with event → delivery p99 < 1 s: {rate} events/s, \
             {} deliveries/s offered ({per_second:.0}/s received)",
            rate * registrations as u64
        ),
        None => println!("  no offered rate sustained for {secs} s with event → delivery p99 < 1 s"),
    }
    Ok(())
}

/// Statements that write `count` due deliveries (and their events and `webhook.deliver` jobs)
/// of `tenant` to `webhooks` in turn, as the dispatcher would have, dispatched events and
/// PENDING deliveries at generation 1. Ids are made from the row number.
fn backlog_sql(backend: Backend, tenant: &str, webhooks: &[String], count: u64, now: i64) -> Vec<String> {
    let per = webhooks.len() as u64;
    let events = count.div_ceil(per);
    let data = r#"{"customerRef":"bench","status":"INACTIVE","updatedAt":"2026-01-01 00:00:00.000"}"#;
    match backend {
        Backend::Sqlite => {
            let registrations: Vec<String> =
                webhooks.iter().enumerate().map(|(r, id)| format!("({r}, '{id}')")).collect();
            let registrations = registrations.join(", ");
            let deliveries = format!(
                "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {events} - 1),
                 w(r, id) AS (VALUES {registrations})
                 SELECT printf('00000000-0000-7000-8000-%012x', n.i) AS event_id, w.id AS webhook_id,
                        printf('00000000-0000-7000-9%03x-%012x', w.r, n.i) AS id,
                        printf('00000000-0000-7000-a%03x-%012x', w.r, n.i) AS job_id
                 FROM n CROSS JOIN w WHERE n.i * {per} + w.r < {count}"
            );
            vec![
                format!(
                    "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {events} - 1)
                     INSERT INTO events (id, tenant_id, event_type, occurred_at, resource_type, resource_id, data, dispatched_at)
                     SELECT printf('00000000-0000-7000-8000-%012x', i), '{tenant}', 'customer.status_changed', {now} - {events} + i,
                            'customer', 'bench', '{data}', {now}
                     FROM n"
                ),
                format!(
                    "INSERT INTO webhook_deliveries (id, tenant_id, event_id, webhook_id, generation, status, attempts, created_at, updated_at)
                     SELECT id, '{tenant}', event_id, webhook_id, 1, 'PENDING', 0, {now}, {now} FROM ({deliveries})"
                ),
                format!(
                    "INSERT INTO jobs (id, kind, tenant_id, payload, status, attempts, max_attempts, run_at, created_at, updated_at)
                     SELECT job_id, 'webhook.deliver', '{tenant}', '{{\"deliveryId\":\"' || id || '\",\"attempt\":1}}', 'queued', 0, 10,
                            {now}, {now}, {now}
                     FROM ({deliveries})"
                ),
            ]
        }
        Backend::Postgres => {
            let registrations: Vec<String> =
                webhooks.iter().enumerate().map(|(r, id)| format!("({r}, '{id}'::uuid)")).collect();
            let registrations = registrations.join(", ");
            let hex = |width: u32, expr: &str| format!("lpad(to_hex({expr}), {width}, '0')");
            let deliveries = format!(
                "SELECT ('00000000-0000-7000-8000-' || {ei})::uuid AS event_id, w.id AS webhook_id,
                        ('00000000-0000-7000-9' || {r} || '-' || {ei})::uuid AS id,
                        ('00000000-0000-7000-a' || {r} || '-' || {ei})::uuid AS job_id
                 FROM generate_series(0, {events} - 1) AS i CROSS JOIN (VALUES {registrations}) AS w(r, id)
                 WHERE i * {per} + w.r < {count}",
                ei = hex(12, "i"),
                r = hex(3, "w.r"),
            );
            vec![
                format!(
                    "INSERT INTO events (id, tenant_id, event_type, occurred_at, resource_type, resource_id, data, dispatched_at)
                     SELECT ('00000000-0000-7000-8000-' || {})::uuid, '{tenant}', 'customer.status_changed', {now} - {events} + i,
                            'customer', 'bench', '{data}'::jsonb, {now}
                     FROM generate_series(0, {events} - 1) AS i",
                    hex(12, "i")
                ),
                format!(
                    "INSERT INTO webhook_deliveries (id, tenant_id, event_id, webhook_id, generation, status, attempts, created_at, updated_at)
                     SELECT id, '{tenant}', event_id, webhook_id, 1, 'PENDING', 0, {now}, {now} FROM ({deliveries}) AS d"
                ),
                format!(
                    "INSERT INTO jobs (id, kind, tenant_id, payload, status, attempts, max_attempts, run_at, created_at, updated_at)
                     SELECT job_id, 'webhook.deliver', '{tenant}', jsonb_build_object('deliveryId', id::text, 'attempt', 1),
                            'queued', 0, 10, {now}, {now}, {now}
                     FROM ({deliveries}) AS d"
                ),
                "ANALYZE events".to_owned(),
                "ANALYZE webhook_deliveries".to_owned(),
                "ANALYZE jobs".to_owned(),
            ]
        }
    }
}

/// A receiver that is there and dead: it accepts connections and never answers (not even the
/// TLS handshake), so every attempt waits out the sender's connect timeout.
async fn dead_receiver() -> anyhow::Result<(u16, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let held = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(60)).await;
                drop(stream);
            });
        }
    });
    Ok((port, held))
}

async fn memory_under_backlog(backend: Backend, binary: &str, count: u64) -> anyhow::Result<()> {
    let name = super::store_name(backend);
    let secs = env_u64("TOKENOPS_BENCH_WEBHOOK_BACKLOG_SECS", BACKLOG_SECS).max(1);
    println!("== webhook backlog, {name}: {count} deliveries due to a dead receiver, memory sampled for {secs} s");
    let bed = Testbed::start(backend).await;
    let (db, tenant) = (&bed.db, &bed.tenant);
    let mut env = bed.environment("all");
    let (port, _dead) = dead_receiver().await?;
    env.insert("TOKENOPS_WEBHOOK_ALLOW_CIDRS".to_owned(), ALLOW_CIDRS.to_owned());
    super::service_settings_from_env(&mut env);
    // Registrations through the API (their secrets sealed as the service seals them), then the
    // backlog behind the service's back, and the service started again on it.
    let service = ServiceProcess::start(binary, &env).await;
    let api = Api { client: reqwest::Client::new(), base: service.base_url.clone(), token: tenant.token.clone() };
    let mut webhooks = Vec::new();
    for r in 0..BACKLOG_REGISTRATIONS.min(count.max(1)) {
        let body =
            json!({ "url": format!("https://127.0.0.1:{port}/dead{r}"), "eventTypes": ["customer.status_changed"] });
        let created = api.expect(reqwest::Method::POST, "/api/webhooks", &body, 201).await?;
        webhooks.push(created["id"].as_str().context("a registration id")?.to_owned());
    }
    service.terminate().await;
    let seeding = Instant::now();
    let now = SystemClock.now().as_micros();
    for statement in backlog_sql(backend, &tenant.id.to_string(), &webhooks, count, now) {
        db.execute(&statement).await;
    }
    let due = db.count("jobs", "kind = 'webhook.deliver' AND status = 'queued'").await;
    println!("  seeded {due} due delivery jobs in {:.1} s", seeding.elapsed().as_secs_f64());

    let service = ServiceProcess::start(binary, &env).await;
    let pid = service.pid().context("the service's pid")?;
    let before = super::memory::resident_kib(pid).context("resident memory")?;
    let began = Instant::now();
    let (mut peak, mut samples, mut last) = (before, Vec::new(), before);
    while began.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(kib) = super::memory::resident_kib(pid) {
            peak = peak.max(kib);
            last = kib;
        }
        // Every tenth of the run, where memory stands.
        let tenth = (began.elapsed().as_secs_f64() * 10.0 / secs as f64) as usize;
        if tenth > samples.len() {
            samples.push(last);
        }
    }
    let left = db.count("jobs", "kind = 'webhook.deliver' AND status IN ('queued', 'running')").await;
    let done = db.count("jobs", "kind = 'webhook.deliver' AND status = 'done'").await;
    let attempted = db.count("webhook_deliveries", "attempts > 0").await;
    let suspended = db.count("webhooks", "status = 'SUSPENDED'").await;
    drop(service);
    let mib = |kib: u64| kib as f64 / 1_024.0;
    let shape: Vec<String> = samples.iter().map(|&k| format!("{:.0}", mib(k))).collect();
    println!(
        "  service resident memory: {:.1} MiB at start, {:.1} MiB at the peak (+{:.1} MiB), {:.1} MiB at the end; \
         by tenths of the run (MiB): {}",
        mib(before),
        mib(peak),
        mib(peak.saturating_sub(before)),
        mib(last),
        shape.join(" ")
    );
    println!(
        "  meanwhile: {done} delivery jobs done ({left} queued or leased, put-backs included), {attempted} \
         deliveries attempted, {suspended}/{} registrations suspended",
        webhooks.len()
    );
    if due < i64::try_from(count).unwrap_or(i64::MAX) {
        bail!("seeded {due} jobs, expected {count}");
    }
    Ok(())
}
