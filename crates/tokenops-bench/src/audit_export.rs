//! The audit benchmark (`scripts/bench audit-export [sqlite|postgres]`): a million audit records
//! (`TOKENOPS_BENCH_AUDIT_RECORDS` to change)
//! of one organisation written straight into a fresh store and sealed by the service's own
//! sealer, then, through the real binary, filtered searches (`GET /api/audit/events`: each
//! filter's first call, cold, then p50 and p99 over its pages 0, 1, 2, … as an integrator reads
//! them) and the whole log exported through `GET /api/audit/events/export`, read as a stream. Prints
//! the search latencies, the rows exported, the rows per second, and the service's resident
//! memory before the export and at its peak during it (sampled from /proc every 50 ms), so that
//! "memory stays flat" is a number.

use crate::memory::Peak;
use anyhow::{Context, bail};
use std::time::{Duration, Instant};
use tokenops_testkit::{Backend, ServiceProcess, Testbed};

/// How many records are seeded unless `TOKENOPS_BENCH_AUDIT_RECORDS` says otherwise.
const DEFAULT_RECORDS: i64 = 1_000_000;

/// The records to seed: `TOKENOPS_BENCH_AUDIT_RECORDS` (a smaller run for a quick check), else a
/// million.
fn record_count() -> anyhow::Result<i64> {
    match std::env::var("TOKENOPS_BENCH_AUDIT_RECORDS") {
        Ok(text) => {
            let count: i64 = text.trim().replace('_', "").parse().context("TOKENOPS_BENCH_AUDIT_RECORDS")?;
            if count < 1 {
                bail!("TOKENOPS_BENCH_AUDIT_RECORDS must be at least 1");
            }
            Ok(count)
        }
        Err(_) => Ok(DEFAULT_RECORDS),
    }
}
/// Calls per search after the first: enough for a p99.
const SEARCH_CALLS: usize = 200;
/// How long the sealer may take over the seeded records.
const SEALING_DEADLINE: Duration = Duration::from_secs(1_800);
/// The filtered pages measured: each filter of the spec, alone and combined, and sorts.
const SEARCHES: &[&str] = &[
    "",
    "occurredFrom=2020-01-01T00:00:00Z",
    "action=transaction.submit",
    "actorIds=client-3",
    "actorIds=client-3,client-5&action=customer.create",
    "resourceType=transaction&resourceId=ref-500000",
    "requestId=req-777777",
    "source=API&size=100",
    "query=REF-99999",
    "query=client-1",
    "sort=action,asc&size=100",
    "sort=occurredAt,asc",
];

/// One statement that writes `records` records of `tenant`, one microsecond apart, with
/// actions, actors and details that vary as a real log's do.
fn seed_sql(backend: Backend, tenant: &str, start_micros: i64, records: i64) -> String {
    match backend {
        Backend::Sqlite => format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {records})
             INSERT INTO audit_records (id, tenant_id, occurred_at, created_at, action, category, source, actor_id,
                                        resource_type, resource_id, outcome, request_id, idempotency_key, http_status, detail)
             SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-7' || substr(hex(randomblob(2)), 2) || '-a'
                          || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))),
                    '{tenant}', {start_micros} + i, {start_micros} + i,
                    CASE i % 3 WHEN 0 THEN 'customer.create' WHEN 1 THEN 'transaction.submit' ELSE 'account.create' END,
                    'OPERATIONS', 'API', 'client-' || (i % 17), 'transaction', 'ref-' || i,
                    CASE WHEN i % 50 = 0 THEN 'FAILURE' ELSE 'SUCCESS' END, 'req-' || i, 'key, \"quoted\" ' || i, 202,
                    '{{\"amount\":\"' || i || '.00\",\"note\":\"=cell\"}}'
             FROM n"
        ),
        // A record is written with its entry in the sealer's queue (migration 0023).
        Backend::Postgres => format!(
            "WITH a AS (
             INSERT INTO audit_records (id, tenant_id, occurred_at, created_at, action, category, source, actor_id,
                                        resource_type, resource_id, outcome, request_id, idempotency_key, http_status, detail)
             SELECT gen_random_uuid(), '{tenant}', {start_micros} + i, {start_micros} + i,
                    CASE i % 3 WHEN 0 THEN 'customer.create' WHEN 1 THEN 'transaction.submit' ELSE 'account.create' END,
                    'OPERATIONS', 'API', 'client-' || (i % 17), 'transaction', 'ref-' || i,
                    CASE WHEN i % 50 = 0 THEN 'FAILURE' ELSE 'SUCCESS' END, 'req-' || i, 'key, \"quoted\" ' || i, 202,
                    jsonb_build_object('amount', i || '.00', 'note', '=cell')
             FROM generate_series(1, {records}) AS i
             RETURNING id, tenant_id, created_at)
             INSERT INTO audit_unsealed (record_id, chain_id, record_created_at) SELECT id, tenant_id, created_at FROM a"
        ),
    }
}

