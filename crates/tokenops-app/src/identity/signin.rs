//! Sign-in with the embedded provider: login (tokens, or the NEW_PASSWORD_REQUIRED challenge for
//! an invited user), completing the challenge with a new password, activation with the
//! temporary password, and refresh. Every credential failure is the same `401 Invalid
//! credentials.` whatever its cause (unknown email, wrong password, not ACTIVE, locked), and
//! takes the same time; failures count towards a lockout (`AppSettings::sign_in_lockout`,
//! progressive: see `tokenops_identity::lockout`) that never changes the answer. Each attempt,
//! successful or not, is an audit record.

use crate::App;
use crate::context::{Caller, RequestContext};
use crate::error::{AppResult, Code, Error};
use crate::write::{Admission, AuditAction, AuditResource, Write, WriteResponse};
use serde::Serialize;
use tokenops_domain::Timestamp;
use tokenops_domain::audit::AuditSource;
use tokenops_domain::identity::UserStatus;
use tokenops_identity::{LockoutState, PasswordPolicy, opaque, passwords};
use tokenops_store::{ChallengeRecord, RefreshTokenRecord, UserRecord};

/// A user signing in: the IDENTITY category, unlike `users::USER`, the organisation's management of members.
const SIGNING_IN_USER: AuditResource = AuditResource { category: "IDENTITY", resource_type: "user" };
pub const LOGIN: AuditAction = SIGNING_IN_USER.action("auth.login");
pub const NEW_PASSWORD: AuditAction = SIGNING_IN_USER.action("auth.new_password");
pub const ACTIVATE: AuditAction = SIGNING_IN_USER.action("auth.activate");
pub const REFRESH: AuditAction = SIGNING_IN_USER.action("auth.refresh");

/// How long a NEW_PASSWORD_REQUIRED session may be completed.
const CHALLENGE_TTL_MS: i64 = 10 * 60 * 1_000;

/// The longest refresh token or session looked up. Ours are 43 characters, but any text is
/// answered as a credential that does not match (the spec's 401, never a 400: other providers'
/// refresh tokens exceed 1,000 characters, and a client may send an access token by mistake);
/// beyond this bound it is refused without being hashed or looked up.
const OPAQUE_CREDENTIAL_MAX: usize = 8 * 1_024;

/// Whether `text` is short enough to be looked up as a refresh token or session.
fn worth_looking_up(text: &str) -> bool {
    text.len() <= OPAQUE_CREDENTIAL_MAX
}

/// The tokens a successful sign-in returns. `Debug` hides them.
#[derive(Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tokens {
    pub access_token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    pub token_type: &'static str,
    pub expires_in: i64,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("token_type", &self.token_type)
            .field("expires_in", &self.expires_in)
            .finish_non_exhaustive()
    }
}

/// Login answers with tokens or with a challenge, never both.
#[derive(Debug, Clone)]
pub enum LoginOutcome {
    Tokens(Tokens),
    NewPasswordRequired { session: String },
}

fn invalid_credentials() -> Error {
    Error::of(Code::InvalidCredentials)
}

fn lockout_state(user: &UserRecord) -> LockoutState {
    LockoutState {
        failures: user.failed_sign_ins,
        first_failure_at: user.first_failed_sign_in_at,
        locked_until: user.locked_until,
    }
}

fn set_lockout_state(user: &mut UserRecord, state: LockoutState) {
    user.failed_sign_ins = state.failures;
    user.first_failed_sign_in_at = state.first_failure_at;
    user.locked_until = state.locked_until;
}

/// At most this many argon2id computations at once: each takes tens of milliseconds and
/// 19 MiB, and anyone can ask for one.
const ARGON2_CONCURRENCY: usize = 4;

fn argon2_permits() -> &'static tokio::sync::Semaphore {
    static PERMITS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    PERMITS.get_or_init(|| tokio::sync::Semaphore::new(ARGON2_CONCURRENCY))
}

/// argon2id off the async threads, bounded (see [`ARGON2_CONCURRENCY`]).
async fn verify(phc: Option<String>, password: String) -> AppResult<bool> {
    let _permit = argon2_permits().acquire().await.map_err(Error::internal)?;
    tokio::task::spawn_blocking(move || match phc {
        Some(phc) => passwords::verify_password(&phc, &password),
        None => passwords::verify_against_dummy(&password),
    })
    .await
    .map_err(Error::internal)
}

