//! Organisations and sign-in with the embedded provider, over HTTP: the operator creates an
//! organisation, the owner's invitation (temporary password) lands in the mail outbox, login
//! answers the NEW_PASSWORD_REQUIRED challenge, new-password and activate make the user ACTIVE,
//! refresh issues access tokens only, credential failures are one identical 401 (a refresh token
//! or session of any length included), the progressive lockout, bodies that are not JSON objects,
//! and revoked access on the user's own profile.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokenops_testkit::organisation::{
    NEW_PASSWORD, activate_through_challenge, call, create_organisation_invited as create_organisation, login,
};
use tokenops_testkit::{Backend, Reply, TestApp, backends};

async fn embedded(backend: Backend) -> TestApp {
    TestApp::spawn_embedded(backend, BTreeMap::new()).await
}

/// A new organisation whose owner `email` has set a password and signed in: the owner's tokens.
async fn signed_in_owner(app: &TestApp, email: &str) -> Value {
    let (_, temporary) = create_organisation(app, email).await;
    activate_through_challenge(app, email, &temporary).await
}

async fn a_newcomer_goes_from_operator_to_signed_in_owner(backend: Backend) {
    let app = embedded(backend).await;
    let email = "olivia@bank.example";
    let (tenant_id, temporary) = create_organisation(&app, email).await;

    // First login with the temporary password: a challenge, never tokens; the new password
    // answers it with tokens.
    let tokens = activate_through_challenge(&app, email, &temporary).await;
    assert_eq!(tokens["tokenType"], "Bearer");
    assert_eq!(tokens["expiresIn"], 3600);
    let access = tokens["accessToken"].as_str().expect("access token");
    assert!(tokens["refreshToken"].as_str().is_some());

    let me = call(&app, Method::GET, "/api/users/me", Some(access), None).await;
    me.expect(200);
    assert_eq!(me.body["email"], email);
    assert_eq!(me.body["status"], "ACTIVE");
    assert_eq!(me.body["role"], "SUPER_ADMIN");
    assert_eq!(me.body["tenantId"], tenant_id.as_str());
    // The owner works in their organisation.
    call(&app, Method::GET, "/api/customers", Some(access), None).await.expect(200);
    // The temporary password is unusable afterwards; the new one signs in with tokens.
    login(&app, email, &temporary).await.expect(401);
    let again = login(&app, email, NEW_PASSWORD).await;
    again.expect(200);
    assert!(again.body["accessToken"].is_string() && again.body.get("challenge").is_none());
}

async fn activate_sets_the_first_password_with_the_temporary_one(backend: Backend) {
    let app = embedded(backend).await;
    let email = "ada@bank.example";
    let (_, temporary) = create_organisation(&app, email).await;
    let body = |temp: &str, new: &str| json!({ "email": email, "temporaryPassword": temp, "newPassword": new });
    let weak = call(&app, Method::POST, "/api/auth/activate", None, Some(&body(&temporary, "short"))).await;
    weak.expect(400);
    assert!(weak.body["message"].as_str().is_some_and(|m| m.starts_with("Password must be")), "{}", weak.body);
    call(&app, Method::POST, "/api/auth/activate", None, Some(&body("Wrong-Temporary-1", NEW_PASSWORD)))
        .await
        .expect(401);
    let done = call(&app, Method::POST, "/api/auth/activate", None, Some(&body(&temporary, NEW_PASSWORD))).await;
    done.expect(200);
    assert!(done.body["accessToken"].is_string());
    // Once ACTIVE, activation is over.
    call(&app, Method::POST, "/api/auth/activate", None, Some(&body(&temporary, NEW_PASSWORD))).await.expect(401);
}

