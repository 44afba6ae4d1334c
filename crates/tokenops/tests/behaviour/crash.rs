//! Crash safety of durable jobs, with the real binary: jobs leased by a process killed with
//! SIGKILL run to completion after a restart, exactly once in effect; SIGTERM finishes or
//! releases leased jobs before exit.

use crate::BINARY;
use crate::crash_load::{job_crash_environment, wait_until};
use reqwest::Method;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;
use tokenops_testkit::{Backend, ServiceProcess, Testbed, backends};

const EVENTS: usize = 400;

/// How often a wait polls.
const POLL: Duration = Duration::from_millis(20);

async fn make_events(service: &ServiceProcess, token: &str) {
    let client = reqwest::Client::new();
    let send = |method: Method, path: String, key: String, body: serde_json::Value| {
        client
            .request(method, format!("{}{path}", service.base_url))
            .header("API-Version", "1.0.0")
            .header("Idempotency-Key", key)
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    let created = send(Method::POST, "/api/customers".into(), "create".into(), json!({ "customerRef": "crash-1" }))
        .await
        .expect("create customer");
    assert_eq!(created.status().as_u16(), 201);
    // Each flip of the status emits one event, and with it one dispatch job.
    for i in 0..EVENTS {
        let status = if i % 2 == 0 { "INACTIVE" } else { "ACTIVE" };
        let r = send(Method::PATCH, "/api/customers/crash-1".into(), format!("flip-{i}"), json!({ "status": status }))
            .await
            .expect("patch customer");
        assert_eq!(r.status().as_u16(), 200);
    }
}

async fn a_job_leased_by_a_killed_process_runs_to_completion_after_restart_exactly_once(backend: Backend) {
    let bed = Testbed::start(backend).await;
    let (db, tenant) = (&bed.db, &bed.tenant);

    // An API-only node accepts the writes; their dispatch jobs wait in the queue.
    let api = ServiceProcess::start(BINARY, &job_crash_environment(&bed, "api")).await;
    make_events(&api, &tenant.token).await;
    assert!(api.terminate().await.success());
    assert_eq!(db.count("jobs", "kind = 'event.dispatch' AND status = 'queued'").await, EVENTS as i64);

    // A worker node starts on them and is killed while it holds leases.
    let worker = ServiceProcess::start(BINARY, &job_crash_environment(&bed, "all")).await;
    // A dispatch job specifically: periodic jobs (maintenance, sweeps) also run at start.
    wait_until(Duration::from_secs(20), POLL, "a leased dispatch job", || async {
        db.count("jobs", "kind = 'event.dispatch' AND status = 'running'").await > 0
    })
    .await;
    worker.kill9().await;

    // Each leased job with its attempts so far (more than one if, under load, its lease ran
    // out and it was claimed again before the kill: fenced, and harmless).
    let interrupted: BTreeMap<String, i64> = db
        .strings(
            "SELECT CAST(id AS TEXT) || '=' || CAST(attempts AS TEXT) FROM jobs \
             WHERE kind = 'event.dispatch' AND status = 'running'",
        )
        .await
        .into_iter()
        .filter_map(|row| row.split_once('=').map(|(id, n)| (id.to_owned(), n.parse().unwrap_or(0))))
        .collect();
    assert!(!interrupted.is_empty(), "the kill must find leased jobs");
    let dispatched_before: BTreeMap<String, String> = db
        .strings(
            "SELECT CAST(id AS TEXT) || '=' || CAST(dispatched_at AS TEXT) FROM events WHERE dispatched_at IS NOT NULL",
        )
        .await
        .into_iter()
        .filter_map(|row| row.split_once('=').map(|(a, b)| (a.to_owned(), b.to_owned())))
        .collect();
    // A leased job's effect commits with its completion, so none of theirs has landed.
    let interrupted_events: Vec<String> = db
        .strings(
            "SELECT CAST(payload ->> 'eventId' AS TEXT) FROM jobs WHERE kind = 'event.dispatch' AND status = 'running'",
        )
        .await;
    for event in &interrupted_events {
        assert!(!dispatched_before.contains_key(event), "event {event} was dispatched by a job still leased");
    }

    // After a restart, expired leases are claimed again and everything completes.
    let restarted = ServiceProcess::start(BINARY, &job_crash_environment(&bed, "all")).await;
    wait_until(Duration::from_secs(60), POLL, "every job finished", || async {
        db.count("jobs", "status IN ('queued', 'running')").await == 0
    })
    .await;
    assert_eq!(db.count("jobs", "status = 'dead'").await, 0);
    assert_eq!(db.count("events", "dispatched_at IS NULL").await, 0);
    assert_eq!(db.count("events", "").await, EVENTS as i64);
    for (id, before) in &interrupted {
        let attempts =
            db.scalar(&format!("SELECT CAST(attempts AS BIGINT) FROM jobs WHERE CAST(id AS TEXT) = '{id}'")).await;
        assert!(attempts > *before, "job {id} ran again after the restart ({before} then {attempts})");
    }
    // Effects that landed before the kill were not applied a second time.
    for (event, at) in &dispatched_before {
        let now = db
            .strings(&format!("SELECT CAST(dispatched_at AS TEXT) FROM events WHERE CAST(id AS TEXT) = '{event}'"))
            .await;
        assert_eq!(now, vec![at.clone()], "event {event} was dispatched twice");
    }

    // A graceful stop leaves no job leased.
    assert!(restarted.terminate().await.success());
    assert_eq!(db.count("jobs", "status = 'running'").await, 0);
}

backends!(a_job_leased_by_a_killed_process_runs_to_completion_after_restart_exactly_once);
