//! Policy templates over HTTP (spec: Resources/Policy template; Endpoints/Policies and
//! templates; Errors/Policies, templates, approvals; Paging style B, templates SYSTEM first then
//! key ascending, includeDeprecated, ignorePaging), on both stores.

use reqwest::Method;
use serde_json::{Value, json};
use tokenops_domain::policy::system_templates;
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use uuid::Uuid;

use crate::support::assert_invalid;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A template body; its default content breaks the catalogue (`!=`, an unknown field), which a
/// template may: only a policy's content is validated.
fn template(key: &str, action: &str) -> Value {
    json!({
        "key": key,
        "name": format!("Template {key}"),
        "description": "Treasury's suggestion",
        "action": action,
        "defaultContent": {
            "appliesTo": {"action": action},
            "hitPolicy": "FIRST",
            "rules": [{"id": "odd", "when": {"assetId": "!= EUR", "colour": "== red"}, "emit": {"autoApproval": true}}],
        },
    })
}

fn policy_content(action: &str) -> Value {
    json!({
        "appliesTo": {"action": action},
        "rules": [{"id": "big", "when": {"assetId": "== EUR", "amount": ">= 1000"}, "emit": {"approver": "#treasury"}}],
    })
}

async fn create(app: &TestApp, key: &str, action: &str) -> Reply {
    let reply = app.post("/api/templates", &template(key, action)).await;
    reply.expect(201);
    reply
}

fn keys(reply: &Reply) -> Vec<String> {
    reply.body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("data: {}", reply.body))
        .iter()
        .map(|t| t["key"].as_str().expect("key").to_owned())
        .collect()
}

fn system_keys() -> Vec<String> {
    system_templates().into_iter().map(|t| t.key).collect()
}

// ---------------------------------------------------------------------------------------------
// Listing
// ---------------------------------------------------------------------------------------------

backends!(templates_list_system_first_then_the_organisations_by_key);
async fn templates_list_system_first_then_the_organisations_by_key(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "zeta", "TRANSFER").await;
    create(&app, "alpha", "MINT").await;

    let all = app.get("/api/templates?ignorePaging=true").await;
    all.expect(200);
    let mut expected = system_keys();
    expected.extend(["alpha".to_owned(), "zeta".to_owned()]);
    assert_eq!(keys(&all), expected);
    assert_eq!(all.body["totalItems"], expected.len());
    assert_eq!(all.body["totalPages"], 1);
    assert_eq!(all.body["page"], 0);

    let system = &all.body["data"][0];
    assert_eq!(system["scope"], "SYSTEM");
    assert_eq!(system["templateVersion"], 1);
    assert_eq!(system["status"], "ACTIVE");
    assert!(system["defaultContent"]["rules"].is_array(), "{system}");
    assert!(system.get("createdAt").is_none(), "SYSTEM templates carry no timestamps: {system}");
    let alpha = &all.body["data"][expected.len() - 2];
    assert_eq!(alpha["scope"], "TENANT");
    assert_eq!(alpha["action"], "MINT");
    assert!(alpha["createdAt"].is_string());

    // Style B pages over the same order.
    let first = app.get("/api/templates?page=0&size=3").await;
    first.expect(200);
    assert_eq!(keys(&first), expected[..3].to_vec());
    assert_eq!(first.body["size"], 3);
    assert_eq!(first.body["totalItems"], expected.len());
    assert_eq!(first.body["totalPages"], expected.len().div_ceil(3));
    let last = app.get(&format!("/api/templates?page={}&size=3", expected.len() / 3)).await;
    assert_eq!(keys(&last), expected[(expected.len() / 3) * 3..].to_vec());
    // Default paging: 20 a page, all of these fit.
    let default = app.get("/api/templates").await;
    assert_eq!(default.body["size"], 20);
    assert_eq!(keys(&default), expected);

    assert_invalid(&app.get("/api/templates?size=0").await, "size");
    assert_invalid(&app.get("/api/templates?includeDeprecated=yes").await, "includeDeprecated");
    assert_invalid(&app.get("/api/templates?ignorePaging=1").await, "ignorePaging");

    // Another organisation sees the SYSTEM templates only.
    let other = app.new_tenant();
    let theirs =
        Reply::read(app.request_as(&other, Method::GET, "/api/templates?ignorePaging=true").send().await.expect("GET"))
            .await;
    assert_eq!(keys(&theirs), system_keys());

    // No token: 401.
    let anonymous = app.raw(Method::GET, "/api/templates").header("API-Version", tokenops_testkit::API_VERSION);
    Reply::read(anonymous.send().await.expect("GET")).await.expect(401);
}

