//! The remote signer: custody in a separate signing service (an HSM front, Web3Signer or a
//! bank's own), spoken to over HTTP JSON. The protocol is documented in `PROTOCOL.md`; signing
//! follows Web3Signer's `eth1/sign` endpoint, key creation and disabling are tokenops extensions.
//!
//! Failures split the way the ledger pipeline needs them: the signer saying no (unknown key,
//! disabled key, refused request) is a refusal; the signer not answering (connection refused,
//! timeout, 5xx, a garbled answer, our credentials rejected) is temporary. A signature that does
//! not recover to the wallet is refused: a signer that signs with another key must not get a
//! transaction onto the ledger.

use crate::{Address, B256, Custody, CustodyError, Refusal, Signature, check_label, ensure_crypto_provider};
use async_trait::async_trait;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How to reach the signer.
#[derive(Clone)]
pub struct RemoteSignerConfig {
    /// The signer's base URL, without a trailing slash (`https://signer.bank.internal:9000`).
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub bearer_token: Option<String>,
    /// Bounds every request, connection included.
    pub timeout: Duration,
}

impl std::fmt::Debug for RemoteSignerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSignerConfig")
            .field("base_url", &self.base_url)
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RemoteSignerConfig {
    pub fn new(base_url: impl Into<String>) -> Self {
        Self { base_url: base_url.into(), bearer_token: None, timeout: Duration::from_secs(5) }
    }
}

/// The body of a signing request: the 32-byte hash as `0x` hex.
#[derive(Debug, Serialize, Deserialize)]
pub struct SignRequest {
    pub data: String,
}

/// The body of a key-creation request.
#[derive(Debug, Serialize, Deserialize)]
pub struct CreateKeyRequest {
    pub label: String,
}

/// The answer to a key creation.
#[derive(Debug, Serialize, Deserialize)]
pub struct CreateKeyResponse {
    pub address: String,
}

#[derive(Debug, Clone)]
pub struct RemoteSigner {
    client: reqwest::Client,
    base_url: String,
    bearer_token: Option<String>,
}

impl RemoteSigner {
    pub fn new(config: RemoteSignerConfig) -> Result<Self, CustodyError> {
        ensure_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            // A signer never redirects; following one could send a signing request elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| CustodyError::unavailable(format!("remote signer client: {e}")))?;
        Ok(Self {
            client,
            base_url: config.base_url.trim_end_matches('/').to_owned(),
            bearer_token: config.bearer_token,
        })
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        let request = self.client.post(format!("{}{path}", self.base_url));
        match &self.bearer_token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// `GET /upcheck`: true when the signer answers 200 (a readiness probe).
    pub async fn upcheck(&self) -> bool {
        let request = self.client.get(format!("{}/upcheck", self.base_url));
        matches!(request.send().await, Ok(response) if response.status().is_success())
    }
}

fn unreachable(error: reqwest::Error) -> CustodyError {
    CustodyError::unavailable(format!("remote signer unreachable: {error}"))
}

/// Sends `request` and answers the body of a success; another status is `status_error`'s about
/// `wallet`.
async fn answer(request: reqwest::RequestBuilder, wallet: Option<Address>) -> Result<String, CustodyError> {
    let response = request.send().await.map_err(unreachable)?;
    let status = response.status();
    let body = response.text().await.map_err(unreachable)?;
    if !status.is_success() {
        return Err(status_error(wallet, status, &body));
    }
    Ok(body)
}

/// Maps a non-success status. 404 (no such key) and 403/423 (key disabled or signing refused by
/// the signer's policy) and other 4xx (a request the signer will never accept) are refusals;
/// 401 (our credentials) and 5xx are temporary: they are fixed on the signer's side, and the
/// operation should wait for that rather than fail for good.
fn status_error(wallet: Option<Address>, status: StatusCode, body: &str) -> CustodyError {
    let body: String = body.chars().take(200).collect();
    let refused = |refusal: Refusal| CustodyError::Refused {
        wallet,
        refusal,
        reason: format!("remote signer answered {status}: {body}"),
    };
    match status {
        StatusCode::NOT_FOUND => refused(Refusal::UnknownWallet),
        StatusCode::FORBIDDEN | StatusCode::LOCKED => refused(Refusal::Disabled),
        StatusCode::UNAUTHORIZED | StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS => {
            CustodyError::unavailable(format!("remote signer answered {status}: {body}"))
        }
        status if status.is_client_error() => refused(Refusal::Rejected),
        status => CustodyError::unavailable(format!("remote signer answered {status}: {body}")),
    }
}

/// Parses a 65-byte `r || s || v` signature (`v` 27/28 as Web3Signer sends it, or 0/1), as a
/// JSON string or as plain text.
fn parse_signature(body: &str) -> Option<Signature> {
    let text = body.trim();
    let text = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')).unwrap_or(text);
    let digits = text.strip_prefix("0x")?;
    let mut bytes = [0u8; 65];
    hex::decode_to_slice(digits, &mut bytes).ok()?;
    let parity = match bytes[64] {
        0 | 27 => false,
        1 | 28 => true,
        _ => return None,
    };
    let mut rs = [0u8; 64];
    rs.copy_from_slice(&bytes[..64]);
    Some(Signature::from_bytes_and_parity(&rs, parity))
}

#[async_trait]
impl Custody for RemoteSigner {
    async fn create_wallet(&self, label: &str) -> Result<Address, CustodyError> {
        check_label(label)?;
        let request = self.post("/api/v1/eth1/keys").json(&CreateKeyRequest { label: label.to_owned() });
        let body = answer(request, None).await?;
        let created: CreateKeyResponse = serde_json::from_str(&body)
            .map_err(|e| CustodyError::unavailable(format!("remote signer sent an unreadable key: {e}")))?;
        created
            .address
            .parse()
            .map_err(|_| CustodyError::unavailable("remote signer sent an address that is not one".to_owned()))
    }

