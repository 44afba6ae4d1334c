//! Organisations and their people with the embedded identity provider, over HTTP, the way a
//! bank's administrator gets there: the operator creates an organisation, the owner's invitation
//! (a temporary password) is read from the file mail outbox, login answers the
//! NEW_PASSWORD_REQUIRED challenge, new-password gives tokens; the owner then invites others.
//!
//! Every helper asserts the statuses on its way, so a test reads as the rule it checks.

use reqwest::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use uuid::Uuid;

use crate::{API_VERSION, Reply, TestApp};

/// The password every helper chooses when it completes an activation.
pub const NEW_PASSWORD: &str = "Correct-Horse-42";

/// A request as an integrator sends it: `API-Version`, the bearer token when given, and a JSON
/// body with a fresh `Idempotency-Key` when given.
pub async fn call(app: &TestApp, method: Method, path: &str, token: Option<&str>, body: Option<&Value>) -> Reply {
    let mut request = app.raw(method, path).header("API-Version", API_VERSION);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.header("Idempotency-Key", Uuid::now_v7().to_string()).json(body);
    }
    Reply::read(request.send().await.expect("request")).await
}

/// The invitation mails in the file outbox of `data_dir` addressed to `email`, oldest first.
fn invitations_to(data_dir: &Path, email: &str) -> Vec<String> {
    let outbox = data_dir.join("outbox");
    let Ok(entries) = std::fs::read_dir(&outbox) else { return Vec::new() };
    let mut mails: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".eml") && !name.starts_with('.')
        })
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    mails.sort();
    mails
        .into_iter()
        .filter_map(|(_, path)| std::fs::read_to_string(path).ok())
        .filter(|text| {
            text.lines().any(|l| {
                l.strip_prefix("To:").is_some_and(|to| to.trim().trim_matches(['<', '>']).eq_ignore_ascii_case(email))
            })
        })
        .collect()
}

/// The temporary password of the newest invitation to `email` in the file outbox of a service
/// whose data directory is `data_dir` (a child process's too), if it has been delivered.
pub fn temporary_password_in(data_dir: &Path, email: &str) -> Option<String> {
    let mail = invitations_to(data_dir, email).pop()?;
    let line = mail
        .lines()
        .find(|l| l.starts_with("Temporary password: "))
        .unwrap_or_else(|| panic!("the invitation to {email} has no temporary password line"));
    Some(line.trim_start_matches("Temporary password: ").trim().to_owned())
}

/// The temporary password of the newest invitation sent to `email` (drain the jobs first).
pub fn temporary_password(app: &TestApp, email: &str) -> String {
    temporary_password_in(app.db.dir(), email).unwrap_or_else(|| panic!("no invitation for {email} in the outbox"))
}

/// How many invitations `email` has received.
pub fn invitation_count(app: &TestApp, email: &str) -> usize {
    invitations_to(app.db.dir(), email).len()
}

pub async fn login(app: &TestApp, email: &str, password: &str) -> Reply {
    call(app, Method::POST, "/api/auth/login", None, Some(&json!({ "email": email, "password": password }))).await
}

/// Signs an invited user in through the challenge with [`NEW_PASSWORD`]; returns their tokens.
/// The temporary password's login is the challenge only, never tokens.
pub async fn activate_through_challenge(app: &TestApp, email: &str, temporary: &str) -> Value {
    let challenged = login(app, email, temporary).await;
    challenged.expect(200);
    assert_eq!(challenged.body["challenge"], "NEW_PASSWORD_REQUIRED", "{}", challenged.body);
    let tokens = ["accessToken", "refreshToken"];
    assert!(tokens.iter().all(|t| challenged.body.get(t).is_none()), "a challenge, not tokens: {}", challenged.body);
    let session = challenged.body["session"].as_str().expect("session").to_owned();
    let done = call(
        app,
        Method::POST,
        "/api/auth/new-password",
        None,
        Some(&json!({ "email": email, "newPassword": NEW_PASSWORD, "session": session })),
    )
    .await;
    done.expect(200);
    done.body
}