async fn every_credential_failure_is_the_same_401(backend: Backend) {
    let app = embedded(backend).await;
    let email = "eve@bank.example";
    signed_in_owner(&app, email).await;
    let wrong_password = login(&app, email, "Wrong-Password-1").await;
    let unknown_email = login(&app, "nobody@bank.example", "Wrong-Password-1").await;
    for reply in [&wrong_password, &unknown_email] {
        reply.expect(401);
        assert_eq!(reply.body["message"], "Invalid credentials.");
    }
    let strip = |b: &Value| {
        let mut b = b.clone();
        for volatile in ["timestamp", "requestId"] {
            b.as_object_mut().expect("object").remove(volatile);
        }
        b
    };
    assert_eq!(strip(&wrong_password.body), strip(&unknown_email.body));
    // Sign-in errors use the spec's spaced timestamps.
    let ts = wrong_password.body["timestamp"].as_str().expect("timestamp");
    assert!(ts.len() == 23 && ts.as_bytes()[10] == b' ', "{ts}");
    // A suspended user is refused the same way, even with the right password.
    app.db.execute(&format!("UPDATE users SET status = 'SUSPENDED' WHERE email = '{email}'")).await;
    let suspended = login(&app, email, NEW_PASSWORD).await;
    suspended.expect(401);
    assert_eq!(strip(&suspended.body), strip(&unknown_email.body));
}

async fn sign_in_bodies_are_validated_field_by_field(backend: Backend) {
    let app = embedded(backend).await;
    for (body, field) in [
        (json!({ "password": "x" }), "email"),
        (json!({ "email": "not-an-email", "password": "x" }), "email"),
        (json!({ "email": "a@b.example" }), "password"),
        (json!({ "email": "a@b.example", "password": "" }), "password"),
        (json!({ "email": 5, "password": "x" }), "email"),
    ] {
        let reply = call(&app, Method::POST, "/api/auth/login", None, Some(&body)).await;
        reply.expect(400);
        assert_eq!(reply.body["message"], format!("Invalid Request parameter. {field}").as_str());
    }
    let malformed = Reply::read(
        app.raw(Method::POST, "/api/auth/login")
            .header("API-Version", "1.0.0")
            .header("Content-Type", "application/json")
            .body("{\"email\":")
            .send()
            .await
            .expect("send"),
    )
    .await;
    malformed.expect(400);
    assert_eq!(malformed.body["message"], "Malformed JSON request");
    let refresh = call(&app, Method::POST, "/api/auth/refresh", None, Some(&json!({}))).await;
    refresh.expect(400);
    assert_eq!(refresh.body["message"], "Invalid Request parameter. refreshToken");
}

/// The error envelope without what differs on every answer.
fn stable(body: &Value) -> Value {
    let mut body = body.clone();
    for volatile in ["timestamp", "requestId"] {
        body.as_object_mut().expect("object").remove(volatile);
    }
    body
}

/// Progressive, as managed user pools do it: five failures in a row lock the account for a
/// second, each failure once a lock has run out doubles it, attempts during a lock neither count
/// nor extend it, and a success starts over. The answer never changes.
async fn repeated_failures_lock_the_account_progressively_without_changing_the_answer(backend: Backend) {
    let app = embedded(backend).await;
    let email = "lock@bank.example";
    signed_in_owner(&app, email).await;
    let wrong = || login(&app, email, "Wrong-Password-1");
    let right = || login(&app, email, NEW_PASSWORD);

    // Four failures lock nothing, and a success forgets them.
    for _ in 0..4 {
        wrong().await.expect(401);
    }
    right().await.expect(200);

    // Five lock for a second: even the right password gets the wrong password's 401.
    let mut refusal = Value::Null;
    for _ in 0..5 {
        let reply = wrong().await;
        reply.expect(401);
        refusal = stable(&reply.body);
    }
    let locked = right().await;
    locked.expect(401);
    assert_eq!(locked.body["message"], "Invalid credentials.");
    assert_eq!(stable(&locked.body), refusal, "a lock is answered as a wrong password");
    // A burst during the lock neither counts nor extends it.
    for _ in 0..5 {
        wrong().await.expect(401);
    }
    app.clock.advance_millis(1_000);
    right().await.expect(200);

    // After the success, five failures lock for a second again; the next failure after that
    // lock has run out locks for two.
    for _ in 0..5 {
        wrong().await.expect(401);
    }
    app.clock.advance_millis(1_000);
    wrong().await.expect(401);
    app.clock.advance_millis(1_000);
    right().await.expect(401);
    app.clock.advance_millis(1_000);
    right().await.expect(200);

    // Every attempt is in the audit log, failures included.
    assert!(app.db.count("audit_records", "action = 'auth.login' AND outcome = 'FAILURE'").await >= 22);
    assert!(app.db.count("audit_records", "action = 'auth.login' AND outcome = 'SUCCESS'").await >= 4);
}