pub(crate) async fn hash(password: String) -> AppResult<String> {
    let _permit = argon2_permits().acquire().await.map_err(Error::internal)?;
    tokio::task::spawn_blocking(move || passwords::hash_password(&password))
        .await
        .map_err(Error::internal)?
        .map_err(|e| Error::internal(e.to_string()))
}

fn context(request_id: &str, user: Option<&UserRecord>) -> RequestContext {
    RequestContext {
        caller: Caller::anonymous(
            user.map(|u| u.id.to_string()).unwrap_or_else(|| "anonymous".to_owned()),
            user.map(|u| u.tenant_id),
        ),
        tenant: user.map(|u| u.tenant_id),
        request_id: request_id.to_owned(),
        correlation_id: None,
        source: AuditSource::Api,
    }
}

async fn begin(
    app: &App,
    request_id: &str,
    user: Option<&UserRecord>,
    action: &'static AuditAction,
) -> AppResult<Write> {
    let resource = user.map(|u| u.id.to_string());
    match app.writes.begin(context(request_id, user), action, None, resource).await? {
        Admission::Proceed(w) => Ok(w),
        Admission::Replay(_) => Err(Error::internal("a sign-in has no idempotency key to replay")),
    }
}

/// Commits a sign-in write, recording the HTTP status the caller gets.
async fn finish(app: &App, w: Write, status: u16) -> AppResult<()> {
    let response = WriteResponse { status, body: serde_json::Value::Null, headers: Vec::new(), resource_id: None };
    app.writes.commit(w, response).await.map(drop)
}

/// Records a refused attempt (with the user's new lockout state, if any) and returns the refusal.
async fn refuse(
    app: &App,
    request_id: &str,
    user: Option<UserRecord>,
    action: &'static AuditAction,
    error: Error,
    why: &str,
) -> AppResult<Error> {
    let mut w = begin(app, request_id, user.as_ref(), action).await?;
    if let Some(mut user) = user {
        // Re-read inside the write: concurrent failures each count.
        if let Some(fresh) = w.tx().users().get_for_update(user.tenant_id, user.id).await? {
            let state = app.settings.sign_in_lockout.after_failure(lockout_state(&fresh), w.now());
            user = fresh;
            // Lockout bookkeeping, not a change of the user: updatedAt stays (an anonymous caller
            // must not move it, nor the users' order by it).
            set_lockout_state(&mut user, state);
            w.tx().users().update(&user).await?;
        }
    }
    w.set_audit_failure();
    w.set_audit_detail(serde_json::json!({ "reason": why }));
    finish(app, w, 401).await?;
    Ok(error)
}

async fn issue_tokens(app: &App, w: &mut Write, user: &UserRecord, with_refresh: bool) -> AppResult<Tokens> {
    let access = app.identity.issue(&user.id.to_string(), Some(user.tenant_id)).await?;
    let refresh_token = if with_refresh {
        let (token, token_hash) = opaque::new_opaque_token();
        let now = w.now();
        w.tx()
            .refresh_tokens()
            .insert(&RefreshTokenRecord {
                token_hash,
                user_id: user.id,
                tenant_id: user.tenant_id,
                expires_at: now.plus_millis(app.identity.refresh_ttl_secs() * 1_000),
                revoked_at: None,
                created_at: now,
            })
            .await?;
        Some(token)
    } else {
        None
    };
    Ok(Tokens { access_token: access.token, refresh_token, token_type: "Bearer", expires_in: access.expires_in })
}

async fn find_user(app: &App, email: &str) -> AppResult<Option<UserRecord>> {
    let mut tx = app.store.read().await?;
    Ok(tx.users().find_by_email(&email.trim().to_lowercase()).await?)
}

