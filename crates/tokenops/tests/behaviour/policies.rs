//! Policies and their versions over HTTP (spec: Resources/Policy, Policy version, Policy
//! content; States and transitions/Policy; Endpoints/Policies and templates; Errors/Policies,
//! templates, approvals; Authentication 10; Paging style B, versions newest first), on both
//! stores.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokenops_testkit::organisation::{call, create_organisation, invite_and_activate};
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use uuid::Uuid;

use crate::support::assert_invalid;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const TRANSFER_TEMPLATE: &str = "system.transfer.approval";

fn content(threshold: &str) -> Value {
    json!({
        "appliesTo": {"action": "TRANSFER"},
        "hitPolicy": "UNIQUE",
        "rules": [
            {"id": "large", "when": {"assetId": "== EUR", "amount": format!(">= {threshold}")},
             "emit": {"approver": "#treasury", "step": 0, "reason": "large"}},
            {"id": "small", "when": {"assetId": "== EUR", "amount": format!("[0 .. {threshold})")},
             "emit": {"autoApproval": true}},
        ],
        "defaults": {"unmatched": "REQUIRE_MANUAL_REVIEW"},
    })
}

async fn create(app: &TestApp, template_key: &str, body_content: &Value) -> Reply {
    let reply = app.post("/api/policies", &json!({"templateKey": template_key, "content": body_content})).await;
    reply.expect(201);
    reply
}

fn id_of(reply: &Reply) -> String {
    reply.body["id"].as_str().unwrap_or_else(|| panic!("id: {}", reply.body)).to_owned()
}

async fn action(app: &TestApp, id: &str, verb: &str) -> Reply {
    app.post(&format!("/api/policies/{id}/{verb}"), &json!(null)).await
}

async fn put_current(app: &TestApp, id: &str, number: Value) -> Reply {
    let path = format!("/api/policies/{id}/current-version");
    app.write(Method::PUT, &path, &Uuid::now_v7().to_string(), &json!({"versionNumber": number})).await
}

fn versions(reply: &Reply) -> Vec<u64> {
    reply.body["data"].as_array().expect("data").iter().map(|v| v["versionNumber"].as_u64().expect("n")).collect()
}

// ---------------------------------------------------------------------------------------------
// Creating and reading
// ---------------------------------------------------------------------------------------------

