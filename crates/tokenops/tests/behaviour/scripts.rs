//! `/api/scripts`: creation (compiled, parameters extracted), the status machine through PATCH,
//! DELETE, download and clone, each rule and status code of the spec's table provoked.

use reqwest::Method;
use serde_json::{Value, json};
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use uuid::Uuid;

use crate::support::{key, write_in_flight};

pub const SWEEP: &str = r#"// @param target: decimal = "1000.00" -- the balance to keep
// @param account: string -- the account to sweep
let note = "sweep " + account + " to " + target;
log(note);
note
"#;

/// A script named `name` with `source`, created (201) and returned.
pub async fn create(app: &TestApp, name: &str, source: &str) -> Value {
    let reply = app.post("/api/scripts", &json!({ "name": name, "source": source })).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.body
}

pub fn id_of(script: &Value) -> String {
    script["scriptId"].as_str().expect("scriptId").to_owned()
}

pub async fn set_status(app: &TestApp, id: &str, status: &str) -> Reply {
    app.patch(&format!("/api/scripts/{id}"), &json!({ "status": status })).await
}

pub async fn publish(app: &TestApp, id: &str) -> Value {
    let reply = set_status(app, id, "PUBLISHED").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body
}

#[track_caller]
fn refused(reply: &Reply, status: u16, says: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let message = reply.body["message"].as_str().unwrap_or_default();
    let details = reply.body["details"].to_string();
    assert!(message.contains(says) || details.contains(says), "expected {says:?} in {}", reply.body);
}

backends!(
    a_script_is_created_as_a_draft_with_its_declared_parameters,
    creation_refuses_what_does_not_compile_a_taken_name_a_missing_import_and_no_key,
    a_patch_changes_name_description_code_and_status_by_the_machine,
    publishing_resolves_imports_and_new_code_outdates_dependants,
    an_imported_script_sees_its_own_parameters_at_their_defaults,
    deletion_is_refused_while_published_run_or_imported,
    download_gives_the_code_and_refuses_a_deleted_script,
    a_clone_takes_new_defaults_and_keeps_its_root,
    a_script_write_with_its_key_in_flight_is_409,
    the_import_rules_hold_when_writes_on_both_ends_race,
);

async fn a_script_is_created_as_a_draft_with_its_declared_parameters(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reply = app.post("/api/scripts", &json!({ "name": "sweep", "description": "Sweep", "source": SWEEP })).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let id = id_of(&reply.body);
    assert_eq!(reply.header("location"), Some(format!("/api/scripts/{id}").as_str()));
    assert_eq!(reply.body["status"], "DRAFT");
    assert_eq!(reply.body["version"], 1);
    assert_eq!(reply.body["rootScriptId"], id.as_str(), "its own root");
    assert_eq!(
        reply.body["parameters"],
        json!([
            { "name": "target", "type": "DECIMAL", "default": "1000", "required": false, "description": "the balance to keep" },
            { "name": "account", "type": "STRING", "required": true, "description": "the account to sweep" },
        ])
    );
    let read = app.get(&format!("/api/scripts/{id}")).await;
    read.expect(200);
    assert_eq!(read.body, reply.body);
    let listed = app.get("/api/scripts").await;
    listed.expect(200);
    assert_eq!(listed.body["totalElements"], 1);
    assert_eq!(listed.body["content"][0]["scriptId"], id.as_str());
    // Another organisation sees none of it.
    let other = app.new_tenant();
    assert_eq!(app.get_as(&other, &format!("/api/scripts/{id}")).await.status, 404);
    assert_eq!(app.get(&format!("/api/scripts/{}", Uuid::now_v7())).await.status, 404);
    assert_eq!(app.get("/api/scripts/not-a-uuid").await.status, 400);
}