    async fn sign_hash(&self, wallet: Address, hash: B256) -> Result<Signature, CustodyError> {
        let request =
            self.post(&format!("/api/v1/eth1/sign/{wallet:#x}")).json(&SignRequest { data: format!("{hash:#x}") });
        let body = answer(request, Some(wallet)).await?;
        let signature = parse_signature(&body)
            .ok_or_else(|| CustodyError::unavailable("remote signer sent an unreadable signature".to_owned()))?;
        match signature.recover_address_from_prehash(&hash) {
            Ok(signer) if signer == wallet => Ok(signature),
            _ => Err(CustodyError::refused(
                wallet,
                Refusal::Rejected,
                "the remote signer's signature does not belong to the wallet",
            )),
        }
    }

    async fn disable(&self, wallet: Address) -> Result<(), CustodyError> {
        let response =
            self.post(&format!("/api/v1/eth1/keys/{wallet:#x}/disable")).send().await.map_err(unreachable)?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = response.text().await.map_err(unreachable)?;
        Err(status_error(Some(wallet), status, &body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_parse_with_either_parity_form() {
        let rs = "11".repeat(64);
        assert!(parse_signature(&format!("0x{rs}1b")).is_some_and(|s| !s.v()));
        assert!(parse_signature(&format!("\"0x{rs}1c\"")).is_some_and(|s| s.v()));
        assert!(parse_signature(&format!("0x{rs}01")).is_some_and(|s| s.v()));
        assert!(parse_signature(&format!("0x{rs}05")).is_none());
        assert!(parse_signature(&format!("0x{rs}")).is_none());
        assert!(parse_signature("nonsense").is_none());
    }

    #[test]
    fn statuses_split_into_refusals_and_temporary_failures() {
        let refused = |s: StatusCode| status_error(None, s, "").is_refusal();
        assert!(refused(StatusCode::NOT_FOUND));
        assert!(refused(StatusCode::FORBIDDEN));
        assert!(refused(StatusCode::BAD_REQUEST));
        assert!(!refused(StatusCode::UNAUTHORIZED));
        assert!(!refused(StatusCode::TOO_MANY_REQUESTS));
        assert!(!refused(StatusCode::INTERNAL_SERVER_ERROR));
        assert!(!refused(StatusCode::SERVICE_UNAVAILABLE));
    }
}