// ---------------------------------------------------------------------------------------------
// Creating
// ---------------------------------------------------------------------------------------------

backends!(a_tenant_template_is_stored_as_sent_and_its_key_is_unique);
async fn a_tenant_template_is_stored_as_sent_and_its_key_is_unique(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = template("treasury.transfers", "TRANSFER");
    let created = create(&app, "treasury.transfers", "TRANSFER").await;
    assert_eq!(created.header("Location"), Some("/api/templates/treasury.transfers"));
    assert_eq!(created.body["key"], "treasury.transfers");
    assert_eq!(created.body["scope"], "TENANT");
    assert_eq!(created.body["templateVersion"], 1);
    assert_eq!(created.body["status"], "ACTIVE");
    assert_eq!(created.body["action"], "TRANSFER");
    assert_eq!(created.body["name"], "Template treasury.transfers");
    assert_eq!(created.body["description"], "Treasury's suggestion");
    // Invalid default content saves as sent: templates are not validated.
    assert_eq!(created.body["defaultContent"], body["defaultContent"]);

    // ... while a policy created with that content is refused.
    let policy = app
        .post("/api/policies", &json!({"templateKey": "treasury.transfers", "content": body["defaultContent"]}))
        .await;
    assert_invalid(&policy, "content.rules[0].when.assetId");
    assert_invalid(&policy, "content.rules[0].when.colour");

    // 409: the key exists in the organisation, or is a SYSTEM key.
    let again = app.post("/api/templates", &body).await;
    again.expect(409);
    assert_eq!(again.body["code"], "TEMPLATE_KEY_EXISTS");
    let system = app.post("/api/templates", &template("system.transfer.approval", "TRANSFER")).await;
    system.expect(409);
    // Another organisation may use the same key.
    let other = app.new_tenant();
    let theirs =
        Reply::read(app.request_as(&other, Method::POST, "/api/templates").json(&body).send().await.expect("POST"))
            .await;
    theirs.expect(201);

    // Shape: every field but description required, key grammar, known action, object content.
    let mut missing = body.clone();
    for field in ["key", "name", "action", "defaultContent"] {
        missing.as_object_mut().expect("object").remove(field);
        assert_invalid(&app.post("/api/templates", &missing).await, field);
        missing = body.clone();
    }
    assert_invalid(&app.post("/api/templates", &template("has space", "TRANSFER")).await, "key");
    assert_invalid(&app.post("/api/templates", &template("system.mine", "TRANSFER")).await, "key");
    assert_invalid(&app.post("/api/templates", &template("fine", "LOCK")).await, "action");
    let mut not_object = template("fine", "TRANSFER");
    not_object["defaultContent"] = json!("rules");
    assert_invalid(&app.post("/api/templates", &not_object).await, "defaultContent");
    // No description is an empty one; fields the body does not take (the record's scope, an
    // unknown colour) are ignored.
    let mut undescribed = template("undescribed", "TRANSFER");
    undescribed.as_object_mut().expect("object").remove("description");
    undescribed["scope"] = json!("SYSTEM");
    undescribed["colour"] = json!("red");
    let created = app.post("/api/templates", &undescribed).await;
    created.expect(201);
    assert_eq!(created.body["description"], "", "{}", created.body);
    assert_eq!(created.body["scope"], "TENANT", "{}", created.body);

    // Audited.
    // Audited: the creation, and the refused second one.
    let audit = app.get("/api/audit/events?action=template.create&resourceId=treasury.transfers").await;
    audit.expect(200);
    let records = audit.body["data"].as_array().expect("data");
    let mut outcomes: Vec<&str> = records.iter().map(|r| r["outcome"].as_str().expect("outcome")).collect();
    outcomes.sort_unstable();
    assert_eq!(outcomes, vec!["FAILURE", "SUCCESS"], "{}", audit.body);
    assert!(records.iter().all(|r| r["category"] == "POLICIES"), "{}", audit.body);
}

