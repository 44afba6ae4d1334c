//! The one outbound HTTPS POST of a delivery attempt, and its outcome.
//!
//! Each attempt resolves the host through the [`AddressRule`] and connects only to the addresses
//! it checked (pinned into that attempt's client), so a name re-pointed at a private address
//! between the check and the connection (DNS rebinding) is never reached. Connections are kept
//! alive and reused, per destination and *checked address set*: an attempt takes the client
//! pinned to exactly the addresses it has just checked, so a reused connection was made to one
//! of them (a handshake per attempt cost more than the rest of a delivery). Redirects are never
//! followed (a 3xx is a failed attempt), no proxy is used, and at most [`MAX_REASON_BODY`] bytes
//! of a failed answer are read, for `failureReason`.
//!
//! TLS is rustls on the ring provider given explicitly (the workspace's one provider), trusting
//! Mozilla's roots (webpki-roots) plus the operator's extra PEM roots (`TOKENOPS_WEBHOOK_CA_FILE`).

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::address::{AddressRule, system_lookup};
use crate::url::WebhookUrl;

pub use crate::retry::{AttemptOutcome, FailureClass};

/// How long the TCP connection and TLS handshake may take; past it the receiver is UNREACHABLE.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The spec's read timeout: an answer slower than this is a TIMEOUT.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How much of a failed answer's body is read into `failureReason`.
pub const MAX_REASON_BODY: usize = 2 * 1_024;

/// The longest `failureReason` this transport writes, in characters.
pub const MAX_REASON_CHARS: usize = 512;

/// Clients (each with its pool of kept-alive connections) held at once; past it the one used
/// longest ago is dropped with its connections.
const MAX_CLIENTS: usize = 256;

/// How long an unused connection is kept, and how many per destination.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
const IDLE_PER_DESTINATION: usize = 32;

/// What a kept client is pinned to: the destination and the addresses checked for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    host: String,
    port: u16,
    addresses: Vec<SocketAddr>,
}

type Clients = Arc<Mutex<HashMap<ClientKey, (reqwest::Client, Instant)>>>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("TOKENOPS_WEBHOOK_ALLOW_CIDRS: {0}")]
    AllowCidrs(String),
    #[error("TOKENOPS_WEBHOOK_CA_FILE {path} cannot be read: {reason}")]
    CaFile { path: String, reason: String },
    #[error("the webhook CA file holds no PEM certificate")]
    NoCertificate,
    #[error("the webhook CA file is not valid PEM: {0}")]
    InvalidPem(String),
    #[error("a certificate of the webhook CA file is not usable as a root: {0}")]
    InvalidRoot(String),
    #[error("the TLS configuration cannot be built: {0}")]
    Tls(String),
}

/// Makes delivery attempts. Cheap to share: build one at start and keep it.
#[derive(Debug, Clone)]
pub struct Transport {
    rule: AddressRule,
    tls: Arc<rustls::ClientConfig>,
    connect_timeout: Duration,
    read_timeout: Duration,
    clients: Clients,
}

