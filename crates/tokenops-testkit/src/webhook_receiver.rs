//! A real HTTPS webhook receiver for the behaviour tests: it records every request and answers
//! each path as the test programs it.
//!
//! At start it makes a throwaway CA and a server certificate for `localhost` and `127.0.0.1`,
//! and listens on `127.0.0.1` (a free port). The service under test trusts it through
//! `TOKENOPS_WEBHOOK_CA_FILE` ([`Receiver::write_ca_file`]) and reaches it only with
//! `TOKENOPS_WEBHOOK_ALLOW_CIDRS` = [`ALLOW_CIDRS`] (loopback is not a public address).
//!
//! ```ignore
//! let receiver = Receiver::start().await;
//! receiver.respond("/flaky", Response::Status(503));
//! // register receiver.url("/flaky") with the service, make an event happen, then:
//! let requests = receiver.wait_for_path("/flaky", 2, Duration::from_secs(10)).await;
//! ```
//!
//! [`Receiver::url`] names the host as `127.0.0.1` (the certificate carries it as an IP
//! address), so no name resolution is involved. The server stops when the `Receiver` is dropped.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// The `TOKENOPS_WEBHOOK_ALLOW_CIDRS` that lets the service reach the receiver.
pub const ALLOW_CIDRS: &str = "127.0.0.0/8";

/// How the receiver answers a path (default: `Status(200)`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Response {
    /// Answer at once with this status and a short text body.
    Status(u16),
    /// Wait this long, then answer 200: longer than the sender's read timeout is a TIMEOUT.
    Delay(Duration),
    /// Answer 302 with this `Location`.
    Redirect(String),
    /// Hold the request, answering nothing, until [`Receiver::release`] is called for the path;
    /// then answer 200. The request is recorded on arrival, so a held one is counted.
    Hold,
    /// Close the connection without answering (a reset as the sender sees it).
    Reset,
    /// Each request gets one of [`chaos_menu`]'s answers, picked by a generator seeded with
    /// this value (the same seed, the same sequence of answers).
    Chaos(u64),
}

/// What [`Response::Chaos`] picks from: successes (one of them slow but within the sender's
/// five-second read timeout), 5xx, 429, 302, 410, an answer slower than that timeout, and a
/// connection closed unanswered.
pub fn chaos_menu() -> Vec<Response> {
    vec![
        Response::Status(200),
        Response::Status(204),
        Response::Delay(Duration::from_millis(300)),
        Response::Status(500),
        Response::Status(503),
        Response::Status(429),
        Response::Status(410),
        Response::Redirect("https://example.com/elsewhere".to_owned()),
        Response::Delay(Duration::from_millis(5_500)),
        Response::Reset,
    ]
}

/// SplitMix64: a small, good-enough generator for picking answers reproducibly.
fn splitmix(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct ReceivedRequest {
    pub method: String,
    /// The path without the query.
    pub path: String,
    pub query: Option<String>,
    /// Header names in lower case, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub received_at: SystemTime,
    /// How the receiver answered it (what `Response::Chaos` picked, never `Chaos` itself).
    pub answer: Response,
}

impl ReceivedRequest {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as JSON; panics (in a test) when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("the webhook body is not JSON ({e}): {:?}", self.body))
    }
}

#[derive(Default)]
struct State {
    requests: Mutex<Vec<ReceivedRequest>>,
    answers: Mutex<HashMap<String, Response>>,
    /// Paths whose held requests may go: every `Hold` request to them is answered.
    released: Mutex<std::collections::HashSet<String>>,
    release: tokio::sync::Notify,
    /// Requests answered so far (a held one counts once it is released).
    answered: std::sync::atomic::AtomicUsize,
    /// Answers `Response::Chaos` has picked so far.
    chaos_picks: std::sync::atomic::AtomicU64,
    /// TCP connections accepted so far.
    connections: std::sync::atomic::AtomicUsize,
}