backends!(a_template_write_replays_under_its_idempotency_key);
async fn a_template_write_replays_under_its_idempotency_key(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let key = Uuid::now_v7().to_string();
    let body = template("replayed", "BURN");
    let first = app.write(Method::POST, "/api/templates", &key, &body).await;
    first.expect(201);
    let second = app.write(Method::POST, "/api/templates", &key, &body).await;
    second.expect(201);
    assert_eq!(second.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(second.body, first.body);
    let other = app.write(Method::POST, "/api/templates", &key, &template("other", "BURN")).await;
    other.expect(422);
}

// ---------------------------------------------------------------------------------------------
// Changing and deprecating
// ---------------------------------------------------------------------------------------------

backends!(a_template_change_bumps_its_version_and_leaves_policies_alone);
async fn a_template_change_bumps_its_version_and_leaves_policies_alone(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "payments", "FIAT_PAYMENT").await;
    let content = policy_content("FIAT_PAYMENT");
    let policy = app.post("/api/policies", &json!({"templateKey": "payments", "content": content})).await;
    policy.expect(201);
    let id = policy.body["id"].as_str().expect("id").to_owned();

    let new_default = json!({"appliesTo": {"action": "FIAT_PAYMENT"}, "rules": []});
    let changed =
        app.patch("/api/templates/payments", &json!({"name": "Payments v2", "defaultContent": new_default})).await;
    changed.expect(200);
    assert_eq!(changed.body["templateVersion"], 2);
    assert_eq!(changed.body["name"], "Payments v2");
    assert_eq!(changed.body["description"], "Treasury's suggestion", "unchanged fields stay");
    assert_eq!(changed.body["defaultContent"], new_default);
    let described = app.patch("/api/templates/payments", &json!({"description": "Now described"})).await;
    assert_eq!(described.body["templateVersion"], 3);

    // The policy is a copy: the template's change did not reach it.
    let read = app.get(&format!("/api/policies/{id}")).await;
    read.expect(200);
    assert_eq!(read.body["content"], content);
    assert_eq!(read.body["templateKey"], "payments");
    assert_eq!(read.body["action"], "FIAT_PAYMENT");

    assert_invalid(&app.patch("/api/templates/payments", &json!({"name": " "})).await, "name");
    assert_invalid(&app.patch("/api/templates/payments", &json!({"defaultContent": [1]})).await, "defaultContent");
    assert_invalid(&app.patch("/api/templates/payments", &json!({})).await, "body");

    // 404: no template with the key in scope (a SYSTEM template is the platform's; another
    // organisation's is not in scope).
    for missing in ["nothing-here", "system.transfer.approval"] {
        let reply = app.patch(&format!("/api/templates/{missing}"), &json!({"name": "x"})).await;
        reply.expect(404);
        assert_eq!(reply.body["code"], "TEMPLATE_NOT_FOUND");
        app.post(&format!("/api/templates/{missing}/deprecate"), &json!(null)).await.expect(404);
    }
    let other = app.new_tenant();
    let theirs = Reply::read(
        app.request_as(&other, Method::PATCH, "/api/templates/payments")
            .json(&json!({"name": "x"}))
            .send()
            .await
            .expect("PATCH"),
    )
    .await;
    theirs.expect(404);
    let audit = app.get("/api/audit/events?action=template.update&resourceId=payments").await;
    assert_eq!(audit.body["totalItems"], 2, "{}", audit.body);
}

backends!(a_template_with_several_fields_wrong_names_each_in_details);
async fn a_template_with_several_fields_wrong_names_each_in_details(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "key": "system.mine", "name": " ", "action": "NOPE", "defaultContent": [1] });
    let reply = app.post("/api/templates", &body).await;
    reply.expect(400);
    assert_eq!(reply.body["code"], "VALIDATION_FAILED");
    let fields: Vec<&str> =
        reply.body["details"].as_array().expect("details").iter().filter_map(|d| d["field"].as_str()).collect();
    assert_eq!(fields, ["key", "name", "action", "defaultContent"], "{}", reply.body);
    let changed = app.patch("/api/templates/any", &json!({ "name": " ", "defaultContent": 3 })).await;
    changed.expect(400);
    assert_eq!(changed.body["details"].as_array().map(Vec::len), Some(2), "{}", changed.body);
    let listed = app.get("/api/templates?ignorePaging=true").await;
    listed.expect(200);
    assert!(!listed.body.to_string().contains("system.mine"), "nothing was created: {}", listed.body);
}