async fn creation_refuses_what_does_not_compile_a_taken_name_a_missing_import_and_no_key(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let broken = app.post("/api/scripts", &json!({ "name": "broken", "source": "let x = ;\n" })).await;
    refused(&broken, 400, "line 1");
    assert!(broken.body["line"].is_number(), "the position is given: {}", broken.body);
    create(&app, "lib", "fn twice(x) { x * 2 }").await;
    refused(&app.post("/api/scripts", &json!({ "name": "lib", "source": "1" })).await, 400, "lib");
    let missing = app.post("/api/scripts", &json!({ "name": "main", "source": "import \"nowhere\" as n;\n1" })).await;
    refused(&missing, 400, "nowhere");
    refused(&app.post("/api/scripts", &json!({ "name": "bad name!", "source": "1" })).await, 400, "name");
    refused(&app.post("/api/scripts", &json!({ "source": "1" })).await, 400, "name");
    refused(&app.post("/api/scripts", &json!({ "name": "x" })).await, 400, "source");
    let bad_param = app.post("/api/scripts", &json!({ "name": "p", "source": "// @param n: nope\n1" })).await;
    refused(&bad_param, 400, "nope");
    let no_key = app.request(Method::POST, "/api/scripts").json(&json!({ "name": "k", "source": "1" })).send().await;
    assert_eq!(no_key.expect("answered").status().as_u16(), 400);
    // A dependency that exists compiles.
    create(&app, "main", "import \"lib\" as lib;\nlib::twice(21)").await;
}

async fn a_patch_changes_name_description_code_and_status_by_the_machine(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let id = id_of(&create(&app, "s", "1").await);
    let path = format!("/api/scripts/{id}");
    refused(&app.patch(&path, &json!({})).await, 400, "Nothing to change");
    refused(&app.patch(&path, &json!({ "name": "" })).await, 400, "name");
    refused(&app.patch(&path, &json!({ "description": "  " })).await, 400, "description");
    refused(&app.patch(&path, &json!({ "status": "OUTDATED" })).await, 400, "status");
    refused(&app.patch(&path, &json!({ "status": "GONE" })).await, 400, "status");
    refused(&app.patch(&path, &json!({ "source": "let = ;" })).await, 400, "compile");
    create(&app, "taken", "2").await;
    refused(&app.patch(&path, &json!({ "name": "taken" })).await, 400, "taken");
    let renamed = app.patch(&path, &json!({ "name": "renamed", "description": "now described" })).await;
    renamed.expect(200);
    assert_eq!(
        (renamed.body["name"].as_str(), renamed.body["description"].as_str()),
        (Some("renamed"), Some("now described"))
    );
    let coded = app.patch(&path, &json!({ "source": "// @param n: integer = 3\nn + 1" })).await;
    coded.expect(200);
    assert_eq!(coded.body["version"], 2);
    assert_eq!(coded.body["parameters"][0]["name"], "n");
    let recoded = app.patch(&path, &json!({ "code": "// @param m: integer = 4\nm + 1" })).await;
    recoded.expect(200);
    assert_eq!(recoded.body["version"], 3);
    assert_eq!(recoded.body["parameters"][0]["name"], "m");
    let by_code = app.post("/api/scripts", &json!({ "name": "by-code", "code": "// @param k: integer = 1\nk" })).await;
    by_code.expect(201);
    assert_eq!(by_code.body["parameters"][0]["name"], "k", "{}", by_code.body);
    let cleared = app.patch(&path, &json!({ "description": null })).await;
    assert_eq!(cleared.body["description"], Value::Null);
    refused(&set_status(&app, &id, "DEPRECATED").await, 409, "DRAFT");
    assert_eq!(publish(&app, &id).await["status"], "PUBLISHED");
    refused(&set_status(&app, &id, "PUBLISHED").await, 409, "already");
    assert_eq!(set_status(&app, &id, "DEPRECATED").await.body["status"], "DEPRECATED");
    refused(&app.patch(&path, &json!({ "source": "5" })).await, 409, "DEPRECATED");
    // `code`, the spec's word for the source, is taken as well.
    refused(&app.patch(&path, &json!({ "code": "5" })).await, 409, "DEPRECATED");
    refused(&app.patch(&path, &json!({ "code": "// @param m: integer = 4\nm + 1" })).await, 409, "DEPRECATED");
    assert_eq!(publish(&app, &id).await["status"], "PUBLISHED", "a deprecated script is published again");
    assert_eq!(set_status(&app, &id, "DRAFT").await.body["status"], "DRAFT", "unpublished");
    refused(&app.patch(&format!("/api/scripts/{}", Uuid::now_v7()), &json!({ "name": "z" })).await, 404, "not found");
}

