//! Organisations and sign-in with the embedded provider, over HTTP: the operator creates an
//! organisation, the owner's invitation (temporary password) lands in the mail outbox, login
//! answers the NEW_PASSWORD_REQUIRED challenge, new-password and activate make the user ACTIVE,
//! refresh issues access tokens only, credential failures are one identical 401, lockout, and
//! revoked access on the user's own profile.

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

async fn repeated_failures_lock_the_account_without_changing_the_answer(backend: Backend) {
    let app = embedded(backend).await;
    let email = "lock@bank.example";
    signed_in_owner(&app, email).await;
    for _ in 0..5 {
        login(&app, email, "Wrong-Password-1").await.expect(401);
    }
    // Locked: even the right password gets the same 401 for a while.
    let locked = login(&app, email, NEW_PASSWORD).await;
    locked.expect(401);
    assert_eq!(locked.body["message"], "Invalid credentials.");
    app.clock.advance_millis(16 * 60 * 1_000);
    login(&app, email, NEW_PASSWORD).await.expect(200);
    // Every attempt is in the audit log, failures included.
    assert!(app.db.count("audit_records", "action = 'auth.login' AND outcome = 'FAILURE'").await >= 6);
    assert!(app.db.count("audit_records", "action = 'auth.login' AND outcome = 'SUCCESS'").await >= 1);
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
    repeated_failures_lock_the_account_without_changing_the_answer,
    refresh_gives_access_tokens_only_until_revoked_or_expired,
    a_suspended_user_is_told_access_has_been_revoked_even_with_a_live_token,
    only_the_operator_creates_organisations_and_emails_are_unique,
    a_weak_new_password_is_refused_alike_for_any_email,
    invitation_mail_is_readable_by_its_owner_only,
    organisations_are_not_created_through_an_external_provider,
);