/// Activation's temporary password counts towards the same lockout.
async fn wrong_temporary_passwords_lock_activation_too(backend: Backend) {
    let app = embedded(backend).await;
    let email = "tara@bank.example";
    let (_, temporary) = create_organisation(&app, email).await;
    let app = &app;
    let activate = |temp: &str| {
        let body = json!({ "email": email, "temporaryPassword": temp, "newPassword": NEW_PASSWORD });
        async move { call(app, Method::POST, "/api/auth/activate", None, Some(&body)).await }
    };
    for _ in 0..5 {
        activate("Wrong-Temporary-1").await.expect(401);
    }
    let locked = activate(&temporary).await;
    locked.expect(401);
    assert_eq!(locked.body["message"], "Invalid credentials.");
    app.clock.advance_millis(1_000);
    activate(&temporary).await.expect(200);
}

/// Any text sent as a refresh token or a session that is not a live one is the spec's 401,
/// whatever its length (another provider's refresh tokens exceed 1,000 characters, and an access
/// token sent by mistake is about 600); only an absent, blank or non-string field is a 400.
async fn a_credential_of_any_length_that_is_not_live_is_401_not_400(backend: Backend) {
    let app = embedded(backend).await;
    let email = "lena@bank.example";
    let tokens = signed_in_owner(&app, email).await;
    let access = tokens["accessToken"].as_str().expect("access token");
    assert!(access.len() > 256, "an access token is longer than the old bound: {}", access.len());
    for bad in [access.to_owned(), "r".repeat(1_500), "r".repeat(8 * 1_024 + 1), "r".repeat(100_000)] {
        let reply = call(&app, Method::POST, "/api/auth/refresh", None, Some(&json!({ "refreshToken": bad }))).await;
        reply.expect(401);
        assert_eq!(reply.body["message"], "Refresh token is invalid or expired.", "{} characters", bad.len());
    }
    for (body, field) in [
        (json!({}), "refreshToken"),
        (json!({ "refreshToken": " " }), "refreshToken"),
        (json!({ "refreshToken": 5 }), "refreshToken"),
        (json!({ "refreshToken": null }), "refreshToken"),
    ] {
        let reply = call(&app, Method::POST, "/api/auth/refresh", None, Some(&body)).await;
        reply.expect(400);
        assert_eq!(reply.body["message"], format!("Invalid Request parameter. {field}").as_str());
    }

    // A challenge's session likewise: a long bogus one is a wrong credential.
    let invited = "nina@bank.example";
    let (_, temporary) = create_organisation(&app, invited).await;
    let challenged = login(&app, invited, &temporary).await;
    challenged.expect(200);
    for bad in ["s".repeat(600), "s".repeat(8 * 1_024 + 1)] {
        let body = json!({ "email": invited, "newPassword": NEW_PASSWORD, "session": bad });
        let reply = call(&app, Method::POST, "/api/auth/new-password", None, Some(&body)).await;
        reply.expect(401);
        assert_eq!(reply.body["message"], "Invalid credentials.", "{} characters", bad.len());
    }
    let blank = json!({ "email": invited, "newPassword": NEW_PASSWORD, "session": "" });
    let reply = call(&app, Method::POST, "/api/auth/new-password", None, Some(&blank)).await;
    reply.expect(400);
    assert_eq!(reply.body["message"], "Invalid Request parameter. session");
}