async fn publishing_resolves_imports_and_new_code_outdates_dependants(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let lib = id_of(&create(&app, "lib", "fn twice(x) { x * 2 }").await);
    let main = id_of(&create(&app, "main", "import \"lib\" as lib;\nlib::twice(21)").await);
    refused(&set_status(&app, &main, "PUBLISHED").await, 409, "lib");
    publish(&app, &lib).await;
    let published = publish(&app, &main).await;
    assert_eq!(published["dependencies"], json!([{ "name": "lib", "scriptId": lib, "version": 1 }]));
    // Unpublishing a script a published one depends on is 409; so is renaming it.
    refused(&set_status(&app, &lib, "DRAFT").await, 409, "depend");
    refused(&app.patch(&format!("/api/scripts/{lib}"), &json!({ "name": "lib2" })).await, 409, "import");
    // New code for the published dependency: it stays PUBLISHED at version 2, main is OUTDATED.
    let changed = app.patch(&format!("/api/scripts/{lib}"), &json!({ "source": "fn twice(x) { x + x }" })).await;
    changed.expect(200);
    assert_eq!((changed.body["status"].as_str(), changed.body["version"].as_u64()), (Some("PUBLISHED"), Some(2)));
    let outdated = app.get(&format!("/api/scripts/{main}")).await;
    assert_eq!(outdated.body["status"], "OUTDATED");
    refused(&app.patch(&format!("/api/scripts/{main}"), &json!({ "source": "1" })).await, 409, "OUTDATED");
    // The code it has, sent again, is code sent all the same.
    let same = json!({ "source": "import \"lib\" as lib;\nlib::twice(21)" });
    refused(&app.patch(&format!("/api/scripts/{main}"), &same).await, 409, "OUTDATED");
    let republished = publish(&app, &main).await;
    assert_eq!(republished["dependencies"][0]["version"], 2, "the current version, at publication");
}

/// A script that uses its own declared parameters can be imported: its top level runs with them
/// at their defaults.
async fn an_imported_script_sees_its_own_parameters_at_their_defaults(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let lib = "// @param limit: integer = 5\nexport let cap = limit + 1;\nlog(`lib with ${limit}`);";
    publish(&app, &id_of(&create(&app, "lib", lib).await)).await;
    let main = id_of(&create(&app, "main", "import \"lib\" as l;\nlog(`cap ${l::cap}`);").await);
    let ran = app.post(&format!("/api/scripts/{main}/dry-runs"), &json!({})).await;
    ran.expect(200);
    assert_eq!(ran.body["status"], "SUCCEEDED", "{}", ran.body);
    assert_eq!(ran.body["log"], json!(["lib with 5", "cap 6"]), "{}", ran.body);
    assert_eq!(publish(&app, &main).await["status"], "PUBLISHED");
}

async fn deletion_is_refused_while_published_run_or_imported(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let lib = id_of(&create(&app, "lib", "fn one() { 1 }").await);
    let main = id_of(&create(&app, "main", "import \"lib\" as lib;\nlib::one()").await);
    let delete = |id: String| {
        let app = &app;
        async move { app.write(Method::DELETE, &format!("/api/scripts/{id}"), &key(), &Value::Null).await }
    };
    refused(&delete(lib.clone()).await, 409, "import");
    publish(&app, &lib).await;
    refused(&delete(lib.clone()).await, 409, "PUBLISHED");
    // An ACTIVE automation of a script keeps it, even deprecated.
    publish(&app, &main).await;
    let automation = app.post("/api/automations", &json!({ "scriptId": main })).await;
    assert_eq!(automation.status, 201, "{}", automation.body);
    set_status(&app, &main, "DEPRECATED").await.expect(200);
    refused(&delete(main.clone()).await, 409, "ACTIVE");
    let automation_id = automation.body["automationId"].as_str().expect("id").to_owned();
    app.patch(&format!("/api/automations/{automation_id}/status"), &json!({ "status": "INACTIVE" })).await.expect(200);
    let deleted = delete(main.clone()).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    assert_eq!(app.get(&format!("/api/scripts/{main}")).await.status, 404, "deleted");
    refused(&delete(main.clone()).await, 404, "not found");
    refused(&delete(Uuid::now_v7().to_string()).await, 404, "not found");
    // The name is free again.
    create(&app, "main", "2").await;
}