/// `POST /api/auth/login`.
pub async fn login(app: &App, request_id: &str, email: &str, password: &str) -> AppResult<LoginOutcome> {
    let now: Timestamp = app.clock.now();
    let user = find_user(app, email).await?;
    let locked = user.as_ref().is_some_and(|u| app.settings.sign_in_lockout.is_locked(&lockout_state(u), now));
    // Which hash to check: the chosen password once ACTIVE, the temporary one while INVITED.
    let phc = user.as_ref().filter(|_| !locked).and_then(|u| match u.status {
        UserStatus::Active => u.password_hash.clone(),
        UserStatus::Invited => u.temporary_password_hash.clone(),
        UserStatus::Suspended => None,
    });
    let matches = verify(phc, password.to_owned()).await?;
    let Some(user) = user else {
        return Err(refuse(app, request_id, None, &LOGIN, invalid_credentials(), "unknown email").await?);
    };
    if locked || !matches || user.status == UserStatus::Suspended {
        let why = if locked {
            "locked"
        } else if user.status == UserStatus::Suspended {
            "suspended"
        } else {
            "wrong password"
        };
        return Err(refuse(app, request_id, Some(user), &LOGIN, invalid_credentials(), why).await?);
    }
    // A hash made with weaker parameters than today's is replaced while the password is at
    // hand (hashed before the write: argon2 must not hold the writer).
    let rehashed = match user.password_hash.as_deref() {
        Some(phc) if user.status == UserStatus::Active && passwords::needs_rehash(phc) => {
            Some(hash(password.to_owned()).await?)
        }
        _ => None,
    };
    let mut w = begin(app, request_id, Some(&user), &LOGIN).await?;
    let mut fresh = w.tx().users().get_for_update(user.tenant_id, user.id).await?.ok_or_else(invalid_credentials)?;
    // The password was checked outside this write (argon2 must not hold the writer): refuse if
    // meanwhile the account was locked, changed status, or the checked hash was replaced.
    if app.settings.sign_in_lockout.is_locked(&lockout_state(&fresh), w.now())
        || fresh.status != user.status
        || fresh.password_hash != user.password_hash
        || fresh.temporary_password_hash != user.temporary_password_hash
    {
        drop(w);
        return Err(refuse(app, request_id, Some(user), &LOGIN, invalid_credentials(), "changed during sign-in").await?);
    }
    set_lockout_state(&mut fresh, app.settings.sign_in_lockout.after_success());
    if rehashed.is_some() {
        fresh.password_hash = rehashed;
    }
    // As for a refusal: a sign-in changes no field the API shows, so updatedAt stays.
    w.tx().users().update(&fresh).await?;
    let outcome = if fresh.status == UserStatus::Invited {
        let (session, session_hash) = opaque::new_opaque_token();
        let now = w.now();
        w.tx()
            .challenges()
            .insert(&ChallengeRecord { session_hash, user_id: fresh.id, expires_at: now.plus_millis(CHALLENGE_TTL_MS) })
            .await?;
        w.set_audit_detail(serde_json::json!({ "challenge": "NEW_PASSWORD_REQUIRED" }));
        LoginOutcome::NewPasswordRequired { session }
    } else {
        let tokens = issue_tokens(app, &mut w, &fresh, true).await?;
        LoginOutcome::Tokens(tokens)
    };
    finish(app, w, 200).await?;
    Ok(outcome)
}

fn policy_check(password: &str, email: &str) -> AppResult<()> {
    PasswordPolicy::default()
        .validate(password, email)
        .map_err(|v| Error::bad_request(v.message).with_code(Code::PasswordPolicy))
}

/// How an invited user proves who they are before setting the first password.
enum Proof {
    /// The session of a NEW_PASSWORD_REQUIRED challenge (SHA-256 of it), consumed here; `None`
    /// for text too long to be one.
    Challenge(Option<String>),
    /// The temporary password, already verified against this hash.
    TemporaryPassword(Option<String>),
}

/// Sets the user's first password, makes them ACTIVE and signs them in: the proof is consumed,
/// the password set and the tokens issued in one write, so none of it happens without the rest.
async fn set_first_password(
    app: &App,
    request_id: &str,
    user: UserRecord,
    new_password: &str,
    proof: Proof,
    action: &'static AuditAction,
) -> AppResult<Tokens> {
    let password_hash = hash(new_password.to_owned()).await?;
    let mut w = begin(app, request_id, Some(&user), action).await?;
    let fresh = w.tx().users().get_for_update(user.tenant_id, user.id).await?;
    let now = w.now();
    let proven = match (&proof, &fresh) {
        (Proof::Challenge(Some(session_hash)), Some(_)) => {
            w.tx().challenges().take(session_hash, now).await?.is_some_and(|c| c.user_id == user.id)
        }
        (Proof::Challenge(None), _) => false,
        (Proof::TemporaryPassword(verified), Some(f)) => f.temporary_password_hash == *verified,
        (_, None) => false,
    };
    let Some(mut fresh) = fresh.filter(|f| proven && f.status == UserStatus::Invited) else {
        drop(w);
        return Err(
            refuse(app, request_id, Some(user), action, invalid_credentials(), "invalid session or state").await?
        );
    };
    fresh.password_hash = Some(password_hash);
    // The temporary password is unusable from now on.
    fresh.temporary_password_hash = None;
    fresh.status = UserStatus::Active;
    set_lockout_state(&mut fresh, app.settings.sign_in_lockout.after_success());
    fresh.updated_at = now;
    w.tx().users().update(&fresh).await?;
    let tokens = issue_tokens(app, &mut w, &fresh, true).await?;
    w.set_audit_detail(serde_json::json!({ "status": { "before": "INVITED", "after": "ACTIVE" } }));
    finish(app, w, 200).await?;
    Ok(tokens)
}

