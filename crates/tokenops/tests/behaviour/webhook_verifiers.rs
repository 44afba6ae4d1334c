//! The Python verifier example (examples/webhooks/verify.py) run against real deliveries of both
//! schemes from the HTTPS receiver, on both stores: each valid delivery passes, and a tampered
//! body, signature, timestamp or expectation is refused for its own reason.
//!
//! The Python comes from `TOKENOPS_TEST_PYTHON` (scripts/test prepares it with `cryptography`).
//! Without it the test fails: a verifier that is never run proves nothing.

use reqwest::Method;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokenops_testkit::webhook_receiver::ReceivedRequest;
use tokenops_testkit::{Backend, Reply, backends};
use uuid::Uuid;

use crate::webhooks::{WAIT, app_with_receiver, now_secs, register};

const VERIFIER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/webhooks/verify.py");

fn python() -> String {
    std::env::var("TOKENOPS_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "TOKENOPS_TEST_PYTHON is not set: this test runs examples/webhooks/verify.py, which needs Python 3.11+ \
             with cryptography. Run scripts/test (it prepares target/openapi-venv), or set TOKENOPS_TEST_PYTHON \
             to a python that has scripts/openapi-client-requirements.txt installed."
        )
    })
}

/// A scratch directory for one test's files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("tokenops-webhook-verifiers-{}", Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Self(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).expect("scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One delivery as files for the CLI: its headers (a JSON object) and its exact body.
#[derive(Clone)]
struct Written {
    headers: PathBuf,
    body: PathBuf,
}

fn headers_of(request: &ReceivedRequest) -> Map<String, Value> {
    request.headers.iter().map(|(name, value)| (name.clone(), json!(value))).collect()
}

fn write_delivery(scratch: &Scratch, name: &str, headers: &Map<String, Value>, body: &[u8]) -> Written {
    let headers = serde_json::to_vec(headers).expect("headers JSON");
    Written {
        headers: scratch.write(&format!("{name}.headers.json"), &headers),
        body: scratch.write(&format!("{name}.body.bin"), body),
    }
}

/// What one run of the verifier said.
struct Verdict {
    valid: bool,
    stderr: String,
}