async fn download_gives_the_code_and_refuses_a_deleted_script(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let id = id_of(&create(&app, "sweep", SWEEP).await);
    let download = app.get(&format!("/api/scripts/{id}/download")).await;
    download.expect(200);
    assert_eq!(download.body.as_str(), Some(SWEEP));
    assert_eq!(download.header("content-disposition"), Some("attachment; filename=\"sweep.rhai\""));
    app.write(Method::DELETE, &format!("/api/scripts/{id}"), &key(), &Value::Null).await.expect(204);
    refused(&app.get(&format!("/api/scripts/{id}/download")).await, 409, "deleted");
    refused(&app.get(&format!("/api/scripts/{}/download", Uuid::now_v7())).await, 404, "not found");
}

async fn a_clone_takes_new_defaults_and_keeps_its_root(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let source = id_of(&create(&app, "sweep", SWEEP).await);
    let clone = |id: String, body: Value| {
        let app = &app;
        async move { app.post(&format!("/api/scripts/{id}/clone"), &body).await }
    };
    let override_ = |key: &str, value: Value, kind: &str| json!({ "key": key, "value": value, "type": kind });
    let made = clone(
        source.clone(),
        json!({ "name": "sweep-eu", "overrides": [override_("target", json!("250.50"), "DECIMAL")] }),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    assert_eq!(made.body["status"], "DRAFT");
    assert_eq!(made.body["rootScriptId"], source.as_str());
    assert_eq!(made.body["clonedFrom"], source.as_str());
    assert_eq!(made.body["parameters"][0]["default"], "250.5", "decimals in canonical form");
    // A clone of the clone keeps the first root.
    let second = clone(id_of(&made.body), json!({ "name": "sweep-eu-2" })).await;
    assert_eq!(second.body["rootScriptId"], source.as_str());
    refused(&clone(source.clone(), json!({ "name": "sweep-eu" })).await, 400, "sweep-eu");
    refused(
        &clone(source.clone(), json!({ "name": "c1", "overrides": [override_("nope", json!("1"), "STRING")] })).await,
        400,
        "nope",
    );
    refused(
        &clone(source.clone(), json!({ "name": "c2", "overrides": [override_("target", json!("abc"), "DECIMAL")] }))
            .await,
        400,
        "target",
    );
    refused(
        &clone(source.clone(), json!({ "name": "c3", "overrides": [override_("target", json!("1"), "INTEGER")] }))
            .await,
        400,
        "target",
    );
    refused(
        &clone(source.clone(), json!({ "name": "c4", "overrides": [{ "key": " ", "value": 1, "type": "INTEGER" }] }))
            .await,
        400,
        "key",
    );
    // A source whose import has gone no longer compiles.
    let lib = id_of(&create(&app, "lib", "fn one() { 1 }").await);
    let main = id_of(&create(&app, "main", "import \"lib\" as lib;\nlib::one()").await);
    app.write(Method::DELETE, &format!("/api/scripts/{main}"), &key(), &Value::Null).await.expect(204);
    refused(&clone(main.clone(), json!({ "name": "c5" })).await, 409, "deleted");
    let user = id_of(&create(&app, "user", "import \"lib\" as lib;\nlib::one()").await);
    app.write(Method::DELETE, &format!("/api/scripts/{user}"), &key(), &Value::Null).await.expect(204);
    app.write(Method::DELETE, &format!("/api/scripts/{lib}"), &key(), &Value::Null).await.expect(204);
    let revived = id_of(&create(&app, "uses-lib", "fn local() { 2 }").await);
    let patched =
        app.patch(&format!("/api/scripts/{revived}"), &json!({ "source": "import \"lib\" as lib;\n1" })).await;
    refused(&patched, 400, "lib");
    refused(&clone(Uuid::now_v7().to_string(), json!({ "name": "c6" })).await, 404, "not found");
}

async fn a_script_write_with_its_key_in_flight_is_409(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "name": "inflight", "source": "1" });
    let reply = write_in_flight(&app, "script.create", Method::POST, "/api/scripts", &body).await;
    assert_eq!(reply.status, 409, "{}", reply.body);
}

