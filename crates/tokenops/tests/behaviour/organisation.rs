//! The organisation over HTTP (spec: User, role, approval group; States and transitions > User;
//! Organisation, users, roles, groups; Authentication; Errors > Organisation access; Paging;
//! supplement §2–§4 and §9; docs/permissions.md), on both stores.
//!
//! Users, invitations, suspension and machine clients run with the embedded identity provider
//! (an external provider owns accounts, so those answer 404 there); roles and groups are also
//! shown to work under an external provider, whose subjects act with their token's `scope`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokenops_domain::permission::Permission;
use tokenops_testkit::organisation::{
    Member, NEW_PASSWORD, accept_invitation, activate_through_challenge, call, create_organisation, invitation_count,
    invite, invite_and_activate, invite_member, invite_named, login, temporary_password,
};
use tokenops_testkit::{API_VERSION, Backend, Reply, TestApp, backends};
use uuid::Uuid;

use crate::support::until_waiting;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const OWNER: &str = "olivia@bank.example";
const SUPER_ADMIN_ID: &str = "00000000-0000-7000-8000-000000000001";
const ADMIN_ID: &str = "00000000-0000-7000-8000-000000000002";
const USER_ID: &str = "00000000-0000-7000-8000-000000000003";
const REVOKED: &str = "Your access has been revoked.";

/// The invited `email` activates with the temporary password of their invitation: their access
/// token.
async fn activate_invited(app: &TestApp, email: &str) -> String {
    let temporary = temporary_password(app, email);
    let body = json!({ "email": email, "temporaryPassword": temporary, "newPassword": NEW_PASSWORD });
    let activated = call(app, Method::POST, "/api/auth/activate", None, Some(&body)).await;
    activated.expect(200);
    activated.body["accessToken"].as_str().expect("access token").to_owned()
}

async fn embedded(backend: Backend) -> TestApp {
    TestApp::spawn_embedded(backend, BTreeMap::new()).await
}

/// An embedded-provider app with one organisation whose owner (SUPER_ADMIN) is signed in:
/// (app, tenant id, owner's access token).
async fn organisation(backend: Backend) -> (TestApp, String, String) {
    let app = embedded(backend).await;
    let (tenant, owner) = create_organisation(&app, OWNER).await;
    (app, tenant, owner)
}

fn users(tenant: &str) -> String {
    format!("/api/tenants/{tenant}/users")
}

fn roles(tenant: &str) -> String {
    format!("/api/tenants/{tenant}/roles")
}

fn groups(tenant: &str) -> String {
    format!("/api/tenants/{tenant}/groups")
}

fn clients(tenant: &str) -> String {
    format!("/api/tenants/{tenant}/clients")
}

async fn get(app: &TestApp, path: &str, token: &str) -> Reply {
    call(app, Method::GET, path, Some(token), None).await
}

async fn post(app: &TestApp, path: &str, token: &str, body: &Value) -> Reply {
    call(app, Method::POST, path, Some(token), Some(body)).await
}

async fn patch(app: &TestApp, path: &str, token: &str, body: &Value) -> Reply {
    call(app, Method::PATCH, path, Some(token), Some(body)).await
}

async fn delete(app: &TestApp, path: &str, token: &str) -> Reply {
    call(app, Method::DELETE, path, Some(token), None).await
}

/// The error envelope with this status and exactly this message.
#[track_caller]
fn refused(reply: &Reply, status: u16, message: &str) {
    assert_eq!(reply.status, status, "unexpected status; body: {}", reply.body);
    assert_eq!(reply.body["status"], status, "envelope status; body: {}", reply.body);
    assert_eq!(reply.body["message"], message, "message; body: {}", reply.body);
    assert!(reply.body["error"].as_str().is_some_and(|e| !e.is_empty()), "envelope error; body: {}", reply.body);
    assert!(reply.body["timestamp"].is_string(), "envelope timestamp; body: {}", reply.body);
}

/// The error envelope with this status and a message containing `part`.
#[track_caller]
fn refused_with(reply: &Reply, status: u16, part: &str) {
    assert_eq!(reply.status, status, "unexpected status; body: {}", reply.body);
    assert_eq!(reply.body["status"], status, "envelope status; body: {}", reply.body);
    let message = reply.body["message"].as_str().unwrap_or_default();
    assert!(message.contains(part), "message {message:?} lacks {part:?}; body: {}", reply.body);
}

/// A change of a user or a role: a PATCH with this body, or a DELETE.
enum Change {
    Patch(Value),
    Delete,
}

/// Each attempt (what it is, the caller's token, the path, the change) refused with the error
/// envelope, `status` and exactly `message`; a failure names the attempt.
async fn each_refused(app: &TestApp, status: u16, message: &str, attempts: &[(&str, &str, String, Change)]) {
    for (attempt, token, path, change) in attempts {
        let reply = match change {
            Change::Patch(body) => patch(app, path, token, body).await,
            Change::Delete => delete(app, path, token).await,
        };
        assert_eq!(
            (reply.status, reply.body["message"].as_str()),
            (status, Some(message)),
            "{attempt}; body: {}",
            reply.body
        );
        refused(&reply, status, message);
    }
}

/// A style C page: items, pageNumber, pageSize, totalResults (and nothing of the other styles).
#[track_caller]
fn assert_page_c(reply: &Reply, page: u64, size: u64, total: u64) {
    reply.expect(200);
    let body = &reply.body;
    assert!(body["items"].is_array(), "style C items; body: {body}");
    assert_eq!(body["pageNumber"], page, "pageNumber; body: {body}");
    assert_eq!(body["pageSize"], size, "pageSize; body: {body}");
    assert_eq!(body["totalResults"], total, "totalResults; body: {body}");
    for other in ["content", "data", "totalElements", "totalItems", "totalPages", "nextCursor"] {
        assert!(body.get(other).is_none(), "style C has no {other}; body: {body}");
    }
}

/// One text field of every item of a page (`items`), in order.
fn column(page: &Value, field: &str) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {page}"))
        .iter()
        .map(|item| match &item[field] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// `firstName lastName` of every item of a page.
fn full_names(page: &Value) -> Vec<String> {
    column(page, "firstName").into_iter().zip(column(page, "lastName")).map(|(f, l)| format!("{f} {l}")).collect()
}

fn id_of(reply: &Reply) -> String {
    reply.body["id"].as_str().unwrap_or_else(|| panic!("no id in {}", reply.body)).to_owned()
}

/// The claims of a JWT (unverified: the test reads what the service issued).
fn claims_of(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT has three parts");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64url payload")).expect("JSON claims")
}

fn subject_of(token: &str) -> String {
    claims_of(token)["sub"].as_str().expect("sub").to_owned()
}

/// Creates a custom role; returns its id.
async fn create_role(app: &TestApp, tenant: &str, token: &str, name: &str, permissions: &[&str]) -> String {
    let reply =
        post(app, &roles(tenant), token, &json!({ "name": name, "description": "", "permissions": permissions })).await;
    reply.expect(201);
    id_of(&reply)
}

async fn create_group(app: &TestApp, tenant: &str, token: &str, key: &str, name: &str) -> String {
    let reply = post(app, &groups(tenant), token, &json!({ "key": key, "name": name })).await;
    reply.expect(201);
    id_of(&reply)
}

/// The audit records of `action` the caller can see, newest first.
async fn audit_records(app: &TestApp, token: &str, action: &str) -> Vec<Value> {
    let reply = get(app, &format!("/api/audit/events?action={action}&size=100"), token).await;
    reply.expect(200);
    reply.body["data"].as_array().expect("style B data").clone()
}

/// The SUCCESS records of `action` about `resource_id` (at least one).
async fn audited(app: &TestApp, token: &str, action: &str, resource_id: &str) -> Vec<Value> {
    let records = audit_records(app, token, action).await;
    let found: Vec<Value> =
        records.iter().filter(|r| r["resourceId"] == resource_id && r["outcome"] == "SUCCESS").cloned().collect();
    assert!(!found.is_empty(), "a successful {action} record about {resource_id}; records: {records:?}");
    found
}

/// A token of the test issuer for `tenant` whose `scope` is exactly `scope` (none when `None`).
fn scoped_token(app: &TestApp, tenant: &str, scope: Option<&str>) -> String {
    let tenant = tokenops_domain::TenantId(Uuid::parse_str(tenant).expect("tenant id"));
    let subject = Uuid::now_v7().to_string();
    app.issuer.sign(&app.issuer.claims_with_scope(&app.clock, &subject, Some(tenant), 3_600, scope))
}

/// `GET /api/users/{id}` with the Content-Type the spec requires.
async fn user_by_id(app: &TestApp, id: &str, token: &str, content_type: Option<&str>) -> Reply {
    let mut request =
        app.raw(Method::GET, &format!("/api/users/{id}")).header("API-Version", API_VERSION).bearer_auth(token);
    if let Some(content_type) = content_type {
        request = request.header("Content-Type", content_type);
    }
    Reply::read(request.send().await.expect("request")).await
}

/// Reveals a machine client's secret at its one-time URL (no bearer token).
async fn reveal(app: &TestApp, url: &str) -> Reply {
    Reply::read(app.client.get(url).header("API-Version", API_VERSION).send().await.expect("reveal")).await
}