impl Transport {
    /// `extra_roots_pem`: the contents of `TOKENOPS_WEBHOOK_CA_FILE`, one or more PEM certificates
    /// trusted in addition to Mozilla's roots.
    pub fn new(rule: AddressRule, extra_roots_pem: Option<&[u8]>) -> Result<Self, TransportError> {
        let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        if let Some(pem) = extra_roots_pem {
            let certificates = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| TransportError::InvalidPem(e.to_string()))?;
            if certificates.is_empty() {
                return Err(TransportError::NoCertificate);
            }
            for certificate in certificates {
                roots.add(certificate).map_err(|e| TransportError::InvalidRoot(e.to_string()))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TransportError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            rule,
            tls: Arc::new(tls),
            connect_timeout: CONNECT_TIMEOUT,
            read_timeout: READ_TIMEOUT,
            clients: Clients::default(),
        })
    }

    /// The transport of the operator's settings: `TOKENOPS_WEBHOOK_ALLOW_CIDRS` (comma-separated,
    /// empty for none) and the path of `TOKENOPS_WEBHOOK_CA_FILE` when set.
    pub fn from_settings(allow_cidrs: &str, ca_file: Option<&Path>) -> Result<Self, TransportError> {
        let rule = AddressRule::from_allow_cidrs(allow_cidrs).map_err(TransportError::AllowCidrs)?;
        let pem = ca_file
            .map(|path| {
                std::fs::read(path)
                    .map_err(|e| TransportError::CaFile { path: path.display().to_string(), reason: e.to_string() })
            })
            .transpose()?;
        Self::new(rule, pem.as_deref())
    }

    /// Other timeouts than the spec's, for tests that provoke a TIMEOUT without waiting five
    /// seconds.
    pub fn with_timeouts(mut self, connect: Duration, read: Duration) -> Self {
        self.connect_timeout = connect;
        self.read_timeout = read;
        // Clients already built keep the timeouts they were built with.
        self.clients = Clients::default();
        self
    }

    pub fn rule(&self) -> &AddressRule {
        &self.rule
    }

    /// POSTs `body` with `headers` to `url`: 2xx is delivered; anything else a failed attempt
    /// with its class and a short reason.
    pub async fn post(&self, url: &WebhookUrl, headers: &[(String, String)], body: Bytes) -> AttemptOutcome {
        self.post_with(url, headers, body, system_lookup).await
    }

    /// [`Self::post`] with the name lookup given (a test's resolver whose answer changes).
    pub(crate) async fn post_with<F, Fut>(
        &self,
        url: &WebhookUrl,
        headers: &[(String, String)],
        body: Bytes,
        lookup: F,
    ) -> AttemptOutcome
    where
        F: FnOnce(String, u16) -> Fut,
        Fut: std::future::Future<Output = std::io::Result<Vec<std::net::SocketAddr>>>,
    {
        // The resolver has no deadline of its own; a lookup that hangs is a host not reached.
        let addresses = match tokio::time::timeout(self.connect_timeout, self.rule.resolve_with(url, lookup)).await {
            Ok(Ok(addresses)) => addresses,
            Ok(Err(error)) => return unreachable(error.to_string()),
            Err(_) => return unreachable(format!("the webhook host {} did not resolve in time", url.host())),
        };
        let header_map = match header_map(headers) {
            Ok(map) => map,
            Err(reason) => return unreachable(reason),
        };
        let client = match self.client_for(url, addresses) {
            Ok(client) => client,
            Err(error) => return unreachable(describe(&error.without_url())),
        };
        let response = match client.post(url.as_str()).headers(header_map).body(body).send().await {
            Ok(response) => response,
            Err(error) => return failed_send(&error),
        };
        let status = response.status();
        if status.is_success() {
            return AttemptOutcome::Delivered { status: status.as_u16() };
        }
        let location = status
            .is_redirection()
            .then(|| response.headers().get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned))
            .flatten();
        let excerpt = read_excerpt(response).await;
        let mut reason = format!("HTTP {status}");
        if status.is_redirection() {
            reason.push_str(" (redirects are not followed");
            if let Some(location) = location {
                reason.push_str("; Location: ");
                reason.push_str(&location);
            }
            reason.push(')');
        }
        if !excerpt.is_empty() {
            reason.push_str(": ");
            reason.push_str(&excerpt);
        }
        AttemptOutcome::Failed {
            class: FailureClass::Rejected,
            status: Some(status.as_u16()),
            reason: trimmed(&reason),
        }
    }
}

