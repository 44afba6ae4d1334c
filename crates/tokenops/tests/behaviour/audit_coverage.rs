//! Every write operation of the OpenAPI document leaves an audit record with the spec's fields
//! (spec: Resources/Audit event, Endpoints/Audit; issue 21, point 3): the document the service
//! serves is walked, each POST, PUT, PATCH and DELETE is driven over HTTP as an integrator drives
//! it (the embedded provider's people, the prerequisites made the same way), and the record is
//! found by the request's id through `GET /api/audit/events`. A failed attempt leaves a FAILURE
//! record. An operation the table below does not name fails the test, so a new endpoint cannot
//! slip through unaudited.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use tokenops_app::clock::Clock;
use tokenops_testkit::organisation::{NEW_PASSWORD, call, temporary_password};
use tokenops_testkit::webhook_receiver::{ALLOW_CIDRS, Receiver};
use tokenops_testkit::{API_VERSION, Backend, Reply, TestApp, backends};
use uuid::Uuid;

use crate::support::assert_iso_utc;

backends!(every_write_of_the_document_leaves_an_audit_record);

/// What the audit log records for an operation.
enum Audit {
    /// The record's action, category and resource type.
    As(&'static str, &'static str, &'static str),
    /// Deliberately not audited, and why.
    Exempt(&'static str),
}

use Audit::{As, Exempt};

/// Every write operation of the document, in the order the walk drives them (each one's
/// prerequisites come before it), with what its audit record says.
const WRITES: &[(&str, Audit)] = &[
    ("POST /api/tenants", As("tenant.create", "ORGANISATION", "tenant")),
    ("POST /api/auth/login", As("auth.login", "IDENTITY", "user")),
    ("POST /api/auth/new-password", As("auth.new_password", "IDENTITY", "user")),
    ("POST /api/auth/refresh", As("auth.refresh", "IDENTITY", "user")),
    ("POST /api/tenants/{tenantId}/users", As("user.invite", "ORGANISATION", "user")),
    ("POST /api/auth/activate", As("auth.activate", "IDENTITY", "user")),
    ("PATCH /api/tenants/{tenantId}/users/{userId}", As("user.update", "ORGANISATION", "user")),
    ("DELETE /api/tenants/{tenantId}/users/{userId}", As("user.remove", "ORGANISATION", "user")),
    ("POST /api/tenants/{tenantId}/roles", As("role.create", "ORGANISATION", "role")),
    ("PATCH /api/tenants/{tenantId}/roles/{roleId}", As("role.update", "ORGANISATION", "role")),
    ("DELETE /api/tenants/{tenantId}/roles/{roleId}", As("role.delete", "ORGANISATION", "role")),
    ("POST /api/tenants/{tenantId}/groups", As("group.create", "ORGANISATION", "group")),
    ("PATCH /api/tenants/{tenantId}/groups/{groupId}", As("group.update", "ORGANISATION", "group")),
    ("POST /api/tenants/{tenantId}/groups/{groupId}/members", As("group.member.add", "ORGANISATION", "group")),
    (
        "DELETE /api/tenants/{tenantId}/groups/{groupId}/members/{userId}",
        As("group.member.remove", "ORGANISATION", "group"),
    ),
    ("POST /api/tenants/{tenantId}/clients", As("client.create", "ORGANISATION", "machine_client")),
    ("POST /idp/oauth2/token", As("auth.client_credentials", "IDENTITY", "machine_client")),
    ("DELETE /api/tenants/{tenantId}/clients/{clientId}", As("client.disable", "ORGANISATION", "machine_client")),
    ("POST /api/contracts", As("contract.create", "CONTRACTS", "contract")),
    ("PATCH /api/contracts/{assetId}", As("contract.update", "CONTRACTS", "contract")),
    ("POST /api/customers", As("customer.create", "CUSTOMERS", "customer")),
    ("POST /api/accounts", As("account.create", "ACCOUNTS", "account")),
    ("POST /api/transactions", As("transaction.submit", "TRANSACTIONS", "transaction")),
    ("PATCH /api/accounts/{accountRef}", As("account.update_status", "ACCOUNTS", "account")),
    ("POST /api/webhooks", As("webhook.create", "WEBHOOKS", "webhook")),
    ("PATCH /api/webhooks/{webhookId}", As("webhook.update", "WEBHOOKS", "webhook")),
    ("POST /api/webhooks/{webhookId}/test", As("webhook.test", "WEBHOOKS", "webhook")),
    ("POST /api/webhooks/{webhookId}/secret/rotate", As("webhook.secret_rotate", "WEBHOOKS", "webhook")),
    ("PATCH /api/customers/{customerRef}", As("customer.update_status", "CUSTOMERS", "customer")),
    ("POST /api/webhook-events/{eventId}/redeliver", As("webhook_event.redeliver", "WEBHOOKS", "webhook_event")),
    ("POST /api/webhook-events/redeliver", As("webhook_event.redeliver_filtered", "WEBHOOKS", "webhook_event")),
    ("DELETE /api/webhooks/{webhookId}", As("webhook.delete", "WEBHOOKS", "webhook")),
    ("POST /api/templates", As("template.create", "POLICIES", "template")),
    ("PATCH /api/templates/{key}", As("template.update", "POLICIES", "template")),
    ("POST /api/templates/{key}/deprecate", As("template.deprecate", "POLICIES", "template")),
    ("POST /api/policies", As("policy.create", "POLICIES", "policy")),
    ("PATCH /api/policies/{policyId}", As("policy.update", "POLICIES", "policy")),
    ("POST /api/policies/{policyId}/versions", As("policy.version.create", "POLICIES", "policy")),
    ("PUT /api/policies/{policyId}/current-version", As("policy.current_version.set", "POLICIES", "policy")),
    ("POST /api/policies/{policyId}/activate", As("policy.activate", "POLICIES", "policy")),
    ("POST /api/policies/{policyId}/archive", As("policy.archive", "POLICIES", "policy")),
    (
        "POST /api/policies/simulations",
        Exempt("changes nothing: it evaluates a policy against past operations and answers, as a read would"),
    ),
    ("POST /api/approvals/requests", As("approval.request.create", "APPROVAL", "approval_request")),
    ("POST /api/approvals/tasks/{taskId}/approve", As("approval.task.approve", "APPROVAL", "approval_task")),
    ("POST /api/approvals/tasks/{taskId}/reject", As("approval.task.reject", "APPROVAL", "approval_task")),
    ("POST /api/approvals/tasks/{taskId}/reassign", As("approval.task.reassign", "APPROVAL", "approval_task")),
    ("POST /api/approvals/requests/{requestId}/cancel", As("approval.request.cancel", "APPROVAL", "approval_request")),
    ("POST /api/scripts", As("script.create", "SCRIPTS", "script")),
    ("PATCH /api/scripts/{scriptId}", As("script.update", "SCRIPTS", "script")),
    ("POST /api/scripts/{scriptId}/clone", As("script.clone", "SCRIPTS", "script")),
    ("DELETE /api/scripts/{scriptId}", As("script.delete", "SCRIPTS", "script")),
    (
        "POST /api/scripts/{scriptId}/dry-runs",
        Exempt("changes nothing: it runs the script in the sandbox with submissions recorded, not made"),
    ),
    ("POST /api/automations", As("automation.create", "AUTOMATIONS", "automation")),
    ("POST /api/automations/{automationId}/executions", As("automation.execute", "AUTOMATIONS", "automation")),
    ("PATCH /api/automations/{automationId}/status", As("automation.update_status", "AUTOMATIONS", "automation")),
];

/// A write operation's key, `METHOD /path/{template}`.
fn writes_in_document(document: &Value) -> BTreeSet<String> {
    let paths = document["paths"].as_object().expect("the document's paths");
    let mut writes = BTreeSet::new();
    for (path, item) in paths {
        for method in ["post", "put", "patch", "delete"] {
            if item.get(method).is_some() {
                writes.insert(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    writes
}

/// How a request carries its input.
enum Body {
    None,
    Json(Value),
    /// Form-encoded, with HTTP Basic client authentication (the token endpoint).
    Token {
        client_id: String,
        secret: String,
    },
}

/// One request of the walk and what its audit record must say.
struct Sent {
    op: &'static str,
    request_id: String,
    key: Option<String>,
    status: u16,
    /// The caller's subject: a user's id, a client's id, or the operator's client id.
    actor: String,
    resource_id: Option<String>,
    failure: bool,
}

/// A person of the organisation: their user id and tokens.
#[derive(Clone, Default)]
struct Person {
    id: String,
    token: String,
    refresh: String,
}

/// What the walk has made so far.
struct World {
    app: TestApp,
    receiver: Receiver,
    tenant: String,
    operator: String,
    operator_id: String,
    owner: Person,
    carol: Person,
    /// Ids by name: what one step made and a later one acts on.
    ids: BTreeMap<&'static str, String>,
    sent: Vec<Sent>,
}

/// An identifier's form kept, its value unknown: a fresh UUID for a UUID, else one more letter.
fn unknown(value: &str) -> String {
    if Uuid::parse_str(value).is_ok() {
        Uuid::now_v7().to_string()
    } else if value.bytes().all(|b| b.is_ascii_uppercase()) {
        format!("{value}X")
    } else {
        format!("{value}x")
    }
}

/// `template` with its `{…}` parameters filled from `params` in order.
fn fill(template: &str, params: &[&str]) -> String {
    let mut out = String::new();
    let mut rest = template;
    let mut params = params.iter();
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').expect("a closed parameter") + open;
        out.push_str(&rest[..open]);
        out.push_str(params.next().expect("a value for each parameter"));
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    assert!(params.next().is_none(), "more values than {template} has parameters");
    out
}

impl World {
    fn id(&self, name: &str) -> String {
        self.ids.get(name).unwrap_or_else(|| panic!("no {name} made yet")).clone()
    }

    fn keep(&mut self, name: &'static str, value: &Value) -> String {
        let text = value.as_str().unwrap_or_else(|| panic!("{name}: {value}")).to_owned();
        self.ids.insert(name, text.clone());
        text
    }

    /// Keeps `value`, the id a creation's reply gives, as `name`'s, and as the resource of the
    /// creation's record (the last request that succeeded), which could not name it before.
    fn keep_created(&mut self, name: &'static str, value: &Value) {
        let id = self.keep(name, value);
        let created = self.sent.iter().rposition(|s| !s.failure).expect("the creating request");
        self.sent[created].resource_id = Some(id);
    }

    /// Sends `op` with `params` and `body` as `token`, with a request id of its own (and a fresh
    /// Idempotency-Key on the API's writes); returns the reply and the request id.
    async fn raw_send(
        &self,
        op: &str,
        params: &[&str],
        body: &Body,
        token: Option<&str>,
    ) -> (Reply, String, Option<String>) {
        let (method, template) = op.split_once(' ').expect("METHOD path");
        let method = Method::from_bytes(method.as_bytes()).expect("a method");
        let path = fill(template, params);
        let request_id = format!("audit-cov-{}", Uuid::now_v7().simple());
        let mut request = self.app.raw(method, &path).header("X-Request-Id", &request_id);
        let signs_in = path.starts_with("/api/auth/") || path.starts_with("/idp/");
        if path.starts_with("/api/") {
            request = request.header("API-Version", API_VERSION);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let key = (!signs_in).then(|| Uuid::now_v7().to_string());
        if let Some(key) = &key {
            request = request.header("Idempotency-Key", key);
        }
        request = match body {
            Body::None => request,
            Body::Json(value) => request.json(value),
            Body::Token { client_id, secret } => request
                .basic_auth(client_id, Some(secret))
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body("grant_type=client_credentials"),
        };
        let reply = Reply::read(request.send().await.expect("request")).await;
        assert_eq!(reply.header("x-request-id"), Some(request_id.as_str()), "{op} echoes the request id");
        (reply, request_id, key)
    }

    /// Sends `op` and expects `status`; notes the audit record it must leave (about `resource`,
    /// by `actor`).
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &mut self,
        op: &'static str,
        params: &[&str],
        body: Body,
        token: Option<&str>,
        status: u16,
        actor: &str,
        resource: Option<&str>,
    ) -> Reply {
        let reply = self.noted(op, params, &body, token, status, actor, resource, false).await;
        // The same request about a resource that does not exist: a FAILURE record. The last
        // parameter names the resource; an organisation's id is the caller's own and cannot vary.
        let names_a_resource = op.rsplit('{').next().is_some_and(|last| !last.starts_with("tenantId}"));
        if let Some(last) = params.last().filter(|_| names_a_resource) {
            let mut other: Vec<&str> = params[..params.len() - 1].to_vec();
            let missing = unknown(last);
            other.push(&missing);
            let (refused, request_id, key) = self.raw_send(op, &other, &body, token).await;
            assert!(
                (400..500).contains(&refused.status),
                "{op} about an unknown {last}: a refusal, got {} {}",
                refused.status,
                refused.body
            );
            // The record names the unknown resource, or the one the route is about (a group
            // whose unknown member was to be removed).
            let about = if resource == Some(*last) { Some(missing) } else { resource.map(str::to_owned) };
            self.sent.push(Sent {
                op,
                request_id,
                key,
                status: refused.status,
                actor: actor.to_owned(),
                resource_id: about,
                failure: true,
            });
        }
        reply
    }

    /// Notes a refused request that must leave a FAILURE record.
    #[allow(clippy::too_many_arguments)]
    async fn refused(
        &mut self,
        op: &'static str,
        params: &[&str],
        body: Body,
        token: Option<&str>,
        status: u16,
        actor: &str,
        resource: Option<&str>,
    ) {
        self.noted(op, params, &body, token, status, actor, resource, true).await;
    }

    /// Sends `op` and expects `status`; notes the record it must leave, a FAILURE record when
    /// `failure`.
    #[allow(clippy::too_many_arguments)]
    async fn noted(
        &mut self,
        op: &'static str,
        params: &[&str],
        body: &Body,
        token: Option<&str>,
        status: u16,
        actor: &str,
        resource: Option<&str>,
        failure: bool,
    ) -> Reply {
        let (reply, request_id, key) = self.raw_send(op, params, body, token).await;
        assert_eq!(reply.status, status, "{op}: {}", reply.body);
        let resource_id = resource.map(str::to_owned);
        self.sent.push(Sent { op, request_id, key, status, actor: actor.to_owned(), resource_id, failure });
        reply
    }

    /// An invited user's temporary password (after the mail job ran).
    async fn temporary(&self, email: &str) -> String {
        self.app.drain_jobs().await;
        temporary_password(&self.app, email)
    }

    /// Invites and activates `email` outside the walk; returns the person.
    async fn member(&mut self, email: &str) -> Person {
        let tenant = self.tenant.clone();
        let body = json!({ "email": email, "firstName": "Member", "lastName": "Tester" });
        let invited = call(
            &self.app,
            Method::POST,
            &format!("/api/tenants/{tenant}/users"),
            Some(&self.owner.token),
            Some(&body),
        )
        .await;
        invited.expect(200);
        let id = invited.body["id"].as_str().expect("user id").to_owned();
        let temporary = self.temporary(email).await;
        let body = json!({ "email": email, "temporaryPassword": temporary, "newPassword": NEW_PASSWORD });
        let activated = call(&self.app, Method::POST, "/api/auth/activate", None, Some(&body)).await;
        activated.expect(200);
        Person {
            id,
            token: activated.body["accessToken"].as_str().expect("accessToken").to_owned(),
            refresh: String::new(),
        }
    }
}

/// Drives `op` once as an integrator would, making what it needs first.
async fn drive(w: &mut World, op: &'static str) {
    let tenant = w.tenant.clone();
    let owner = w.owner.clone();
    let t = Some(owner.token.as_str());
    let me = owner.id.as_str();
    match op {
        "POST /api/tenants" => unreachable!("the walk starts with it"),
        "POST /api/auth/login" | "POST /api/auth/new-password" => unreachable!("the owner's sign-in makes them"),
        "POST /api/auth/refresh" => {
            let body = Body::Json(json!({ "refreshToken": owner.refresh }));
            w.send(op, &[], body, None, 200, me, Some(me)).await;
        }
        "POST /api/tenants/{tenantId}/users" => {
            let body = json!({ "email": "uma@bank.example", "firstName": "Uma", "lastName": "User" });
            let reply = w.send(op, &[&tenant], Body::Json(body), t, 200, me, None).await;
            w.keep_created("uma", &reply.body["id"]);
        }
        "POST /api/auth/activate" => {
            let temporary = w.temporary("uma@bank.example").await;
            let uma = w.id("uma");
            let body =
                json!({ "email": "uma@bank.example", "temporaryPassword": temporary, "newPassword": NEW_PASSWORD });
            w.send(op, &[], Body::Json(body), None, 200, &uma, Some(&uma)).await;
        }
        "PATCH /api/tenants/{tenantId}/users/{userId}" => {
            let uma = w.id("uma");
            w.send(op, &[&tenant, &uma], Body::Json(json!({ "roleName": "ADMIN" })), t, 200, me, Some(&uma)).await;
        }
        "DELETE /api/tenants/{tenantId}/users/{userId}" => {
            let uma = w.id("uma");
            w.send(op, &[&tenant, &uma], Body::None, t, 204, me, Some(&uma)).await;
        }
        "POST /api/tenants/{tenantId}/roles" => {
            let body = json!({ "name": "Readers", "description": "", "permissions": ["customer:read"] });
            let reply = w.send(op, &[&tenant], Body::Json(body), t, 201, me, None).await;
            w.keep_created("role", &reply.body["id"]);
        }
        "PATCH /api/tenants/{tenantId}/roles/{roleId}" => {
            let role = w.id("role");
            w.send(op, &[&tenant, &role], Body::Json(json!({ "description": "Read" })), t, 200, me, Some(&role)).await;
        }
        "DELETE /api/tenants/{tenantId}/roles/{roleId}" => {
            let role = w.id("role");
            w.send(op, &[&tenant, &role], Body::None, t, 204, me, Some(&role)).await;
        }
        "POST /api/tenants/{tenantId}/groups" => {
            let body = json!({ "key": "checkers", "name": "checkers" });
            let reply = w.send(op, &[&tenant], Body::Json(body), t, 201, me, None).await;
            w.keep_created("group", &reply.body["id"]);
        }
        "PATCH /api/tenants/{tenantId}/groups/{groupId}" => {
            let group = w.id("group");
            w.send(op, &[&tenant, &group], Body::Json(json!({ "name": "Checkers" })), t, 200, me, Some(&group)).await;
        }
        "POST /api/tenants/{tenantId}/groups/{groupId}/members" => {
            let group = w.id("group");
            let carol = w.carol.id.clone();
            let body = Body::Json(json!({ "userId": carol }));
            w.send(op, &[&tenant, &group], body, t, 201, me, Some(&group)).await;
        }
        "DELETE /api/tenants/{tenantId}/groups/{groupId}/members/{userId}" => {
            let group = w.id("group");
            let dave = w.member("dave@bank.example").await;
            w.ids.insert("dave", dave.id.clone());
            let members = format!("/api/tenants/{tenant}/groups/{group}/members");
            call(&w.app, Method::POST, &members, t, Some(&json!({ "userId": dave.id }))).await.expect(201);
            w.send(op, &[&tenant, &group, &dave.id], Body::None, t, 204, me, Some(&group)).await;
        }
        "POST /api/tenants/{tenantId}/clients" => {
            let body = json!({ "name": "Nightly batch", "roleName": "USER" });
            let reply = w.send(op, &[&tenant], Body::Json(body), t, 201, me, None).await;
            w.keep_created("client", &reply.body["clientId"]);
            w.keep("reveal", &reply.body["secretRevealUrl"]);
        }
        "POST /idp/oauth2/token" => {
            let (client, url) = (w.id("client"), w.id("reveal"));
            let revealed =
                Reply::read(w.app.client.get(&url).header("API-Version", API_VERSION).send().await.expect("reveal"))
                    .await;
            revealed.expect(200);
            let secret = revealed.body["clientSecret"].as_str().expect("clientSecret").to_owned();
            let body = Body::Token { client_id: client.clone(), secret: secret.clone() };
            w.send(op, &[], body, None, 200, &client, Some(&client)).await;
            let wrong = Body::Token { client_id: client.clone(), secret: format!("{secret}x") };
            w.refused(op, &[], wrong, None, 401, &client, Some(&client)).await;
        }
        "DELETE /api/tenants/{tenantId}/clients/{clientId}" => {
            let client = w.id("client");
            w.send(op, &[&tenant, &client], Body::None, t, 204, me, Some(&client)).await;
        }
        "POST /api/contracts" => {
            w.send(op, &[], Body::Json(json!({ "assetId": "USD" })), t, 201, me, Some("USD")).await;
            w.app.drain_jobs().await;
            // Registered twice: a conflict, recorded as a failed attempt.
            w.refused(op, &[], Body::Json(json!({ "assetId": "USD" })), t, 409, me, Some("USD")).await;
        }
        "PATCH /api/contracts/{assetId}" => {
            w.send(op, &["USD"], Body::Json(json!({ "name": "US Dollar" })), t, 200, me, Some("USD")).await;
        }
        "POST /api/customers" => {
            let body = json!({ "customerRef": "c-1" });
            w.send(op, &[], Body::Json(body.clone()), t, 201, me, Some("c-1")).await;
            w.refused(op, &[], Body::Json(body), t, 409, me, Some("c-1")).await;
        }
        "POST /api/accounts" => {
            let body = json!({ "accountRef": "a-1", "customerRef": "c-1", "assetId": "USD" });
            w.send(op, &[], Body::Json(body), t, 201, me, Some("a-1")).await;
            w.app.drain_jobs().await;
        }
        "POST /api/transactions" => {
            let body = json!({ "txType": "MINT", "assetId": "USD", "accountRef": "a-1", "amount": "10.00" });
            let reply = w.send(op, &[], Body::Json(body), t, 202, me, None).await;
            w.keep_created("transaction", &reply.body["transactionId"]);
            w.app.drain_jobs().await;
        }
        "PATCH /api/accounts/{accountRef}" => {
            w.send(op, &["a-1"], Body::Json(json!({ "status": "INACTIVE" })), t, 200, me, Some("a-1")).await;
        }
        "POST /api/webhooks" => {
            let body = json!({ "url": w.receiver.url("/hooks"), "eventTypes": ["customer.status_changed"] });
            let reply = w.send(op, &[], Body::Json(body), t, 201, me, None).await;
            w.keep_created("webhook", &reply.body["id"]);
        }
        "PATCH /api/webhooks/{webhookId}" => {
            let webhook = w.id("webhook");
            let body = json!({ "eventTypes": ["customer.status_changed", "webhook.test"] });
            w.send(op, &[&webhook], Body::Json(body), t, 200, me, Some(&webhook)).await;
        }
        "POST /api/webhooks/{webhookId}/test" | "POST /api/webhooks/{webhookId}/secret/rotate" => {
            let webhook = w.id("webhook");
            w.send(op, &[&webhook], Body::None, t, 200, me, Some(&webhook)).await;
        }
        "PATCH /api/customers/{customerRef}" => {
            w.send(op, &["c-1"], Body::Json(json!({ "status": "INACTIVE" })), t, 200, me, Some("c-1")).await;
            // Its event is delivered to the webhook: what the redeliveries replay.
            w.app.drain_jobs().await;
            let events = call(&w.app, Method::GET, "/api/webhook-events?type=customer.status_changed", t, None).await;
            events.expect(200);
            let found = events.body["items"].as_array().expect("items").iter().find(|e| e["resource"]["id"] == "c-1");
            let event = found.expect("the customer's event")["id"].clone();
            w.keep("event", &event);
        }
        "POST /api/webhook-events/{eventId}/redeliver" => {
            let event = w.id("event");
            w.send(op, &[&event], Body::Json(json!({})), t, 202, me, Some(&event)).await;
            w.app.drain_jobs().await;
        }
        "POST /api/webhook-events/redeliver" => {
            let now = w.app.clock.now();
            let body =
                json!({ "from": now.plus_millis(-3_600_000).to_iso8601(), "to": now.plus_millis(1).to_iso8601() });
            w.send(op, &[], Body::Json(body), t, 202, me, None).await;
        }
        "DELETE /api/webhooks/{webhookId}" => {
            let webhook = w.id("webhook");
            w.send(op, &[&webhook], Body::None, t, 204, me, Some(&webhook)).await;
        }
        "POST /api/templates" => {
            let body = json!({
                "key": "treasury.big",
                "name": "Big transfers",
                "description": "Treasury's suggestion",
                "action": "TRANSFER",
                "defaultContent": { "appliesTo": { "action": "TRANSFER" }, "rules": [] },
            });
            w.send(op, &[], Body::Json(body), t, 201, me, Some("treasury.big")).await;
        }
        "PATCH /api/templates/{key}" => {
            let body = Body::Json(json!({ "description": "Now described" }));
            w.send(op, &["treasury.big"], body, t, 200, me, Some("treasury.big")).await;
        }
        "POST /api/templates/{key}/deprecate" => {
            w.send(op, &["treasury.big"], Body::None, t, 200, me, Some("treasury.big")).await;
        }
        "POST /api/policies" => {
            let body = json!({ "templateKey": "system.transfer.approval", "content": policy_content("1000") });
            let reply = w.send(op, &[], Body::Json(body), t, 201, me, None).await;
            w.keep_created("policy", &reply.body["id"]);
        }
        "PATCH /api/policies/{policyId}" => {
            let policy = w.id("policy");
            w.send(op, &[&policy], Body::Json(json!({ "name": "Large" })), t, 200, me, Some(&policy)).await;
        }
        "POST /api/policies/{policyId}/versions" => {
            let policy = w.id("policy");
            let body = Body::Json(json!({ "content": policy_content("2000") }));
            w.send(op, &[&policy], body, t, 201, me, Some(&policy)).await;
        }
        "PUT /api/policies/{policyId}/current-version" => {
            let policy = w.id("policy");
            let body = Body::Json(json!({ "versionNumber": 2 }));
            w.send(op, &[&policy], body, t, 200, me, Some(&policy)).await;
        }
        "POST /api/policies/{policyId}/activate" | "POST /api/policies/{policyId}/archive" => {
            let policy = w.id("policy");
            w.send(op, &[&policy], Body::None, t, 200, me, Some(&policy)).await;
        }
        "POST /api/approvals/requests" => {
            let reply = w.send(op, &[], Body::Json(approval()), t, 201, me, None).await;
            w.keep_created("request", &reply.body["id"]);
            w.keep("task", &reply.body["tasks"][0]["id"]);
        }
        "POST /api/approvals/tasks/{taskId}/approve"
        | "POST /api/approvals/tasks/{taskId}/reject"
        | "POST /api/approvals/tasks/{taskId}/reassign" => {
            // Each on a request of its own, raised by the owner and acted on by a checker.
            let raised = call(&w.app, Method::POST, "/api/approvals/requests", t, Some(&approval())).await;
            raised.expect(201);
            let task = raised.body["tasks"][0]["id"].as_str().expect("task").to_owned();
            let body = if op.ends_with("reassign") {
                json!({ "approver": format!("user:{}", w.id("dave")) })
            } else {
                json!({})
            };
            let carol = w.carol.clone();
            w.send(op, &[&task], Body::Json(body), Some(&carol.token), 200, &carol.id, Some(&task)).await;
        }
        "POST /api/approvals/requests/{requestId}/cancel" => {
            let request = w.id("request");
            w.send(op, &[&request], Body::None, t, 200, me, Some(&request)).await;
        }
        "POST /api/scripts" => {
            let body = json!({ "name": "noop", "source": "1" });
            let reply = w.send(op, &[], Body::Json(body), t, 201, me, None).await;
            w.keep_created("script", &reply.body["scriptId"]);
        }
        "PATCH /api/scripts/{scriptId}" => {
            let script = w.id("script");
            w.send(op, &[&script], Body::Json(json!({ "status": "PUBLISHED" })), t, 200, me, Some(&script)).await;
        }
        "POST /api/scripts/{scriptId}/clone" => {
            let script = w.id("script");
            let reply = w.send(op, &[&script], Body::Json(json!({ "name": "noop-copy" })), t, 201, me, None).await;
            // The clone is the resource the record names (the source is in its detail).
            w.keep_created("clone", &reply.body["scriptId"]);
        }
        "DELETE /api/scripts/{scriptId}" => {
            let clone = w.id("clone");
            w.send(op, &[&clone], Body::None, t, 204, me, Some(&clone)).await;
        }
        "POST /api/automations" => {
            let script = w.id("script");
            let reply = w.send(op, &[], Body::Json(json!({ "scriptId": script })), t, 201, me, None).await;
            w.keep_created("automation", &reply.body["automationId"]);
        }
        "POST /api/automations/{automationId}/executions" => {
            let automation = w.id("automation");
            w.send(op, &[&automation], Body::Json(json!({})), t, 202, me, Some(&automation)).await;
        }
        "PATCH /api/automations/{automationId}/status" => {
            let automation = w.id("automation");
            let body = Body::Json(json!({ "status": "INACTIVE" }));
            w.send(op, &[&automation], body, t, 200, me, Some(&automation)).await;
        }
        other => panic!("no request builder for {other}: add one to `drive` with its row in WRITES"),
    }
}

fn policy_content(threshold: &str) -> Value {
    json!({
        "appliesTo": { "action": "TRANSFER" },
        "rules": [{ "id": "big", "when": { "assetId": "== USD", "amount": format!(">= {threshold}") }, "emit": { "approver": "#checkers" } }],
    })
}

fn approval() -> Value {
    json!({
        "action": "LARGE_PAYMENT_RELEASE",
        "resourceType": "payment",
        "resourceId": "PAY-1",
        "approvers": [{ "step": 0, "approver": "#checkers" }],
    })
}

/// The operator creates the organisation and its owner signs in through the challenge: the
/// first three writes of the walk.
async fn organisation(app: TestApp, receiver: Receiver) -> World {
    let credentials = app.operator_credentials();
    let operator_id = credentials["clientId"].as_str().expect("clientId").to_owned();
    let operator = app.operator_token().await;
    let mut w = World {
        app,
        receiver,
        tenant: String::new(),
        operator,
        operator_id,
        owner: Person::default(),
        carol: Person::default(),
        ids: BTreeMap::new(),
        sent: Vec::new(),
    };
    let email = "olivia@bank.example";
    let body =
        json!({ "name": "Bank of Audits", "owner": { "email": email, "firstName": "Olivia", "lastName": "Owner" } });
    let (operator, operator_id) = (w.operator.clone(), w.operator_id.clone());
    let created = w.send("POST /api/tenants", &[], Body::Json(body), Some(&operator), 201, &operator_id, None).await;
    w.tenant = created.body["id"].as_str().expect("tenant id").to_owned();
    let owner_id = created.body["owner"]["id"].as_str().expect("owner id").to_owned();
    w.sent.last_mut().expect("sent").resource_id = Some(w.tenant.clone());

    let temporary = w.temporary(email).await;
    let wrong = Body::Json(json!({ "email": email, "password": "Not-The-Password-1" }));
    w.refused("POST /api/auth/login", &[], wrong, None, 401, &owner_id, Some(&owner_id)).await;
    let login = Body::Json(json!({ "email": email, "password": temporary }));
    let challenged = w.send("POST /api/auth/login", &[], login, None, 200, &owner_id, Some(&owner_id)).await;
    let session = challenged.body["session"].as_str().expect("session").to_owned();
    let body = Body::Json(json!({ "email": email, "newPassword": NEW_PASSWORD, "session": session }));
    let tokens = w.send("POST /api/auth/new-password", &[], body, None, 200, &owner_id, Some(&owner_id)).await;
    w.owner = Person {
        id: owner_id,
        token: tokens.body["accessToken"].as_str().expect("accessToken").to_owned(),
        refresh: tokens.body["refreshToken"].as_str().expect("refreshToken").to_owned(),
    };
    w.carol = w.member("carol@bank.example").await;
    w
}

/// The one audit record of `sent`, checked against the spec's fields; `false` when there is none.
async fn check_record(w: &World, sent: &Sent, expected: (&str, &str, &str), start: &str) -> bool {
    let (action, category, resource_type) = expected;
    let path = format!("/api/audit/events?requestId={}", sent.request_id);
    let found = call(&w.app, Method::GET, &path, Some(&w.owner.token), None).await;
    found.expect(200);
    let records = found.body["data"].as_array().unwrap_or_else(|| panic!("style B data: {}", found.body));
    let op = sent.op;
    if records.is_empty() {
        return false;
    }
    assert_eq!(records.len(), 1, "{op}: one audit record for request {}: {}", sent.request_id, found.body);
    let record = &records[0];
    let outcome = if sent.failure { "FAILURE" } else { "SUCCESS" };
    assert_eq!(record["action"], action, "{op}: action; {record}");
    assert_eq!(record["category"], category, "{op}: category; {record}");
    assert_eq!(record["resourceType"], resource_type, "{op}: resourceType; {record}");
    assert_eq!(record["outcome"], outcome, "{op}: outcome; {record}");
    assert_eq!(record["source"], "API", "{op}: source; {record}");
    assert_eq!(record["actorId"], sent.actor.as_str(), "{op}: actorId; {record}");
    assert_eq!(record["requestId"], sent.request_id.as_str(), "{op}: requestId; {record}");
    assert_eq!(record["httpStatus"], sent.status, "{op}: httpStatus; {record}");
    assert_eq!(record["idempotencyKey"], json!(sent.key), "{op}: idempotencyKey; {record}");
    if let Some(resource) = &sent.resource_id {
        assert_eq!(record["resourceId"], resource.as_str(), "{op}: resourceId; {record}");
    }
    assert!(Uuid::parse_str(record["id"].as_str().unwrap_or("")).is_ok(), "{op}: id; {record}");
    assert_iso_utc(&record["occurredAt"]);
    assert_iso_utc(&record["createdAt"]);
    let (occurred, created) = (record["occurredAt"].as_str().unwrap_or(""), record["createdAt"].as_str().unwrap_or(""));
    let at = |text: &str| tokenops_domain::Timestamp::parse_iso8601(text).expect("a timestamp");
    assert!(at(occurred) >= at(start) && at(occurred) <= at(created), "{op}: occurredAt {occurred}; {record}");
    // Read by id, the same record.
    let id = record["id"].as_str().unwrap_or("");
    let one = call(&w.app, Method::GET, &format!("/api/audit/events/{id}"), Some(&w.owner.token), None).await;
    one.expect(200);
    assert_eq!(&one.body, record, "{op}: read by id");
    true
}

async fn every_write_of_the_document_leaves_an_audit_record(backend: Backend) {
    let receiver = Receiver::start().await;
    let dir = std::env::temp_dir().join(format!("tokenops-audit-ca-{}", Uuid::now_v7()));
    std::fs::create_dir_all(&dir).expect("CA directory");
    let ca = receiver.write_ca_file(&dir);
    let settings = BTreeMap::from([
        ("TOKENOPS_WEBHOOK_ALLOW_CIDRS".to_owned(), ALLOW_CIDRS.to_owned()),
        ("TOKENOPS_WEBHOOK_CA_FILE".to_owned(), ca.display().to_string()),
    ]);
    let app = TestApp::spawn_embedded(backend, settings).await;

    // The table covers the document exactly: a write it does not name fails here, by name.
    let document = Reply::read(app.raw(Method::GET, "/openapi.json").send().await.expect("openapi.json")).await;
    document.expect(200);
    let in_document = writes_in_document(&document.body);
    let in_table: BTreeSet<String> = WRITES.iter().map(|(op, _)| (*op).to_owned()).collect();
    assert_eq!(in_table.len(), WRITES.len(), "an operation is named twice in WRITES");
    let uncovered: Vec<&String> = in_document.difference(&in_table).collect();
    assert!(
        uncovered.is_empty(),
        "write operations of the OpenAPI document with no row in audit_coverage::WRITES (say how each is audited, \
         or why it is exempt, and add its request builder to `drive`): {uncovered:?}"
    );
    for (op, audit) in WRITES {
        if let Exempt(why) = audit {
            assert!(why.len() > 20, "{op}: an exemption says why the write is not audited");
        }
    }
    let stale: Vec<&String> = in_table.difference(&in_document).collect();
    assert!(stale.is_empty(), "rows of WRITES the document no longer has: {stale:?}");

    let start = app.clock.now().to_iso8601();
    let mut w = organisation(app, receiver).await;
    for (op, audit) in WRITES.iter().skip(3) {
        if let As(..) = audit {
            drive(&mut w, op).await;
        }
    }

    let expected: BTreeMap<&str, (&str, &str, &str)> = WRITES
        .iter()
        .filter_map(|(op, audit)| match audit {
            As(action, category, resource_type) => Some((*op, (*action, *category, *resource_type))),
            Exempt(_) => None,
        })
        .collect();
    let driven: BTreeSet<&str> = w.sent.iter().filter(|s| !s.failure).map(|s| s.op).collect();
    let undriven: Vec<&&str> = expected.keys().filter(|op| !driven.contains(**op)).collect();
    assert!(undriven.is_empty(), "audited writes the walk did not drive: {undriven:?}");
    assert!(w.sent.iter().filter(|s| s.failure).count() >= 30, "failed attempts of most writes were driven");
    let mut unaudited = Vec::new();
    for sent in &w.sent {
        if !check_record(&w, sent, expected[sent.op], &start).await {
            let outcome = if sent.failure { "a refusal" } else { "a success" };
            unaudited.push(format!("{} ({outcome}, {})", sent.op, sent.status));
        }
    }
    assert!(unaudited.is_empty(), "writes that left no audit record: {unaudited:#?}");
}