/// `POST /api/auth/new-password`: completes the challenge login handed out.
pub async fn new_password(
    app: &App,
    request_id: &str,
    email: &str,
    new_password: &str,
    session: &str,
) -> AppResult<Tokens> {
    // The policy is checked against what the caller sent, before any lookup, so its answer
    // says nothing about which emails exist.
    policy_check(new_password, email)?;
    let user = find_user(app, email).await?;
    let Some(user) = user.filter(|u| u.status == UserStatus::Invited) else {
        return Err(refuse(app, request_id, None, &NEW_PASSWORD, invalid_credentials(), "no invited user").await?);
    };
    set_first_password(
        app,
        request_id,
        user,
        new_password,
        Proof::Challenge(worth_looking_up(session).then(|| opaque::hash_opaque(session))),
        &NEW_PASSWORD,
    )
    .await
}

/// `POST /api/auth/activate`: the invited user proves the temporary password and sets their own.
pub async fn activate(
    app: &App,
    request_id: &str,
    email: &str,
    temporary_password: &str,
    new_password: &str,
) -> AppResult<Tokens> {
    policy_check(new_password, email)?;
    let now = app.clock.now();
    let user = find_user(app, email).await?;
    let locked = user.as_ref().is_some_and(|u| app.settings.sign_in_lockout.is_locked(&lockout_state(u), now));
    let phc = user
        .as_ref()
        .filter(|u| !locked && u.status == UserStatus::Invited)
        .and_then(|u| u.temporary_password_hash.clone());
    let matches = verify(phc.clone(), temporary_password.to_owned()).await?;
    let Some(user) = user else {
        return Err(refuse(app, request_id, None, &ACTIVATE, invalid_credentials(), "unknown email").await?);
    };
    if !matches {
        let why = if locked { "locked" } else { "wrong temporary password" };
        return Err(refuse(app, request_id, Some(user), &ACTIVATE, invalid_credentials(), why).await?);
    }
    set_first_password(app, request_id, user, new_password, Proof::TemporaryPassword(phc), &ACTIVATE).await
}

/// `POST /api/auth/refresh`: a new access token, no new refresh token.
pub async fn refresh(app: &App, request_id: &str, refresh_token: &str) -> AppResult<Tokens> {
    let now = app.clock.now();
    let refused = || Error::of(Code::InvalidRefreshToken);
    let record = if worth_looking_up(refresh_token) {
        let mut tx = app.store.read().await?;
        tx.refresh_tokens().get(&opaque::hash_opaque(refresh_token)).await?
    } else {
        None
    };
    let user = match &record {
        Some(r) => {
            let mut tx = app.store.read().await?;
            tx.users().get(r.tenant_id, r.user_id).await?
        }
        None => None,
    };
    let valid = record.as_ref().is_some_and(|r| r.revoked_at.is_none() && r.expires_at > now)
        && user.as_ref().is_some_and(|u| u.status == UserStatus::Active);
    let Some(user) = user.filter(|_| valid) else {
        // A bad refresh token is not a password guess: it does not count towards the lockout.
        return Err(refuse(app, request_id, None, &REFRESH, refused(), "invalid, expired or revoked").await?);
    };
    let mut w = begin(app, request_id, Some(&user), &REFRESH).await?;
    let tokens = issue_tokens(app, &mut w, &user, false).await?;
    finish(app, w, 200).await?;
    Ok(tokens)
}
