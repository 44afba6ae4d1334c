//! The remote signer against a real HTTP server speaking the protocol of `PROTOCOL.md` with
//! local keys: key creation, signing, disabling, and how each failure of the signer is reported
//! (refused vs unavailable). A real exchange over a loopback socket, not a mock of the trait.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use k256::ecdsa::SigningKey;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokenops_custody::{Address, B256, Custody, CustodyError, Refusal, RemoteSigner, RemoteSignerConfig};

const TOKEN: &str = "signer-test-token";

/// How the test signer misbehaves, to exercise the client's error mapping.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Honest,
    /// Answers 503 to everything.
    Failing,
    /// Signs with another key than the wallet's.
    WrongKey,
    /// Answers 200 with a body that is not a signature.
    Garbled,
    /// Answers after 2 s (beyond the client's timeout).
    Slow,
}

struct Signer {
    keys: HashMap<Address, (SigningKey, bool)>,
    mode: Mode,
}

type Shared = Arc<Mutex<Signer>>;

fn authorised(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {TOKEN}"))
}

async fn create_key(State(signer): State<Shared>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    if !authorised(&headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    assert!(body["label"].is_string(), "the label is sent");
    let key = SigningKey::random(&mut rand::rngs::OsRng);
    let address = Address::from_public_key(key.verifying_key());
    signer.lock().expect("lock").keys.insert(address, (key, true));
    (StatusCode::CREATED, Json(json!({ "address": format!("{address:#x}") }))).into_response()
}

async fn sign(
    State(signer): State<Shared>,
    headers: HeaderMap,
    Path(address): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    if !authorised(&headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let mode = signer.lock().expect("lock").mode;
    match mode {
        Mode::Failing => return (StatusCode::SERVICE_UNAVAILABLE, "maintenance").into_response(),
        Mode::Garbled => return (StatusCode::OK, "not a signature").into_response(),
        Mode::Slow => tokio::time::sleep(Duration::from_secs(2)).await,
        Mode::Honest | Mode::WrongKey => {}
    }
    let Ok(address) = address.parse::<Address>() else { return StatusCode::BAD_REQUEST.into_response() };
    let Some(data) = body["data"].as_str().and_then(|d| d.strip_prefix("0x")).and_then(|d| hex::decode(d).ok()) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    if data.len() != 32 {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let guard = signer.lock().expect("lock");
    let Some((key, active)) = guard.keys.get(&address) else {
        return (StatusCode::NOT_FOUND, "no such key").into_response();
    };
    if !active {
        return (StatusCode::FORBIDDEN, "key disabled").into_response();
    }
    let other = SigningKey::from_slice(&[0x11; 32]).expect("key");
    let key = if mode == Mode::WrongKey { &other } else { key };
    let (signature, recovery) = key.sign_prehash_recoverable(&data).expect("sign");
    let mut bytes = signature.to_bytes().to_vec();
    bytes.push(27 + recovery.to_byte());
    // Web3Signer answers text/plain.
    (StatusCode::OK, format!("0x{}", hex::encode(bytes))).into_response()
}

async fn disable(State(signer): State<Shared>, headers: HeaderMap, Path(address): Path<String>) -> Response {
    if !authorised(&headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Ok(address) = address.parse::<Address>() else { return StatusCode::BAD_REQUEST.into_response() };
    match signer.lock().expect("lock").keys.get_mut(&address) {
        Some(entry) => {
            entry.1 = false;
            StatusCode::NO_CONTENT.into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Starts the signer on a free loopback port; returns its state and base URL.
async fn start_signer() -> (Shared, String) {
    let state: Shared = Arc::new(Mutex::new(Signer { keys: HashMap::new(), mode: Mode::Honest }));
    let app = Router::new()
        .route("/upcheck", get(|| async { "OK" }))
        .route("/api/v1/eth1/keys", post(create_key))
        .route("/api/v1/eth1/keys/{address}/disable", post(disable))
        .route("/api/v1/eth1/sign/{address}", post(sign))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (state, format!("http://{address}"))
}

fn client(base: &str, token: Option<&str>) -> RemoteSigner {
    RemoteSigner::new(RemoteSignerConfig {
        base_url: base.to_owned(),
        bearer_token: token.map(str::to_owned),
        timeout: Duration::from_millis(500),
    })
    .expect("client")
}

fn expect_refusal(result: Result<impl std::fmt::Debug, CustodyError>, expected: Refusal) {
    match result {
        Err(CustodyError::Refused { refusal, .. }) => assert_eq!(refusal, expected),
        other => panic!("expected a refusal ({expected:?}), got {other:?}"),
    }
}

fn expect_unavailable(result: Result<impl std::fmt::Debug, CustodyError>) {
    match result {
        Err(CustodyError::Unavailable { .. }) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn creates_signs_and_disables_over_http() {
    let (_state, base) = start_signer().await;
    let signer = client(&base, Some(TOKEN));
    assert!(signer.upcheck().await);

    let wallet = signer.create_wallet("account 1").await.expect("create");
    let hash = B256::repeat_byte(0xab);
    let signature = signer.sign_hash(wallet, hash).await.expect("sign");
    assert_eq!(signature.recover_address_from_prehash(&hash).expect("recover"), wallet);

    signer.disable(wallet).await.expect("disable");
    expect_refusal(signer.sign_hash(wallet, hash).await, Refusal::Disabled);
    expect_refusal(signer.sign_hash(Address::repeat_byte(5), hash).await, Refusal::UnknownWallet);
    expect_refusal(signer.disable(Address::repeat_byte(5)).await, Refusal::UnknownWallet);
}

#[tokio::test]
async fn signer_failures_are_temporary_and_foreign_signatures_refused() {
    let (state, base) = start_signer().await;
    let signer = client(&base, Some(TOKEN));
    let wallet = signer.create_wallet("w").await.expect("create");
    let hash = B256::repeat_byte(1);
    let set_mode = |mode| state.lock().expect("lock").mode = mode;

    set_mode(Mode::Failing);
    expect_unavailable(signer.sign_hash(wallet, hash).await);
    set_mode(Mode::Garbled);
    expect_unavailable(signer.sign_hash(wallet, hash).await);
    set_mode(Mode::Slow);
    expect_unavailable(signer.sign_hash(wallet, hash).await);
    // A signature that does not recover to the wallet never reaches a ledger.
    set_mode(Mode::WrongKey);
    expect_refusal(signer.sign_hash(wallet, hash).await, Refusal::Rejected);
    set_mode(Mode::Honest);
    signer.sign_hash(wallet, hash).await.expect("signs again once the signer recovers");

    // Our credentials rejected: the operator fixes the token, the operation waits.
    expect_unavailable(client(&base, None).sign_hash(wallet, hash).await);
    expect_unavailable(client(&base, Some("wrong")).create_wallet("w").await);
}

#[tokio::test]
async fn an_unreachable_signer_is_temporary() {
    // Bind then drop a listener: the port is free and nothing answers on it.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    };
    let signer = client(&format!("http://127.0.0.1:{port}"), Some(TOKEN));
    expect_unavailable(signer.sign_hash(Address::repeat_byte(1), B256::ZERO).await);
    expect_unavailable(signer.create_wallet("w").await);
    assert!(!signer.upcheck().await);
}
