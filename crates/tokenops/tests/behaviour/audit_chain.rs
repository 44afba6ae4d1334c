//! The audit log's sealed chain: the sealer (`audit.seal`) seals records into hashed blocks and
//! signs the head; `GET /api/audit/chain/head` shows it; an untouched chain verifies, a record
//! changed behind the service's back is named; sealing goes on after a restart without sealing a
//! record twice or skipping one; `tokenops audit verify` checks an export and the store.

use crate::BINARY;
use reqwest::Method;
use serde_json::{Value, json};
use std::process::Command;
use tokenops_app::jobs::kinds;
use tokenops_domain::audit_chain::{ChainHead, Mismatch};
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use uuid::Uuid;

backends!(
    a_head_signed_before_a_key_rotation_is_signed_anew_and_still_verifies,
    an_untouched_chain_verifies_and_a_changed_record_is_named,
    sealing_resumes_after_a_restart_without_sealing_twice_or_skipping,
    the_binary_verifies_an_export_and_the_store_and_names_a_changed_record,
    the_search_total_stays_exact_for_records_written_and_sealed_after_a_kept_count,
);

async fn write_customers(app: &TestApp, refs: &[&str]) {
    for customer_ref in refs {
        app.post("/api/customers", &json!({ "customerRef": customer_ref })).await.expect(201);
        app.clock.advance_millis(10);
    }
}

/// Runs the sealer as the workers would.
async fn seal(app: &TestApp) {
    app.app.jobs.schedule_periodic(kinds::AUDIT_SEAL).await.expect("schedule the sealer");
    let report = app.drain_jobs().await;
    assert_eq!((report.dead, report.retried), (0, 0), "the sealer failed: {report:?}");
}

/// The organisation's records in the store as (id, chain_seq), sealed or not (seq 0).
async fn stored(app: &TestApp) -> Vec<(String, i64)> {
    let tenant = app.tenant.id.as_uuid();
    app.db
        .strings(&format!(
            "SELECT CAST(id AS TEXT) || ' ' || CAST(COALESCE(chain_seq, 0) AS TEXT) FROM {}
             WHERE CAST(tenant_id AS TEXT) = '{tenant}' ORDER BY chain_seq",
            app.db.sealed_audit_records()
        ))
        .await
        .into_iter()
        .map(|line| {
            let (id, seq) = line.split_once(' ').expect("id and seq");
            (id.to_owned(), seq.parse().expect("seq"))
        })
        .collect()
}

async fn head(app: &TestApp) -> Reply {
    app.get("/api/audit/chain/head").await
}

async fn jwks(app: &TestApp) -> Value {
    Reply::read(app.raw(Method::GET, "/.well-known/webhook-jwks.json").send().await.expect("jwks")).await.body
}

/// The head a reply states, once its signature checks against the published key set.
async fn signed_head(app: &TestApp, reply: &Reply) -> ChainHead {
    reply.expect(200);
    let claims =
        tokenops_app::audit_chain::open_head(reply.body["signature"].as_str().expect("signature"), &jwks(app).await)
            .expect("the head's signature verifies against the published JWKS");
    assert_eq!(claims.iss, app.base_url);
    assert_eq!(claims.head.block_number, reply.body["blockNumber"].as_i64().expect("blockNumber"));
    assert_eq!(claims.head.hash, reply.body["hash"].as_str().expect("hash"));
    assert_eq!(claims.head.record_count, reply.body["recordCount"].as_i64().expect("recordCount"));
    claims.head
}