/// Has the operator create an organisation owned by `email` and delivers the invitation;
/// returns (tenant id, the owner's temporary password). The owner is still INVITED.
pub async fn create_organisation_invited(app: &TestApp, email: &str) -> (String, String) {
    let operator = app.operator_token().await;
    let body =
        json!({ "name": "Bank of Tests", "owner": { "email": email, "firstName": "Olivia", "lastName": "Owner" } });
    let created = call(app, Method::POST, "/api/tenants", Some(&operator), Some(&body)).await;
    created.expect(201);
    assert_eq!(created.body["owner"]["status"], "INVITED");
    assert_eq!(created.body["owner"]["role"], "SUPER_ADMIN");
    app.drain_jobs().await;
    (created.body["id"].as_str().expect("id").to_owned(), temporary_password(app, email))
}

/// Creates an organisation and activates its owner (SUPER_ADMIN) through the challenge;
/// returns (tenant id, the owner's access token).
pub async fn create_organisation(app: &TestApp, email: &str) -> (String, String) {
    let (tenant, temporary) = create_organisation_invited(app, email).await;
    let tokens = activate_through_challenge(app, email, &temporary).await;
    (tenant, tokens["accessToken"].as_str().expect("access token").to_owned())
}

/// `POST /api/tenants/{tenant}/users` as `inviter`, with the names derived from the email.
pub async fn invite(app: &TestApp, tenant: &str, inviter: &str, email: &str, role_name: Option<&str>) -> Reply {
    let local = email.split('@').next().unwrap_or(email);
    let mut first = local.to_owned();
    if let Some(c) = first.get_mut(0..1) {
        c.make_ascii_uppercase();
    }
    invite_named(app, tenant, inviter, email, &first, "Tester", role_name).await
}

/// `POST /api/tenants/{tenant}/users` as `inviter` with the given names.
pub async fn invite_named(
    app: &TestApp,
    tenant: &str,
    inviter: &str,
    email: &str,
    first_name: &str,
    last_name: &str,
    role_name: Option<&str>,
) -> Reply {
    let mut body = json!({ "email": email, "firstName": first_name, "lastName": last_name });
    if let Some(role) = role_name {
        body["roleName"] = json!(role);
    }
    call(app, Method::POST, &format!("/api/tenants/{tenant}/users"), Some(inviter), Some(&body)).await
}

/// A user who went through invitation and activation.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub email: String,
    pub access_token: String,
    pub refresh_token: String,
}

/// Reads `email`'s invitation from the outbox and activates it through the challenge.
pub async fn accept_invitation(app: &TestApp, id: &str, email: &str) -> Member {
    app.drain_jobs().await;
    let temporary = temporary_password(app, email);
    let tokens = activate_through_challenge(app, email, &temporary).await;
    Member {
        id: id.to_owned(),
        email: email.to_owned(),
        access_token: tokens["accessToken"].as_str().expect("access token").to_owned(),
        refresh_token: tokens["refreshToken"].as_str().expect("refresh token").to_owned(),
    }
}

/// Invites `email` with `role_name` (USER when `None`) as `inviter`, then activates them.
pub async fn invite_member(app: &TestApp, tenant: &str, inviter: &str, email: &str, role_name: Option<&str>) -> Member {
    let invited = invite(app, tenant, inviter, email, role_name).await;
    invited.expect(200);
    accept_invitation(app, invited.body["id"].as_str().expect("user id"), email).await
}

/// Invites and activates a user; returns (user id, access token).
pub async fn invite_and_activate(
    app: &TestApp,
    tenant: &str,
    inviter: &str,
    email: &str,
    role_name: Option<&str>,
) -> (String, String) {
    let member = invite_member(app, tenant, inviter, email, role_name).await;
    (member.id, member.access_token)
}
