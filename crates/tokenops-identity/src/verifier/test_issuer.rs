//! A JWKS endpoint for the verifier's tests, with a verifier of it, tokens that name a key, and
//! instants.

use super::*;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex as StdMutex};

// RFC 7517 Appendix A.1's example P-256 public key: a real curve point, and no secret.
const X: &str = "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4";
const Y: &str = "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM";

struct IssuerState {
    kids: Vec<String>,
    /// Real keys published beside the `kids` (whose key has no private half).
    real: Vec<serde_json::Value>,
    status: u16,
    /// When set, the next request waits for a message before it is answered.
    stall: Option<mpsc::Receiver<()>>,
}

/// A JWKS endpoint on a blocking thread (no test-only dependencies), counting requests.
pub(super) struct Issuer {
    url: String,
    state: Arc<StdMutex<IssuerState>>,
    requests: Arc<AtomicUsize>,
}

impl Issuer {
    pub(super) fn start(kids: &[&str]) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/jwks.json", listener.local_addr().expect("addr"));
        let state = Arc::new(StdMutex::new(IssuerState {
            kids: kids.iter().map(|k| (*k).to_owned()).collect(),
            real: Vec::new(),
            status: 200,
            stall: None,
        }));
        let requests = Arc::new(AtomicUsize::new(0));
        let (shared, counter) = (state.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (shared, counter) = (shared.clone(), counter.clone());
                std::thread::spawn(move || {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    counter.fetch_add(1, Ordering::SeqCst);
                    let stall = shared.lock().expect("state").stall.take();
                    if let Some(release) = stall {
                        let _ = release.recv();
                    }
                    let (status, body) = {
                        let state = shared.lock().expect("state");
                        let mut keys: Vec<_> = state
                            .kids
                            .iter()
                            .map(|kid| json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "kid": kid, "x": X, "y": Y}))
                            .collect();
                        keys.extend(state.real.iter().cloned());
                        (state.status, json!({ "keys": keys }).to_string())
                    };
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes());
                });
            }
        });
        Self { url, state, requests }
    }

    pub(super) fn publish(&self, kids: &[&str]) {
        self.state.lock().expect("state").kids = kids.iter().map(|k| (*k).to_owned()).collect();
    }

    pub(super) fn publish_real(&self, keys: Vec<serde_json::Value>) {
        self.state.lock().expect("state").real = keys;
    }

    pub(super) fn answer(&self, status: u16) {
        self.state.lock().expect("state").status = status;
    }

    /// Makes the next request hang until the returned sender sends (or is dropped).
    pub(super) fn stall(&self) -> mpsc::Sender<()> {
        let (release, wait) = mpsc::channel();
        self.state.lock().expect("state").stall = Some(wait);
        release
    }

    pub(super) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub(super) async fn wait_for_requests(&self, n: usize) {
        for _ in 0..500 {
            if self.requests() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the issuer saw {} requests, expected {n}", self.requests());
    }
}

pub(super) fn verifier(issuer: &Issuer) -> Arc<TokenVerifier> {
    crate::install_crypto_provider();
    Arc::new(
        TokenVerifier::new(VerifierSettings {
            issuer: "https://idp.example".into(),
            jwks_url: issuer.url.clone(),
            audience: None,
            leeway_secs: 30,
            refresh_interval: Duration::from_secs(10),
            keys_ttl: Duration::from_secs(60),
        })
        .expect("verifier"),
    )
}

/// A token naming `kid` but signed with HS256: verification gets past the key lookup and
/// then fails with `WrongAlgorithm` when the kid is cached, `UnknownKey` when it is not. No
/// private key is needed to observe the cache.
pub(super) fn token(kid: &str) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, &json!({ "sub": "s" }), &EncodingKey::from_secret(b"k")).expect("encode")
}

pub(super) const T0: i64 = 1_700_000_000_000_000;

pub(super) fn at(secs: f64) -> Timestamp {
    Timestamp::from_micros(T0 + (secs * 1_000_000.0) as i64)
}

pub(super) const KNOWN: Result<Claims, VerifyError> = Err(VerifyError::WrongAlgorithm);