/// The heads are signed with the webhook JWS key, which rotates and whose replaced key leaves
/// the JWKS after its overlap: the sealer signs every chain's latest head anew with the new key,
/// so the stored head still verifies against what is published.
async fn a_head_signed_before_a_key_rotation_is_signed_anew_and_still_verifies(backend: Backend) {
    const DAY_MS: i64 = 24 * 3_600_000;
    let settings =
        std::collections::BTreeMap::from([("TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS".to_owned(), "1".to_owned())]);
    let mut app = TestApp::spawn_with(backend, settings).await;
    write_customers(&app, &["r-1", "r-2"]).await;
    seal(&app).await;
    let before = signed_head(&app, &head(&app).await).await;
    let old_kids = jwks(&app).await["keys"].clone();

    // The key reaches its age: rotated; the sealer (nothing new to seal) signs the head anew.
    let rotate = |app: &TestApp| {
        let jobs = app.app.jobs.clone();
        async move { jobs.schedule_periodic("webhooks.rotate_key").await.expect("schedule") }
    };
    app.clock.advance_millis(DAY_MS + 60_000);
    rotate(&app).await;
    app.drain_jobs().await;
    app.clock.advance_millis(31_000);
    seal(&app).await;
    // Past the overlap the replaced key is withdrawn from the JWKS.
    app.clock.advance_millis(11 * 60_000);
    rotate(&app).await;
    app.drain_jobs().await;
    let claims = app.issuer.claims(&app.clock, &app.tenant.subject, Some(app.tenant.id), 3_600);
    app.tenant.token = app.issuer.sign(&claims);
    assert_ne!(jwks(&app).await["keys"], old_kids, "the key rotated and the old one was withdrawn");
    let after = signed_head(&app, &head(&app).await).await;
    assert_eq!(after, before, "the same head, signed anew");
    let verified = app.app.audit_chain.verify(Some(app.tenant.id), None).await.expect("verify");
    assert!(verified.is_ok(), "the stored head's signature checks against the published keys: {verified:?}");
}

async fn an_untouched_chain_verifies_and_a_changed_record_is_named(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    head(&app).await.expect(404);
    write_customers(&app, &["a-1", "b-2", "c-3", "d-4"]).await;
    seal(&app).await;
    let head = signed_head(&app, &head(&app).await).await;
    assert_eq!(head.chain_id, app.tenant.id.as_uuid());
    assert_eq!((head.block_number, head.record_count), (1, 4));
    let records = stored(&app).await;
    assert_eq!(records.iter().map(|(_, seq)| *seq).collect::<Vec<_>>(), [1, 2, 3, 4], "in commit order, no gap");
    let chain = Some(app.tenant.id);
    let outcome = app.app.audit_chain.verify(chain, None).await.expect("verify").expect("an untouched chain verifies");
    assert_eq!((outcome.verified.records, outcome.unsealed), (4, 0));

    // Another organisation's head is its own: none yet.
    let other = app.new_tenant();
    app.get_as(&other, "/api/audit/chain/head").await.expect(404);

    // A record changed in the store behind the service's back.
    let (victim, _) = &records[2];
    app.db.execute(&format!("UPDATE audit_records SET resource_id = 'z-9' WHERE CAST(id AS TEXT) = '{victim}'")).await;
    match app.app.audit_chain.verify(chain, None).await.expect("verify") {
        Err(Mismatch::Record { seq: 3, id: Some(id), .. }) => assert_eq!(id.to_string(), *victim),
        other => panic!("the changed record must be named: {other:?}"),
    }
    // Against the head kept from before, too.
    assert!(matches!(
        app.app.audit_chain.verify(chain, Some(head)).await.expect("verify"),
        Err(Mismatch::Record { seq: 3, .. })
    ));
}

async fn sealing_resumes_after_a_restart_without_sealing_twice_or_skipping(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    write_customers(&app, &["a-1", "b-2", "c-3"]).await;
    seal(&app).await;
    let first = signed_head(&app, &head(&app).await).await;
    assert_eq!((first.block_number, first.record_count), (1, 3));
    // Sealing again with nothing new writes no block.
    seal(&app).await;
    assert_eq!(signed_head(&app, &head(&app).await).await, first);

    let app = app.restart().await;
    write_customers(&app, &["d-4", "e-5"]).await;
    app.patch("/api/customers/a-1", &json!({ "status": "INACTIVE" })).await.expect(200);
    seal(&app).await;
    let second = signed_head(&app, &head(&app).await).await;
    assert_eq!((second.block_number, second.record_count), (2, 6));
    let records = stored(&app).await;
    assert_eq!(records.len(), 6);
    assert_eq!(records.iter().map(|(_, seq)| *seq).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6], "each sealed once");
    assert_eq!(app.db.count("audit_blocks", "").await, 2);
    let chain = Some(app.tenant.id);
    let whole = app.app.audit_chain.verify(chain, None).await.expect("verify").expect("the whole chain verifies");
    assert_eq!((whole.verified.blocks, whole.verified.records), (2, 6));
    // The head kept from before the restart still vouches for the chain's first block.
    let prefix = app.app.audit_chain.verify(chain, Some(first)).await.expect("verify").expect("the prefix verifies");
    assert_eq!((prefix.verified.records, prefix.verified.beyond_head), (3, 3));
}

