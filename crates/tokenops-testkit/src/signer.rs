//! A remote signer for tests: a real HTTP server on a loopback port speaking the protocol of
//! `crates/tokenops-custody/PROTOCOL.md` with keys it generates and keeps in memory, so the
//! service's remote custody is exercised over a socket. It can be told to refuse: key
//! creation for labels containing a marker, and signatures for chosen wallets.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use k256::ecdsa::SigningKey;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Keys {
    by_address: HashMap<String, SigningKey>,
    labels: HashMap<String, String>,
    refuse_labels_containing: Option<String>,
    refuse_signing: HashSet<String>,
}

/// A running signer; it stops with the test's runtime.
#[derive(Clone)]
pub struct TestSigner {
    keys: Arc<Mutex<Keys>>,
    pub base_url: String,
}

fn lower(address: &str) -> String {
    address.to_ascii_lowercase()
}

/// The EVM address of a key: the last 20 bytes of keccak-256 of the uncompressed public key.
fn address_of(key: &SigningKey) -> String {
    use sha3::{Digest, Keccak256};
    let point = key.verifying_key().to_encoded_point(false);
    let hash = Keccak256::digest(&point.as_bytes()[1..]);
    format!("0x{}", hex::encode(&hash[12..]))
}

async fn create_key(State(signer): State<TestSigner>, Json(body): Json<Value>) -> Response {
    let label = body["label"].as_str().unwrap_or_default().to_owned();
    let mut keys = signer.keys.lock().expect("signer lock");
    if keys.refuse_labels_containing.as_ref().is_some_and(|marker| label.contains(marker.as_str())) {
        return (StatusCode::FORBIDDEN, "key creation refused by policy").into_response();
    }
    let key = SigningKey::random(&mut rand::rngs::OsRng);
    let address = address_of(&key);
    keys.labels.insert(address.clone(), label);
    keys.by_address.insert(address.clone(), key);
    (StatusCode::CREATED, Json(json!({ "address": address }))).into_response()
}

async fn sign(State(signer): State<TestSigner>, Path(address): Path<String>, Json(body): Json<Value>) -> Response {
    let address = lower(&address);
    let Some(data) = body["data"].as_str().and_then(|d| d.strip_prefix("0x")).and_then(|d| hex::decode(d).ok()) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let keys = signer.keys.lock().expect("signer lock");
    if keys.refuse_signing.contains(&address) {
        return (StatusCode::FORBIDDEN, "signing refused by policy").into_response();
    }
    let Some(key) = keys.by_address.get(&address) else {
        return (StatusCode::NOT_FOUND, "no such key").into_response();
    };
    let Ok((signature, recovery)) = key.sign_prehash_recoverable(&data) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut bytes = signature.to_bytes().to_vec();
    bytes.push(27 + recovery.to_byte());
    (StatusCode::OK, format!("0x{}", hex::encode(bytes))).into_response()
}

async fn disable(State(signer): State<TestSigner>, Path(address): Path<String>) -> Response {
    signer.keys.lock().expect("signer lock").refuse_signing.insert(lower(&address));
    StatusCode::NO_CONTENT.into_response()
}

impl TestSigner {
    /// Starts a signer on a free loopback port.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the signer");
        let signer = TestSigner {
            keys: Arc::new(Mutex::new(Keys::default())),
            base_url: format!("http://{}", listener.local_addr().expect("signer address")),
        };
        let app = Router::new()
            .route("/upcheck", get(|| async { "OK" }))
            .route("/api/v1/eth1/keys", post(create_key))
            .route("/api/v1/eth1/keys/{address}/disable", post(disable))
            .route("/api/v1/eth1/sign/{address}", post(sign))
            .with_state(signer.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.expect("serve the signer") });
        signer
    }

    /// From now on, refuses (403) to create keys whose label contains `marker`.
    pub fn refuse_key_creation_for_labels_containing(&self, marker: &str) {
        self.keys.lock().expect("signer lock").refuse_labels_containing = Some(marker.to_owned());
    }

    /// From now on, refuses (403) every signature for `address`.
    pub fn refuse_signing_for(&self, address: &str) {
        self.keys.lock().expect("signer lock").refuse_signing.insert(lower(address));
    }

    /// How many keys the signer holds.
    pub fn key_count(&self) -> usize {
        self.keys.lock().expect("signer lock").by_address.len()
    }
}