async fn run(args: &[&str]) -> Verdict {
    let python = python();
    let command = tokio::process::Command::new(&python).arg(VERIFIER).args(args).kill_on_drop(true).output();
    let output = tokio::time::timeout(Duration::from_secs(60), command)
        .await
        .expect("the verifier finishes within a minute")
        .unwrap_or_else(|e| panic!("running {python} {VERIFIER}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    // Exit 1 is a refusal; anything else (2 for usage, a traceback) is the verifier failing.
    let valid = match output.status.code() {
        Some(0) => {
            assert_eq!(stdout.trim(), "valid", "{stderr}");
            true
        }
        Some(1) => {
            assert!(stderr.starts_with("invalid: "), "a refusal states its reason: {stderr}");
            false
        }
        other => panic!("the verifier crashed ({other:?}):\n{stdout}\n{stderr}"),
    };
    Verdict { valid, stderr }
}

#[track_caller]
fn assert_valid(verdict: &Verdict, case: &str) {
    assert!(verdict.valid, "{case}: refused: {}", verdict.stderr);
}

#[track_caller]
fn assert_refused(verdict: &Verdict, reason: &str, case: &str) {
    assert!(!verdict.valid, "{case}: accepted");
    assert!(verdict.stderr.contains(reason), "{case}: refused for another reason than {reason:?}: {}", verdict.stderr);
}

/// The body with its first byte changed, and the headers with a Content-Digest recomputed over
/// it: an attacker who changes the body can change the unsigned digest too.
fn tampered(request: &ReceivedRequest) -> (Vec<u8>, Map<String, Value>) {
    let mut body = request.body.to_vec();
    body[0] ^= 0x20;
    let mut headers = headers_of(request);
    headers.insert("content-digest".into(), json!(tokenops_webhooks::signing::content_digest(&body)));
    (body, headers)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temp path")
}

/// The verifier's verdict on `delivery` at `now` (Unix seconds), run with `scheme`: the
/// subcommand and its options.
async fn verify(scheme: Vec<String>, delivery: Written, now: i64) -> Verdict {
    let now = now.to_string();
    let files = ["--headers", path(&delivery.headers), "--body", path(&delivery.body), "--now", &now];
    run(&scheme.iter().map(String::as_str).chain(files).collect::<Vec<_>>()).await
}

backends!(
    hmac_deliveries_pass_the_python_verifier_and_tampering_fails,
    jws_deliveries_pass_the_python_verifier_and_tampering_fails
);

async fn hmac_deliveries_pass_the_python_verifier_and_tampering_fails(backend: Backend) {
    python();
    let (app, receiver) = app_with_receiver(backend, &[]).await;
    let created = register(&app, &receiver.url("/py-hmac"), &["webhook.test"], None).await;
    let id = created["id"].as_str().expect("id").to_owned();
    let secret = created["secret"].as_str().expect("secret").to_owned();
    app.drain_jobs().await;
    let got = receiver.wait_for_path("/py-hmac", 1, WAIT).await;
    let request = &got[0];
    let scratch = Scratch::new();
    let delivery = write_delivery(&scratch, "d", &headers_of(request), &request.body);
    let timestamp: i64 = request.header("webhook-timestamp").and_then(|t| t.parse().ok()).expect("timestamp");
    // `=` form: a secret is base64url and may begin with `-`, which argparse would read as an
    // option.
    let hmac = |written: &Written, secret: &str, now: i64| {
        verify(vec!["hmac".into(), format!("--secret={secret}")], written.clone(), now)
    };
    let now = now_secs(&app);

    assert_valid(&hmac(&delivery, &secret, now).await, "the delivery as it arrived");
    assert_valid(&hmac(&delivery, &secret, timestamp + 300).await, "300 s later");
    assert_valid(&hmac(&delivery, &secret, timestamp - 300).await, "300 s earlier");
    assert_refused(&hmac(&delivery, &secret, timestamp + 301).await, "Webhook-Timestamp", "301 s later");
    assert_refused(&hmac(&delivery, &secret, timestamp - 301).await, "Webhook-Timestamp", "301 s earlier");
    assert_refused(&hmac(&delivery, "another secret", now).await, "no v1 signature", "another secret");

    let (body, digest_fixed) = tampered(request);
    let same_digest = write_delivery(&scratch, "body", &headers_of(request), &body);
    assert_refused(&hmac(&same_digest, &secret, now).await, "Content-Digest", "tampered body");
    let new_digest = write_delivery(&scratch, "body-digest", &digest_fixed, &body);
    assert_refused(&hmac(&new_digest, &secret, now).await, "no v1 signature", "tampered body, digest recomputed");

    let mut headers = headers_of(request);
    let signature = request.header("webhook-signature").expect("Webhook-Signature");
    let flipped = flip_base64(signature.strip_prefix("v1,").expect("v1,"));
    headers.insert("webhook-signature".into(), json!(format!("v1,{flipped}")));
    let forged = write_delivery(&scratch, "sig", &headers, &request.body);
    assert_refused(&hmac(&forged, &secret, now).await, "no v1 signature", "tampered signature");

    // During a rotation two v1 pairs arrive, newest first; either secret verifies.
    let rotated = app.post(&format!("/api/webhooks/{id}/secret/rotate"), &json!({})).await;
    rotated.expect(200);
    let new_secret = rotated.body["secret"].as_str().expect("the new secret").to_owned();
    app.post(&format!("/api/webhooks/{id}/test"), &json!({})).await.expect(200);
    let got = receiver.wait_for_path("/py-hmac", 2, WAIT).await;
    let pairs = got[1].header("webhook-signature").expect("Webhook-Signature");
    assert_eq!(pairs.matches("v1,").count(), 2, "{pairs}");
    let during = write_delivery(&scratch, "rotation", &headers_of(&got[1]), &got[1].body);
    let now = now_secs(&app);
    assert_valid(&hmac(&during, &new_secret, now).await, "the new secret during the overlap");
    assert_valid(&hmac(&during, &secret, now).await, "the previous secret during the overlap");
    assert_refused(&hmac(&during, "neither", now).await, "no v1 signature", "neither secret");
}

async fn jws_deliveries_pass_the_python_verifier_and_tampering_fails(backend: Backend) {
    python();
    let (app, receiver) = app_with_receiver(backend, &[]).await;
    let url = receiver.url("/py-jws");
    let created = register(&app, &url, &["webhook.test"], Some("JWS_ES256")).await;
    let id = created["id"].as_str().expect("id").to_owned();
    app.drain_jobs().await;
    let got = receiver.wait_for_path("/py-jws", 1, WAIT).await;
    let request = &got[0];
    let jwks = Reply::read(app.raw(Method::GET, "/.well-known/webhook-jwks.json").send().await.expect("jwks")).await;
    jwks.expect(200);
    let scratch = Scratch::new();
    let trusted = scratch.write("jwks.json", &serde_json::to_vec(&jwks.body).expect("jwks JSON"));
    let delivery = write_delivery(&scratch, "d", &headers_of(request), &request.body);
    let timestamp: i64 = request.header("webhook-timestamp").and_then(|t| t.parse().ok()).expect("timestamp");
    let now = now_secs(&app);
    let issuer = app.base_url.clone();
    let jws = |written: &Written, keys: &Path, registration: &str, url: &str, issuer: &str, now: i64| {
        let scheme = ["jws", "--jwks", path(keys), "--registration-id", registration, "--url", url, "--issuer", issuer];
        verify(scheme.map(str::to_owned).to_vec(), written.clone(), now)
    };

    assert_valid(&jws(&delivery, &trusted, &id, &url, &issuer, now).await, "the delivery as it arrived");
    assert_refused(&jws(&delivery, &trusted, "another", &url, &issuer, now).await, "claim aud", "wrong aud");
    let elsewhere = receiver.url("/elsewhere");
    assert_refused(&jws(&delivery, &trusted, &id, &elsewhere, &issuer, now).await, "claim htu", "another URL");
    let stranger = "https://other.example";
    assert_refused(&jws(&delivery, &trusted, &id, &url, stranger, now).await, "claim iss", "another issuer");
    assert_refused(&jws(&delivery, &trusted, &id, &url, &issuer, timestamp + 60).await, "expired", "60 s later");

    let (body, digest_fixed) = tampered(request);
    let same_digest = write_delivery(&scratch, "body", &headers_of(request), &body);
    assert_refused(&jws(&same_digest, &trusted, &id, &url, &issuer, now).await, "Content-Digest", "tampered body");
    let new_digest = write_delivery(&scratch, "body-digest", &digest_fixed, &body);
    let verdict = jws(&new_digest, &trusted, &id, &url, &issuer, now).await;
    assert_refused(&verdict, "claim body_hash", "tampered body, digest recomputed");

    let token = request.header("x-jws-signature").expect("X-JWS-Signature");
    let (signed, signature) = token.rsplit_once('.').expect("a compact JWS");
    let mut headers = headers_of(request);
    headers.insert("x-jws-signature".into(), json!(format!("{signed}.{}", flip_base64(signature))));
    let forged = write_delivery(&scratch, "sig", &headers, &request.body);
    assert_refused(&jws(&forged, &trusted, &id, &url, &issuer, now).await, "does not verify", "tampered signature");

    // The key comes from the trusted set by kid: a set without it trusts nothing.
    let mut renamed = jwks.body.clone();
    for key in renamed["keys"].as_array_mut().expect("keys") {
        key["kid"] = json!("another-kid");
    }
    let untrusted = scratch.write("untrusted.json", &serde_json::to_vec(&renamed).expect("JSON"));
    assert_refused(&jws(&delivery, &untrusted, &id, &url, &issuer, now).await, "trusted key set", "unknown kid");

    // jti: within one process a second attempt (fresh jti) passes and a repeat is refused.
    app.post(&format!("/api/webhooks/{id}/test"), &json!({})).await.expect(200);
    let got = receiver.wait_for_path("/py-jws", 2, WAIT).await;
    let second = write_delivery(&scratch, "second", &headers_of(&got[1]), &got[1].body);
    let script = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
import verify
jwks_path, reg, url, iss, now = sys.argv[2:7]
def load(headers, body):
    return json.load(open(headers)), open(body, "rb").read()
first, second = load(*sys.argv[7:9]), load(*sys.argv[9:11])
jwks = json.load(open(jwks_path))
verify.verify_jws(*first, jwks, reg, url, iss, now=int(now))
verify.verify_jws(*second, jwks, reg, url, iss, now=int(now))
try:
    verify.verify_jws(*first, jwks, reg, url, iss, now=int(now))
except verify.VerificationError as refused:
    print("repeat refused:", refused)
else:
    sys.exit("a repeated jti was accepted")
"#;
    let python = python();
    let directory = Path::new(VERIFIER).parent().expect("the example's directory");
    let output = tokio::process::Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(directory)
        .args([path(&trusted), &id, &url, &issuer, &now_secs(&app).to_string()])
        .args([path(&delivery.headers), path(&delivery.body), path(&second.headers), path(&second.body)])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), output)
        .await
        .expect("the jti check finishes within a minute")
        .unwrap_or_else(|e| panic!("running {python}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the jti check failed ({}):\n{stdout}\n{stderr}", output.status);
    assert!(stdout.contains("repeat refused:") && stdout.contains("jti"), "{stdout}\n{stderr}");
}

/// `text` (base64 or base64url) with its first character swapped for another of the alphabet, so
/// it still decodes but to other bytes.
fn flip_base64(text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    chars[0] = if chars[0] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}