backends!(a_policy_starts_as_a_draft_at_version_one_with_the_content_sent);
async fn a_policy_starts_as_a_draft_at_version_one_with_the_content_sent(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let sent = content("10000");
    let created = app
        .post(
            "/api/policies",
            &json!({"templateKey": TRANSFER_TEMPLATE, "content": sent, "name": "Large transfers",
                    "description": "Treasury signs large EUR transfers", "changeSummary": "First cut"}),
        )
        .await;
    created.expect(201);
    let id = id_of(&created);
    assert_eq!(created.header("Location"), Some(format!("/api/policies/{id}").as_str()));
    let p = &created.body;
    assert_eq!(p["status"], "DRAFT");
    assert_eq!(p["version"], 1);
    assert_eq!(p["ruleType"], "APPROVAL");
    assert_eq!(p["action"], "TRANSFER");
    assert_eq!(p["templateKey"], TRANSFER_TEMPLATE);
    assert_eq!(p["name"], "Large transfers");
    assert_eq!(p["description"], "Treasury signs large EUR transfers");
    assert_eq!(p["createdBy"], app.tenant.subject.as_str());
    assert!(p["createdAt"].is_string() && p["updatedAt"].is_string());
    // hitPolicy and everything else stored as sent; the template's default is not copied.
    assert_eq!(p["content"], sent);
    assert_eq!(p["content"]["hitPolicy"], "UNIQUE");

    let read = app.get(&format!("/api/policies/{id}")).await;
    read.expect(200);
    assert_eq!(&read.body, p);

    // "Stored as sent": a hitPolicy of any JSON type is kept, not refused.
    for hit_policy in [json!(1), json!({"mode": "collect"}), json!(["FIRST"]), json!(true)] {
        let mut other = content("20000");
        other["hitPolicy"] = hit_policy.clone();
        let kept = app.post("/api/policies", &json!({"templateKey": TRANSFER_TEMPLATE, "content": other})).await;
        kept.expect(201);
        assert_eq!(kept.body["content"]["hitPolicy"], hit_policy, "{}", kept.body);
    }

    let listed = app.get(&format!("/api/policies/{id}/versions")).await;
    listed.expect(200);
    assert_eq!(listed.body["totalItems"], 1);
    let v1 = &listed.body["data"][0];
    assert_eq!(v1["versionNumber"], 1);
    assert_eq!(v1["policyId"], id.as_str());
    assert_eq!(v1["changeSummary"], "First cut");
    assert_eq!(v1["content"], sent);
    assert_eq!(v1["createdBy"], app.tenant.subject.as_str());
    assert!(Uuid::parse_str(v1["id"].as_str().expect("version id")).is_ok());

    let audit = app.get(&format!("/api/audit/events?action=policy.create&resourceId={id}")).await;
    assert_eq!(audit.body["data"][0]["outcome"], "SUCCESS", "{}", audit.body);

    // Idempotent: the same key and body replay the policy; no second one.
    let key = Uuid::now_v7().to_string();
    let body =
        json!({"templateKey": "system.mint.approval", "content": {"appliesTo": {"action": "MINT"}, "rules": []}});
    let first = app.write(Method::POST, "/api/policies", &key, &body).await;
    first.expect(201);
    let replay = app.write(Method::POST, "/api/policies", &key, &body).await;
    assert_eq!(replay.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(replay.body["id"], first.body["id"]);
    // The first policy, the four kept hitPolicies, and this one once.
    assert_eq!(app.get("/api/policies").await.body["totalItems"], 6);
}

backends!(a_policys_name_and_description_change_audited_and_idempotent);
async fn a_policys_name_and_description_change_audited_and_idempotent(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let created = app
        .post("/api/policies", &json!({"templateKey": TRANSFER_TEMPLATE, "content": content("10"), "name": "Old"}))
        .await;
    created.expect(201);
    let id = id_of(&created);
    let path = format!("/api/policies/{id}");
    let patch = |key: &str, body: Value| {
        let (app, path, key) = (&app, path.clone(), key.to_owned());
        async move { app.write(Method::PATCH, &path, &key, &body).await }
    };

    app.clock.advance_millis(1_000);
    let key = Uuid::now_v7().to_string();
    let renamed = patch(&key, json!({"name": "  Large EUR transfers "})).await;
    renamed.expect(200);
    assert_eq!(renamed.body["name"], "Large EUR transfers", "trimmed: {}", renamed.body);
    assert_eq!(renamed.body["description"], Value::Null, "left out, so unchanged");
    assert_ne!(renamed.body["updatedAt"], created.body["updatedAt"]);
    for unchanged in ["status", "version", "content", "createdAt", "templateKey"] {
        assert_eq!(renamed.body[unchanged], created.body[unchanged], "{unchanged}");
    }
    assert_eq!(app.get(&path).await.body, renamed.body);
    // The same key and body replay; another body under it is 422.
    let replay = patch(&key, json!({"name": "  Large EUR transfers "})).await;
    assert_eq!(replay.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(replay.body, renamed.body);
    patch(&key, json!({"name": "Other"})).await.expect(422);
    let described = patch(&Uuid::now_v7().to_string(), json!({"description": "Treasury signs"})).await;
    described.expect(200);
    assert_eq!(
        (described.body["name"].as_str(), described.body["description"].as_str()),
        (Some("Large EUR transfers"), Some("Treasury signs"))
    );
    let audit = app.get(&format!("/api/audit/events?action=policy.update&resourceId={id}")).await;
    assert_eq!(audit.body["totalItems"], 2, "one record per change, none for the replay: {}", audit.body);

    // 400: nothing to change (a field PATCH does not take, such as status, counts as none),
    // blank, too long.
    let fresh = || Uuid::now_v7().to_string();
    // Nothing to change is VALIDATION_FAILED with its detail against the body.
    assert_invalid(&patch(&fresh(), json!({})).await, "body");
    assert_invalid(&patch(&fresh(), json!({"name": null})).await, "body");
    assert_invalid(&patch(&fresh(), json!({"name": "  "})).await, "name");
    assert_invalid(&patch(&fresh(), json!({"description": "d".repeat(2001)})).await, "description");
    assert_invalid(&patch(&fresh(), json!({"name": "n".repeat(201)})).await, "name");
    assert_invalid(&patch(&fresh(), json!({"status": "ACTIVE"})).await, "body");
    let bad_id = app.write(Method::PATCH, "/api/policies/not-a-uuid", &fresh(), &json!({"name": "x"})).await;
    assert_invalid(&bad_id, "policyId");
    // 404: unknown, or another organisation's.
    let unknown = format!("/api/policies/{}", Uuid::now_v7());
    app.write(Method::PATCH, &unknown, &fresh(), &json!({"name": "x"})).await.expect(404);
    let other = app.new_tenant();
    app.write_as(&other, Method::PATCH, &path, &fresh(), &json!({"name": "x"})).await.expect(404);
    // 409: an archived policy keeps its labels.
    action(&app, &id, "archive").await.expect(200);
    let archived = patch(&fresh(), json!({"name": "Renamed"})).await;
    archived.expect(409);
    assert_eq!(archived.body["code"], "POLICY_ARCHIVED", "{}", archived.body);
    assert_eq!(app.get(&path).await.body["name"], "Large EUR transfers");
}

backends!(invalid_content_is_400_naming_every_offending_rule_and_field);
async fn invalid_content_is_400_naming_every_offending_rule_and_field(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let bad = json!({
        "appliesTo": {"action": "TRANSFER"},
        "rules": [
            {"id": "not-equal", "when": {"assetId": "!= EUR"}, "emit": {"autoApproval": true}},
            {"id": "outside", "when": {"colour": "== red"}, "emit": {"autoApproval": true}},
            {"id": "no-asset", "when": {"amount": ">= 10"}, "emit": {"outcome": "REJECT"}},
            {"id": "bad-decimal", "when": {"assetId": "== EUR", "amount": ">= 1.2.3"}, "emit": {"autoApproval": true}},
        ],
        "aprover": "#typo",
    });
    let reply = app.post("/api/policies", &json!({"templateKey": TRANSFER_TEMPLATE, "content": bad})).await;
    for field in [
        "content.rules[0].when.assetId",
        "content.rules[1].when.colour",
        "content.rules[2].when",
        "content.rules[3].when.amount",
        "content.aprover",
    ] {
        assert_invalid(&reply, field);
    }
    let not_equal = reply.body["details"]
        .as_array()
        .expect("details")
        .iter()
        .find(|d| d["field"] == "content.rules[0].when.assetId")
        .cloned();
    assert!(not_equal.is_some_and(|d| d["message"].as_str().is_some_and(|m| m.contains("!="))), "{}", reply.body);

    // The content must govern the template's action.
    let wrong = json!({"appliesTo": {"action": "MINT"}, "rules": []});
    assert_invalid(
        &app.post("/api/policies", &json!({"templateKey": TRANSFER_TEMPLATE, "content": wrong})).await,
        "content.appliesTo.action",
    );
    assert_invalid(&app.post("/api/policies", &json!({"templateKey": TRANSFER_TEMPLATE})).await, "content");
    assert_invalid(&app.post("/api/policies", &json!({"content": content("1")})).await, "templateKey");
    assert_eq!(app.get("/api/policies").await.body["totalItems"], 0, "nothing was created");
}

backends!(auto_approval_false_is_no_effect_of_its_own);
/// `rules[].emit.autoApproval` is a boolean: false says "not automatic", so it may stand beside
/// the effect a rule names, and alone leaves the rule without one.
async fn auto_approval_false_is_no_effect_of_its_own(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let with = |emit: Value| {
        json!({"templateKey": TRANSFER_TEMPLATE, "content": {
            "appliesTo": {"action": "TRANSFER"},
            "rules": [{"id": "r", "when": {"assetId": "== EUR", "amount": ">= 100"}, "emit": emit}],
        }})
    };
    let beside =
        app.post("/api/policies", &with(json!({"approver": "#checkers", "step": 0, "autoApproval": false}))).await;
    beside.expect(201);
    assert_eq!(beside.body["content"]["rules"][0]["emit"]["autoApproval"], false, "{}", beside.body);
    assert_invalid(&app.post("/api/policies", &with(json!({"autoApproval": false}))).await, "content.rules[0].emit");
    assert_invalid(
        &app.post("/api/policies", &with(json!({"autoApproval": "false", "approver": "#checkers"}))).await,
        "content.rules[0].emit.autoApproval",
    );
}

backends!(a_template_that_is_not_visible_is_404);
async fn a_template_that_is_not_visible_is_404(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let unknown = app.post("/api/policies", &json!({"templateKey": "no.such.template", "content": content("1")})).await;
    unknown.expect(404);
    assert_eq!(unknown.body["code"], "TEMPLATE_NOT_FOUND");
    // Another organisation's template is not visible here.
    let other = app.new_tenant();
    let template =
        json!({"key": "theirs", "name": "n", "description": "d", "action": "TRANSFER", "defaultContent": {}});
    Reply::read(app.request_as(&other, Method::POST, "/api/templates").json(&template).send().await.expect("POST"))
        .await
        .expect(201);
    app.post("/api/policies", &json!({"templateKey": "theirs", "content": content("1")})).await.expect(404);
}

// ---------------------------------------------------------------------------------------------
// Activation, the slot and archiving
// ---------------------------------------------------------------------------------------------

backends!(one_non_archived_policy_holds_a_slot_and_archiving_frees_it);
async fn one_non_archived_policy_holds_a_slot_and_archiving_frees_it(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let a = id_of(&create(&app, TRANSFER_TEMPLATE, &content("100")).await);
    let activated = action(&app, &a, "activate").await;
    activated.expect(200);
    assert_eq!(activated.body["status"], "ACTIVE");
    // Activating an ACTIVE policy succeeds unchanged.
    let again = action(&app, &a, "activate").await;
    again.expect(200);
    assert_eq!(again.body, activated.body);

    // A second policy in the slot may be drafted, not activated.
    let b = id_of(&create(&app, TRANSFER_TEMPLATE, &content("200")).await);
    let conflict = action(&app, &b, "activate").await;
    conflict.expect(409);
    assert_eq!(conflict.body["code"], "POLICY_SLOT_TAKEN");
    assert_eq!(conflict.body["conflictingPolicyId"], a.as_str());
    assert_eq!(app.get(&format!("/api/policies/{b}")).await.body["status"], "DRAFT");
    // Another slot (another template) is free.
    let mint = json!({"appliesTo": {"action": "MINT"}, "rules": []});
    let c = id_of(&create(&app, "system.mint.approval", &mint).await);
    action(&app, &c, "activate").await.expect(200);

    // Archiving frees the slot and keeps the versions; it has no state guard.
    let archived = action(&app, &a, "archive").await;
    archived.expect(200);
    assert_eq!(archived.body["status"], "ARCHIVED");
    action(&app, &a, "archive").await.expect(200);
    assert_eq!(app.get(&format!("/api/policies/{a}/versions")).await.body["totalItems"], 1);
    action(&app, &b, "activate").await.expect(200);
    // An archived policy is not activated again.
    let refused = action(&app, &a, "activate").await;
    refused.expect(409);
    assert_eq!(refused.body["code"], "POLICY_ARCHIVED");
    // A DRAFT archives too.
    let d = id_of(&create(&app, TRANSFER_TEMPLATE, &content("300")).await);
    assert_eq!(action(&app, &d, "archive").await.body["status"], "ARCHIVED");

    // Filters and order: newest first.
    let all = app.get("/api/policies").await;
    all.expect(200);
    let ids: Vec<&str> =
        all.body["data"].as_array().expect("data").iter().map(|p| p["id"].as_str().expect("id")).collect();
    assert_eq!(ids, vec![d.as_str(), c.as_str(), b.as_str(), a.as_str()]);
    assert_eq!(all.body["totalItems"], 4);
    let active = app.get("/api/policies?status=ACTIVE").await;
    let active_ids: Vec<&str> =
        active.body["data"].as_array().expect("data").iter().map(|p| p["id"].as_str().expect("id")).collect();
    assert_eq!(active_ids, vec![c.as_str(), b.as_str()]);
    assert_eq!(app.get("/api/policies?status=ARCHIVED&ruleType=APPROVAL").await.body["totalItems"], 2);
    let paged = app.get("/api/policies?page=1&size=3").await;
    assert_eq!(paged.body["data"].as_array().expect("data").len(), 1);
    assert_eq!(paged.body["totalPages"], 2);
    assert_invalid(&app.get("/api/policies?status=ENABLED").await, "status");
    assert_invalid(&app.get("/api/policies?ruleType=LIMIT").await, "ruleType");

    let audit = app.get(&format!("/api/audit/events?action=policy.activate&resourceId={b}")).await;
    let outcomes: Vec<&str> =
        audit.body["data"].as_array().expect("data").iter().map(|r| r["outcome"].as_str().expect("o")).collect();
    assert!(outcomes.contains(&"SUCCESS") && outcomes.contains(&"FAILURE"), "{}", audit.body);
}

backends!(concurrent_activations_of_one_slot_let_one_through);
async fn concurrent_activations_of_one_slot_let_one_through(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let a = id_of(&create(&app, TRANSFER_TEMPLATE, &content("100")).await);
    let b = id_of(&create(&app, TRANSFER_TEMPLATE, &content("200")).await);
    // Neither may activate while the other is a draft in the slot; archiving one lets the other.
    let (ra, rb) = tokio::join!(action(&app, &a, "activate"), action(&app, &b, "activate"));
    assert_eq!((ra.status, rb.status), (409, 409));
    let (archived, activated) = tokio::join!(action(&app, &a, "archive"), action(&app, &b, "activate"));
    archived.expect(200);
    // Either the archive came first (200), or the activation saw a's draft (409): never both active.
    assert!(matches!(activated.status, 200 | 409), "{}", activated.body);
    let e = id_of(&create(&app, TRANSFER_TEMPLATE, &content("300")).await);
    let (rb, re) = tokio::join!(action(&app, &b, "activate"), action(&app, &e, "activate"));
    let active = app.get("/api/policies?status=ACTIVE").await;
    assert!(active.body["totalItems"].as_u64().expect("total") <= 1, "{}", active.body);
    assert!(rb.status == 409 || re.status == 409, "the slot admits one: {} {}", rb.body, re.body);
}

backends!(an_archival_racing_activations_of_its_slot_fails_no_request);
/// An archival racing activations of its own policy and of the slot's other drafts: each
/// request is answered 200 or 409, never a server error (on PostgreSQL an activation that
/// locked the slot and then its own, just archived, row met others locking in id order: a
/// deadlock), and the slot ends with one ACTIVE policy at most.
async fn an_archival_racing_activations_of_its_slot_fails_no_request(backend: Backend) {
    const ROUNDS: usize = 12;
    let app = TestApp::spawn(backend).await;
    for round in 0..ROUNDS {
        let mut drafts = Vec::new();
        for n in 0..4 {
            drafts.push(id_of(&create(&app, TRANSFER_TEMPLATE, &content(&format!("{}", 100 + n))).await));
        }
        let archival = action(&app, &drafts[0], "archive");
        let activations = (0..12).map(|i| action(&app, &drafts[i % drafts.len()], "activate"));
        let (archived, activated) = tokio::join!(archival, futures::future::join_all(activations));
        archived.expect(200);
        for reply in &activated {
            assert!(matches!(reply.status, 200 | 409), "round {round}: {} {}", reply.status, reply.body);
        }
        let active = app.get("/api/policies?status=ACTIVE").await;
        assert!(active.body["totalItems"].as_u64().expect("total") <= 1, "round {round}: {}", active.body);
        for id in &drafts {
            action(&app, id, "archive").await.expect(200);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Versions
// ---------------------------------------------------------------------------------------------

backends!(versions_are_added_listed_newest_first_and_chosen_as_current);
async fn versions_are_added_listed_newest_first_and_chosen_as_current(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let first = content("100");
    let id = id_of(&create(&app, TRANSFER_TEMPLATE, &first).await);
    let path = format!("/api/policies/{id}/versions");
    let second = content("200");
    let added = app.post(&path, &json!({"changeSummary": "Raise the bar", "content": second})).await;
    added.expect(201);
    assert_eq!(added.body["versionNumber"], 2);
    assert_eq!(added.header("Location"), Some(path.as_str()));
    assert_eq!(added.body["policyId"], id.as_str());
    assert_eq!(added.body["changeSummary"], "Raise the bar");
    assert_eq!(added.body["content"], second);
    assert_eq!(added.body["createdBy"], app.tenant.subject.as_str());
    assert!(added.body["createdAt"].is_string() && added.body["id"].is_string());
    // The current version did not change.
    let policy = app.get(&format!("/api/policies/{id}")).await;
    assert_eq!(policy.body["version"], 1);
    assert_eq!(policy.body["content"], first);
    app.post(&path, &json!({"content": content("300")})).await.expect(201);

    let listed = app.get(&path).await;
    assert_eq!(versions(&listed), vec![3, 2, 1]);
    let page = app.get(&format!("{path}?page=1&size=2")).await;
    assert_eq!(versions(&page), vec![1]);
    assert_eq!(page.body["totalPages"], 2);

    let set = put_current(&app, &id, json!(2)).await;
    set.expect(200);
    assert_eq!(set.body["version"], 2);
    assert_eq!(set.body["content"], second);
    assert_eq!(app.get(&format!("/api/policies/{id}")).await.body["version"], 2);
    // Roll back.
    assert_eq!(put_current(&app, &id, json!(1)).await.body["content"], first);
    let missing = put_current(&app, &id, json!(9)).await;
    missing.expect(404);
    assert_eq!(missing.body["code"], "POLICY_VERSION_NOT_FOUND");
    assert_invalid(&put_current(&app, &id, json!(0)).await, "versionNumber");
    assert_invalid(&put_current(&app, &id, Value::Null).await, "versionNumber");

    // Versions never change.
    let again = app.get(&path).await;
    assert_eq!(again.body["data"][2]["content"], first);
    assert_eq!(again.body["data"][1], added.body);

    // Invalid content is refused, and adds nothing.
    let bad = json!({"appliesTo": {"action": "TRANSFER"}, "rules": [{"id": "x", "when": {"amount": ">= 1"}, "emit": {"autoApproval": true}}]});
    assert_invalid(&app.post(&path, &json!({"content": bad})).await, "content.rules[0].when");
    assert_eq!(app.get(&path).await.body["totalItems"], 3);

    // Archived: versions kept, frozen.
    action(&app, &id, "archive").await.expect(200);
    assert_eq!(app.get(&path).await.body["totalItems"], 3);
    let frozen = app.post(&path, &json!({"content": content("400")})).await;
    frozen.expect(409);
    assert_eq!(frozen.body["code"], "POLICY_ARCHIVED");
    put_current(&app, &id, json!(2)).await.expect(409);

    let audit = app.get(&format!("/api/audit/events?action=policy.version.create&resourceId={id}")).await;
    assert!(audit.body["totalItems"].as_u64().expect("total") >= 2, "{}", audit.body);
}

// ---------------------------------------------------------------------------------------------
// Not found, bad ids, access
// ---------------------------------------------------------------------------------------------

backends!(unknown_and_foreign_policies_are_404_and_bad_ids_400);
async fn unknown_and_foreign_policies_are_404_and_bad_ids_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let other = app.new_tenant();
    let foreign = Reply::read(
        app.request_as(&other, Method::POST, "/api/policies")
            .json(&json!({"templateKey": TRANSFER_TEMPLATE, "content": content("1")}))
            .send()
            .await
            .expect("POST"),
    )
    .await;
    foreign.expect(201);
    for id in [Uuid::now_v7().to_string(), id_of(&foreign)] {
        let read = app.get(&format!("/api/policies/{id}")).await;
        read.expect(404);
        assert_eq!(read.body["code"], "POLICY_NOT_FOUND");
        app.get(&format!("/api/policies/{id}/versions")).await.expect(404);
        action(&app, &id, "activate").await.expect(404);
        action(&app, &id, "archive").await.expect(404);
        app.post(&format!("/api/policies/{id}/versions"), &json!({"content": content("2")})).await.expect(404);
        put_current(&app, &id, json!(1)).await.expect(404);
    }
    for path in ["/api/policies/not-a-uuid", "/api/policies/not-a-uuid/versions"] {
        assert_invalid(&app.get(path).await, "policyId");
    }
    assert_invalid(&action(&app, "not-a-uuid", "activate").await, "policyId");
    assert_invalid(&put_current(&app, "not-a-uuid", json!(1)).await, "policyId");
}

backends!(each_policy_permission_is_required);
async fn each_policy_permission_is_required(backend: Backend) {
    let app = TestApp::spawn_embedded(backend, BTreeMap::new()).await;
    let (tenant, owner) = create_organisation(&app, "olivia@bank.example").await;
    let post = |path: String, token: String, body: Value| {
        let app = &app;
        async move { call(app, Method::POST, &path, Some(&token), Some(&body)).await }
    };
    // The owner (SUPER_ADMIN) holds every permission.
    let created =
        post("/api/policies".into(), owner.clone(), json!({"templateKey": TRANSFER_TEMPLATE, "content": content("1")}))
            .await;
    created.expect(201);
    let id = id_of(&created);

    for (role, permissions) in [("Policy Readers", vec!["policy:read"]), ("Customer Readers", vec!["customer:read"])] {
        let made = post(
            format!("/api/tenants/{tenant}/roles"),
            owner.clone(),
            json!({"name": role, "description": "", "permissions": permissions}),
        )
        .await;
        made.expect(201);
    }
    let (_, reader) = invite_and_activate(&app, &tenant, &owner, "rita@bank.example", Some("Policy Readers")).await;
    let (_, outsider) = invite_and_activate(&app, &tenant, &owner, "otto@bank.example", Some("Customer Readers")).await;

    #[track_caller]
    fn denied(reply: &Reply, permission: &str) {
        reply.expect(403);
        assert_eq!(reply.body["message"], format!("Missing permission: {permission}"), "{}", reply.body);
    }
    // policy:read
    call(&app, Method::GET, "/api/policies", Some(&reader), None).await.expect(200);
    call(&app, Method::GET, "/api/templates", Some(&reader), None).await.expect(200);
    denied(&call(&app, Method::GET, "/api/policies", Some(&outsider), None).await, "policy:read");
    denied(&call(&app, Method::GET, &format!("/api/policies/{id}"), Some(&outsider), None).await, "policy:read");
    denied(
        &call(&app, Method::GET, &format!("/api/policies/{id}/versions"), Some(&outsider), None).await,
        "policy:read",
    );
    denied(&call(&app, Method::GET, "/api/templates", Some(&outsider), None).await, "policy:read");
    // policy:create
    denied(
        &post(
            "/api/policies".into(),
            reader.clone(),
            json!({"templateKey": TRANSFER_TEMPLATE, "content": content("1")}),
        )
        .await,
        "policy:create",
    );
    // policy:version:create
    denied(
        &post(format!("/api/policies/{id}/versions"), reader.clone(), json!({"content": content("2")})).await,
        "policy:version:create",
    );
    // policy:update
    denied(&post(format!("/api/policies/{id}/activate"), reader.clone(), json!(null)).await, "policy:update");
    denied(&post(format!("/api/policies/{id}/archive"), reader.clone(), json!(null)).await, "policy:update");
    let put = call(
        &app,
        Method::PUT,
        &format!("/api/policies/{id}/current-version"),
        Some(&reader),
        Some(&json!({"versionNumber": 1})),
    )
    .await;
    denied(&put, "policy:update");
    let patch =
        call(&app, Method::PATCH, &format!("/api/policies/{id}"), Some(&reader), Some(&json!({"name": "x"}))).await;
    denied(&patch, "policy:update");
    // template:create
    let template = json!({"key": "k", "name": "n", "description": "d", "action": "TRANSFER", "defaultContent": {}});
    denied(&post("/api/templates".into(), reader.clone(), template.clone()).await, "template:create");
    post("/api/templates".into(), owner.clone(), template).await.expect(201);
    denied(
        &call(&app, Method::PATCH, "/api/templates/k", Some(&reader), Some(&json!({"name": "x"}))).await,
        "template:create",
    );
    denied(&post("/api/templates/k/deprecate".into(), reader.clone(), json!(null)).await, "template:create");

    // No token: 401.
    call(&app, Method::GET, "/api/policies", None, None).await.expect(401);
    call(&app, Method::POST, "/api/policies", None, Some(&json!({}))).await.expect(401);
    call(&app, Method::PATCH, &format!("/api/policies/{id}"), None, Some(&json!({"name": "x"}))).await.expect(401);
    // Nothing changed.
    let read = call(&app, Method::GET, &format!("/api/policies/{id}"), Some(&owner), None).await;
    assert_eq!(read.body["status"], "DRAFT");
    assert_eq!(read.body["version"], 1);
}

// ---------------------------------------------------------------------------------------------
// What the pipeline reads
// ---------------------------------------------------------------------------------------------

backends!(the_pipeline_reads_the_active_policies_of_an_action_with_their_current_content);
async fn the_pipeline_reads_the_active_policies_of_an_action_with_their_current_content(backend: Backend) {
    use tokenops_domain::policy::PolicyAction;
    let app = TestApp::spawn(backend).await;
    let active = async || {
        let mut tx = app.app.store.read().await.expect("read transaction");
        app.app.policies.active_for_action(&mut *tx, app.tenant.id, PolicyAction::Transfer).await.expect("read")
    };
    let id = id_of(&create(&app, TRANSFER_TEMPLATE, &content("100")).await);
    assert!(active().await.is_empty(), "a DRAFT affects no operation");
    action(&app, &id, "activate").await.expect(200);
    app.post(&format!("/api/policies/{id}/versions"), &json!({"content": content("500")})).await.expect(201);
    let found = active().await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].policy.id.to_string(), id);
    assert_eq!(found[0].content.document(), &content("100"), "the current version, not the newest");
    put_current(&app, &id, json!(2)).await.expect(200);
    assert_eq!(active().await[0].content.document(), &content("500"));
    // Another action's policies and another organisation's are not read.
    let mint = json!({"appliesTo": {"action": "MINT"}, "rules": []});
    let m = id_of(&create(&app, "system.mint.approval", &mint).await);
    action(&app, &m, "activate").await.expect(200);
    assert_eq!(active().await.len(), 1);
    action(&app, &id, "archive").await.expect(200);
    assert!(active().await.is_empty(), "an archived policy stops being selected");
}