/// Writes on both ends of an import, sent at once, still keep the rules each keeps alone:
/// unpublishing a dependency against publishing its importer, new code for a published
/// dependency against publishing its importer, deleting a draft against creating its importer.
/// Each judges the other's script, so on PostgreSQL an organisation's script writes take turns;
/// without them both sides of each pair went through in most rounds.
async fn the_import_rules_hold_when_writes_on_both_ends_race(backend: Backend) {
    const ROUNDS: usize = 6;
    let app = TestApp::spawn(backend).await;
    let script = |id: String| {
        let app = &app;
        async move { app.get(&format!("/api/scripts/{id}")).await.body }
    };
    for round in 0..ROUNDS {
        // Unpublish the dependency / publish the importer: exactly one goes through.
        let lib = id_of(&create(&app, &format!("lib{round}"), "fn one() { 1 }").await);
        publish(&app, &lib).await;
        let user =
            id_of(&create(&app, &format!("user{round}"), &format!("import \"lib{round}\" as l;\nl::one()")).await);
        let (unpublished, published) =
            tokio::join!(set_status(&app, &lib, "DRAFT"), set_status(&app, &user, "PUBLISHED"));
        let mut statuses = [unpublished.status, published.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "round {round}: {} / {}", unpublished.body, published.body);
        let (lib_now, user_now) = (script(lib.clone()).await, script(user.clone()).await);
        assert!(
            !(lib_now["status"] == "DRAFT" && user_now["status"] == "PUBLISHED"),
            "round {round}: a PUBLISHED importer of a DRAFT: {lib_now} {user_now}"
        );

        // New code for the published dependency / publish the importer: a PUBLISHED importer
        // resolved the dependency's current version, else it is OUTDATED.
        let lib = id_of(&create(&app, &format!("base{round}"), "fn two() { 2 }").await);
        publish(&app, &lib).await;
        let user =
            id_of(&create(&app, &format!("top{round}"), &format!("import \"base{round}\" as b;\nb::two()")).await);
        let (lib_path, new_source) = (format!("/api/scripts/{lib}"), json!({ "source": "fn two() { 1 + 1 }" }));
        let new_code = app.patch(&lib_path, &new_source);
        let (changed, published) = tokio::join!(new_code, set_status(&app, &user, "PUBLISHED"));
        changed.expect(200);
        published.expect(200);
        let user_now = script(user.clone()).await;
        let pinned = user_now["dependencies"][0]["version"].as_u64();
        assert!(
            user_now["status"] == "OUTDATED" || pinned == Some(2),
            "round {round}: PUBLISHED on a version its dependency left: {user_now}"
        );

        // Delete a draft / create a script importing it: exactly one goes through.
        let doomed = id_of(&create(&app, &format!("gone{round}"), "fn three() { 3 }").await);
        let body =
            json!({ "name": format!("heir{round}"), "source": format!("import \"gone{round}\" as g;\ng::three()") });
        let (doomed_path, doomed_key) = (format!("/api/scripts/{doomed}"), key());
        let (deleted, created) = tokio::join!(
            app.write(Method::DELETE, &doomed_path, &doomed_key, &Value::Null),
            app.post("/api/scripts", &body)
        );
        assert!(
            matches!((deleted.status, created.status), (204, 400) | (409, 201)),
            "round {round}: delete {} {} / create {} {}",
            deleted.status,
            deleted.body,
            created.status,
            created.body
        );
    }
}