/// JSON that is not an object cannot be read as a sign-in body: the spec's `Malformed JSON
/// request`, as unreadable JSON is, on each of the four endpoints.
async fn a_sign_in_body_that_is_not_a_json_object_is_malformed(backend: Backend) {
    let app = embedded(backend).await;
    for path in ["/api/auth/login", "/api/auth/new-password", "/api/auth/activate", "/api/auth/refresh"] {
        for body in ["[1]", "null", "\"x\"", "5", "{\"email\":"] {
            let reply = Reply::read(
                app.raw(Method::POST, path)
                    .header("API-Version", "1.0.0")
                    .header("Content-Type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .expect("send"),
            )
            .await;
            reply.expect(400);
            assert_eq!(reply.body["message"], "Malformed JSON request", "{path} {body}: {}", reply.body);
            assert_eq!(reply.body["code"], "MALFORMED_JSON", "{path} {body}: {}", reply.body);
        }
    }
    // A NUL in a field is that field's 400, not a message of its own.
    let nul = json!({ "email": "a@b.example", "password": "x\u{0}y" });
    let reply = call(&app, Method::POST, "/api/auth/login", None, Some(&nul)).await;
    reply.expect(400);
    assert_eq!(reply.body["message"], "Invalid Request parameter. password");
}

async fn refresh_gives_access_tokens_only_until_revoked_or_expired(backend: Backend) {
    let app = embedded(backend).await;
    let email = "rita@bank.example";
    let tokens = signed_in_owner(&app, email).await;
    let refresh_token = tokens["refreshToken"].as_str().expect("refresh token");
    let refreshed =
        call(&app, Method::POST, "/api/auth/refresh", None, Some(&json!({ "refreshToken": refresh_token }))).await;
    refreshed.expect(200);
    assert!(refreshed.body["accessToken"].is_string());
    assert!(refreshed.body.get("refreshToken").is_none(), "no new refresh token");
    // A refresh token is not an access token.
    call(&app, Method::GET, "/api/users/me", Some(refresh_token), None).await.expect(401);
    for bad in ["not-a-token", "A".repeat(43).as_str()] {
        let reply = call(&app, Method::POST, "/api/auth/refresh", None, Some(&json!({ "refreshToken": bad }))).await;
        reply.expect(401);
        assert_eq!(reply.body["message"], "Refresh token is invalid or expired.");
    }
    // A disabled account's refresh token stops working.
    app.db.execute(&format!("UPDATE users SET status = 'SUSPENDED' WHERE email = '{email}'")).await;
    let disabled =
        call(&app, Method::POST, "/api/auth/refresh", None, Some(&json!({ "refreshToken": refresh_token }))).await;
    disabled.expect(401);
    assert_eq!(disabled.body["message"], "Refresh token is invalid or expired.");
    // And an expired one (12 hours by default).
    app.db.execute(&format!("UPDATE users SET status = 'ACTIVE' WHERE email = '{email}'")).await;
    app.clock.advance_millis(12 * 3_600_000 + 1_000);
    call(&app, Method::POST, "/api/auth/refresh", None, Some(&json!({ "refreshToken": refresh_token })))
        .await
        .expect(401);
}

async fn a_suspended_user_is_told_access_has_been_revoked_even_with_a_live_token(backend: Backend) {
    let app = embedded(backend).await;
    let email = "sam@bank.example";
    let tokens = signed_in_owner(&app, email).await;
    let access = tokens["accessToken"].as_str().expect("access");
    call(&app, Method::GET, "/api/users/me", Some(access), None).await.expect(200);
    app.db.execute(&format!("UPDATE users SET status = 'SUSPENDED' WHERE email = '{email}'")).await;
    let revoked = call(&app, Method::GET, "/api/users/me", Some(access), None).await;
    revoked.expect(401);
    assert_eq!(revoked.body["message"], "Your access has been revoked.");
}

async fn only_the_operator_creates_organisations_and_emails_are_unique(backend: Backend) {
    let app = embedded(backend).await;
    let email = "uma@bank.example";
    let tokens = signed_in_owner(&app, email).await;
    let owner = tokens["accessToken"].as_str().expect("access");
    let body =
        json!({ "name": "Other Bank", "owner": { "email": "x@other.example", "firstName": "X", "lastName": "Y" } });
    call(&app, Method::POST, "/api/tenants", Some(owner), Some(&body)).await.expect(403);
    let operator = app.operator_token().await;
    let taken =
        json!({ "name": "Other Bank", "owner": { "email": "UMA@bank.example", "firstName": "U", "lastName": "M" } });
    call(&app, Method::POST, "/api/tenants", Some(&operator), Some(&taken)).await.expect(409);
    for (bad, field) in [
        (json!({ "owner": { "email": "a@b.example", "firstName": "A", "lastName": "B" } }), "name"),
        (json!({ "name": "N" }), "owner"),
        (json!({ "name": "N", "owner": { "email": "nope", "firstName": "A", "lastName": "B" } }), "owner.email"),
        (json!({ "name": "N", "owner": { "email": "ab@", "firstName": "A", "lastName": "B" } }), "owner.email"),
        (
            json!({ "name": "N", "owner": { "email": "a@b@c.example", "firstName": "A", "lastName": "B" } }),
            "owner.email",
        ),
        (
            json!({ "name": "N", "owner": { "email": "a@b.example", "firstName": " ", "lastName": "B" } }),
            "owner.firstName",
        ),
    ] {
        let reply = call(&app, Method::POST, "/api/tenants", Some(&operator), Some(&bad)).await;
        reply.expect(400);
        assert!(reply.body["message"].as_str().is_some_and(|m| m.starts_with(field)), "{}", reply.body);
    }
}

async fn a_weak_new_password_is_refused_alike_for_any_email(backend: Backend) {
    let app = embedded(backend).await;
    let email = "ivy@bank.example";
    create_organisation(&app, email).await;
    // The policy answers before any lookup: an invited email and an unknown one look the same.
    for who in [email, "nobody@bank.example"] {
        let body = json!({ "email": who, "newPassword": "weak", "session": "x" });
        let reply = call(&app, Method::POST, "/api/auth/new-password", None, Some(&body)).await;
        reply.expect(400);
        assert!(reply.body["message"].as_str().is_some_and(|m| m.starts_with("Password must be")), "{}", reply.body);
    }
}

async fn invitation_mail_is_readable_by_its_owner_only(backend: Backend) {
    let app = embedded(backend).await;
    create_organisation(&app, "mia@bank.example").await;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let outbox = app.db.dir().join("outbox");
        assert_eq!(std::fs::metadata(&outbox).expect("outbox").permissions().mode() & 0o777, 0o700);
        for entry in std::fs::read_dir(&outbox).expect("outbox") {
            let mode = entry.expect("entry").metadata().expect("metadata").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}

async fn organisations_are_not_created_through_an_external_provider(backend: Backend) {
    // A bank's token without tenant_id is not thereby the platform operator.
    let app = TestApp::spawn(backend).await;
    let platform = app.issuer.sign(&app.issuer.claims(&app.clock, "someone", None, 3_600));
    let body = json!({ "name": "N", "owner": { "email": "a@b.example", "firstName": "A", "lastName": "B" } });
    call(&app, Method::POST, "/api/tenants", Some(&platform), Some(&body)).await.expect(404);
}

backends!(
    a_newcomer_goes_from_operator_to_signed_in_owner,
    activate_sets_the_first_password_with_the_temporary_one,
    every_credential_failure_is_the_same_401,
    sign_in_bodies_are_validated_field_by_field,
    repeated_failures_lock_the_account_progressively_without_changing_the_answer,
    wrong_temporary_passwords_lock_activation_too,
    a_credential_of_any_length_that_is_not_live_is_401_not_400,
    a_sign_in_body_that_is_not_a_json_object_is_malformed,
    refresh_gives_access_tokens_only_until_revoked_or_expired,
    a_suspended_user_is_told_access_has_been_revoked_even_with_a_live_token,
    only_the_operator_creates_organisations_and_emails_are_unique,
    a_weak_new_password_is_refused_alike_for_any_email,
    invitation_mail_is_readable_by_its_owner_only,
    organisations_are_not_created_through_an_external_provider,
);