/// On PostgreSQL transactions commit concurrently: a record whose transaction began first but
/// commits after a seal is not passed over; the next seal takes it into a later block. (SQLite
/// runs one write transaction at a time, so there the order of commit is the order of writing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_committed_after_a_seal_is_sealed_in_a_later_block_not_skipped() {
    use tokenops_domain::Clock;
    use tokenops_domain::audit::{AuditOutcome, AuditRecord, AuditSource};
    let app = TestApp::spawn(Backend::Postgres).await;
    let now = app.clock.now();
    let late = AuditRecord {
        id: tokenops_domain::new_id(),
        tenant_id: Some(app.tenant.id),
        occurred_at: now,
        created_at: now,
        action: "customer.create".into(),
        category: "CUSTOMERS".into(),
        source: AuditSource::Worker,
        actor_id: None,
        resource_type: "customer".into(),
        resource_id: Some("late-1".into()),
        outcome: AuditOutcome::Success,
        request_id: None,
        idempotency_key: None,
        http_status: None,
        detail: json!({"late": true}),
        seal: None,
    };
    let mut open = app.app.store.write().await.expect("a write transaction");
    open.audit().record(&late).await.expect("the late record, not committed yet");
    app.clock.advance_millis(10);
    write_customers(&app, &["a-1", "b-2"]).await;
    app.app.audit_chain.seal_all().await.expect("seal");
    let first = signed_head(&app, &head(&app).await).await;
    assert_eq!((first.block_number, first.record_count), (1, 2), "the open transaction's record is not visible");
    open.commit().await.expect("commit the late record");
    app.app.audit_chain.seal_all().await.expect("seal again");
    let second = signed_head(&app, &head(&app).await).await;
    assert_eq!((second.block_number, second.record_count), (2, 3));
    let records = stored(&app).await;
    assert_eq!(records.last().map(|(id, seq)| (id.clone(), *seq)), Some((late.id.to_string(), 3)));
    let outcome = app.app.audit_chain.verify(Some(app.tenant.id), None).await.expect("verify").expect("verifies");
    assert_eq!((outcome.verified.records, outcome.unsealed), (3, 0));
}

/// Runs `tokenops audit verify` with `args`: its exit code and standard output.
fn verify(app: &TestApp, args: &[&str]) -> (i32, String) {
    let mut command = Command::new(BINARY);
    command
        .args(["audit", "verify"])
        .args(args)
        .env_clear()
        .env("TOKENOPS_DATA_DIR", app.db.dir())
        .env("TOKENOPS_LOG", "error")
        .env("TOKENOPS_PUBLIC_URL", &app.base_url)
        .args(["--database-url", &app.db.url()]);
    if let Some(schema) = app.db.schema() {
        command.args(["--database-schema", schema]);
    }
    let output = command.output().expect("run tokenops audit verify");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    (output.status.code().unwrap_or(-1), format!("{stdout}{stderr}"))
}

