//! The demo's webhook receiver: an HTTPS endpoint on 127.0.0.1 with a certificate from a CA made
//! at start (the service trusts it through `TOKENOPS_WEBHOOK_CA_FILE`), which checks each
//! delivery's HMAC_SHA256 signature with the shipped verifier and prints it as it arrives.

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// How many times, 50 ms apart, a delivery that came before the secret was known looks for it.
const SECRET_WAIT_POLLS: u32 = 60;

/// A delivery as received: its event type and whether its signature verified.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub event_type: String,
    pub verified: bool,
}

#[derive(Default)]
struct Shared {
    secret: Option<String>,
    deliveries: Vec<Delivery>,
}

pub struct Receiver {
    pub url: String,
    pub ca_pem: String,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    pub async fn start() -> anyhow::Result<Receiver> {
        let (ca_pem, tls) = certificates()?;
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding the demo's webhook receiver")?;
        let port = listener.local_addr().context("the receiver's address")?.port();
        let shared = Arc::new(Mutex::new(Shared::default()));
        let task = tokio::spawn(accept(listener, TlsAcceptor::from(Arc::new(tls)), shared.clone()));
        Ok(Receiver { url: format!("https://127.0.0.1:{port}/tokenops"), ca_pem, shared, task })
    }

    /// The registration's secret, once the service has answered it.
    pub fn trust(&self, secret: &str) {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner).secret = Some(secret.to_owned());
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner).deliveries.clone()
    }
}

async fn accept(listener: TcpListener, acceptor: TlsAcceptor, shared: Arc<Mutex<Shared>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let (acceptor, shared) = (acceptor.clone(), shared.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else { return };
            let service = service_fn(move |request| receive(shared.clone(), request));
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
        });
    }
}

async fn receive(
    shared: Arc<Mutex<Shared>>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, std::convert::Infallible> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let event: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let event_type = event["type"].as_str().unwrap_or("?").to_owned();
    let timestamp: i64 = header("webhook-timestamp").parse().unwrap_or_default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    // The registration's test delivery may arrive before the demo has read the secret from the
    // registration's answer (a worker picks the delivery up as the registration commits): it
    // waits a moment for it, as a receiver that stores the secret after registering would.
    let mut secret = None;
    for _ in 0..SECRET_WAIT_POLLS {
        secret = shared.lock().unwrap_or_else(PoisonError::into_inner).secret.clone();
        if secret.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let verified = secret.is_some_and(|secret| {
        tokenops_webhooks::verify::verify_hmac(&header("webhook-signature"), &secret, timestamp, now, &body).is_ok()
    });
    let mark = if verified { "signature verified" } else { "signature NOT verified" };
    println!("   [receiver] {event_type} ({mark}, event {})", header("webhook-event-id"));
    shared.lock().unwrap_or_else(PoisonError::into_inner).deliveries.push(Delivery { event_type, verified });
    let status = if verified { 200 } else { 401 };
    let mut response = hyper::Response::new(Full::new(Bytes::from_static(b"")));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    Ok(response)
}

/// A throwaway CA and a certificate for 127.0.0.1 signed by it: the CA in PEM for the service,
/// the server's TLS configuration for the receiver.
fn certificates() -> anyhow::Result<(String, rustls::ServerConfig)> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "tokenops demo webhook CA");
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate()?;
    let mut server_params = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
    server_params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = server_params.signed_by(&server_key, &issuer)?;
    let chain = vec![server_cert.der().clone(), CertificateDer::from(ca_cert.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((ca_cert.pem(), config))
}