/// The running receiver. Dropping it stops accepting connections.
pub struct Receiver {
    state: Arc<State>,
    address: SocketAddr,
    ca_pem: String,
    accept_loop: JoinHandle<()>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").field("address", &self.address).finish_non_exhaustive()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

impl Receiver {
    /// Starts the receiver on a free port of 127.0.0.1 with a fresh CA.
    pub async fn start() -> Receiver {
        let (ca_pem, tls) = certificates();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the webhook receiver");
        let address = listener.local_addr().expect("the receiver's address");
        let state = Arc::new(State::default());
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let accept_loop = tokio::spawn(accept(listener, acceptor, state.clone()));
        Receiver { state, address, ca_pem, accept_loop }
    }

    /// `https://127.0.0.1:PORT{path}`; `path` starts with `/` and may carry a query.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.address.port())
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The throwaway CA's certificate, PEM: the content of `TOKENOPS_WEBHOOK_CA_FILE`.
    pub fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }

    /// Writes the CA certificate to `dir/webhook-ca.pem` and returns its path.
    pub fn write_ca_file(&self, dir: &Path) -> PathBuf {
        let path = dir.join("webhook-ca.pem");
        std::fs::write(&path, &self.ca_pem).expect("write the webhook CA file");
        path
    }

    /// How to answer requests to `path` (without query) from now on.
    pub fn respond(&self, path: &str, response: Response) {
        lock(&self.state.answers).insert(path.to_owned(), response);
    }

    /// Lets the requests held at `path` (and any later ones it holds) be answered 200.
    pub fn release(&self, path: &str) {
        lock(&self.state.released).insert(path.to_owned());
        self.state.release.notify_waiters();
    }

    /// How many requests have been answered (held ones only once released).
    pub fn answered(&self) -> usize {
        self.state.answered.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many TCP connections the receiver has accepted (a sender that keeps its connections
    /// alive makes fewer than its requests).
    pub fn connections(&self) -> usize {
        self.state.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        lock(&self.state.requests).clone()
    }

    /// The requests so far to `path`.
    pub fn requests_to(&self, path: &str) -> Vec<ReceivedRequest> {
        self.requests().into_iter().filter(|r| r.path == path).collect()
    }

    /// Waits until at least `n` requests have arrived and returns them all; panics with what did
    /// arrive when `deadline` passes first.
    pub async fn wait_for(&self, n: usize, deadline: Duration) -> Vec<ReceivedRequest> {
        self.wait_until(deadline, &format!("{n} webhook requests"), |all| (all.len() >= n).then(|| all.to_vec())).await
    }

    /// Waits until at least `n` requests to `path` have arrived and returns those.
    pub async fn wait_for_path(&self, path: &str, n: usize, deadline: Duration) -> Vec<ReceivedRequest> {
        self.wait_until(deadline, &format!("{n} webhook requests to {path}"), |all| {
            let matching: Vec<ReceivedRequest> = all.iter().filter(|r| r.path == path).cloned().collect();
            (matching.len() >= n).then_some(matching)
        })
        .await
    }

    async fn wait_until<T>(&self, deadline: Duration, what: &str, done: impl Fn(&[ReceivedRequest]) -> Option<T>) -> T {
        let until = Instant::now() + deadline;
        loop {
            let requests = self.requests();
            if let Some(result) = done(&requests) {
                return result;
            }
            if Instant::now() >= until {
                let seen: Vec<String> = requests.iter().map(|r| format!("{} {}", r.method, r.path)).collect();
                panic!("expected {what} within {deadline:?}; received {}: {seen:?}", requests.len());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// What a [`Sink`] hands each request to: its path and body, as they arrive.
pub type OnRequest = Arc<dyn Fn(&str, &Bytes) + Send + Sync>;

/// A lean receiver for the delivery benchmark: it answers every request 200 with an empty body
/// at once and records nothing, handing each request's path and body to a callback. Same CA and
/// address rules as [`Receiver`]; keep-alive connections are served as long as the sender keeps
/// them.
pub struct Sink {
    address: SocketAddr,
    ca_pem: String,
    accept_loop: JoinHandle<()>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

impl Sink {
    pub async fn start(on_request: OnRequest) -> Sink {
        let (ca_pem, tls) = certificates();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the webhook sink");
        let address = listener.local_addr().expect("the sink's address");
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let accept_loop = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (acceptor, on_request) = (acceptor.clone(), on_request.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else { return };
                    let service = service_fn(move |request: hyper::Request<Incoming>| {
                        let on_request = on_request.clone();
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await?.to_bytes();
                            on_request(parts.uri.path(), &body);
                            Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::new())))
                        }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
                });
            }
        });
        Sink { address, ca_pem, accept_loop }
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.address.port())
    }