backends!(a_deprecated_template_is_hidden_and_starts_no_policy);
async fn a_deprecated_template_is_hidden_and_starts_no_policy(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "old", "TRANSFER").await;
    create(&app, "current", "TRANSFER").await;
    let before = app.post("/api/policies", &json!({"templateKey": "old", "content": policy_content("TRANSFER")})).await;
    before.expect(201);

    let deprecated = app.request(Method::POST, "/api/templates/old/deprecate").send().await.expect("POST");
    let deprecated = Reply::read(deprecated).await;
    deprecated.expect(200);
    assert_eq!(deprecated.body["status"], "DEPRECATED");
    assert_eq!(deprecated.body["key"], "old");
    // Again: nothing changes.
    let again =
        Reply::read(app.request(Method::POST, "/api/templates/old/deprecate").send().await.expect("POST")).await;
    again.expect(200);
    assert_eq!(again.body["updatedAt"], deprecated.body["updatedAt"]);

    let listed = app.get("/api/templates?ignorePaging=true").await;
    assert!(!keys(&listed).contains(&"old".to_owned()), "hidden by default: {:?}", keys(&listed));
    assert!(keys(&listed).contains(&"current".to_owned()));
    let with = app.get("/api/templates?ignorePaging=true&includeDeprecated=true").await;
    let mut expected = system_keys();
    expected.extend(["current".to_owned(), "old".to_owned()]);
    assert_eq!(keys(&with), expected);
    assert_eq!(with.body["data"][expected.len() - 1]["status"], "DEPRECATED");

    // No new policy from it; the one made before stays as it was.
    let refused =
        app.post("/api/policies", &json!({"templateKey": "old", "content": policy_content("TRANSFER")})).await;
    refused.expect(404);
    assert_eq!(refused.body["code"], "TEMPLATE_NOT_FOUND");
    let id = before.body["id"].as_str().expect("id");
    let read = app.get(&format!("/api/policies/{id}")).await;
    assert_eq!(read.body["templateKey"], "old");
    assert_eq!(read.body["status"], "DRAFT");
}

// ---------------------------------------------------------------------------------------------
// Reading one
// ---------------------------------------------------------------------------------------------

backends!(a_template_is_read_by_key_where_its_creation_points);
async fn a_template_is_read_by_key_where_its_creation_points(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let created = create(&app, "treasury.transfers", "TRANSFER").await;
    let location = created.header("Location").expect("Location").to_owned();
    let read = app.get(&location).await;
    read.expect(200);
    assert_eq!(read.body, created.body, "the template as created");
    let system = app.get("/api/templates/system.transfer.approval").await;
    system.expect(200);
    assert_eq!(system.body["scope"], "SYSTEM");
    assert_eq!(system.body["action"], "TRANSFER");

    let missing = app.get("/api/templates/no.such.key").await;
    missing.expect(404);
    assert_eq!(missing.body["code"], "TEMPLATE_NOT_FOUND");
    // Another organisation's template is not in scope, like a missing one.
    let other = app.new_tenant();
    let theirs = Reply::read(app.request_as(&other, Method::GET, &location).send().await.expect("GET")).await;
    theirs.expect(404);
    assert_eq!(theirs.body["code"], "TEMPLATE_NOT_FOUND");

    // A deprecated template is still read by its key (it only starts no new policy).
    let deprecate = app.request(Method::POST, "/api/templates/treasury.transfers/deprecate").send().await;
    Reply::read(deprecate.expect("POST")).await.expect(200);
    let deprecated = app.get(&location).await;
    deprecated.expect(200);
    assert_eq!(deprecated.body["status"], "DEPRECATED");
}
