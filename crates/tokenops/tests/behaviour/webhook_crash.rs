//! Webhook deliveries survive SIGKILL, with the real binary: a chaotic HTTPS receiver (2xx, slow,
//! 5xx, 429, 302, 410, past the read timeout, resets, at random) gets two registrations' worth of
//! deliveries while events are still being produced, and the service is killed twice while
//! attempts are in flight, then restarted on the same store. Afterwards every delivery has
//! settled (DELIVERED or PARKED) exactly as the rules make of the answers that counted, each
//! attempt number reached the receiver (an attempt cut off by a kill is made again under its
//! number), every attempt of a delivery carried the same bytes, those of the event, and no
//! delivery job is left queued, leased or dead.

use crate::BINARY;
use crate::crash_load::wait_until;
use crate::webhook_operations::{assert_settled_by_the_rules, settles_at};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tokenops_testkit::webhook_receiver::{ALLOW_CIDRS, ReceivedRequest, Receiver, Response};
use tokenops_testkit::{Backend, ServiceProcess, TestDb, Testbed, backends};
use uuid::Uuid;

backends!(webhook_deliveries_settle_by_the_rules_across_two_sigkills);

/// Events produced in all, a third before each kill and the last third after the second.
const EVENTS: usize = 48;
/// Each event's status flip goes to one of these customers in turn.
const CUSTOMERS: usize = 6;
const PATHS: [&str; 2] = ["/chaos-a", "/chaos-b"];
/// A kill comes once this many attempts have reached the receiver since the last start.
const REQUESTS_BEFORE_KILL: usize = 12;
/// How long everything may take to settle after the last restart.
const SETTLE: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(20);

/// Short retries (20 ms first delay, 2.4 s cap) and leases, so that a run of eleven attempts
/// and the recovery from a kill each take seconds.
fn environment(bed: &Testbed, ca: &std::path::Path) -> BTreeMap<String, String> {
    let mut env = bed.environment("all");
    for (name, value) in [
        ("TOKENOPS_WEBHOOK_ALLOW_CIDRS", ALLOW_CIDRS),
        ("TOKENOPS_WEBHOOK_RETRY_BASE_MS", "20"),
        ("TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION", "16"),
        ("TOKENOPS_WORKER_CONCURRENCY", "16"),
        ("TOKENOPS_WORKER_POLL_MS", "50"),
        ("TOKENOPS_JOB_LEASE_MS", "1500"),
        // A request killed mid-flight holds its key for one lease: the producer resends it.
        ("TOKENOPS_IDEMPOTENCY_LEASE_MS", "1000"),
        ("TOKENOPS_LOG", "error"),
    ] {
        env.insert(name.to_owned(), value.to_owned());
    }
    env.insert("TOKENOPS_WEBHOOK_CA_FILE".to_owned(), ca.display().to_string());
    env
}

/// The service as its clients reach it: each start listens on a port of its own, so the
/// address changes with each restart.
#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    base: Arc<RwLock<String>>,
    token: String,
}