async fn the_binary_verifies_an_export_and_the_store_and_names_a_changed_record(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    // A value that the export neutralises, so that the verifier must undo it.
    app.write(Method::POST, "/api/customers", "=1+1", &json!({ "customerRef": "f-1" })).await.expect(201);
    write_customers(&app, &["a-1", "b-2", "c-3"]).await;
    seal(&app).await;
    // A record sealed later than the head kept: exported and stored, but not vouched for.
    let head_reply = head(&app).await;
    signed_head(&app, &head_reply).await;
    write_customers(&app, &["d-4"]).await;

    let dir = app.db.dir().join("verify");
    std::fs::create_dir_all(&dir).expect("dir");
    let (head_file, jwks_file, export_file) = (dir.join("head.json"), dir.join("jwks.json"), dir.join("audit.csv"));
    std::fs::write(&head_file, head_reply.body.to_string()).expect("head file");
    std::fs::write(&jwks_file, jwks(&app).await.to_string()).expect("jwks file");
    let export = app.get("/api/audit/events/export").await;
    export.expect(200);
    let text = export.body.as_str().expect("CSV").to_owned();
    std::fs::write(&export_file, &text).expect("export file");
    let files = |export: &std::path::Path| {
        [
            "--export".to_owned(),
            export.display().to_string(),
            "--head".to_owned(),
            head_file.display().to_string(),
            "--jwks".to_owned(),
            jwks_file.display().to_string(),
        ]
    };
    let args = files(&export_file);
    let (code, out) = verify(&app, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("the chain verifies: 4 records in 1 blocks"), "{out}");
    assert!(out.contains("1 records not sealed yet"), "{out}");

    // One cell of one record changed in the file.
    let records = stored(&app).await;
    let (victim, _) = records.iter().find(|(_, seq)| *seq == 3).expect("the third record");
    let changed_line = text.lines().find(|l| l.starts_with(victim.as_str())).expect("the victim's line");
    let tampered = text.replace(changed_line, &changed_line.replace("customer.create", "customer.delete"));
    assert_ne!(tampered, text);
    let tampered_file = dir.join("tampered.csv");
    std::fs::write(&tampered_file, tampered).expect("tampered file");
    let args = files(&tampered_file);
    let (code, out) = verify(&app, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("record {victim} (chain position 3")), "names the record: {out}");

    // The store, against the kept head and against its own.
    let tenant = app.tenant.id.as_uuid().to_string();
    let head_path = head_file.display().to_string();
    let (code, out) = verify(&app, &["--tenant", &tenant, "--head", &head_path]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 records not sealed yet"), "{out}");
    seal(&app).await;
    let (code, out) = verify(&app, &["--tenant", &tenant]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("the chain verifies: 5 records in 2 blocks"), "{out}");
    app.db.execute(&format!("UPDATE audit_records SET http_status = 200 WHERE CAST(id AS TEXT) = '{victim}'")).await;
    let (code, out) = verify(&app, &["--tenant", &tenant, "--head", &head_path]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("record {victim} (chain position 3")), "names the record: {out}");
    let unknown = Uuid::now_v7().to_string();
    let (code, out) = verify(&app, &["--tenant", &unknown]);
    assert_eq!(code, 2, "nothing sealed cannot verify: {out}");
}

/// The search keeps each filter's count over sealed records and adds what was sealed or written
/// since: its `totalItems` is the store's count whatever happened after a count was kept.
async fn the_search_total_stays_exact_for_records_written_and_sealed_after_a_kept_count(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let tenant = app.tenant.id.as_uuid();
    let searches = [
        ("", "TRUE"),
        ("action=customer.create", "action = 'customer.create'"),
        ("query=CUSTOMER.CR&size=2", "action LIKE 'customer.cr%'"),
    ];
    let check = |step: &'static str| {
        let app = &app;
        async move {
            for (query, condition) in searches {
                let stored = app
                    .db
                    .count("audit_records", &format!("CAST(tenant_id AS TEXT) = '{tenant}' AND {condition}"))
                    .await;
                for page in [0, 1] {
                    let reply = app.get(&format!("/api/audit/events?page={page}&{query}")).await;
                    reply.expect(200);
                    assert_eq!(reply.body["totalItems"].as_i64(), Some(stored), "{step}: {query} page {page}");
                }
            }
        }
    };
    write_customers(&app, &["cache-1", "cache-2", "cache-3"]).await;
    seal(&app).await;
    check("sealed, counted in full").await;
    write_customers(&app, &["cache-4", "cache-5"]).await;
    check("written after the kept count").await;
    seal(&app).await;
    check("sealed after the kept count").await;
    write_customers(&app, &["cache-6"]).await;
    seal(&app).await;
    write_customers(&app, &["cache-7", "cache-8"]).await;
    check("sealed and written after the kept count").await;
}
