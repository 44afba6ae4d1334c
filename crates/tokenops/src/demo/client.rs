//! The demo's HTTP client: every call goes through the public API as an integrator's would,
//! and is printed as a person wants to read it (the request, the status, the essential fields).

use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::Value;

/// A caller of the API: the base URL and, once signed in, a bearer token.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    http: reqwest::Client,
    token: Option<String>,
}

/// An answer: its status and its body (JSON, or `Value::String` for text such as CSV).
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Api {
    pub fn new(base: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .context("building the demo's HTTP client")?;
        Ok(Self { base: base.to_owned(), http, token: None })
    }

    /// The same client acting with `token`.
    pub fn as_caller(&self, token: &str) -> Self {
        Self { token: Some(token.to_owned()), ..self.clone() }
    }

    /// Sends a request with the API's headers (a fresh Idempotency-Key on every POST, PUT and
    /// PATCH); prints it and its answer; fails unless the status is `expect`.
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>, expect: u16) -> anyhow::Result<Answer> {
        let answer = self.send(method.clone(), path, body).await?;
        print_exchange(&method, path, body, &answer);
        if answer.status != expect {
            bail!("{method} {path} answered {} (expected {expect}): {}", answer.status, compact(&answer.body));
        }
        Ok(answer)
    }

    /// Like [`Api::call`] without printing: for polling.
    pub async fn quiet(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<Answer> {
        self.send(method, path, body).await
    }

    async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<Answer> {
        let mut request =
            self.http.request(method.clone(), format!("{}{path}", self.base)).header("API-Version", "1.0.0");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if matches!(method, Method::POST | Method::PUT | Method::PATCH) {
            request = request.header("Idempotency-Key", uuid::Uuid::now_v7().to_string());
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.with_context(|| format!("{method} {path}"))?;
        let status = response.status().as_u16();
        let json =
            response.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|c| c.contains("json"));
        let text = response.text().await.with_context(|| format!("reading the answer to {method} {path}"))?;
        let body = if json { serde_json::from_str(&text).unwrap_or(Value::String(text)) } else { Value::String(text) };
        Ok(Answer { status, body })
    }

    /// A token of the embedded identity provider for client credentials.
    pub async fn client_token(&self, client_id: &str, secret: &str) -> anyhow::Result<String> {
        let response = self
            .http
            .post(format!("{}/idp/oauth2/token", self.base))
            .basic_auth(client_id, Some(secret))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials")
            .send()
            .await
            .context("asking the identity provider for a token")?;
        let status = response.status();
        let body: Value = response.json().await.context("reading the token answer")?;
        println!("   POST /idp/oauth2/token (client credentials)\n   → {status}");
        body["access_token"].as_str().map(str::to_owned).with_context(|| format!("no access_token in {body}"))
    }
}

fn print_exchange(method: &Method, path: &str, body: Option<&Value>, answer: &Answer) {
    match body {
        Some(body) => println!("   {method} {path} {}", compact(body)),
        None => println!("   {method} {path}"),
    }
    println!("   → {} {}", answer.status, essentials(&answer.body));
}

/// The fields a person looks at first, when the answer has them.
fn essentials(body: &Value) -> String {
    const FIELDS: &[&str] = &[
        "id",
        "transactionId",
        "state",
        "status",
        "failureCode",
        "reasonCode",
        "assetId",
        "accountRef",
        "customerRef",
        "amount",
        "total",
        "available",
        "locked",
        "txHash",
        "blockNumber",
        "challenge",
        "role",
        "url",
        "signatureScheme",
    ];
    match body {
        Value::Object(map) => {
            let shown: Vec<String> = FIELDS
                .iter()
                .filter_map(|field| map.get(*field).filter(|v| !v.is_null()).map(|v| format!("{field}={}", plain(v))))
                .collect();
            shown.join(" ")
        }
        Value::String(text) => format!("({} lines of text)", text.lines().count()),
        other => compact(other),
    }
}

fn plain(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

/// One line of JSON, secrets and passwords masked (the demo prints what it sends).
pub fn compact(value: &Value) -> String {
    let mut masked = value.clone();
    mask(&mut masked);
    let text = masked.to_string();
    if text.len() > 240 { format!("{}…", &text[..text.floor_char_boundary(240)]) } else { text }
}

fn mask(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                let lower = key.to_ascii_lowercase();
                if lower.contains("password")
                    || lower.contains("secret")
                    || lower == "session"
                    || lower.contains("token")
                {
                    *inner = Value::String("***".into());
                } else {
                    mask(inner);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(mask),
        _ => {}
    }
}