impl Api {
    fn base(&self) -> String {
        self.base.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn moved_to(&self, service: &ServiceProcess) {
        *self.base.write().unwrap_or_else(PoisonError::into_inner) = service.base_url.clone();
    }

    /// Sends a write with `key` until it is answered with `want`, across kills and restarts
    /// (the same key: a write that committed before a kill is replayed, not made twice).
    async fn until_answered(&self, method: reqwest::Method, path: &str, key: &str, body: &Value, want: u16) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let sent = self
                .client
                .request(method.clone(), format!("{}{path}", self.base()))
                .header("API-Version", "1.0.0")
                .header("Idempotency-Key", key)
                .bearer_auth(&self.token)
                .json(body)
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            let last = match sent {
                Ok(reply) if reply.status().as_u16() == want => return reply.json().await.unwrap_or(Value::Null),
                // Unanswered (killed), 5xx, or the key still held by a killed request: resend.
                Ok(reply) => format!("{} {}", reply.status(), reply.text().await.unwrap_or_default()),
                Err(e) => e.to_string(),
            };
            assert!(Instant::now() < deadline, "{method} {path} ({key}) never answered {want}: {last}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A GET answered 200 (retried while a restart is under way).
    async fn read(&self, path: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let reply = self
                .client
                .get(format!("{}{path}", self.base()))
                .header("API-Version", "1.0.0")
                .bearer_auth(&self.token)
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            if let Ok(reply) = reply
                && reply.status().is_success()
            {
                return reply.json().await.expect("a JSON body");
            }
            assert!(Instant::now() < deadline, "GET {path} never answered 200");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Waits until `produced` events exist and attempts are in flight: deliveries leased by the
/// service and at least `REQUESTS_BEFORE_KILL` requests at the receiver since `seen`; returns
/// the leased count.
async fn deliveries_in_flight(db: &TestDb, receiver: &Receiver, seen: usize, produced: usize) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let events = db.count("events", "event_type = 'customer.status_changed'").await;
        let leased = db.count("jobs", "kind = 'webhook.deliver' AND status = 'running'").await;
        if events >= produced as i64 && leased > 0 && receiver.requests().len() >= seen + REQUESTS_BEFORE_KILL {
            return leased;
        }
        assert!(Instant::now() < deadline, "no webhook attempts in flight within a minute");
        tokio::time::sleep(POLL).await;
    }
}

async fn webhook_deliveries_settle_by_the_rules_across_two_sigkills(backend: Backend) {
    let started = Instant::now();
    let bed = Testbed::start(backend).await;
    let (db, tenant) = (&bed.db, &bed.tenant);
    let receiver = Receiver::start().await;
    let env = environment(&bed, &receiver.write_ca_file(db.dir()));
    let mut service = ServiceProcess::start(BINARY, &env).await;
    let api = Api {
        client: reqwest::Client::new(),
        base: Arc::new(RwLock::new(service.base_url.clone())),
        token: tenant.token.clone(),
    };

    let mut ids = Vec::new();
    for path in PATHS {
        let body = json!({ "url": receiver.url(path), "eventTypes": ["customer.status_changed"] });
        let created = api.until_answered(reqwest::Method::POST, "/api/webhooks", path, &body, 201).await;
        ids.push(created["id"].as_str().expect("id").to_owned());
        // The registration's own test delivery, answered 200 before the chaos begins.
        receiver.wait_for_path(path, 1, Duration::from_secs(20)).await;
    }
    for c in 0..CUSTOMERS {
        let body = json!({ "customerRef": format!("wc-{c}") });
        api.until_answered(reqwest::Method::POST, "/api/customers", &format!("c-{c}"), &body, 201).await;
    }
    let seed = u64::try_from(Uuid::now_v7().as_u128() & u128::from(u64::MAX)).unwrap_or(1);
    eprintln!("webhook crash chaos seed {seed}");
    for path in PATHS {
        receiver.respond(path, Response::Chaos(seed));
    }

    // The producer flips the customers' statuses one event at a time, each flip with its own
    // key, resent until answered: it carries on across the kills.
    let producer = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0..EVENTS {
                let status = if (i / CUSTOMERS).is_multiple_of(2) { "INACTIVE" } else { "ACTIVE" };
                let path = format!("/api/customers/wc-{}", i % CUSTOMERS);
                let body = json!({ "status": status });
                api.until_answered(reqwest::Method::PATCH, &path, &format!("flip-{i}"), &body, 200).await;
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
        })
    };

    let mut kills = Vec::new();
    for kill in 1..=2 {
        let seen = receiver.requests().len();
        let leased = deliveries_in_flight(db, &receiver, seen, kill * EVENTS / 3).await;
        let produced = db.count("events", "event_type = 'customer.status_changed'").await;
        service.kill9().await;
        let down = Instant::now();
        service = ServiceProcess::start(BINARY, &env).await;
        api.moved_to(&service);
        kills.push(format!(
            "{leased} delivery jobs leased, {produced} events produced, up again in {:?}",
            down.elapsed()
        ));
    }
    producer.await.expect("the producer");