impl Transport {
    /// The client pinned to `url`'s destination and exactly `addresses` (the ones this attempt
    /// checked), kept from an earlier attempt or built now.
    fn client_for(&self, url: &WebhookUrl, mut addresses: Vec<SocketAddr>) -> reqwest::Result<reqwest::Client> {
        addresses.sort_unstable();
        addresses.dedup();
        let key = ClientKey { host: url.host().to_owned(), port: url.port(), addresses };
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((client, used)) = clients.get_mut(&key) {
            *used = Instant::now();
            return Ok(client.clone());
        }
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured((*self.tls).clone())
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("tokenops-webhooks/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(self.connect_timeout)
            .read_timeout(self.read_timeout)
            // A receiver that trickles its answer is still bounded.
            .timeout(self.connect_timeout + self.read_timeout)
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_max_idle_per_host(IDLE_PER_DESTINATION);
        if url.ip_literal().is_none() {
            builder = builder.resolve_to_addrs(url.host(), &key.addresses);
        }
        let client = builder.build()?;
        if clients.len() >= MAX_CLIENTS
            && let Some(oldest) = clients.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone())
        {
            clients.remove(&oldest);
        }
        clients.insert(key, (client.clone(), Instant::now()));
        Ok(client)
    }
}

fn unreachable(reason: String) -> AttemptOutcome {
    AttemptOutcome::Failed { class: FailureClass::Unreachable, status: None, reason: trimmed(&reason) }
}

fn failed_send(error: &reqwest::Error) -> AttemptOutcome {
    // A connection that could not be made in time is the receiver being unreachable; a
    // connection made whose answer is late is a TIMEOUT.
    let class = if error.is_connect() {
        FailureClass::Unreachable
    } else if error.is_timeout() {
        FailureClass::Timeout
    } else {
        FailureClass::Unreachable
    };
    let reason = match class {
        FailureClass::Timeout => "no answer within the read timeout".to_owned(),
        _ => describe(error),
    };
    AttemptOutcome::Failed { class, status: None, reason: trimmed(&reason) }
}

fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("invalid header name {name:?}"))?;
        let value = HeaderValue::from_str(value).map_err(|_| format!("invalid value of header {name}"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// The error and its causes in one line, without the URL (the integrator knows it, and a query
/// string may carry their own token).
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Up to [`MAX_REASON_BODY`] bytes of the answer, as one line of text.
async fn read_excerpt(mut response: reqwest::Response) -> String {
    let mut bytes: Vec<u8> = Vec::new();
    while bytes.len() < MAX_REASON_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk[..chunk.len().min(MAX_REASON_BODY - bytes.len())]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&bytes).split_whitespace().collect::<Vec<_>>().join(" ")
}

fn trimmed(reason: &str) -> String {
    let reason: String = reason.chars().filter(|c| !c.is_control()).collect();
    match reason.char_indices().nth(MAX_REASON_CHARS) {
        Some((end, _)) => format!("{}…", &reason[..end]),
        None => reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_roots_must_be_pem_certificates() {
        let rule = AddressRule::default();
        assert!(Transport::new(rule.clone(), None).is_ok());
        assert_eq!(Transport::new(rule.clone(), Some(b"")).expect_err("empty"), TransportError::NoCertificate);
        assert_eq!(
            Transport::new(rule.clone(), Some(b"not pem at all")).expect_err("text"),
            TransportError::NoCertificate
        );
        let garbage = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(Transport::new(rule, Some(garbage)).is_err());
    }

    #[test]
    fn settings_build_the_rule_and_read_the_ca_file() {
        let transport = Transport::from_settings("127.0.0.0/8", None).expect("transport");
        assert!(transport.rule().permits("127.0.0.1".parse().expect("ip")));
        assert!(matches!(Transport::from_settings("nonsense", None), Err(TransportError::AllowCidrs(_))));
        let missing = Path::new("/nonexistent/webhook-ca.pem");
        assert!(matches!(Transport::from_settings("", Some(missing)), Err(TransportError::CaFile { .. })));
    }

    #[test]
    fn reasons_are_one_bounded_line() {
        assert_eq!(trimmed("a\nb"), "ab");
        let long = "x".repeat(MAX_REASON_CHARS + 10);
        assert_eq!(trimmed(&long).chars().count(), MAX_REASON_CHARS + 1);
    }

    #[tokio::test]
    async fn a_refused_address_is_unreachable_without_a_connection() {
        let transport = Transport::new(AddressRule::default(), None).expect("transport");
        let url = crate::url::normalise("https://127.0.0.1:9/hook").expect("url");
        let outcome = transport.post(&url, &[], Bytes::from_static(b"{}")).await;
        match outcome {
            AttemptOutcome::Failed { class: FailureClass::Unreachable, status: None, reason } => {
                assert!(reason.contains("loopback"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let rule = AddressRule::new(crate::address::parse_cidrs("127.0.0.0/8").expect("cidr"));
        let transport = Transport::new(rule, None).expect("transport");
        let url = crate::url::normalise(&format!("https://127.0.0.1:{port}/hook")).expect("url");
        let outcome = transport.post(&url, &[], Bytes::from_static(b"{}")).await;
        assert!(
            matches!(outcome, AttemptOutcome::Failed { class: FailureClass::Unreachable, status: None, .. }),
            "{outcome:?}"
        );
    }

    /// A resolver whose answer changes between lookups (DNS rebinding): `first` on the first
    /// lookup, `later` on every other; it counts the lookups.
    fn rebinding(
        lookups: &Arc<std::sync::atomic::AtomicUsize>,
        first: std::net::IpAddr,
        later: std::net::IpAddr,
    ) -> impl FnOnce(String, u16) -> std::future::Ready<std::io::Result<Vec<std::net::SocketAddr>>> {
        let lookups = lookups.clone();
        move |_, port| {
            let n = lookups.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let ip = if n == 0 { first } else { later };
            std::future::ready(Ok(vec![std::net::SocketAddr::new(ip, port)]))
        }
    }

    /// Accepts connections on `ip:port` and counts them.
    async fn counting_listener(ip: &str, port: u16) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind((ip, port)).await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(stream);
            }
        });
        (port, accepted)
    }

    #[tokio::test]
    async fn each_attempt_resolves_once_and_connects_only_to_what_it_checked() {
        use std::sync::atomic::Ordering::SeqCst;
        // The allowed address answers first; a second lookup would name 127.0.0.2, outside the
        // allowed range, listening on the same port.
        let (port, allowed_accepts) = counting_listener("127.0.0.1", 0).await;
        let (_, private_accepts) = counting_listener("127.0.0.2", port).await;
        let rule = AddressRule::new(crate::address::parse_cidrs("127.0.0.1/32").expect("cidr"));
        let transport = Transport::new(rule, None).expect("transport");
        // A name no system resolver knows: reaching anything proves the pinned address was used.
        let url = crate::url::normalise(&format!("https://rebind.invalid:{port}/hook")).expect("url");
        let lookups = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let first: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
        let later: std::net::IpAddr = "127.0.0.2".parse().expect("ip");

        let outcome =
            transport.post_with(&url, &[], Bytes::from_static(b"{}"), rebinding(&lookups, first, later)).await;
        assert!(matches!(outcome, AttemptOutcome::Failed { class: FailureClass::Unreachable, .. }), "{outcome:?}");
        assert_eq!(lookups.load(SeqCst), 1, "one lookup per attempt");
        assert_eq!(allowed_accepts.load(SeqCst), 1, "the connection went to the checked address");
        assert_eq!(private_accepts.load(SeqCst), 0, "the rebound address was reached");

        // The next attempt resolves again and is refused before any connection.
        let outcome =
            transport.post_with(&url, &[], Bytes::from_static(b"{}"), rebinding(&lookups, first, later)).await;
        match outcome {
            AttemptOutcome::Failed { class: FailureClass::Unreachable, status: None, reason } => {
                assert!(reason.contains("127.0.0.2") && reason.contains("loopback"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(lookups.load(SeqCst), 2);
        assert_eq!(allowed_accepts.load(SeqCst), 1);
        assert_eq!(private_accepts.load(SeqCst), 0, "the rebound address was reached");
    }
}