pub async fn run(backend: Backend, binary: &str) -> anyhow::Result<()> {
    let name = super::store_name(backend);
    let records = record_count()?;
    println!("== audit export, {name}: {records} records of one organisation");
    let bed = Testbed::start(backend).await;
    let (db, clock, tenant) = (&bed.db, &bed.clock, &bed.tenant);
    let mut env = bed.environment("all");
    // The sealer starts on the seeded records at once rather than after its default 10 s.
    env.insert("TOKENOPS_AUDIT_SEAL_MS".to_owned(), "1000".to_owned());
    // The service migrates the store; the records are written behind its back, then it is
    // started again so that nothing of the seeding stays in its memory.
    ServiceProcess::start(binary, &env).await.terminate().await;
    let seeding = Instant::now();
    let start_micros = tokenops_domain::Clock::now(clock).as_micros() - 2 * records;
    db.execute(&seed_sql(backend, &tenant.id.to_string(), start_micros, records)).await;
    println!("seeded in {:.1} s", seeding.elapsed().as_secs_f64());

    let service = ServiceProcess::start(binary, &env).await;
    // A live log is sealed within seconds of each write; the searches measure that state.
    let sealing = Instant::now();
    loop {
        let unsealed = db.count(db.sealed_audit_records(), "chain_seq IS NULL").await;
        if unsealed == 0 {
            break;
        }
        if sealing.elapsed() > SEALING_DEADLINE {
            bail!("{unsealed} records still unsealed after {:?}", SEALING_DEADLINE);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!("sealed in {:.1} s", sealing.elapsed().as_secs_f64());
    if backend == Backend::Postgres {
        // What autovacuum does on a production server after a bulk load and its sealing (this
        // machine's test server runs without it): statistics, and the visibility map that lets
        // a count read an index alone.
        db.execute("VACUUM ANALYZE audit_records, audit_seals, audit_unsealed").await;
    }
    let pid = service.pid().context("the service's pid")?;
    let client = reqwest::Client::new();
    let get = |path: &str| {
        client.get(format!("{}{path}", service.base_url)).header("API-Version", "1.0.0").bearer_auth(&tenant.token)
    };
    // One small list first, so that "before" is a service that has served the area.
    // A filter none of the searches uses, so that each search's first call is cold.
    let warm = get("/api/audit/events?requestId=warm-up&size=1").send().await?;
    if !warm.status().is_success() {
        bail!("GET /api/audit/events: {}", warm.status());
    }
    // Each filter's first page, then its pages in turn, one call at a time: the first call
    // counts the whole filter; the following ones are what a node that has served it answers.
    let call = |query: String| {
        let get = &get;
        async move {
            let began = Instant::now();
            let reply = get(&format!("/api/audit/events?{query}")).send().await?;
            let status = reply.status();
            let body = reply.bytes().await?;
            if !status.is_success() {
                bail!("GET /api/audit/events?{query}: {status}");
            }
            anyhow::Ok((began.elapsed(), body))
        }
    };
    for query in SEARCHES {
        let (cold, body) = call(query.to_string()).await?;
        let page: serde_json::Value = serde_json::from_slice(&body).context("a style B page")?;
        let pages = page["totalPages"].as_u64().context("totalPages")?.max(1);
        let mut took = Vec::with_capacity(SEARCH_CALLS);
        for i in 1..=SEARCH_CALLS as u64 {
            let sep = if query.is_empty() { "" } else { "&" };
            took.push(call(format!("{query}{sep}page={}", i % pages)).await?.0);
        }
        took.sort();
        let ms = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)].as_secs_f64() * 1_000.0;
        println!(
            "search {query:<52} cold {:>7.1} ms, pages p50 {:>7.1} ms, p99 {:>7.1} ms",
            cold.as_secs_f64() * 1_000.0,
            ms(0.5),
            ms(0.99)
        );
    }
    let memory = Peak::start(pid, Duration::from_millis(50))?;
    let began = Instant::now();
    let mut response = get("/api/audit/events/export").send().await?;
    if !response.status().is_success() {
        bail!("GET /api/audit/events/export: {}", response.status());
    }
    let (mut lines, mut bytes) = (0u64, 0u64);
    // A CRLF may be split between two chunks: the last byte of each chunk is carried over.
    let mut ended_with_cr = false;
    while let Some(chunk) = response.chunk().await? {
        bytes += chunk.len() as u64;
        if ended_with_cr && chunk.first() == Some(&b'\n') {
            lines += 1;
        }
        lines += chunk.windows(2).filter(|w| w == b"\r\n").count() as u64;
        ended_with_cr = chunk.last() == Some(&b'\r');
    }
    let seconds = began.elapsed().as_secs_f64();
    let (before, peak) = memory.stop();
    let rows = lines.saturating_sub(1);
    if rows != records as u64 {
        bail!("exported {rows} rows, expected {records}");
    }
    println!(
        "exported {rows} rows ({:.0} MiB of CSV) in {seconds:.1} s: {:.0} rows/s",
        bytes as f64 / 1_048_576.0,
        rows as f64 / seconds
    );
    println!(
        "service resident memory: {:.1} MiB before, {:.1} MiB at the peak during the export (+{:.1} MiB)",
        before as f64 / 1024.0,
        peak as f64 / 1024.0,
        peak.saturating_sub(before) as f64 / 1024.0
    );
    Ok(())
}