    // Every delivery settles. A registration the chaos suspended (twenty failed attempts in a
    // row) is set ACTIVE again, as its operator would: its waiting deliveries then go out.
    let deadline = Instant::now() + SETTLE;
    let mut reactivated = 0;
    let events = loop {
        let page = api.read("/api/webhook-events?type=customer.status_changed&limit=100").await;
        let items = page["items"].as_array().expect("items").clone();
        let settled = items.len() == EVENTS
            && items.iter().all(|e| {
                e["deliveries"].as_array().is_some_and(|d| {
                    d.len() == PATHS.len() && d.iter().all(|d| d["status"] == "DELIVERED" || d["status"] == "PARKED")
                })
            });
        if settled {
            break items;
        }
        for id in &ids {
            let registration = api.read(&format!("/api/webhooks/{id}")).await;
            if registration["status"] == "SUSPENDED" {
                let key = format!("resume-{id}-{reactivated}");
                let body = json!({ "status": "ACTIVE" });
                let path = format!("/api/webhooks/{id}");
                api.until_answered(reqwest::Method::PATCH, &path, &key, &body, 200).await;
                reactivated += 1;
            }
        }
        assert!(Instant::now() < deadline, "not settled within {SETTLE:?} (seed {seed}): {page}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Nothing is left to a job: none queued or leased (a late put-back for a settled delivery
    // ends doing nothing within its second), none dead.
    wait_until(Duration::from_secs(10), POLL, "no webhook.deliver job queued or leased", || async {
        db.count("jobs", "kind = 'webhook.deliver' AND status IN ('queued', 'running')").await == 0
    })
    .await;
    assert_eq!(db.count("jobs", "kind = 'webhook.deliver' AND status = 'dead'").await, 0, "a delivery job died");
    assert!(service.terminate().await.success());

    // Each (event, registration)'s requests, in arrival order.
    let mut received: HashMap<(String, String), Vec<ReceivedRequest>> = HashMap::new();
    for request in receiver.requests() {
        if request.json()["type"] == "webhook.test" {
            continue;
        }
        let event = request.header("webhook-event-id").expect("Webhook-Event-Id").to_owned();
        received.entry((event, request.path.clone())).or_default().push(request);
    }
    let path_of: HashMap<&str, &str> = ids.iter().map(String::as_str).zip(PATHS).collect();
    let (mut delivered, mut parked, mut repeated) = (0, 0, 0);
    for event in &events {
        let event_id = event["id"].as_str().expect("id");
        let mut expected = event.clone();
        expected.as_object_mut().expect("an object").remove("deliveries");
        for delivery in event["deliveries"].as_array().expect("deliveries") {
            let path = path_of[delivery["webhookId"].as_str().expect("webhookId")];
            let requests = received.remove(&(event_id.to_owned(), path.to_owned())).unwrap_or_default();
            let what = format!("{event_id} to {path} (seed {seed})");
            assert!(!requests.is_empty(), "{what}: no attempt reached the receiver");
            let first = requests[0].body.clone();
            assert!(requests.iter().all(|r| r.body == first), "{what}: the bodies differ between attempts");
            assert_eq!(requests[0].json(), expected, "{what}: the body is the event");
            // By attempt number, the answers its requests got. One, unless the attempt was made
            // again: after a kill cut it off before its outcome was recorded (the later request
            // counted), or after a worker lost its lease mid-attempt under load (the lease
            // holder's outcome counted, and its request need not be the last to arrive).
            let mut by_number: BTreeMap<usize, Vec<Response>> = BTreeMap::new();
            for request in &requests {
                let number = request.header("webhook-delivery-attempt").and_then(|n| n.parse().ok()).expect("attempt");
                by_number.entry(number).or_default().push(request.answer.clone());
            }
            repeated += requests.len() - by_number.len();
            let numbers: Vec<usize> = by_number.keys().copied().collect();
            assert_eq!(numbers, (1..=numbers.len()).collect::<Vec<_>>(), "{what}: every attempt, in order");
            let answers = counted_answers(delivery, &by_number.into_values().collect::<Vec<_>>());
            if assert_settled_by_the_rules(delivery, &answers, &what) { delivered += 1 } else { parked += 1 }
        }
    }
    assert!(received.is_empty(), "requests for no delivery: {:?}", received.keys());
    eprintln!(
        "webhook crash chaos: {EVENTS} events, {delivered} delivered, {parked} parked, {repeated} attempts made \
         again after a kill, {reactivated} reactivations; kills: {kills:?}; in {:?}",
        started.elapsed()
    );
}

/// The answers, one per attempt, that the delivery's recorded outcome was made of: of the
/// answers each attempt's requests got, a choice under which the delivery rules end where the
/// service recorded it (status and attempt count); the last answers when no choice does, for
/// `assert_settled_by_the_rules` to report.
fn counted_answers(delivery: &Value, by_attempt: &[Vec<Response>]) -> Vec<Response> {
    let last: Vec<Response> = by_attempt.iter().filter_map(|answers| answers.last().cloned()).collect();
    let delivered = delivery["status"] == "DELIVERED";
    let recorded = |answers: &[Response]| {
        settles_at(answers) == Some((answers.len(), delivered)) && delivery["attempts"] == answers.len()
    };
    let mut choices: Vec<Vec<Response>> = vec![Vec::new()];
    for answers in by_attempt {
        choices = choices
            .into_iter()
            .flat_map(|chosen| {
                answers.iter().map(move |answer| {
                    let mut next = chosen.clone();
                    next.push(answer.clone());
                    next
                })
            })
            .take(256)
            .collect();
    }
    choices.into_iter().find(|answers| recorded(answers)).unwrap_or(last)
}