    /// The throwaway CA's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A test that panicked while holding the lock must not hide the state from the next reader.
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A CA, and a server certificate for `localhost` and `127.0.0.1` signed by it.
fn certificates() -> (String, rustls::ServerConfig) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };

    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "tokenops test webhook CA");
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().expect("server key");
    let mut server_params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).expect("server params");
    server_params.distinguished_name.push(DnType::CommonName, "localhost");
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = server_params.signed_by(&server_key, &issuer).expect("server certificate");

    let chain = vec![server_cert.der().clone(), CertificateDer::from(ca_cert.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server TLS configuration");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (ca_cert.pem(), config)
}

async fn accept(listener: TcpListener, acceptor: TlsAcceptor, state: Arc<State>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        state.connections.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let acceptor = acceptor.clone();
        let state = state.clone();
        // Each connection on its own task: a client that stalls its handshake holds up no other.
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else { return };
            let service = service_fn(move |request| answer(state.clone(), request));
            // An answer of `Response::Reset` ends the connection unanswered: hyper drops it
            // when the service fails.
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
        });
    }
}

/// Why a connection is closed unanswered (`Response::Reset`).
#[derive(Debug)]
struct ResetConnection;

impl std::fmt::Display for ResetConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the test resets this connection")
    }
}

impl std::error::Error for ResetConnection {}