/// A token from the embedded provider's token endpoint; `None` when the client is refused.
async fn client_token_basic(app: &TestApp, client_id: &str, secret: &str) -> Reply {
    Reply::read(
        app.raw(Method::POST, "/idp/oauth2/token")
            .basic_auth(client_id, Some(secret))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials")
            .send()
            .await
            .expect("token request"),
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// The newcomer's way (one test, from the operator to a custom role's user)
// ---------------------------------------------------------------------------------------------

async fn a_newcomer_goes_from_operator_to_a_user_with_a_custom_role(backend: Backend) {
    let app = embedded(backend).await;
    // The operator creates the organisation; the owner's invitation is in the outbox.
    let operator = app.operator_token().await;
    let organisation = json!({
        "name": "Bank of Newcomers",
        "owner": { "email": OWNER, "firstName": "Olivia", "lastName": "Owner" }
    });
    let created = post(&app, "/api/tenants", &operator, &organisation).await;
    created.expect(201);
    let tenant = created.body["id"].as_str().expect("tenant id").to_owned();
    assert_eq!(created.body["owner"]["status"], "INVITED");
    assert_eq!(created.body["owner"]["role"], "SUPER_ADMIN");
    app.drain_jobs().await;
    let temporary = temporary_password(&app, OWNER);

    // Login with the temporary password is a challenge; the new password gives tokens.
    let tokens = activate_through_challenge(&app, OWNER, &temporary).await;
    let owner = tokens["accessToken"].as_str().expect("owner's access token").to_owned();

    // The creation's Location is the organisation's read (the operator's), the owner as now.
    let location = created.header("location").expect("Location").to_owned();
    assert_eq!(location, format!("/api/tenants/{tenant}"));
    let read = get(&app, &location, &operator).await;
    read.expect(200);
    assert_eq!((&read.body["id"], &read.body["name"]), (&created.body["id"], &created.body["name"]));
    assert_eq!(read.body["createdAt"], created.body["createdAt"]);
    assert_eq!(read.body["owner"]["status"], "ACTIVE", "the owner as they are now: {}", read.body);
    assert_eq!(read.body["owner"]["role"], "SUPER_ADMIN");
    refused(&get(&app, &location, &owner).await, 403, "Only the platform operator may do this");
    get(&app, &format!("/api/tenants/{}", uuid::Uuid::now_v7()), &operator).await.expect(404);
    get(&app, "/api/tenants/not-a-uuid", &operator).await.expect(400);

    // The owner creates a custom role that may only read customers.
    let role = post(
        &app,
        &roles(&tenant),
        &owner,
        &json!({ "name": "Customer Readers", "description": "Read customers only", "permissions": ["customer:read"] }),
    )
    .await;
    role.expect(201);
    assert_eq!(role.body["permissions"], json!(["customer:read"]));
    assert_eq!(role.body["platform"], false);

    // ... and invites a user with it (200, not 201).
    let invited =
        invite_named(&app, &tenant, &owner, "nina@bank.example", "Nina", "Newcomer", Some("Customer Readers")).await;
    invited.expect(200);
    assert_eq!(invited.body["status"], "INVITED");
    assert_eq!(invited.body["role"], "Customer Readers");
    assert_eq!(invited.body["roleId"], role.body["id"]);

    // The user activates with the temporary password from their invitation.
    app.drain_jobs().await;
    let nina = activate_invited(&app, "nina@bank.example").await;
    let me = get(&app, "/api/users/me", &nina).await;
    me.expect(200);
    assert_eq!(me.body["status"], "ACTIVE");
    assert_eq!(me.body["role"], "Customer Readers");
    assert_eq!(me.body["tenantId"], tenant.as_str());

    // What the role allows works; what it does not is 403.
    get(&app, "/api/customers", &nina).await.expect(200);
    let write = post(&app, "/api/customers", &nina, &json!({ "customerRef": "CUST-NEW-1" })).await;
    refused(&write, 403, "Missing permission: customer:write");
    // The owner may (SUPER_ADMIN holds everything).
    post(&app, "/api/customers", &owner, &json!({ "customerRef": "CUST-NEW-1" })).await.expect(201);
}

// ---------------------------------------------------------------------------------------------
// The permission catalogue
// ---------------------------------------------------------------------------------------------

async fn the_permission_catalogue_names_every_permission_and_the_platform_roles_granting_it(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reply = app.get("/api/permissions").await;
    reply.expect(200);
    let permissions = reply.body["permissions"].as_array().expect("permissions").clone();
    assert_eq!(permissions.len(), tokenops_domain::permission::Permission::ALL.len());
    let named = |name: &str| {
        permissions
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not in the catalogue"))
            .clone()
    };
    for p in &permissions {
        assert!(p["description"].as_str().is_some_and(|d| !d.is_empty()), "{p}");
        assert!(p["platformRoles"].is_array(), "{p}");
    }
    assert_eq!(named("customer:read")["platformRoles"], json!(["SUPER_ADMIN", "ADMIN", "USER"]));
    assert_eq!(named("super_admin:create")["platformRoles"], json!(["SUPER_ADMIN"]));
    assert_eq!(named("admin:create")["platformRoles"], json!(["SUPER_ADMIN", "ADMIN"]));
    assert_eq!(named("user:create")["platformRoles"], json!(["SUPER_ADMIN", "ADMIN"]));
    assert_eq!(named("member:remove")["platformRoles"], json!(["SUPER_ADMIN", "ADMIN"]));
    assert_eq!(named("role:read")["platformRoles"], json!(["SUPER_ADMIN", "ADMIN", "USER"]));
    // Every permission of the catalogue is listed, so every one the spec names (the domain's
    // test holds the catalogue to the spec's names).
    for permission in Permission::ALL {
        named(permission.name());
    }
    // Reading it needs role:read.
    let tenant = app.tenant.id.to_string();
    let without = scoped_token(&app, &tenant, Some("customer:read"));
    refused(&get(&app, "/api/permissions", &without).await, 403, "Missing permission: role:read");
    get(&app, "/api/permissions", &scoped_token(&app, &tenant, Some("role:read"))).await.expect(200);
}

// ---------------------------------------------------------------------------------------------
// Invitations
// ---------------------------------------------------------------------------------------------

async fn inviting_a_user_answers_200_with_the_invited_user_and_mails_the_invitation(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let body = json!({
        "email": "bob@bank.example", "firstName": "Bob", "lastName": "Builder",
        // Ignored: the user joins the path's organisation.
        "tenantId": Uuid::now_v7().to_string(),
    });
    let invited = post(&app, &users(&tenant), &owner, &body).await;
    invited.expect(200);
    let user = &invited.body;
    let id = id_of(&invited);
    assert!(Uuid::parse_str(&id).is_ok(), "{user}");
    assert_eq!(user["tenantId"], tenant.as_str());
    assert_eq!(user["email"], "bob@bank.example");
    assert_eq!(user["firstName"], "Bob");
    assert_eq!(user["lastName"], "Builder");
    assert_eq!(user["status"], "INVITED");
    assert_eq!(user["role"], "USER");
    assert_eq!(user["roleId"], USER_ID);
    assert!(user["createdAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{user}");
    assert!(user["updatedAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{user}");

    // The organisation now lists the user as read by id.
    let read = get(&app, &format!("{}/{id}", users(&tenant)), &owner).await;
    read.expect(200);
    assert_eq!(read.body, invited.body);

    // The invitation (with a temporary password) lands in the outbox once the job runs.
    app.drain_jobs().await;
    assert_eq!(invitation_count(&app, "bob@bank.example"), 1);
    let bob = activate_invited(&app, "bob@bank.example").await;
    assert_eq!(subject_of(&bob), id, "the user id is the token's sub");
    let me = get(&app, "/api/users/me", &bob).await;
    me.expect(200);
    assert_eq!(me.body["id"], id.as_str());
    assert_eq!(me.body["status"], "ACTIVE");
    assert_eq!(me.body["role"], "USER");

    // The invitation is audited with the inviter as actor.
    let record = &audited(&app, &owner, "user.invite", &id).await[0];
    assert_eq!(record["actorId"], subject_of(&owner).as_str());
    assert_eq!(record["httpStatus"], 200);
}

/// The invite body is not validated up front: the names may be absent or blank, and role lookup
/// and email uniqueness decide.
async fn an_invitation_without_names_is_decided_by_role_and_email(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let bare = post(&app, &users(&tenant), &owner, &json!({ "email": "bare@bank.example", "roleName": "USER" })).await;
    bare.expect(200);
    assert_eq!(bare.body["status"], "INVITED");
    assert_eq!(bare.body["firstName"], "", "{}", bare.body);
    assert_eq!(bare.body["lastName"], "", "{}", bare.body);
    let blank = json!({ "email": "blank@bank.example", "firstName": " ", "lastName": null });
    post(&app, &users(&tenant), &owner, &blank).await.expect(200);
    app.drain_jobs().await;
    assert_eq!(invitation_count(&app, "bare@bank.example"), 1, "the nameless invitee is mailed too");

    let unknown_role = json!({ "email": "who@bank.example", "roleName": "Auditor" });
    refused(&post(&app, &users(&tenant), &owner, &unknown_role).await, 404, "Role Auditor not found");
    let taken = json!({ "email": "bare@bank.example" });
    refused_with(&post(&app, &users(&tenant), &owner, &taken).await, 409, "already registered");
    let long = json!({ "email": "long@bank.example", "firstName": "n".repeat(101) });
    refused_with(&post(&app, &users(&tenant), &owner, &long).await, 400, "firstName");
}

/// The invitee's fields are not validated up front either: the role lookup (404) and the
/// permission check (403) answer first, and only then does the identity provider refuse an
/// account it cannot create (400 naming the field).
async fn an_invitees_bad_email_is_answered_after_the_role_lookup_and_the_permission(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let path = users(&tenant);
    let (_, admin) = invite_and_activate(&app, &tenant, &owner, "adam@bank.example", Some("ADMIN")).await;
    for email in [json!("not-an-email"), json!(" "), Value::Null, json!("a b@bank.example")] {
        let unknown_role = json!({ "email": email, "roleName": "Nope" });
        refused(&post(&app, &path, &owner, &unknown_role).await, 404, "Role Nope not found");
        let beyond = json!({ "email": email, "roleName": "SUPER_ADMIN" });
        refused(&post(&app, &path, &admin, &beyond).await, 403, "Missing permission: super_admin:create");
        let valid_role = json!({ "email": email, "roleName": "USER" });
        refused_with(&post(&app, &path, &owner, &valid_role).await, 400, "email: ");
    }
    refused(&post(&app, &path, &owner, &json!({ "roleName": "Nope" })).await, 404, "Role Nope not found");
    refused(&post(&app, &path, &owner, &json!({ "roleName": "USER" })).await, 400, "email: is required");
    // No mail could reach these: no domain, two @, an empty label, a control character.
    for email in [
        "not-an-email",
        "ab@",
        "@bank.example",
        "a@b@bank.example",
        "a@bank..example",
        "a@bank.example.",
        "a\u{7}@bank.example",
    ] {
        let bad_email = json!({ "email": email, "roleName": "USER" });
        refused(&post(&app, &path, &owner, &bad_email).await, 400, "email: is not an email address");
    }
    // A name too long waits for the provider too; a role name of any length is only looked up.
    let long_name = json!({ "email": "long@bank.example", "lastName": "n".repeat(101), "roleName": "Nope" });
    refused(&post(&app, &path, &owner, &long_name).await, 404, "Role Nope not found");
    let long_role = "r".repeat(150);
    let long_role_body = json!({ "email": "long@bank.example", "roleName": long_role });
    refused(&post(&app, &path, &owner, &long_role_body).await, 404, &format!("Role {long_role} not found"));
    // Nobody was invited. The unknown roles and the missing permissions are audited as failures
    // (the key's answer); an invalid request leaves no record, as one refused before admission
    // does.
    assert_page_c(&get(&app, &path, &owner).await, 0, 20, 2);
    let failures: Vec<_> = audit_records(&app, &owner, "user.invite")
        .await
        .into_iter()
        .filter(|r| r["outcome"] == "FAILURE")
        .map(|r| r["httpStatus"].clone())
        .collect();
    assert!(failures.iter().all(|status| status == 404 || status == 403), "no 400 among {failures:?}");
    assert!(failures.len() >= 2, "the unknown roles are audited: {failures:?}");
}

async fn a_blank_role_name_means_user_and_platform_names_match_case_insensitively(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let operators = create_role(&app, &tenant, &owner, "Operators", &["customer:read"]).await;
    for (email, role_name, role, role_id) in [
        ("absent@bank.example", None, "USER", USER_ID),
        ("empty@bank.example", Some(""), "USER", USER_ID),
        ("spaces@bank.example", Some("   "), "USER", USER_ID),
        ("user@bank.example", Some("uSeR"), "USER", USER_ID),
        ("admin@bank.example", Some("admin"), "ADMIN", ADMIN_ID),
        ("super@bank.example", Some("Super_Admin"), "SUPER_ADMIN", SUPER_ADMIN_ID),
        ("custom@bank.example", Some("Operators"), "Operators", operators.as_str()),
    ] {
        let reply = invite(&app, &tenant, &owner, email, role_name).await;
        reply.expect(200);
        assert_eq!(reply.body["role"], role, "{email}: {}", reply.body);
        assert_eq!(reply.body["roleId"], role_id, "{email}: {}", reply.body);
    }
    let null = json!({ "email": "null@bank.example", "firstName": "N", "lastName": "Null", "roleName": null });
    let reply = post(&app, &users(&tenant), &owner, &null).await;
    reply.expect(200);
    assert_eq!(reply.body["role"], "USER");
}

async fn an_unknown_role_name_is_404_role_not_found(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    refused(&invite(&app, &tenant, &owner, "x@bank.example", Some("Auditor")).await, 404, "Role Auditor not found");
    // Another organisation's custom role is not this organisation's.
    let (other_tenant, other_owner) = create_organisation(&app, "other@bank.example").await;
    create_role(&app, &other_tenant, &other_owner, "Treasury", &["customer:read"]).await;
    refused(&invite(&app, &tenant, &owner, "x@bank.example", Some("Treasury")).await, 404, "Role Treasury not found");
    // Nobody was invited, and nothing was mailed.
    let list = get(&app, &users(&tenant), &owner).await;
    assert_page_c(&list, 0, 20, 1);
    app.drain_jobs().await;
    assert_eq!(invitation_count(&app, "x@bank.example"), 0);
}

async fn handing_out_a_role_needs_the_permission_the_role_requires(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let (_, admin) = invite_and_activate(&app, &tenant, &owner, "adam@bank.example", Some("ADMIN")).await;
    let (_, user) = invite_and_activate(&app, &tenant, &owner, "ulla@bank.example", None).await;

    // SUPER_ADMIN needs super_admin:create, ADMIN admin:create, USER user:create.
    let denied = invite(&app, &tenant, &admin, "sue@bank.example", Some("SUPER_ADMIN")).await;
    refused(&denied, 403, "Missing permission: super_admin:create");
    invite(&app, &tenant, &owner, "sue@bank.example", Some("SUPER_ADMIN")).await.expect(200);
    invite(&app, &tenant, &admin, "anna@bank.example", Some("ADMIN")).await.expect(200);
    invite(&app, &tenant, &admin, "uwe@bank.example", Some("USER")).await.expect(200);
    refused(&invite(&app, &tenant, &user, "x@bank.example", None).await, 403, "Missing permission: user:create");

    // A custom role needs user:create plus every permission it grants.
    create_role(&app, &tenant, &owner, "Recruiters", &["customer:read", "user:create"]).await;
    create_role(&app, &tenant, &owner, "Auditors", &["customer:read", "audit:read", "audit:export"]).await;
    create_role(&app, &tenant, &owner, "Readers", &["customer:read"]).await;
    let (_, recruiter) = invite_and_activate(&app, &tenant, &owner, "rita@bank.example", Some("Recruiters")).await;
    let beyond = invite(&app, &tenant, &recruiter, "x1@bank.example", Some("Auditors")).await;
    refused(&beyond, 403, "You cannot grant permissions you do not hold: audit:read, audit:export");
    invite(&app, &tenant, &recruiter, "x2@bank.example", Some("Readers")).await.expect(200);
    invite(&app, &tenant, &recruiter, "x3@bank.example", None).await.expect(200);
    refused(
        &invite(&app, &tenant, &recruiter, "x4@bank.example", Some("ADMIN")).await,
        403,
        "Missing permission: admin:create",
    );
    // Holding every permission of the role is not enough without user:create.
    let (_, reader) = invite_and_activate(&app, &tenant, &owner, "rhea@bank.example", Some("Readers")).await;
    refused(
        &invite(&app, &tenant, &reader, "x5@bank.example", Some("Readers")).await,
        403,
        "Missing permission: user:create",
    );

    // Rule 2 names one permission per platform role: a role holding only admin:create invites
    // ADMINs (and nobody else), without user:create.
    create_role(&app, &tenant, &owner, "Admin makers", &["admin:create", "user:read"]).await;
    let (_, maker) = invite_and_activate(&app, &tenant, &owner, "mark@bank.example", Some("Admin makers")).await;
    invite(&app, &tenant, &maker, "x6@bank.example", Some("ADMIN")).await.expect(200);
    refused(
        &invite(&app, &tenant, &maker, "x7@bank.example", Some("USER")).await,
        403,
        "Missing permission: user:create",
    );
    refused(
        &invite(&app, &tenant, &maker, "x8@bank.example", Some("SUPER_ADMIN")).await,
        403,
        "Missing permission: super_admin:create",
    );

    // Refusals are audited as failures.
    let failures: Vec<Value> = audit_records(&app, &owner, "user.invite")
        .await
        .into_iter()
        .filter(|r| r["outcome"] == "FAILURE" && r["httpStatus"] == 403)
        .collect();
    assert!(failures.len() >= 2, "refused invitations are audited: {failures:?}");
}

async fn an_email_is_registered_once_across_organisations(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    invite(&app, &tenant, &owner, "bob@bank.example", None).await.expect(200);
    refused_with(&invite(&app, &tenant, &owner, "bob@bank.example", Some("ADMIN")).await, 409, "already registered");
    refused_with(&invite(&app, &tenant, &owner, "BOB@Bank.Example", None).await, 409, "already registered");
    let (other_tenant, other_owner) = create_organisation(&app, "other@bank.example").await;
    refused_with(&invite(&app, &other_tenant, &other_owner, "bob@bank.example", None).await, 409, "already registered");
    refused_with(&invite(&app, &tenant, &owner, "other@bank.example", None).await, 409, "already registered");
    refused_with(&invite(&app, &other_tenant, &other_owner, OWNER, None).await, 409, "already registered");
}

async fn identity_writes_take_an_optional_idempotency_key(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let path = users(&tenant);
    let body = json!({ "email": "kim@bank.example", "firstName": "Kim", "lastName": "Key" });
    // Without a key.
    let plain = Reply::read(
        app.raw(Method::POST, &path)
            .header("API-Version", API_VERSION)
            .bearer_auth(&owner)
            .json(&body)
            .send()
            .await
            .expect("send"),
    )
    .await;
    plain.expect(200);
    // With a key: a retry replays the answer and invites nobody twice.
    let keyed = |body: Value| {
        app.raw(Method::POST, &path)
            .header("API-Version", API_VERSION)
            .header("Idempotency-Key", "invite-lea-1")
            .bearer_auth(&owner)
            .json(&body)
    };
    let lea = json!({ "email": "lea@bank.example", "firstName": "Lea", "lastName": "Key" });
    let first = Reply::read(keyed(lea.clone()).send().await.expect("send")).await;
    first.expect(200);
    let again = Reply::read(keyed(lea).send().await.expect("send")).await;
    again.expect(200);
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(again.body["id"], first.body["id"]);
    // The same key with another body is refused.
    let other = Reply::read(
        keyed(json!({ "email": "max@bank.example", "firstName": "Max", "lastName": "Key" }))
            .send()
            .await
            .expect("send"),
    )
    .await;
    other.expect(422);
    app.drain_jobs().await;
    assert_eq!(invitation_count(&app, "lea@bank.example"), 1);
    assert_eq!(invitation_count(&app, "max@bank.example"), 0);
    let list = get(&app, &users(&tenant), &owner).await;
    assert_page_c(&list, 0, 20, 3);
}

// ---------------------------------------------------------------------------------------------
// The user list
// ---------------------------------------------------------------------------------------------

/// Seeds users with names out of order, one second apart: (email, first, last, role).
async fn seed_people(app: &TestApp, tenant: &str, owner: &str) {
    create_role(app, tenant, owner, "Operators", &["customer:read"]).await;
    for (email, first, last, role) in [
        ("al@bank.example", "Al", "Brown", Some("ADMIN")),
        ("cara@bank.example", "Cara", "Young", None),
        ("bea@bank.example", "Ben", "Abbot", None),
        ("ben@bank.example", "Ben", "Zed", Some("Operators")),
    ] {
        app.clock.advance_millis(1_000);
        invite_named(app, tenant, owner, email, first, last, role).await.expect(200);
    }
}

async fn users_are_listed_in_style_c_by_first_then_last_name(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    seed_people(&app, &tenant, &owner).await;
    let path = users(&tenant);

    let all = get(&app, &path, &owner).await;
    assert_page_c(&all, 0, 20, 5);
    assert_eq!(full_names(&all.body), ["Al Brown", "Ben Abbot", "Ben Zed", "Cara Young", "Olivia Owner"]);
    let first = &all.body["items"][0];
    for field in
        ["id", "tenantId", "email", "firstName", "lastName", "status", "role", "roleId", "createdAt", "updatedAt"]
    {
        assert!(first.get(field).is_some(), "a listed user has {field}: {first}");
    }
    assert_eq!(first["role"], "ADMIN");
    assert_eq!(first["roleId"], ADMIN_ID);

    let second_page = get(&app, &format!("{path}?page=1&size=2"), &owner).await;
    assert_page_c(&second_page, 1, 2, 5);
    assert_eq!(full_names(&second_page.body), ["Ben Zed", "Cara Young"]);
    let beyond = get(&app, &format!("{path}?page=9&size=2"), &owner).await;
    assert_page_c(&beyond, 9, 2, 5);
    assert_eq!(column(&beyond.body, "email").len(), 0);

    let by_email = get(&app, &format!("{path}?sort=email,desc"), &owner).await;
    assert_eq!(
        column(&by_email.body, "email"),
        ["olivia@bank.example", "cara@bank.example", "ben@bank.example", "bea@bank.example", "al@bank.example"]
    );
    let by_last = get(&app, &format!("{path}?sort=lastName,desc"), &owner).await;
    assert_eq!(full_names(&by_last.body), ["Ben Zed", "Cara Young", "Olivia Owner", "Al Brown", "Ben Abbot"]);
    // Repeatable: the second key breaks the first one's ties.
    let by_first_then_last_desc = get(&app, &format!("{path}?sort=firstName&sort=lastName,desc"), &owner).await;
    assert_eq!(
        full_names(&by_first_then_last_desc.body),
        ["Al Brown", "Ben Zed", "Ben Abbot", "Cara Young", "Olivia Owner"]
    );
    let by_role = get(&app, &format!("{path}?sort=role.name,asc&sort=firstName,asc"), &owner).await;
    by_role.expect(200);
    assert_eq!(column(&by_role.body, "role"), ["ADMIN", "Operators", "SUPER_ADMIN", "USER", "USER"]);
    assert_eq!(full_names(&by_role.body), ["Al Brown", "Ben Zed", "Olivia Owner", "Ben Abbot", "Cara Young"]);
    let newest = get(&app, &format!("{path}?sort=createdAt,desc"), &owner).await;
    assert_eq!(full_names(&newest.body), ["Ben Zed", "Ben Abbot", "Cara Young", "Al Brown", "Olivia Owner"]);
    let by_status = get(&app, &format!("{path}?sort=status,asc&sort=email,asc"), &owner).await;
    assert_eq!(column(&by_status.body, "status"), ["ACTIVE", "INVITED", "INVITED", "INVITED", "INVITED"]);
    for sort in ["updatedAt,desc", "id", "lastName,ASC"] {
        get(&app, &format!("{path}?sort={sort}"), &owner).await.expect(200);
    }

    // Paging values out of range are 400.
    for bad in ["size=0", "size=101", "page=-1", "size=x"] {
        get(&app, &format!("{path}?{bad}"), &owner).await.expect(400);
    }
}

async fn the_user_list_filters_by_search_status_and_role(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    seed_people(&app, &tenant, &owner).await;
    let path = users(&tenant);
    let names = |reply: &Reply| {
        reply.expect(200);
        full_names(&reply.body)
    };

    // search: a case-insensitive prefix of email, first name or last name.
    assert_eq!(names(&get(&app, &format!("{path}?search=be"), &owner).await), ["Ben Abbot", "Ben Zed"]);
    assert_eq!(names(&get(&app, &format!("{path}?search=BEN"), &owner).await), ["Ben Abbot", "Ben Zed"]);
    assert_eq!(names(&get(&app, &format!("{path}?search=you"), &owner).await), ["Cara Young"]);
    assert_eq!(names(&get(&app, &format!("{path}?search=b"), &owner).await), ["Al Brown", "Ben Abbot", "Ben Zed"]);
    assert_eq!(names(&get(&app, &format!("{path}?search=CARA%40BANK"), &owner).await), ["Cara Young"]);
    // A prefix, not a substring; wildcard characters are literal.
    for none in ["oung", "bank", "%25", "_", ".", "*", "%5B"] {
        let reply = get(&app, &format!("{path}?search={none}"), &owner).await;
        assert_page_c(&reply, 0, 20, 0);
    }
    let counted = get(&app, &format!("{path}?search=b&size=1"), &owner).await;
    assert_page_c(&counted, 0, 1, 3);

    // status: INVITED, ACTIVE or SUSPENDED; anything else is 400.
    invite_and_activate(&app, &tenant, &owner, "dora@bank.example", None).await;
    assert_eq!(names(&get(&app, &format!("{path}?status=ACTIVE"), &owner).await), ["Dora Tester", "Olivia Owner"]);
    assert_eq!(
        names(&get(&app, &format!("{path}?status=INVITED"), &owner).await),
        ["Al Brown", "Ben Abbot", "Ben Zed", "Cara Young"]
    );
    assert_page_c(&get(&app, &format!("{path}?status=SUSPENDED"), &owner).await, 0, 20, 0);
    refused_with(&get(&app, &format!("{path}?status=GONE"), &owner).await, 400, "status");

    // role: a role name (platform names case-insensitive); an unknown one is 400.
    assert_eq!(names(&get(&app, &format!("{path}?role=ADMIN"), &owner).await), ["Al Brown"]);
    assert_eq!(names(&get(&app, &format!("{path}?role=admin"), &owner).await), ["Al Brown"]);
    assert_eq!(names(&get(&app, &format!("{path}?role=Operators"), &owner).await), ["Ben Zed"]);
    assert_eq!(names(&get(&app, &format!("{path}?role=super_admin"), &owner).await), ["Olivia Owner"]);
    assert_eq!(
        names(&get(&app, &format!("{path}?role=USER"), &owner).await),
        ["Ben Abbot", "Cara Young", "Dora Tester"]
    );
    refused_with(&get(&app, &format!("{path}?role=Nobody"), &owner).await, 400, "role");

    // Filters combine.
    assert_eq!(names(&get(&app, &format!("{path}?search=b&role=USER"), &owner).await), ["Ben Abbot"]);
    assert_eq!(names(&get(&app, &format!("{path}?search=d&status=ACTIVE"), &owner).await), ["Dora Tester"]);
    assert_page_c(&get(&app, &format!("{path}?search=d&status=INVITED"), &owner).await, 0, 20, 0);
}

async fn an_unknown_sort_property_is_the_specs_500_and_a_malformed_sort_400(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    for path in [users(&tenant), roles(&tenant), groups(&tenant)] {
        // "Unknown sort property on identity lists is 500": the message still says what sorts.
        for sort in ["password", "name;drop", "password,desc"] {
            let reply = get(&app, &format!("{path}?sort={sort}"), &owner).await;
            refused_with(&reply, 500, "sortable:");
            assert_eq!(reply.body["code"], "UNKNOWN_SORT_PROPERTY", "{}", reply.body);
        }
        // A sort that is not `property` or `property,asc|desc` is an invalid request.
        for sort in ["createdAt,sideways", "createdAt,asc,desc"] {
            refused_with(&get(&app, &format!("{path}?sort={sort}"), &owner).await, 400, "sort");
        }
    }
    // What one list sorts by is not another's.
    refused_with(&get(&app, &format!("{}?sort=key", roles(&tenant)), &owner).await, 500, "sortable:");
    refused_with(&get(&app, &format!("{}?sort=email", groups(&tenant)), &owner).await, 500, "sortable:");
    refused_with(&get(&app, &format!("{}?sort=name", users(&tenant)), &owner).await, 500, "sortable:");
    // The audit log's sort is the spec's 400 ("unknown is 400").
    refused_with(&get(&app, "/api/audit/events?sort=password", &owner).await, 400, "sort");
}

// ---------------------------------------------------------------------------------------------
// One user: by id, change, suspend, remove
// ---------------------------------------------------------------------------------------------

async fn a_user_is_read_by_id_with_content_type_json_in_any_organisation(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let bob = id_of(&invite(&app, &tenant, &owner, "bob@bank.example", None).await);
    let json_type = Some("application/json");

    let read = user_by_id(&app, &bob, &owner, json_type).await;
    read.expect(200);
    assert_eq!(read.body["id"], bob.as_str());
    assert_eq!(read.body["email"], "bob@bank.example");
    assert_eq!(read.body["tenantId"], tenant.as_str());
    assert_eq!(read.body["role"], "USER");
    user_by_id(&app, &bob, &owner, Some("application/json; charset=utf-8")).await.expect(200);

    // Content-Type application/json is required even on this GET.
    user_by_id(&app, &bob, &owner, None).await.expect(415);
    user_by_id(&app, &bob, &owner, Some("text/plain")).await.expect(415);
    // A path id that is not a UUID is 400; an unknown one 404.
    refused_with(&user_by_id(&app, "not-a-uuid", &owner, json_type).await, 400, "must be a UUID");
    user_by_id(&app, &Uuid::now_v7().to_string(), &owner, json_type).await.expect(404);
    // Not tenant-scoped: a user of another organisation is found.
    let (other_tenant, other_owner) = create_organisation(&app, "other@bank.example").await;
    let elsewhere = user_by_id(&app, &bob, &other_owner, json_type).await;
    elsewhere.expect(200);
    assert_eq!(elsewhere.body["tenantId"], tenant.as_str());
    assert_ne!(other_tenant, tenant);
    // It needs user:read.
    create_role(&app, &tenant, &owner, "Readers", &["customer:read"]).await;
    let (_, reader) = invite_and_activate(&app, &tenant, &owner, "rhea@bank.example", Some("Readers")).await;
    refused(&user_by_id(&app, &bob, &reader, json_type).await, 403, "Missing permission: user:read");
    refused(&get(&app, &users(&tenant), &reader).await, 403, "Missing permission: user:read");
    // Every signed-in user reads their own profile.
    get(&app, "/api/users/me", &reader).await.expect(200);
}

async fn another_organisations_users_roles_groups_and_clients_are_404(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let (other, other_owner) = create_organisation(&app, "other@bank.example").await;
    let their_user = id_of(&invite(&app, &other, &other_owner, "theirs@bank.example", None).await);
    let their_role = create_role(&app, &other, &other_owner, "Theirs", &["customer:read"]).await;
    let their_group = create_group(&app, &other, &other_owner, "theirs", "Theirs").await;
    let their_client =
        post(&app, &clients(&other), &other_owner, &json!({ "name": "Theirs", "roleName": "USER" })).await;
    their_client.expect(201);
    let their_client = their_client.body["clientId"].as_str().expect("clientId").to_owned();
    let mine_group = create_group(&app, &tenant, &owner, "mine", "Mine").await;

    let user_path = format!("{}/{their_user}", users(&tenant));
    refused(&get(&app, &user_path, &owner).await, 404, &format!("User {their_user} not found"));
    refused(
        &patch(&app, &user_path, &owner, &json!({ "status": "SUSPENDED" })).await,
        404,
        &format!("User {their_user} not found"),
    );
    refused(&delete(&app, &user_path, &owner).await, 404, &format!("User {their_user} not found"));
    let role_path = format!("{}/{their_role}", roles(&tenant));
    get(&app, &role_path, &owner).await.expect(404);
    patch(&app, &role_path, &owner, &json!({ "description": "mine now" })).await.expect(404);
    delete(&app, &role_path, &owner).await.expect(404);
    let group_path = format!("{}/{their_group}", groups(&tenant));
    get(&app, &group_path, &owner).await.expect(404);
    patch(&app, &group_path, &owner, &json!({ "name": "Mine now" })).await.expect(404);
    post(&app, &format!("{group_path}/members"), &owner, &json!({ "userId": their_user })).await.expect(404);
    delete(&app, &format!("{group_path}/members/{their_user}"), &owner).await.expect(404);
    get(&app, &format!("{group_path}/members/{their_user}"), &owner).await.expect(404);
    delete(&app, &format!("{}/{their_client}", clients(&tenant)), &owner).await.expect(404);
    // Nor may one of their users join a group here.
    let join =
        post(&app, &format!("{}/{mine_group}/members", groups(&tenant)), &owner, &json!({ "userId": their_user }))
            .await;
    refused(&join, 404, &format!("User {their_user} not found"));
    // Nothing of theirs changed.
    let theirs = get(&app, &format!("{}/{their_user}", users(&other)), &other_owner).await;
    theirs.expect(200);
    assert_eq!(theirs.body["status"], "INVITED");
    get(&app, &format!("{}/{their_role}", roles(&other)), &other_owner).await.expect(200);

    // Path ids that are not UUIDs are 400, wherever they are.
    for (path, method) in [
        (format!("{}/not-a-uuid", users(&tenant)), Method::GET),
        (format!("{}/not-a-uuid", users(&tenant)), Method::DELETE),
        (format!("{}/not-a-uuid", roles(&tenant)), Method::GET),
        (format!("{}/not-a-uuid", roles(&tenant)), Method::DELETE),
        (format!("{}/not-a-uuid", groups(&tenant)), Method::GET),
        (format!("{}/{mine_group}/members/not-a-uuid", groups(&tenant)), Method::DELETE),
        (format!("{}/not-a-uuid/members/{their_user}", groups(&tenant)), Method::DELETE),
        (format!("{}/not-a-uuid", clients(&tenant)), Method::DELETE),
        ("/api/tenants/not-a-uuid/users".to_owned(), Method::GET),
    ] {
        let reply = call(&app, method.clone(), &path, Some(&owner), None).await;
        refused_with(&reply, 400, "must be a UUID");
    }
    let bad_member =
        post(&app, &format!("{}/{mine_group}/members", groups(&tenant)), &owner, &json!({ "userId": "x" })).await;
    refused_with(&bad_member, 400, "userId");
}

async fn a_role_change_applies_at_the_next_request(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let (bob, bob_token) = invite_and_activate(&app, &tenant, &owner, "bob@bank.example", None).await;
    let path = format!("{}/{bob}", users(&tenant));
    refused(&get(&app, "/api/audit/events", &bob_token).await, 403, "Missing permission: audit:read");

    let changed = patch(&app, &path, &owner, &json!({ "roleName": "admin" })).await;
    changed.expect(200);
    assert_eq!(changed.body["role"], "ADMIN");
    assert_eq!(changed.body["roleId"], ADMIN_ID);
    assert_eq!(changed.body["status"], "ACTIVE");
    // The same token now acts as an ADMIN.
    get(&app, "/api/audit/events", &bob_token).await.expect(200);
    let me = get(&app, "/api/users/me", &bob_token).await;
    assert_eq!(me.body["role"], "ADMIN");

    // To a custom role, and back.
    let readers = create_role(&app, &tenant, &owner, "Readers", &["customer:read"]).await;
    let custom = patch(&app, &path, &owner, &json!({ "roleName": "Readers" })).await;
    custom.expect(200);
    assert_eq!(custom.body["roleId"], readers.as_str());
    refused(&get(&app, "/api/audit/events", &bob_token).await, 403, "Missing permission: audit:read");
    get(&app, "/api/customers", &bob_token).await.expect(200);

    refused(&patch(&app, &path, &owner, &json!({ "roleName": "Nope" })).await, 404, "Role Nope not found");
    // Role and status change together, or not at all.
    let both = patch(&app, &path, &owner, &json!({ "roleName": "USER", "status": "SUSPENDED" })).await;
    both.expect(200);
    assert_eq!((both.body["role"].as_str(), both.body["status"].as_str()), (Some("USER"), Some("SUSPENDED")));
    refused(&get(&app, "/api/customers", &bob_token).await, 401, REVOKED);
    refused_with(&patch(&app, &path, &owner, &json!({ "roleName": " " })).await, 400, "roleName");
    // Each change is audited with the user before and after.
    let records = audited(&app, &owner, "user.update", &bob).await;
    assert_eq!(records.len(), 3, "{records:?}");
    assert!(
        records.iter().any(|r| r["detail"]["before"]["role"] == "USER" && r["detail"]["after"]["role"] == "ADMIN"),
        "{records:?}"
    );
}

async fn nobody_changes_or_removes_themselves_or_the_owner(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let owner_id = subject_of(&owner);
    let (adam, admin) = invite_and_activate(&app, &tenant, &owner, "adam@bank.example", Some("ADMIN")).await;
    let (_, sue) = invite_and_activate(&app, &tenant, &owner, "sue@bank.example", Some("SUPER_ADMIN")).await;
    let me = |id: &str| format!("{}/{id}", users(&tenant));

    let yourself = "You cannot change or remove yourself";
    each_refused(
        &app,
        400,
        yourself,
        &[
            ("the owner changes their own role", &owner, me(&owner_id), Change::Patch(json!({ "roleName": "ADMIN" }))),
            ("the owner removes themselves", &owner, me(&owner_id), Change::Delete),
            ("an ADMIN suspends themselves", &admin, me(&adam), Change::Patch(json!({ "status": "SUSPENDED" }))),
            ("an ADMIN removes themselves", &admin, me(&adam), Change::Delete),
        ],
    )
    .await;
    let owner_message = "The organisation's owner cannot be changed or removed";
    each_refused(
        &app,
        400,
        owner_message,
        &[
            ("a SUPER_ADMIN suspends the owner", &sue, me(&owner_id), Change::Patch(json!({ "status": "SUSPENDED" }))),
            (
                "a SUPER_ADMIN changes the owner's role",
                &sue,
                me(&owner_id),
                Change::Patch(json!({ "roleName": "USER" })),
            ),
            ("a SUPER_ADMIN removes the owner", &sue, me(&owner_id), Change::Delete),
            ("an ADMIN removes the owner", &admin, me(&owner_id), Change::Delete),
        ],
    )
    .await;

    // A change must change something, and only to ACTIVE or SUSPENDED.
    refused_with(&patch(&app, &me(&adam), &owner, &json!({})).await, 400, "Nothing to change");
    for status in ["INVITED", "DELETED", "active"] {
        refused_with(&patch(&app, &me(&adam), &owner, &json!({ "status": status })).await, 400, "status");
    }
    patch(&app, &me(&adam), &owner, &json!({ "email": "x@bank.example" })).await.expect(400);

    // Still as they were.
    let owner_now = get(&app, &me(&owner_id), &owner).await;
    assert_eq!(owner_now.body["status"], "ACTIVE");
    assert_eq!(owner_now.body["role"], "SUPER_ADMIN");
    get(&app, "/api/users/me", &admin).await.expect(200);
}

async fn suspension_revokes_access_at_once_and_reactivation_restores_it(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let invited = invite(&app, &tenant, &owner, "bob@bank.example", None).await;
    invited.expect(200);
    let bob: Member = accept_invitation(&app, &id_of(&invited), "bob@bank.example").await;
    let path = format!("{}/{}", users(&tenant), bob.id);
    get(&app, "/api/customers", &bob.access_token).await.expect(200);

    let suspended = patch(&app, &path, &owner, &json!({ "status": "SUSPENDED" })).await;
    suspended.expect(200);
    assert_eq!(suspended.body["status"], "SUSPENDED");
    assert_eq!(suspended.body["role"], "USER");

    // The unexpired token is refused at once, on every endpoint.
    for path in [
        "/api/customers".to_owned(),
        "/api/users/me".to_owned(),
        users(&tenant),
        roles(&tenant),
        groups(&tenant),
        "/api/permissions".to_owned(),
        format!("/api/users/{}", bob.id),
    ] {
        refused(&get(&app, &path, &bob.access_token).await, 401, REVOKED);
    }
    refused(&post(&app, "/api/customers", &bob.access_token, &json!({ "customerRef": "C-1" })).await, 401, REVOKED);
    // The refresh token stops working; so does signing in.
    let refresh =
        call(&app, Method::POST, "/api/auth/refresh", None, Some(&json!({ "refreshToken": bob.refresh_token }))).await;
    refused(&refresh, 401, "Refresh token is invalid or expired.");
    refused(&login(&app, &bob.email, NEW_PASSWORD).await, 401, "Invalid credentials.");
    // Listed as suspended.
    let listed = get(&app, &format!("{}?status=SUSPENDED", users(&tenant)), &owner).await;
    assert_eq!(column(&listed.body, "id"), std::slice::from_ref(&bob.id));
    // Suspending again changes nothing and is not an error; nor do refused sign-ins move
    // updatedAt (an anonymous caller must not reorder the users by it).
    refused(&login(&app, &bob.email, "not the password").await, 401, "Invalid credentials.");
    let again = patch(&app, &path, &owner, &json!({ "status": "SUSPENDED" })).await;
    again.expect(200);
    assert_eq!(again.body["updatedAt"], suspended.body["updatedAt"], "{}", again.body);

    // Reactivated: ACTIVE again; they sign in anew (the old refresh token stays revoked).
    let reactivated = patch(&app, &path, &owner, &json!({ "status": "ACTIVE" })).await;
    reactivated.expect(200);
    assert_eq!(reactivated.body["status"], "ACTIVE");
    let signed_in = login(&app, &bob.email, NEW_PASSWORD).await;
    signed_in.expect(200);
    // A sign-in changes nothing the API shows of the user: updatedAt stays.
    let read = get(&app, &path, &owner).await;
    assert_eq!(read.body["updatedAt"], reactivated.body["updatedAt"], "{}", read.body);
    // Nor does a PATCH naming the role the user has (in another case).
    let role = read.body["role"].as_str().expect("a role").to_lowercase();
    let same_role = patch(&app, &path, &owner, &json!({ "roleName": role })).await;
    same_role.expect(200);
    assert_eq!(same_role.body["updatedAt"], reactivated.body["updatedAt"], "{}", same_role.body);
    let fresh = signed_in.body["accessToken"].as_str().expect("access token");
    get(&app, "/api/customers", fresh).await.expect(200);
    let refresh =
        call(&app, Method::POST, "/api/auth/refresh", None, Some(&json!({ "refreshToken": bob.refresh_token }))).await;
    refused(&refresh, 401, "Refresh token is invalid or expired.");

    let updates = audit_records(&app, &owner, "user.update").await;
    let about_bob = updates.iter().filter(|r| r["resourceId"] == bob.id.as_str() && r["outcome"] == "SUCCESS").count();
    // Suspend, suspend again, reactivate and the same role: each a recorded write.
    assert_eq!(about_bob, 4, "{updates:?}");
}

/// Two user changes on PostgreSQL, the second sent once the first has gone as far as it can
/// (held at the audit table, the last it reaches), and both let go once the second has too:
/// past its rows to the audit table, or waiting on a user row the first holds. Their answers.
async fn two_user_changes_at_once(
    app: &TestApp,
    first: (&str, &str, Value),
    second: (&str, &str, Value),
) -> (Reply, Reply) {
    let held = app.db.hold_table("audit_records").await;
    let first_change = patch(app, first.0, first.1, &first.2);
    let second_change = async {
        until_waiting("the first change at the audit table", 1, async || app.db.waiting_on("audit_records").await)
            .await;
        patch(app, second.0, second.1, &second.2).await
    };
    let release = async {
        let both = async || app.db.waiting_on("audit_records").await + app.db.waiting_on_a_row_of("users").await;
        until_waiting("both changes held", 2, both).await;
        held.release().await;
    };
    let (first, second, ()) = tokio::join!(first_change, second_change, release);
    (first, second)
}

/// Two administrators suspending each other at once: the one whose change waited for the
/// other's is refused as its next request would be, suspended (401), rather than both
/// succeeding from what each was when its request began (a race probe saw both succeed in
/// three rounds of four).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_two_admins_suspending_each_other_at_once_do_not_both_succeed() {
    let (app, tenant, owner) = organisation(Backend::Postgres).await;
    let ann = invite_member(&app, &tenant, &owner, "ann@bank.example", Some("ADMIN")).await;
    let ben = invite_member(&app, &tenant, &owner, "ben@bank.example", Some("ADMIN")).await;
    let suspend = json!({ "status": "SUSPENDED" });
    let (ann_path, ben_path) = (format!("{}/{}", users(&tenant), ann.id), format!("{}/{}", users(&tenant), ben.id));
    let (by_ann, by_ben) = two_user_changes_at_once(
        &app,
        (&ben_path, &ann.access_token, suspend.clone()),
        (&ann_path, &ben.access_token, suspend),
    )
    .await;
    by_ann.expect(200);
    refused(&by_ben, 401, REVOKED);
    let suspended = get(&app, &format!("{}?status=SUSPENDED", users(&tenant)), &owner).await;
    assert_eq!(column(&suspended.body, "id"), std::slice::from_ref(&ben.id), "{}", suspended.body);
}

/// An administrator given, while its change of a user was under way, a role without the
/// route's permission (`user:update`) is refused for that change (403), even though its new
/// role still grants what acting on a USER needs (`user:create`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_an_admin_demoted_during_its_change_lacks_the_routes_permission() {
    let (app, tenant, owner) = organisation(Backend::Postgres).await;
    let ann = invite_member(&app, &tenant, &owner, "ann@bank.example", Some("ADMIN")).await;
    let ben = invite_member(&app, &tenant, &owner, "ben@bank.example", Some("ADMIN")).await;
    let carol = invite_member(&app, &tenant, &owner, "carol@bank.example", None).await;
    create_role(&app, &tenant, &owner, "inviter", &["user:create"]).await;
    let (ben_path, carol_path) = (format!("{}/{}", users(&tenant), ben.id), format!("{}/{}", users(&tenant), carol.id));
    let (demoted, suspension) = two_user_changes_at_once(
        &app,
        (&ben_path, &ann.access_token, json!({ "roleName": "inviter" })),
        (&carol_path, &ben.access_token, json!({ "status": "SUSPENDED" })),
    )
    .await;
    demoted.expect(200);
    refused(&suspension, 403, "Missing permission: user:update");
    assert_eq!(get(&app, &carol_path, &owner).await.body["status"], "ACTIVE");
}

async fn an_invited_user_is_not_set_active_and_reactivation_returns_them_to_invited(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let cara = id_of(&invite(&app, &tenant, &owner, "cara@bank.example", None).await);
    let path = format!("{}/{cara}", users(&tenant));
    app.drain_jobs().await;
    let temporary = temporary_password(&app, "cara@bank.example");

    // Only choosing a password makes an invited user ACTIVE.
    let refused_activation = patch(&app, &path, &owner, &json!({ "status": "ACTIVE" })).await;
    refused_activation.expect(409);
    assert_eq!(refused_activation.body["status"], 409);

    let suspended = patch(&app, &path, &owner, &json!({ "status": "SUSPENDED" })).await;
    suspended.expect(200);
    assert_eq!(suspended.body["status"], "SUSPENDED");
    // Suspended, the invitation cannot be used.
    let activate = json!({ "email": "cara@bank.example", "temporaryPassword": temporary, "newPassword": NEW_PASSWORD });
    refused(&call(&app, Method::POST, "/api/auth/activate", None, Some(&activate)).await, 401, "Invalid credentials.");
    refused(&login(&app, "cara@bank.example", &temporary).await, 401, "Invalid credentials.");

    // Reactivated, they never set a password: INVITED again, and the invitation works.
    let back = patch(&app, &path, &owner, &json!({ "status": "ACTIVE" })).await;
    back.expect(200);
    assert_eq!(back.body["status"], "INVITED");
    let tokens = activate_through_challenge(&app, "cara@bank.example", &temporary).await;
    let me = get(&app, "/api/users/me", tokens["accessToken"].as_str().expect("access")).await;
    assert_eq!(me.body["status"], "ACTIVE");
}

async fn an_admin_cannot_act_on_a_super_admin(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let (_, admin) = invite_and_activate(&app, &tenant, &owner, "adam@bank.example", Some("ADMIN")).await;
    let (sue, sue_token) = invite_and_activate(&app, &tenant, &owner, "sue@bank.example", Some("SUPER_ADMIN")).await;
    let (bob, bob_token) = invite_and_activate(&app, &tenant, &owner, "bob@bank.example", None).await;
    let at = |id: &str| format!("{}/{id}", users(&tenant));

    each_refused(
        &app,
        403,
        "Missing permission: super_admin:create",
        &[
            ("an ADMIN suspends a SUPER_ADMIN", &admin, at(&sue), Change::Patch(json!({ "status": "SUSPENDED" }))),
            ("an ADMIN changes a SUPER_ADMIN's role", &admin, at(&sue), Change::Patch(json!({ "roleName": "USER" }))),
            ("an ADMIN removes a SUPER_ADMIN", &admin, at(&sue), Change::Delete),
            // Nor make anyone one.
            ("an ADMIN makes a SUPER_ADMIN", &admin, at(&bob), Change::Patch(json!({ "roleName": "SUPER_ADMIN" }))),
        ],
    )
    .await;
    // Nor act on the holder of a custom role granting what the ADMIN lacks.
    let root = create_role(&app, &tenant, &owner, "Root", &["super_admin:create", "customer:read"]).await;
    let (rory, _) = invite_and_activate(&app, &tenant, &owner, "rory@bank.example", Some("Root")).await;
    let root_path = format!("{}/{root}", roles(&tenant));
    each_refused(
        &app,
        403,
        "You cannot act on a role, or on its holders, that grants permissions you do not hold: super_admin:create",
        &[
            // Nor strip that role first to act on its holders afterwards: editing or deleting a
            // role needs what handing it out needs.
            (
                "an ADMIN strips the role",
                &admin,
                root_path.clone(),
                Change::Patch(json!({ "permissions": ["customer:read"] })),
            ),
            ("an ADMIN renames the role", &admin, root_path.clone(), Change::Patch(json!({ "name": "Harmless" }))),
            ("an ADMIN deletes the role", &admin, root_path.clone(), Change::Delete),
            ("an ADMIN suspends its holder", &admin, at(&rory), Change::Patch(json!({ "status": "SUSPENDED" }))),
            ("an ADMIN removes its holder", &admin, at(&rory), Change::Delete),
        ],
    )
    .await;
    // Nor hand that role to anyone.
    refused(
        &patch(&app, &at(&bob), &admin, &json!({ "roleName": "Root" })).await,
        403,
        "You cannot grant permissions you do not hold: super_admin:create",
    );
    let unchanged = get(&app, &root_path, &owner).await;
    unchanged.expect(200);
    assert_eq!(unchanged.body["permissions"], json!(["customer:read", "super_admin:create"]));
    get(&app, "/api/users/me", &sue_token).await.expect(200);

    // An ADMIN manages USERs; a USER manages nobody.
    let (carl, _) = invite_and_activate(&app, &tenant, &owner, "carl@bank.example", None).await;
    refused(
        &patch(&app, &at(&carl), &bob_token, &json!({ "status": "SUSPENDED" })).await,
        403,
        "Missing permission: user:update",
    );
    refused(&delete(&app, &at(&carl), &bob_token).await, 403, "Missing permission: member:remove");
    let suspended = patch(&app, &at(&bob), &admin, &json!({ "status": "SUSPENDED" })).await;
    suspended.expect(200);
    assert_eq!(suspended.body["status"], "SUSPENDED");
    // The SUPER_ADMIN acts on the SUPER_ADMIN-like role holder.
    patch(&app, &at(&rory), &sue_token, &json!({ "status": "SUSPENDED" })).await.expect(200);
}

async fn removing_a_user_revokes_their_access_and_frees_their_email(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let invited = invite(&app, &tenant, &owner, "bob@bank.example", None).await;
    let bob = accept_invitation(&app, &id_of(&invited), "bob@bank.example").await;
    let (_, user) = invite_and_activate(&app, &tenant, &owner, "ulla@bank.example", None).await;
    let group = create_group(&app, &tenant, &owner, "approvers", "Approvers").await;
    post(&app, &format!("{}/{group}/members", groups(&tenant)), &owner, &json!({ "userId": bob.id })).await.expect(201);
    let path = format!("{}/{}", users(&tenant), bob.id);

    refused(&delete(&app, &path, &user).await, 403, "Missing permission: member:remove");
    let removed = delete(&app, &path, &owner).await;
    removed.expect(204);
    // Gone: their token is refused, the user is 404, the refresh token and password are dead.
    refused(&get(&app, "/api/customers", &bob.access_token).await, 401, REVOKED);
    refused(&get(&app, "/api/users/me", &bob.access_token).await, 401, REVOKED);
    refused(&get(&app, &path, &owner).await, 404, &format!("User {} not found", bob.id));
    delete(&app, &path, &owner).await.expect(404);
    let refresh =
        call(&app, Method::POST, "/api/auth/refresh", None, Some(&json!({ "refreshToken": bob.refresh_token }))).await;
    refused(&refresh, 401, "Refresh token is invalid or expired.");
    refused(&login(&app, &bob.email, NEW_PASSWORD).await, 401, "Invalid credentials.");
    // Out of the group and of the list.
    let members = get(&app, &format!("{}/{group}", groups(&tenant)), &owner).await;
    members.expect(200);
    assert_eq!(members.body["members"]["totalResults"], 0, "{}", members.body);
    let list = get(&app, &users(&tenant), &owner).await;
    assert!(!column(&list.body, "id").contains(&bob.id));
    audited(&app, &owner, "user.remove", &bob.id).await;

    // The email may be invited again: a new user with a new invitation.
    let again = invite(&app, &tenant, &owner, "bob@bank.example", Some("ADMIN")).await;
    again.expect(200);
    assert_ne!(again.body["id"], bob.id.as_str());
    assert_eq!(again.body["status"], "INVITED");
    let back = accept_invitation(&app, &id_of(&again), "bob@bank.example").await;
    assert_eq!(get(&app, "/api/users/me", &back.access_token).await.body["role"], "ADMIN");
    // The old token stays refused.
    refused(&get(&app, "/api/customers", &bob.access_token).await, 401, REVOKED);
}

// ---------------------------------------------------------------------------------------------
// Roles
// ---------------------------------------------------------------------------------------------

async fn roles_are_listed_with_the_platform_roles_and_their_permissions(backend: Backend) {
    // Roles work under an external provider as well.
    let app = TestApp::spawn(backend).await;
    let tenant = app.tenant.id.to_string();
    let token = app.tenant.token.clone();
    let catalogue = get(&app, "/api/permissions", &token).await;
    let granted_to = |role: &str| -> Vec<String> {
        catalogue.body["permissions"]
            .as_array()
            .expect("permissions")
            .iter()
            .filter(|p| p["platformRoles"].as_array().is_some_and(|r| r.iter().any(|r| r == role)))
            .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    };

    let platform = get(&app, &roles(&tenant), &token).await;
    assert_page_c(&platform, 0, 20, 3);
    assert_eq!(column(&platform.body, "name"), ["ADMIN", "SUPER_ADMIN", "USER"]);
    assert_eq!(column(&platform.body, "id"), [ADMIN_ID, SUPER_ADMIN_ID, USER_ID]);
    for item in platform.body["items"].as_array().expect("items") {
        assert_eq!(item["platform"], true, "{item}");
        let name = item["name"].as_str().expect("name");
        let permissions: Vec<String> = item["permissions"]
            .as_array()
            .expect("permissions")
            .iter()
            .map(|p| p.as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(permissions, granted_to(name), "{name}");
    }

    create_role(&app, &tenant, &token, "Operators", &["customer:read"]).await;
    let all = get(&app, &roles(&tenant), &token).await;
    assert_page_c(&all, 0, 20, 4);
    assert_eq!(column(&all.body, "name"), ["ADMIN", "Operators", "SUPER_ADMIN", "USER"]);
    assert_eq!(all.body["items"][1]["platform"], false);
    assert_eq!(all.body["items"][1]["permissions"], json!(["customer:read"]));
    let desc = get(&app, &format!("{}?sort=name,desc", roles(&tenant)), &token).await;
    assert_eq!(column(&desc.body, "name"), ["USER", "SUPER_ADMIN", "Operators", "ADMIN"]);
    let paged = get(&app, &format!("{}?page=1&size=3", roles(&tenant)), &token).await;
    assert_page_c(&paged, 1, 3, 4);
    assert_eq!(column(&paged.body, "name"), ["USER"]);
    for sort in ["description", "createdAt,desc", "updatedAt", "id"] {
        get(&app, &format!("{}?sort={sort}", roles(&tenant)), &token).await.expect(200);
    }
    // Names sort as people read them, whatever their case: not every capital first.
    create_role(&app, &tenant, &token, "auditors", &["customer:read"]).await;
    let folded = get(&app, &roles(&tenant), &token).await;
    assert_eq!(column(&folded.body, "name"), ["ADMIN", "auditors", "Operators", "SUPER_ADMIN", "USER"]);
    let folded_desc = get(&app, &format!("{}?sort=name,desc", roles(&tenant)), &token).await;
    assert_eq!(column(&folded_desc.body, "name"), ["USER", "SUPER_ADMIN", "Operators", "auditors", "ADMIN"]);
    // Another organisation sees the platform roles only.
    let other = app.new_tenant();
    let theirs = get(&app, &roles(&other.id.to_string()), &other.token).await;
    assert_page_c(&theirs, 0, 20, 3);
    // A token without role:read may not list them.
    refused(
        &get(&app, &roles(&tenant), &scoped_token(&app, &tenant, Some("customer:read"))).await,
        403,
        "Missing permission: role:read",
    );
}

async fn a_custom_role_is_created_with_201_and_a_location(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let tenant = app.tenant.id.to_string();
    let token = app.tenant.token.clone();
    let created = post(
        &app,
        &roles(&tenant),
        &token,
        &json!({
            "name": "Risk Officers",
            "description": "Reads everything about risk",
            "permissions": ["audit:read", "customer:read", "audit:read", "account:read"]
        }),
    )
    .await;
    created.expect(201);
    let id = id_of(&created);
    assert_eq!(created.header("Location"), Some(format!("/api/tenants/{tenant}/roles/{id}").as_str()));
    assert_eq!(created.body["name"], "Risk Officers");
    assert_eq!(created.body["description"], "Reads everything about risk");
    assert_eq!(created.body["platform"], false);
    // In catalogue order, once each.
    assert_eq!(created.body["permissions"], json!(["customer:read", "account:read", "audit:read"]));
    assert!(created.body["createdAt"].is_string() && created.body["updatedAt"].is_string());

    let read = get(&app, created.header("Location").expect("Location"), &token).await;
    read.expect(200);
    for field in ["id", "name", "description", "platform", "permissions", "createdAt", "updatedAt"] {
        assert_eq!(read.body[field], created.body[field], "{field}");
    }
    assert_eq!(read.body["holders"], json!({ "items": [], "pageNumber": 0, "pageSize": 20, "totalResults": 0 }));

    // A description is optional; no permissions is a role that grants nothing.
    let bare = post(&app, &roles(&tenant), &token, &json!({ "name": "Nobody" })).await;
    bare.expect(201);
    assert_eq!(bare.body["permissions"], json!([]));
    assert_eq!(bare.body["description"], "");

    let record = &audited(&app, &token, "role.create", &id).await[0];
    assert_eq!(record["httpStatus"], 201);
}

async fn role_creation_refuses_unknown_permissions_reserved_and_taken_names(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let tenant = app.tenant.id.to_string();
    let token = app.tenant.token.clone();
    let path = roles(&tenant);
    let role = |name: &str, permissions: Value| json!({ "name": name, "description": "", "permissions": permissions });

    let unknown = post(&app, &path, &token, &role("Odd", json!(["customer:read", "nope", "x:y"]))).await;
    refused(&unknown, 400, "Unknown permissions: nope, x:y.");
    refused(
        &post(&app, &path, &token, &role("Odd", json!(["CUSTOMER:READ"]))).await,
        400,
        "Unknown permissions: CUSTOMER:READ.",
    );

    for reserved in ["admin", "SUPER_ADMIN", "Super_Admin", "User", " USER "] {
        post(&app, &path, &token, &role(reserved, json!([]))).await.expect(409);
    }
    create_role(&app, &tenant, &token, "Operators", &["customer:read"]).await;
    refused_with(&post(&app, &path, &token, &role("operators", json!([]))).await, 409, "in use");
    refused_with(&post(&app, &path, &token, &role("OPERATORS", json!(["account:read"]))).await, 409, "in use");
    // The same name is free in another organisation.
    let other = app.new_tenant();
    post(&app, &roles(&other.id.to_string()), &other.token, &role("Operators", json!([]))).await.expect(201);

    for (bad, field) in [
        (json!({ "description": "", "permissions": [] }), "name"),
        (role("", json!([])), "name"),
        (role("   ", json!([])), "name"),
        (role(&"n".repeat(101), json!([])), "name"),
        (json!({ "name": "Long", "description": "d".repeat(501), "permissions": [] }), "description"),
    ] {
        refused_with(&post(&app, &path, &token, &bad).await, 400, field);
    }

    // Only what the author holds may be granted.
    let narrow = scoped_token(&app, &tenant, Some("role:create customer:read"));
    refused(
        &post(&app, &path, &narrow, &role("Writers", json!(["customer:read", "customer:write", "audit:read"]))).await,
        403,
        "You cannot grant permissions you do not hold: customer:write, audit:read",
    );
    post(&app, &path, &narrow, &role("Readers", json!(["customer:read"]))).await.expect(201);
    refused(
        &post(&app, &path, &scoped_token(&app, &tenant, Some("role:read customer:read")), &role("X", json!([]))).await,
        403,
        "Missing permission: role:create",
    );
    let list = get(&app, &path, &token).await;
    assert_page_c(&list, 0, 20, 5);
}

async fn a_role_lists_its_holders_by_first_then_last_name(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let operators = create_role(&app, &tenant, &owner, "Operators", &["customer:read"]).await;
    for (email, first, last) in [
        ("zoe@bank.example", "Zoe", "Adams"),
        ("amy.z@bank.example", "Amy", "Zimmer"),
        ("amy.b@bank.example", "amy", "Baker"),
    ] {
        invite_named(&app, &tenant, &owner, email, first, last, Some("Operators")).await.expect(200);
    }
    invite(&app, &tenant, &owner, "ulla@bank.example", None).await.expect(200);
    let path = format!("{}/{operators}", roles(&tenant));

    let role = get(&app, &path, &owner).await;
    role.expect(200);
    assert_eq!(role.body["name"], "Operators");
    // By first then last name, each without regard to case: `amy Baker` before `Amy Zimmer`.
    let holders = &role.body["holders"];
    assert_eq!(holders["totalResults"], 3, "{holders}");
    assert_eq!(holders["pageNumber"], 0);
    assert_eq!(holders["pageSize"], 20);
    assert_eq!(full_names(holders), ["amy Baker", "Amy Zimmer", "Zoe Adams"]);
    let holder = &holders["items"][0];
    for field in ["id", "email", "firstName", "lastName", "status"] {
        assert!(holder.get(field).is_some(), "a holder has {field}: {holder}");
    }
    let first_page = get(&app, &format!("{path}?size=2"), &owner).await;
    assert_eq!(full_names(&first_page.body["holders"]), ["amy Baker", "Amy Zimmer"]);
    assert_eq!(first_page.body["holders"]["totalResults"], 3);
    let second_page = get(&app, &format!("{path}?page=1&size=2"), &owner).await;
    assert_eq!(full_names(&second_page.body["holders"]), ["Zoe Adams"]);
    assert_eq!(second_page.body["holders"]["pageNumber"], 1);
    get(&app, &format!("{path}?size=0"), &owner).await.expect(400);

    // Platform roles have holders too.
    let super_admin = get(&app, &format!("{}/{SUPER_ADMIN_ID}", roles(&tenant)), &owner).await;
    super_admin.expect(200);
    assert_eq!(super_admin.body["platform"], true);
    assert_eq!(full_names(&super_admin.body["holders"]), ["Olivia Owner"]);
    let user = get(&app, &format!("{}/{USER_ID}", roles(&tenant)), &owner).await;
    assert_eq!(column(&user.body["holders"], "email"), ["ulla@bank.example"]);
    let missing = Uuid::now_v7();
    get(&app, &format!("{}/{missing}", roles(&tenant)), &owner).await.expect(404);
}

async fn custom_roles_are_edited_but_platform_roles_are_read_only(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let readers = create_role(&app, &tenant, &owner, "Readers", &["customer:read"]).await;
    create_role(&app, &tenant, &owner, "Auditors", &["audit:read"]).await;
    let (_, rhea) = invite_and_activate(&app, &tenant, &owner, "rhea@bank.example", Some("Readers")).await;
    let (_, admin) = invite_and_activate(&app, &tenant, &owner, "adam@bank.example", Some("ADMIN")).await;
    let path = format!("{}/{readers}", roles(&tenant));

    refused(
        &post(&app, "/api/customers", &rhea, &json!({ "customerRef": "C-1" })).await,
        403,
        "Missing permission: customer:write",
    );
    // Adding a permission takes effect for the holders at their next request.
    let widened = patch(&app, &path, &owner, &json!({ "permissions": ["customer:write", "customer:read"] })).await;
    widened.expect(200);
    assert_eq!(widened.body["permissions"], json!(["customer:read", "customer:write"]));
    post(&app, "/api/customers", &rhea, &json!({ "customerRef": "C-1" })).await.expect(201);

    let renamed = patch(&app, &path, &owner, &json!({ "name": "Clerks", "description": "Front office" })).await;
    renamed.expect(200);
    assert_eq!(renamed.body["name"], "Clerks");
    assert_eq!(renamed.body["description"], "Front office");
    assert_eq!(renamed.body["permissions"], json!(["customer:read", "customer:write"]));
    assert_eq!(get(&app, "/api/users/me", &rhea).await.body["role"], "Clerks");
    // Keeping its own name in another case is not a clash with itself.
    patch(&app, &path, &owner, &json!({ "name": "CLERKS" })).await.expect(200);

    refused_with(&patch(&app, &path, &owner, &json!({ "name": "admin" })).await, 409, "reserved");
    refused_with(&patch(&app, &path, &owner, &json!({ "name": "auditors" })).await, 409, "in use");
    refused(&patch(&app, &path, &owner, &json!({ "permissions": ["nope"] })).await, 400, "Unknown permissions: nope.");
    refused_with(&patch(&app, &path, &owner, &json!({})).await, 400, "Nothing to change");
    refused_with(&patch(&app, &path, &owner, &json!({ "name": "" })).await, 400, "name");
    // Only what the editor holds may be added; taking away is always allowed.
    refused(
        &patch(&app, &path, &admin, &json!({ "permissions": ["customer:read", "super_admin:create"] })).await,
        403,
        "You cannot grant permissions you do not hold: super_admin:create",
    );
    patch(&app, &path, &admin, &json!({ "permissions": ["customer:read"] })).await.expect(200);
    refused(
        &post(&app, "/api/customers", &rhea, &json!({ "customerRef": "C-2" })).await,
        403,
        "Missing permission: customer:write",
    );

    // Platform roles cannot be edited or deleted.
    for id in [SUPER_ADMIN_ID, ADMIN_ID, USER_ID] {
        let platform = format!("{}/{id}", roles(&tenant));
        refused(
            &patch(&app, &platform, &owner, &json!({ "description": "mine" })).await,
            400,
            "Platform roles cannot be edited",
        );
        refused(
            &patch(&app, &platform, &owner, &json!({ "permissions": [] })).await,
            400,
            "Platform roles cannot be edited",
        );
        refused(&delete(&app, &platform, &owner).await, 400, "Platform roles cannot be edited");
    }
    let user_role = get(&app, &format!("{}/{USER_ID}", roles(&tenant)), &owner).await;
    assert!(user_role.body["permissions"].as_array().is_some_and(|p| p.len() > 5));
    let record = &audited(&app, &owner, "role.update", &readers).await[0];
    assert_eq!(record["httpStatus"], 200);
}

async fn a_role_in_use_cannot_be_deleted(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let held = create_role(&app, &tenant, &owner, "Held", &["customer:read"]).await;
    let by_client = create_role(&app, &tenant, &owner, "Machines", &["customer:read"]).await;
    let free = create_role(&app, &tenant, &owner, "Free", &["customer:read"]).await;
    let holder = id_of(&invite(&app, &tenant, &owner, "hold@bank.example", Some("Held")).await);
    post(&app, &clients(&tenant), &owner, &json!({ "name": "Batch", "roleName": "Machines" })).await.expect(201);
    let at = |id: &str| format!("{}/{id}", roles(&tenant));

    refused_with(&delete(&app, &at(&held), &owner).await, 409, "in use");
    refused_with(&delete(&app, &at(&by_client), &owner).await, 409, "in use");
    // Once nobody holds it, it goes.
    patch(&app, &format!("{}/{holder}", users(&tenant)), &owner, &json!({ "roleName": "USER" })).await.expect(200);
    delete(&app, &at(&held), &owner).await.expect(204);
    delete(&app, &at(&free), &owner).await.expect(204);
    get(&app, &at(&free), &owner).await.expect(404);
    delete(&app, &at(&free), &owner).await.expect(404);
    let names = get(&app, &roles(&tenant), &owner).await;
    assert_eq!(column(&names.body, "name"), ["ADMIN", "Machines", "SUPER_ADMIN", "USER"]);
    // And its name can be used again.
    create_role(&app, &tenant, &owner, "free", &[]).await;
    audited(&app, &owner, "role.delete", &free).await;
    // A USER may not delete roles.
    let (_, user) = invite_and_activate(&app, &tenant, &owner, "ulla@bank.example", None).await;
    refused(&delete(&app, &at(&by_client), &user).await, 403, "Missing permission: role:delete");
}

/// A custom role deleted at the instant it is handed out (invitation, client, role change):
/// the two take turns on the role, so either the deletion finds its new holders (409) or each
/// assignment finds no role (404). Never a holder of a deleted role.
async fn a_role_deleted_while_it_is_handed_out_is_never_held_dangling(backend: Backend) {
    const ROUNDS: usize = 6;
    let (app, tenant, owner) = organisation(backend).await;
    let changed = invite(&app, &tenant, &owner, "mover@bank.example", None).await;
    let mover = format!("{}/{}", users(&tenant), id_of(&changed));
    for round in 0..ROUNDS {
        let name = format!("Doomed{round}");
        let role =
            format!("{}/{}", roles(&tenant), create_role(&app, &tenant, &owner, &name, &["customer:read"]).await);
        let email = format!("late{round}@bank.example");
        let client = json!({ "name": format!("Batch{round}"), "roleName": name });
        let (to_role, clients_path) = (json!({ "roleName": name }), clients(&tenant));
        let (deleted, invited, created, moved) = tokio::join!(
            delete(&app, &role, &owner),
            invite(&app, &tenant, &owner, &email, Some(&name)),
            post(&app, &clients_path, &owner, &client),
            patch(&app, &mover, &owner, &to_role),
        );
        let handed = [(&invited, 200), (&created, 201), (&moved, 200)];
        let expected: Vec<u16> = match deleted.status {
            204 => vec![404; 3],
            409 => handed.iter().map(|(_, ok)| *ok).collect(),
            other => panic!("round {round}: the deletion answered {other}: {}", deleted.body),
        };
        let got: Vec<u16> = handed.iter().map(|(reply, _)| reply.status).collect();
        assert_eq!(
            got, expected,
            "round {round}: deletion {} / {} {} {}",
            deleted.status, invited.body, created.body, moved.body
        );
        if moved.status == 200 {
            patch(&app, &mover, &owner, &json!({ "roleName": "USER" })).await.expect(200);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Approval groups
// ---------------------------------------------------------------------------------------------

async fn groups_are_created_and_listed_and_keys_are_unique(backend: Backend) {
    // Groups work under an external provider as well.
    let app = TestApp::spawn(backend).await;
    let tenant = app.tenant.id.to_string();
    let token = app.tenant.token.clone();
    let path = groups(&tenant);

    let created = post(&app, &path, &token, &json!({ "key": "treasury", "name": "Treasury" })).await;
    created.expect(201);
    let id = id_of(&created);
    assert_eq!(created.header("Location"), Some(format!("{path}/{id}").as_str()));
    assert_eq!(created.body["key"], "treasury");
    assert_eq!(created.body["name"], "Treasury");
    assert_eq!(created.body["status"], "ACTIVE");
    assert!(created.body["createdAt"].is_string() && created.body["updatedAt"].is_string());

    refused_with(&post(&app, &path, &token, &json!({ "key": "TREASURY", "name": "Other" })).await, 409, "in use");
    // The same key is free in another organisation.
    let other = app.new_tenant();
    post(&app, &groups(&other.id.to_string()), &other.token, &json!({ "key": "treasury", "name": "T" }))
        .await
        .expect(201);

    create_group(&app, &tenant, &token, "ops", "Operations").await;
    create_group(&app, &tenant, &token, "audit", "Auditors").await;
    let list = get(&app, &path, &token).await;
    assert_page_c(&list, 0, 20, 3);
    assert_eq!(column(&list.body, "name"), ["Auditors", "Operations", "Treasury"]);
    let by_key = get(&app, &format!("{path}?sort=key,desc"), &token).await;
    assert_eq!(column(&by_key.body, "key"), ["treasury", "ops", "audit"]);
    let paged = get(&app, &format!("{path}?page=1&size=2"), &token).await;
    assert_page_c(&paged, 1, 2, 3);
    assert_eq!(column(&paged.body, "name"), ["Treasury"]);
    for sort in ["status", "createdAt,desc", "updatedAt", "id", "name,desc"] {
        get(&app, &format!("{path}?sort={sort}"), &token).await.expect(200);
    }

    let read = get(&app, &format!("{path}/{id}"), &token).await;
    read.expect(200);
    assert_eq!(read.body["key"], "treasury");
    assert_eq!(read.body["members"], json!({ "items": [], "pageNumber": 0, "pageSize": 20, "totalResults": 0 }));

    for (bad, field) in [
        (json!({ "name": "No key" }), "key"),
        (json!({ "key": "#x", "name": "Hash" }), "key"),
        (json!({ "key": "has space", "name": "Space" }), "key"),
        (json!({ "key": "k".repeat(65), "name": "Long" }), "key"),
        (json!({ "key": "nameless" }), "name"),
        (json!({ "key": "blank", "name": "  " }), "name"),
    ] {
        refused_with(&post(&app, &path, &token, &bad).await, 400, field);
    }
    let record = &audited(&app, &token, "group.create", &id).await[0];
    assert_eq!(record["httpStatus"], 201);
    refused(
        &post(&app, &path, &scoped_token(&app, &tenant, Some("group:read")), &json!({ "key": "x", "name": "X" })).await,
        403,
        "Missing permission: group:manage",
    );
}

/// Adding a member and removing that user at the same instant: the addition either comes first
/// (201, and the removal takes the membership away) or finds no user (404); never "already a
/// member" (200) for a user being removed, nor a membership left behind.
async fn a_member_added_while_the_user_is_removed_is_never_kept(backend: Backend) {
    const ROUNDS: usize = 6;
    let (app, tenant, owner) = organisation(backend).await;
    let group = create_group(&app, &tenant, &owner, "racers", "Racers").await;
    let members = format!("{}/{group}/members", groups(&tenant));
    for round in 0..ROUNDS {
        let user = id_of(&invite(&app, &tenant, &owner, &format!("leaver{round}@bank.example"), None).await);
        let (user_path, body) = (format!("{}/{user}", users(&tenant)), json!({ "userId": user }));
        let (added, removed) = tokio::join!(post(&app, &members, &owner, &body), delete(&app, &user_path, &owner));
        removed.expect(204);
        assert!(matches!(added.status, 201 | 404), "round {round}: {} {}", added.status, added.body);
        get(&app, &format!("{members}/{user}"), &owner).await.expect(404);
    }
    let read = get(&app, &format!("{}/{group}", groups(&tenant)), &owner).await;
    read.expect(200);
    assert_eq!(read.body["members"]["totalResults"], 0, "{}", read.body);
}

async fn group_members_are_added_listed_by_name_and_removed(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let group = create_group(&app, &tenant, &owner, "approvers", "Approvers").await;
    let mut ids = BTreeMap::new();
    for (email, first, last) in [
        ("zoe@bank.example", "Zoe", "Adams"),
        ("amy.z@bank.example", "Amy", "Zimmer"),
        ("amy.b@bank.example", "amy", "Baker"),
    ] {
        ids.insert(email, id_of(&invite_named(&app, &tenant, &owner, email, first, last, None).await));
    }
    let members = format!("{}/{group}/members", groups(&tenant));

    for email in ["zoe@bank.example", "amy.z@bank.example", "amy.b@bank.example"] {
        let added = post(&app, &members, &owner, &json!({ "userId": ids[email] })).await;
        added.expect(201);
        assert_eq!(added.body["groupId"], group.as_str());
        assert_eq!(added.body["user"]["id"], ids[email].as_str());
        assert_eq!(added.body["user"]["email"], email);
        // The Location reads the member back, as the group's read lists it.
        let location = added.header("location").expect("Location").to_owned();
        assert_eq!(location, format!("{members}/{}", ids[email]));
        let member = get(&app, &location, &owner).await;
        member.expect(200);
        assert_eq!(member.body, added.body["user"]);
    }
    // Adding a member again changes nothing: 200.
    let again = post(&app, &members, &owner, &json!({ "userId": ids["zoe@bank.example"] })).await;
    again.expect(200);
    assert_eq!(again.body["user"]["id"], ids["zoe@bank.example"].as_str());

    let read = get(&app, &format!("{}/{group}", groups(&tenant)), &owner).await;
    read.expect(200);
    assert_eq!(read.body["members"]["totalResults"], 3);
    assert_eq!(full_names(&read.body["members"]), ["amy Baker", "Amy Zimmer", "Zoe Adams"]);
    let listed_zoe = format!("{members}/{}", ids["zoe@bank.example"]);
    assert_eq!(get(&app, &listed_zoe, &owner).await.body, read.body["members"]["items"][2]);
    let paged = get(&app, &format!("{}/{group}?page=1&size=2", groups(&tenant)), &owner).await;
    assert_eq!(full_names(&paged.body["members"]), ["Zoe Adams"]);
    assert_eq!(paged.body["members"]["pageSize"], 2);

    let zoe = format!("{members}/{}", ids["zoe@bank.example"]);
    delete(&app, &zoe, &owner).await.expect(204);
    refused_with(&delete(&app, &zoe, &owner).await, 404, "not a member");
    let gone = get(&app, &zoe, &owner).await;
    refused_with(&gone, 404, "not a member");
    assert_eq!(gone.body["code"], "MEMBER_NOT_FOUND");
    get(&app, &format!("{members}/not-a-uuid"), &owner).await.expect(400);
    let read = get(&app, &format!("{}/{group}", groups(&tenant)), &owner).await;
    assert_eq!(full_names(&read.body["members"]), ["amy Baker", "Amy Zimmer"]);
    // Names are read without regard to case: "adam" before "Amy", not after every capital.
    let adam = id_of(&invite_named(&app, &tenant, &owner, "adam@bank.example", "adam", "Young", None).await);
    post(&app, &members, &owner, &json!({ "userId": adam })).await.expect(201);
    let read = get(&app, &format!("{}/{group}", groups(&tenant)), &owner).await;
    assert_eq!(full_names(&read.body["members"]), ["adam Young", "amy Baker", "Amy Zimmer"]);

    // Only users of the organisation; only existing groups.
    let nobody = Uuid::now_v7().to_string();
    refused(
        &post(&app, &members, &owner, &json!({ "userId": nobody })).await,
        404,
        &format!("User {nobody} not found"),
    );
    refused_with(&post(&app, &members, &owner, &json!({})).await, 400, "userId");
    let no_group = format!("{}/{}/members", groups(&tenant), Uuid::now_v7());
    post(&app, &no_group, &owner, &json!({ "userId": ids["zoe@bank.example"] })).await.expect(404);
    delete(&app, &format!("{no_group}/{}", ids["zoe@bank.example"]), &owner).await.expect(404);
    let no_group_member = get(&app, &format!("{no_group}/{}", ids["amy.b@bank.example"]), &owner).await;
    no_group_member.expect(404);
    assert_eq!(no_group_member.body["code"], "GROUP_NOT_FOUND");

    let adds = audit_records(&app, &owner, "group.member.add").await;
    assert!(adds.iter().filter(|r| r["outcome"] == "SUCCESS").count() >= 3, "{adds:?}");
    let removes = audit_records(&app, &owner, "group.member.remove").await;
    assert!(removes.iter().any(|r| r["outcome"] == "SUCCESS"), "{removes:?}");
    // A USER may read groups but not manage them.
    let (_, user) = invite_and_activate(&app, &tenant, &owner, "ulla@bank.example", None).await;
    get(&app, &format!("{}/{group}", groups(&tenant)), &user).await.expect(200);
    get(&app, &format!("{members}/{}", ids["amy.b@bank.example"]), &user).await.expect(200);
    refused(
        &post(&app, &members, &user, &json!({ "userId": ids["zoe@bank.example"] })).await,
        403,
        "Missing permission: group:manage",
    );
}

async fn a_deactivated_group_takes_no_members(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let group = create_group(&app, &tenant, &owner, "approvers", "Approvers").await;
    let path = format!("{}/{group}", groups(&tenant));
    let bob = id_of(&invite(&app, &tenant, &owner, "bob@bank.example", None).await);
    let cara = id_of(&invite(&app, &tenant, &owner, "cara@bank.example", None).await);
    post(&app, &format!("{path}/members"), &owner, &json!({ "userId": bob })).await.expect(201);

    let deactivated = patch(&app, &path, &owner, &json!({ "status": "INACTIVE" })).await;
    deactivated.expect(200);
    assert_eq!(deactivated.body["status"], "INACTIVE");
    refused_with(&post(&app, &format!("{path}/members"), &owner, &json!({ "userId": cara })).await, 409, "deactivated");
    // Listed as INACTIVE, members kept.
    let read = get(&app, &path, &owner).await;
    assert_eq!(read.body["status"], "INACTIVE");
    assert_eq!(read.body["members"]["totalResults"], 1);

    let renamed = patch(&app, &path, &owner, &json!({ "name": "Senior approvers" })).await;
    renamed.expect(200);
    assert_eq!(renamed.body["name"], "Senior approvers");
    assert_eq!(renamed.body["status"], "INACTIVE");
    assert_eq!(renamed.body["key"], "approvers");
    let reactivated = patch(&app, &path, &owner, &json!({ "status": "ACTIVE" })).await;
    reactivated.expect(200);
    assert_eq!(reactivated.body["status"], "ACTIVE");
    post(&app, &format!("{path}/members"), &owner, &json!({ "userId": cara })).await.expect(201);

    refused_with(&patch(&app, &path, &owner, &json!({ "status": "DELETED" })).await, 400, "status");
    refused_with(&patch(&app, &path, &owner, &json!({})).await, 400, "Nothing to change");
    refused_with(&patch(&app, &path, &owner, &json!({ "name": " " })).await, 400, "name");
    patch(&app, &format!("{}/{}", groups(&tenant), Uuid::now_v7()), &owner, &json!({ "name": "X" })).await.expect(404);
    let updates = audit_records(&app, &owner, "group.update").await;
    assert!(updates.iter().filter(|r| r["resourceId"] == group.as_str() && r["outcome"] == "SUCCESS").count() >= 3);
}

// ---------------------------------------------------------------------------------------------
// Machine clients
// ---------------------------------------------------------------------------------------------

async fn a_machine_client_reveals_its_secret_once_and_acts_with_its_role(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    create_role(&app, &tenant, &owner, "Customer Readers", &["customer:read"]).await;
    let created =
        post(&app, &clients(&tenant), &owner, &json!({ "name": "Nightly batch", "roleName": "Customer Readers" }))
            .await;
    created.expect(201);
    let client_id = created.body["clientId"].as_str().expect("clientId").to_owned();
    assert!(Uuid::parse_str(&client_id).is_ok());
    assert_eq!(created.body["name"], "Nightly batch");
    assert_eq!(created.body["role"], "Customer Readers");
    assert!(created.body["secretRevealExpiresAt"].is_string(), "{}", created.body);
    assert!(created.body.get("clientSecret").is_none(), "the secret is not in the answer");
    let url = created.body["secretRevealUrl"].as_str().expect("secretRevealUrl").to_owned();
    assert!(url.starts_with(&format!("{}/api/auth/client-secrets/", app.base_url)), "{url}");

    // Revealed once, without a bearer token; then the link is dead.
    let revealed = reveal(&app, &url).await;
    revealed.expect(200);
    assert_eq!(revealed.body["clientId"], client_id.as_str());
    assert_eq!(revealed.body["tokenUrl"], format!("{}/idp/oauth2/token", app.base_url).as_str());
    let secret = revealed.body["clientSecret"].as_str().expect("clientSecret").to_owned();
    reveal(&app, &url).await.expect(404);
    reveal(&app, &format!("{}/api/auth/client-secrets/not-a-token", app.base_url)).await.expect(404);

    // Its token (HTTP Basic or form fields) has the client id as sub.
    let token = app.client_token(&client_id, &secret).await;
    assert_eq!(subject_of(&token), client_id);
    assert_eq!(claims_of(&token)["tenant_id"], tenant.as_str());
    let form = Reply::read(
        app.raw(Method::POST, "/idp/oauth2/token")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}"))
            .send()
            .await
            .expect("token request"),
    )
    .await;
    form.expect(200);
    assert_eq!(form.body["token_type"], "Bearer");
    assert_eq!(subject_of(form.body["access_token"].as_str().expect("access_token")), client_id);
    client_token_basic(&app, &client_id, "wrong-secret").await.expect(401);

    // It acts with its role's permissions.
    get(&app, "/api/customers", &token).await.expect(200);
    refused(
        &post(&app, "/api/customers", &token, &json!({ "customerRef": "C-1" })).await,
        403,
        "Missing permission: customer:write",
    );
    refused(&get(&app, &users(&tenant), &token).await, 403, "Missing permission: user:read");
    // A client is not a user: it has no profile.
    get(&app, "/api/users/me", &token).await.expect(404);

    // Listed (style C), never with its secret.
    let list = get(&app, &clients(&tenant), &owner).await;
    assert_page_c(&list, 0, 20, 1);
    let listed = &list.body["items"][0];
    assert_eq!(listed["clientId"], client_id.as_str());
    assert_eq!(listed["name"], "Nightly batch");
    assert_eq!(listed["role"], "Customer Readers");
    assert_eq!(listed["active"], true);
    assert!(!list.body.to_string().contains(&secret));

    audited(&app, &owner, "client.create", &client_id).await;
    audited(&app, &owner, "client.secret_reveal", &client_id).await;

    // Disabled: its token is refused at once and it gets no more.
    delete(&app, &format!("{}/{client_id}", clients(&tenant)), &owner).await.expect(204);
    refused(&get(&app, "/api/customers", &token).await, 401, REVOKED);
    client_token_basic(&app, &client_id, &secret).await.expect(401);
    let list = get(&app, &clients(&tenant), &owner).await;
    assert_eq!(list.body["items"][0]["active"], false);
    delete(&app, &format!("{}/{}", clients(&tenant), Uuid::now_v7()), &owner).await.expect(404);
    audited(&app, &owner, "client.disable", &client_id).await;

    // A client disabled before its secret was revealed: the link reveals nothing.
    let unused = post(&app, &clients(&tenant), &owner, &json!({ "name": "Unused", "roleName": "USER" })).await;
    unused.expect(201);
    let unused_id = unused.body["clientId"].as_str().expect("clientId");
    delete(&app, &format!("{}/{unused_id}", clients(&tenant)), &owner).await.expect(204);
    let dead = reveal(&app, unused.body["secretRevealUrl"].as_str().expect("secretRevealUrl")).await;
    refused(&dead, 404, "This secret link is unknown, used or expired");

    // An unrevealed secret waits 24 hours, no longer.
    let late = post(&app, &clients(&tenant), &owner, &json!({ "name": "Late", "roleName": "USER" })).await;
    late.expect(201);
    app.clock.advance_millis(24 * 3_600_000 + 1_000);
    let expired = reveal(&app, late.body["secretRevealUrl"].as_str().expect("secretRevealUrl")).await;
    refused(&expired, 404, "This secret link is unknown, used or expired");
}

async fn creating_a_client_follows_the_rule_for_handing_out_its_role(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let (_, admin) = invite_and_activate(&app, &tenant, &owner, "adam@bank.example", Some("ADMIN")).await;
    let (_, user) = invite_and_activate(&app, &tenant, &owner, "ulla@bank.example", None).await;
    let path = clients(&tenant);

    refused(
        &post(&app, &path, &admin, &json!({ "name": "Root", "roleName": "SUPER_ADMIN" })).await,
        403,
        "Missing permission: super_admin:create",
    );
    refused(
        &post(&app, &path, &admin, &json!({ "name": "Ghost", "roleName": "Ghosts" })).await,
        404,
        "Role Ghosts not found",
    );
    refused(
        &post(&app, &path, &user, &json!({ "name": "Mine", "roleName": "USER" })).await,
        403,
        "Missing permission: client:manage",
    );
    refused(&get(&app, &path, &user).await, 403, "Missing permission: client:read");
    refused_with(&post(&app, &path, &admin, &json!({ "roleName": "USER" })).await, 400, "name");
    let as_admin = post(&app, &path, &admin, &json!({ "name": "Ops", "roleName": "admin" })).await;
    as_admin.expect(201);
    assert_eq!(as_admin.body["role"], "ADMIN");
    let defaulted = post(&app, &path, &owner, &json!({ "name": "Plain" })).await;
    defaulted.expect(201);
    assert_eq!(defaulted.body["role"], "USER");
    let list = get(&app, &path, &admin).await;
    assert_page_c(&list, 0, 20, 2);

    // Disabling a client acts on a holder of its role: an ADMIN disables an ADMIN's client, not
    // a SUPER_ADMIN's.
    let root = post(&app, &path, &owner, &json!({ "name": "Root", "roleName": "SUPER_ADMIN" })).await;
    root.expect(201);
    let root_client = format!("{path}/{}", root.body["clientId"].as_str().expect("clientId"));
    refused(&delete(&app, &root_client, &admin).await, 403, "Missing permission: super_admin:create");
    assert_eq!(get(&app, &root_client, &owner).await.body["active"], true, "still active");
    let ops_client = format!("{path}/{}", as_admin.body["clientId"].as_str().expect("clientId"));
    delete(&app, &ops_client, &admin).await.expect(204);
    delete(&app, &root_client, &owner).await.expect(204);
}

// ---------------------------------------------------------------------------------------------
// External identity provider
// ---------------------------------------------------------------------------------------------

async fn with_an_external_provider_invitations_and_clients_are_404(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let tenant = app.tenant.id.to_string();
    let token = app.tenant.token.clone();
    let invited =
        post(&app, &users(&tenant), &token, &json!({ "email": "bob@bank.example", "firstName": "B", "lastName": "B" }))
            .await;
    invited.expect(404);
    post(&app, &clients(&tenant), &token, &json!({ "name": "Batch", "roleName": "USER" })).await.expect(404);
    // Roles and groups work.
    create_role(&app, &tenant, &token, "Operators", &["customer:read"]).await;
    create_group(&app, &tenant, &token, "approvers", "Approvers").await;
    assert_page_c(&get(&app, &users(&tenant), &token).await, 0, 20, 0);
    // The path must still name the token's organisation.
    let other = Uuid::now_v7();
    refused(&get(&app, &format!("/api/tenants/{other}/roles"), &token).await, 403, "Invalid tenant id");
}

async fn an_external_token_acts_with_the_permissions_its_scope_names(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let tenant = app.tenant.id.to_string();
    let reader = scoped_token(&app, &tenant, Some("customer:read"));
    get(&app, "/api/customers", &reader).await.expect(200);
    refused(
        &post(&app, "/api/customers", &reader, &json!({ "customerRef": "C-1" })).await,
        403,
        "Missing permission: customer:write",
    );
    refused(&get(&app, "/api/audit/events", &reader).await, 403, "Missing permission: audit:read");
    refused(&get(&app, &roles(&tenant), &reader).await, 403, "Missing permission: role:read");

    let writer = scoped_token(&app, &tenant, Some("customer:read customer:write"));
    post(&app, "/api/customers", &writer, &json!({ "customerRef": "C-1" })).await.expect(201);
    get(&app, "/api/customers/C-1", &writer).await.expect(200);
    // Names outside the catalogue grant nothing.
    let odd = scoped_token(&app, &tenant, Some("openid customer:READ profile"));
    refused(&get(&app, "/api/customers", &odd).await, 403, "Missing permission: customer:read");
    let groups_only = scoped_token(&app, &tenant, Some("group:read group:manage"));
    create_group(&app, &tenant, &groups_only, "approvers", "Approvers").await;
    refused(&get(&app, &users(&tenant), &groups_only).await, 403, "Missing permission: user:read");
}

async fn an_external_token_without_scope_may_call_only_what_needs_no_permission(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let tenant = app.tenant.id.to_string();
    let bare = scoped_token(&app, &tenant, None);
    refused(&get(&app, "/api/customers", &bare).await, 403, "Missing permission: customer:read");
    refused(
        &post(&app, "/api/customers", &bare, &json!({ "customerRef": "C-1" })).await,
        403,
        "Missing permission: customer:write",
    );
    refused(&get(&app, &roles(&tenant), &bare).await, 403, "Missing permission: role:read");
    refused(&get(&app, "/api/permissions", &bare).await, 403, "Missing permission: role:read");
    refused(&get(&app, &groups(&tenant), &bare).await, 403, "Missing permission: group:read");
    // The own-profile read needs no permission; an external subject has no profile here.
    get(&app, "/api/users/me", &bare).await.expect(404);
    // An empty scope is no scope.
    let empty = scoped_token(&app, &tenant, Some(""));
    refused(&get(&app, "/api/customers", &empty).await, 403, "Missing permission: customer:read");
}

// ---------------------------------------------------------------------------------------------
// Errors > Organisation access, one request per row
// ---------------------------------------------------------------------------------------------

async fn every_organisation_access_error_has_its_status(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let group = create_group(&app, &tenant, &owner, "approvers", "Approvers").await;
    let owner_id = subject_of(&owner);

    // 400: path id not a UUID, unknown filter value, blank or too long name, unknown permission,
    // editing a platform role, changing yourself or the owner.
    refused_with(&get(&app, &format!("{}/123", users(&tenant)), &owner).await, 400, "must be a UUID");
    refused_with(&get(&app, &format!("{}?status=GONE", users(&tenant)), &owner).await, 400, "status");
    refused_with(&post(&app, &groups(&tenant), &owner, &json!({ "key": "k", "name": "" })).await, 400, "name");
    refused_with(&post(&app, &roles(&tenant), &owner, &json!({ "name": "r".repeat(101) })).await, 400, "name");
    refused(
        &post(&app, &roles(&tenant), &owner, &json!({ "name": "R", "permissions": ["a", "b"] })).await,
        400,
        "Unknown permissions: a, b.",
    );
    refused(
        &patch(&app, &format!("{}/{USER_ID}", roles(&tenant)), &owner, &json!({ "name": "U" })).await,
        400,
        "Platform roles cannot be edited",
    );
    refused(
        &delete(&app, &format!("{}/{owner_id}", users(&tenant)), &owner).await,
        400,
        "You cannot change or remove yourself",
    );

    // 401: no usable token, or the caller is not ACTIVE.
    let anonymous = call(&app, Method::GET, &users(&tenant), None, None).await;
    anonymous.expect(401);
    call(&app, Method::GET, &users(&tenant), Some("not-a-jwt"), None).await.expect(401);
    let (bob, bob_token) = invite_and_activate(&app, &tenant, &owner, "bob@bank.example", None).await;
    patch(&app, &format!("{}/{bob}", users(&tenant)), &owner, &json!({ "status": "SUSPENDED" })).await.expect(200);
    refused(&get(&app, &users(&tenant), &bob_token).await, 401, REVOKED);

    // 403: another organisation in the path, a missing permission, granting what one lacks.
    let other = Uuid::now_v7();
    refused(&get(&app, &format!("/api/tenants/{other}/users"), &owner).await, 403, "Invalid tenant id");
    let invite_elsewhere = invite(&app, &other.to_string(), &owner, "x@bank.example", None).await;
    refused(&invite_elsewhere, 403, "Invalid tenant id");
    refused(
        &post(&app, &format!("/api/tenants/{other}/roles"), &owner, &json!({ "name": "R" })).await,
        403,
        "Invalid tenant id",
    );
    refused(&get(&app, &format!("/api/tenants/{other}/groups"), &owner).await, 403, "Invalid tenant id");
    refused(&get(&app, &format!("/api/tenants/{other}/clients"), &owner).await, 403, "Invalid tenant id");
    // 401: the operator's token names no organisation.
    let operator = app.operator_token().await;
    refused(
        &get(&app, &users(&tenant), &operator).await,
        401,
        "This operation acts for an organisation; the token names none (tenant_id)",
    );
    let (_, user) = invite_and_activate(&app, &tenant, &owner, "ulla@bank.example", None).await;
    refused(&post(&app, &roles(&tenant), &user, &json!({ "name": "R" })).await, 403, "Missing permission: role:create");
    let (_, admin) = invite_and_activate(&app, &tenant, &owner, "adam@bank.example", Some("ADMIN")).await;
    refused(
        &post(&app, &roles(&tenant), &admin, &json!({ "name": "R", "permissions": ["super_admin:create"] })).await,
        403,
        "You cannot grant permissions you do not hold: super_admin:create",
    );

    // 404: no such user, role, group (or organisation's role name).
    let missing = Uuid::now_v7();
    refused(
        &get(&app, &format!("{}/{missing}", users(&tenant)), &owner).await,
        404,
        &format!("User {missing} not found"),
    );
    get(&app, &format!("{}/{missing}", roles(&tenant)), &owner).await.expect(404);
    get(&app, &format!("{}/{missing}", groups(&tenant)), &owner).await.expect(404);
    refused(&invite(&app, &tenant, &owner, "y@bank.example", Some("Ghosts")).await, 404, "Role Ghosts not found");

    // 409: email registered, role name reserved or in use, group key in use, group deactivated.
    refused_with(&invite(&app, &tenant, &owner, "bob@bank.example", None).await, 409, "already registered");
    post(&app, &roles(&tenant), &owner, &json!({ "name": "Admin" })).await.expect(409);
    create_role(&app, &tenant, &owner, "Tellers", &[]).await;
    post(&app, &roles(&tenant), &owner, &json!({ "name": "tellers" })).await.expect(409);
    post(&app, &groups(&tenant), &owner, &json!({ "key": "Approvers", "name": "Again" })).await.expect(409);
    patch(&app, &format!("{}/{group}", groups(&tenant)), &owner, &json!({ "status": "INACTIVE" })).await.expect(200);
    let (ulla, _) = invite_and_activate(&app, &tenant, &owner, "ulla2@bank.example", None).await;
    post(&app, &format!("{}/{group}/members", groups(&tenant)), &owner, &json!({ "userId": ulla })).await.expect(409);

    // 500: sort names a property that does not exist.
    refused_with(&get(&app, &format!("{}?sort=password,asc", users(&tenant)), &owner).await, 500, "password");

    // Every refusal is in the envelope with a request id.
    let envelope = get(&app, &format!("/api/tenants/{other}/users"), &owner).await;
    assert!(envelope.body["requestId"].is_string(), "{}", envelope.body);
    assert!(envelope.header("X-Request-Id").is_some());
}

// ---------------------------------------------------------------------------------------------
// Audit
// ---------------------------------------------------------------------------------------------

async fn every_identity_write_leaves_an_audit_record(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let owner_sub = subject_of(&owner);
    let bob = id_of(&invite(&app, &tenant, &owner, "bob@bank.example", None).await);
    patch(&app, &format!("{}/{bob}", users(&tenant)), &owner, &json!({ "roleName": "ADMIN" })).await.expect(200);
    let role = create_role(&app, &tenant, &owner, "Readers", &["customer:read"]).await;
    patch(&app, &format!("{}/{role}", roles(&tenant)), &owner, &json!({ "description": "d" })).await.expect(200);
    let group = create_group(&app, &tenant, &owner, "approvers", "Approvers").await;
    patch(&app, &format!("{}/{group}", groups(&tenant)), &owner, &json!({ "name": "A" })).await.expect(200);
    post(&app, &format!("{}/{group}/members", groups(&tenant)), &owner, &json!({ "userId": bob })).await.expect(201);
    delete(&app, &format!("{}/{group}/members/{bob}", groups(&tenant)), &owner).await.expect(204);
    let client = post(&app, &clients(&tenant), &owner, &json!({ "name": "Batch", "roleName": "USER" })).await;
    client.expect(201);
    let client_id = client.body["clientId"].as_str().expect("clientId").to_owned();
    reveal(&app, client.body["secretRevealUrl"].as_str().expect("url")).await.expect(200);
    delete(&app, &format!("{}/{client_id}", clients(&tenant)), &owner).await.expect(204);
    delete(&app, &format!("{}/{bob}", users(&tenant)), &owner).await.expect(204);
    delete(&app, &format!("{}/{role}", roles(&tenant)), &owner).await.expect(204);

    for (action, resource) in [
        ("user.invite", bob.as_str()),
        ("user.update", bob.as_str()),
        ("user.remove", bob.as_str()),
        ("role.create", role.as_str()),
        ("role.update", role.as_str()),
        ("role.delete", role.as_str()),
        ("group.create", group.as_str()),
        ("group.update", group.as_str()),
        ("group.member.add", group.as_str()),
        ("group.member.remove", group.as_str()),
        ("client.create", client_id.as_str()),
        ("client.secret_reveal", client_id.as_str()),
        ("client.disable", client_id.as_str()),
    ] {
        let records = audited(&app, &owner, action, resource).await;
        assert_eq!(records.len(), 1, "{action}: {records:?}");
        let record = &records[0];
        assert_eq!(record["source"], "API", "{record}");
        assert!(record["requestId"].is_string(), "{record}");
        if action != "client.secret_reveal" {
            assert_eq!(record["actorId"], owner_sub.as_str(), "{action}: {record}");
        }
    }
    // Sign-in attempts, successful or not, are auth.login records.
    login(&app, OWNER, "Wrong-Password-1").await.expect(401);
    let logins = audit_records(&app, &owner, "auth.login").await;
    assert!(logins.iter().any(|r| r["outcome"] == "SUCCESS"), "{logins:?}");
    assert!(logins.iter().any(|r| r["outcome"] == "FAILURE"), "{logins:?}");
    // A refused write is a FAILURE record with its status.
    refused(&invite(&app, &tenant, &owner, "z@bank.example", Some("Ghosts")).await, 404, "Role Ghosts not found");
    let failures: Vec<Value> =
        audit_records(&app, &owner, "user.invite").await.into_iter().filter(|r| r["outcome"] == "FAILURE").collect();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0]["httpStatus"], 404);
    // The owner's own organisation only: another organisation sees none of it.
    let (_, other_owner) = create_organisation(&app, "other@bank.example").await;
    assert!(audit_records(&app, &other_owner, "user.invite").await.is_empty());
}

backends!(
    a_client_is_read_at_its_location_and_a_disabled_one_keeps_no_role_alive,
    a_newcomer_goes_from_operator_to_a_user_with_a_custom_role,
    the_permission_catalogue_names_every_permission_and_the_platform_roles_granting_it,
    inviting_a_user_answers_200_with_the_invited_user_and_mails_the_invitation,
    an_invitation_without_names_is_decided_by_role_and_email,
    an_invitees_bad_email_is_answered_after_the_role_lookup_and_the_permission,
    a_blank_role_name_means_user_and_platform_names_match_case_insensitively,
    an_unknown_role_name_is_404_role_not_found,
    handing_out_a_role_needs_the_permission_the_role_requires,
    an_email_is_registered_once_across_organisations,
    identity_writes_take_an_optional_idempotency_key,
    users_are_listed_in_style_c_by_first_then_last_name,
    the_user_list_filters_by_search_status_and_role,
    an_unknown_sort_property_is_the_specs_500_and_a_malformed_sort_400,
    a_user_is_read_by_id_with_content_type_json_in_any_organisation,
    another_organisations_users_roles_groups_and_clients_are_404,
    a_role_change_applies_at_the_next_request,
    nobody_changes_or_removes_themselves_or_the_owner,
    suspension_revokes_access_at_once_and_reactivation_restores_it,
    an_invited_user_is_not_set_active_and_reactivation_returns_them_to_invited,
    an_admin_cannot_act_on_a_super_admin,
    removing_a_user_revokes_their_access_and_frees_their_email,
    roles_are_listed_with_the_platform_roles_and_their_permissions,
    a_custom_role_is_created_with_201_and_a_location,
    role_creation_refuses_unknown_permissions_reserved_and_taken_names,
    a_role_lists_its_holders_by_first_then_last_name,
    custom_roles_are_edited_but_platform_roles_are_read_only,
    a_role_in_use_cannot_be_deleted,
    a_role_deleted_while_it_is_handed_out_is_never_held_dangling,
    groups_are_created_and_listed_and_keys_are_unique,
    group_members_are_added_listed_by_name_and_removed,
    a_member_added_while_the_user_is_removed_is_never_kept,
    a_deactivated_group_takes_no_members,
    a_machine_client_reveals_its_secret_once_and_acts_with_its_role,
    creating_a_client_follows_the_rule_for_handing_out_its_role,
    with_an_external_provider_invitations_and_clients_are_404,
    an_external_token_acts_with_the_permissions_its_scope_names,
    an_external_token_without_scope_may_call_only_what_needs_no_permission,
    every_organisation_access_error_has_its_status,
    every_identity_write_leaves_an_audit_record,
);

async fn a_client_is_read_at_its_location_and_a_disabled_one_keeps_no_role_alive(backend: Backend) {
    let (app, tenant, owner) = organisation(backend).await;
    let readers = create_role(&app, &tenant, &owner, "Readers", &["customer:read"]).await;
    let created = post(&app, &clients(&tenant), &owner, &json!({ "name": "Reporting", "roleName": "Readers" })).await;
    created.expect(201);
    let location = created.header("location").expect("Location").to_owned();
    let read = get(&app, &location, &owner).await;
    read.expect(200);
    assert_eq!(read.body["clientId"], created.body["clientId"]);
    assert_eq!(read.body["role"], "Readers");
    assert_eq!(read.body["active"], true);
    assert!(read.body.get("clientSecret").is_none());
    refused_with(&get(&app, &format!("{}?sort=name", clients(&tenant)), &owner).await, 400, "sort");

    // While the client is enabled the role is in use; once disabled, it no longer holds it.
    let role_path = format!("{}/{readers}", roles(&tenant));
    refused_with(&delete(&app, &role_path, &owner).await, 409, "in use");
    delete(&app, &location, &owner).await.expect(204);
    assert_eq!(get(&app, &location, &owner).await.body["active"], false);
    delete(&app, &role_path, &owner).await.expect(204);
    get(&app, &role_path, &owner).await.expect(404);
}