async fn answer(
    state: Arc<State>,
    request: hyper::Request<Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, ResetConnection> {
    let (parts, body) = request.into_parts();
    // A body cut short is a sender that went away mid-request (a killed service): it was never
    // a request the sender made whole, so it is not recorded.
    let Ok(body) = body.collect().await.map(|collected| collected.to_bytes()) else {
        return Err(ResetConnection);
    };
    let path = parts.uri.path().to_owned();
    let programmed = lock(&state.answers).get(&path).cloned().unwrap_or(Response::Status(200));
    let programmed = match programmed {
        Response::Chaos(seed) => {
            let pick = state.chaos_picks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let menu = chaos_menu();
            let index = usize::try_from(splitmix(seed ^ splitmix(pick)) % menu.len() as u64).unwrap_or(0);
            menu[index].clone()
        }
        other => other,
    };
    let received = ReceivedRequest {
        method: parts.method.to_string(),
        path: path.clone(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
            .collect(),
        body,
        received_at: SystemTime::now(),
        answer: programmed.clone(),
    };
    lock(&state.requests).push(received);
    let response = match programmed {
        Response::Status(status) => plain(status, format!("receiver answered {status}")),
        Response::Delay(delay) => {
            tokio::time::sleep(delay).await;
            plain(200, "late answer".to_owned())
        }
        Response::Redirect(location) => {
            let mut response = plain(302, "moved".to_owned());
            if let Ok(value) = hyper::header::HeaderValue::from_str(&location) {
                response.headers_mut().insert(hyper::header::LOCATION, value);
            }
            response
        }
        Response::Hold => {
            loop {
                // Registered before the check, so a release between the two is not missed.
                let released = state.release.notified();
                if lock(&state.released).contains(&path) {
                    break;
                }
                released.await;
            }
            plain(200, "released".to_owned())
        }
        Response::Reset => return Err(ResetConnection),
        // Resolved above.
        Response::Chaos(_) => plain(500, "chaos".to_owned()),
    };
    state.answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok(response)
}

fn plain(status: u16, text: String) -> hyper::Response<Full<Bytes>> {
    let mut response = hyper::Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenops_webhooks::{AddressRule, AttemptOutcome, FailureClass, Transport, normalise, parse_cidrs};

    fn transport(receiver: &Receiver) -> Transport {
        let rule = AddressRule::new(parse_cidrs(ALLOW_CIDRS).expect("cidrs"));
        Transport::new(rule, Some(receiver.ca_pem().as_bytes())).expect("transport")
    }

    async fn post(transport: &Transport, url: &str) -> AttemptOutcome {
        let headers = vec![("content-type".to_owned(), "application/json".to_owned())];
        transport.post(&normalise(url).expect("url"), &headers, Bytes::from_static(br#"{"id":"e1"}"#)).await
    }

    #[tokio::test]
    async fn a_delivery_is_received_as_sent() {
        let receiver = Receiver::start().await;
        let outcome = post(&transport(&receiver), &receiver.url("/hook?x=1")).await;
        assert_eq!(outcome, AttemptOutcome::Delivered { status: 200 });
        let requests = receiver.wait_for(1, Duration::from_secs(5)).await;
        assert_eq!(requests[0].method, "POST");
        assert_eq!(requests[0].path, "/hook");
        assert_eq!(requests[0].query.as_deref(), Some("x=1"));
        assert_eq!(requests[0].header("Content-Type"), Some("application/json"));
        assert_eq!(requests[0].json(), serde_json::json!({ "id": "e1" }));
    }

    #[tokio::test]
    async fn attempts_to_one_destination_share_a_kept_alive_connection() {
        let receiver = Receiver::start().await;
        let transport = transport(&receiver);
        for path in ["/one", "/two", "/one"] {
            assert_eq!(post(&transport, &receiver.url(path)).await, AttemptOutcome::Delivered { status: 200 });
        }
        assert_eq!(receiver.requests().len(), 3);
        assert_eq!(receiver.connections(), 1, "one handshake for the three attempts");
        // After a failure without an answer the next attempt connects again.
        receiver.respond("/reset", Response::Reset);
        post(&transport, &receiver.url("/reset")).await;
        assert_eq!(post(&transport, &receiver.url("/one")).await, AttemptOutcome::Delivered { status: 200 });
        assert_eq!(receiver.connections(), 2);
    }

    #[tokio::test]
    async fn a_500_is_rejected_with_the_answer_in_the_reason() {
        let receiver = Receiver::start().await;
        receiver.respond("/down", Response::Status(500));
        match post(&transport(&receiver), &receiver.url("/down")).await {
            AttemptOutcome::Failed { class: FailureClass::Rejected, status: Some(500), reason } => {
                assert!(reason.contains("500") && reason.contains("receiver answered 500"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_slow_answer_is_a_timeout() {
        let receiver = Receiver::start().await;
        receiver.respond("/slow", Response::Delay(Duration::from_secs(3)));
        let quick = transport(&receiver).with_timeouts(Duration::from_secs(2), Duration::from_millis(500));
        let outcome = post(&quick, &receiver.url("/slow")).await;
        assert!(
            matches!(outcome, AttemptOutcome::Failed { class: FailureClass::Timeout, status: None, .. }),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn a_302_is_a_failed_attempt_and_not_followed() {
        let receiver = Receiver::start().await;
        receiver.respond("/moved", Response::Redirect(receiver.url("/elsewhere")));
        match post(&transport(&receiver), &receiver.url("/moved")).await {
            AttemptOutcome::Failed { class: FailureClass::Rejected, status: Some(302), reason } => {
                assert!(reason.contains("/elsewhere"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert!(receiver.requests_to("/elsewhere").is_empty(), "the redirect was followed");
    }

    #[tokio::test]
    async fn loopback_is_refused_without_the_allowed_cidr() {
        let receiver = Receiver::start().await;
        let strict = Transport::new(AddressRule::default(), Some(receiver.ca_pem().as_bytes())).expect("transport");
        let outcome = post(&strict, &receiver.url("/hook")).await;
        assert!(
            matches!(outcome, AttemptOutcome::Failed { class: FailureClass::Unreachable, status: None, .. }),
            "{outcome:?}"
        );
        assert!(receiver.requests().is_empty(), "a refused address was reached");
    }

    #[tokio::test]
    async fn the_receiver_is_untrusted_without_its_ca() {
        let receiver = Receiver::start().await;
        let rule = AddressRule::new(parse_cidrs(ALLOW_CIDRS).expect("cidrs"));
        let no_ca = Transport::new(rule, None).expect("transport");
        match post(&no_ca, &receiver.url("/hook")).await {
            AttemptOutcome::Failed { class: FailureClass::Unreachable, status: None, reason } => {
                assert!(reason.contains("certificate"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn the_ca_file_is_written_for_the_service() {
        let receiver = Receiver::start().await;
        let dir = std::env::temp_dir().join(format!("webhook-ca-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = receiver.write_ca_file(&dir);
        let pem = std::fs::read(&path).expect("read");
        let rule = AddressRule::new(parse_cidrs(ALLOW_CIDRS).expect("cidrs"));
        let from_file = Transport::new(rule, Some(&pem)).expect("transport");
        assert_eq!(post(&from_file, &receiver.url("/hook")).await, AttemptOutcome::Delivered { status: 200 });
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_host_name_is_reached_at_its_checked_addresses() {
        let receiver = Receiver::start().await;
        let rule = AddressRule::new(parse_cidrs("127.0.0.0/8,::1/128").expect("cidrs"));
        let by_name = Transport::new(rule, Some(receiver.ca_pem().as_bytes())).expect("transport");
        let url = format!("https://localhost:{}/named", receiver.address().port());
        assert_eq!(post(&by_name, &url).await, AttemptOutcome::Delivered { status: 200 });
        assert_eq!(receiver.requests_to("/named").len(), 1);
    }

    #[tokio::test]
    async fn a_held_request_is_answered_once_released() {
        let receiver = Receiver::start().await;
        receiver.respond("/held", Response::Hold);
        let transport = transport(&receiver);
        let url = receiver.url("/held");
        let sent = tokio::spawn(async move { post(&transport, &url).await });
        receiver.wait_for_path("/held", 1, Duration::from_secs(5)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(receiver.answered(), 0, "held");
        assert!(!sent.is_finished());
        receiver.release("/held");
        assert_eq!(sent.await.expect("join"), AttemptOutcome::Delivered { status: 200 });
        assert_eq!(receiver.answered(), 1);
    }

    #[tokio::test]
    async fn a_reset_is_an_unreachable_receiver() {
        let receiver = Receiver::start().await;
        receiver.respond("/reset", Response::Reset);
        let outcome = post(&transport(&receiver), &receiver.url("/reset")).await;
        assert!(
            matches!(outcome, AttemptOutcome::Failed { class: FailureClass::Unreachable, status: None, .. }),
            "{outcome:?}"
        );
        assert_eq!(receiver.requests_to("/reset")[0].answer, Response::Reset);
    }

    #[tokio::test]
    async fn chaos_answers_from_its_menu_and_records_each_pick() {
        let receiver = Receiver::start().await;
        receiver.respond("/chaos", Response::Chaos(7));
        let quick = transport(&receiver).with_timeouts(Duration::from_secs(2), Duration::from_millis(1_000));
        for _ in 0..12 {
            post(&quick, &receiver.url("/chaos")).await;
        }
        let picks: Vec<Response> = receiver.requests_to("/chaos").into_iter().map(|r| r.answer).collect();
        assert_eq!(picks.len(), 12);
        assert!(picks.iter().all(|p| chaos_menu().contains(p)), "{picks:?}");
        assert!(picks.iter().collect::<std::collections::HashSet<_>>().len() > 3, "varied: {picks:?}");
    }

    #[tokio::test]
    async fn waiting_for_a_path_counts_only_that_path() {
        let receiver = Receiver::start().await;
        let transport = transport(&receiver);
        post(&transport, &receiver.url("/a")).await;
        post(&transport, &receiver.url("/b")).await;
        post(&transport, &receiver.url("/a")).await;
        assert_eq!(receiver.wait_for_path("/a", 2, Duration::from_secs(5)).await.len(), 2);
        assert_eq!(receiver.wait_for(3, Duration::from_secs(5)).await.len(), 3);
    }
}
