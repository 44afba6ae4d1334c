//! Span export over OTLP/HTTP (JSON encoding) when `TOKENOPS_OTLP_ENDPOINT` is set: the
//! `request` and `job` spans, which carry W3C trace ids (`app::trace`), are sent in batches to
//! `{endpoint}/v1/traces`, so a collector shows an operation's submission and its settlement's
//! jobs as one trace. A full queue or an unreachable collector drops spans, never slows a request.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Spans waiting to be sent; beyond this they are dropped.
const QUEUE: usize = 4_096;
/// The most spans in one export request.
const BATCH: usize = 512;
/// How long a span may wait for its batch.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The span names exported: those that carry trace ids.
const EXPORTED: &[&str] = &["request", "job"];

/// The layer that hands closed spans to the exporter task.
pub struct OtlpLayer {
    spans: mpsc::Sender<serde_json::Value>,
}

/// Starts the exporter task on the current runtime and returns its layer.
pub fn layer(endpoint: &str, service_name: &str) -> OtlpLayer {
    let (spans, queue) = mpsc::channel(QUEUE);
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    tokio::spawn(export(queue, url, service_name.to_owned()));
    OtlpLayer { spans }
}

/// What the layer keeps per span: its start and its fields.
struct Timed {
    start: SystemTime,
    fields: BTreeMap<String, String>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for OtlpLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !EXPORTED.contains(&attrs.metadata().name()) {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        span.extensions_mut().insert(Timed { start: SystemTime::now(), fields });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(timed) = span.extensions_mut().get_mut::<Timed>() {
            values.record(&mut Fields(&mut timed.fields));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(timed) = span.extensions_mut().remove::<Timed>() else { return };
        let name = span.metadata().name();
        if let Some(exported) = otlp_span(name, &timed, SystemTime::now()) {
            // Full: the span is dropped rather than the request slowed.
            let _ = self.spans.try_send(exported);
        }
    }
}

fn nanos(at: SystemTime) -> String {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()).to_string()
}

/// The span in OTLP's JSON form; `None` without trace ids.
fn otlp_span(name: &str, timed: &Timed, end: SystemTime) -> Option<serde_json::Value> {
    let fields = &timed.fields;
    let trace_id = fields.get("trace_id").filter(|t| t.len() == 32)?;
    let span_id = fields.get("span_id").filter(|s| s.len() == 16)?;
    let attributes: Vec<serde_json::Value> = fields
        .iter()
        .filter(|(key, _)| !matches!(key.as_str(), "trace_id" | "span_id" | "parent_span_id"))
        .map(|(key, value)| serde_json::json!({ "key": key, "value": { "stringValue": value } }))
        .collect();
    let title = match (name, fields.get("route").or(fields.get("kind"))) {
        ("request", Some(route)) => format!("{} {route}", fields.get("method").map_or("", String::as_str)),
        (_, Some(kind)) => format!("job {kind}"),
        _ => name.to_owned(),
    };
    // SERVER for a request, CONSUMER for a job taken from the queue.
    let kind = if name == "request" { 2 } else { 5 };
    let mut span = serde_json::json!({
        "traceId": trace_id,
        "spanId": span_id,
        "name": title,
        "kind": kind,
        "startTimeUnixNano": nanos(timed.start),
        "endTimeUnixNano": nanos(end),
        "attributes": attributes,
    });
    if let Some(parent) = fields.get("parent_span_id").filter(|p| p.len() == 16) {
        span["parentSpanId"] = serde_json::Value::String(parent.clone());
    }
    Some(span)
}

async fn export(mut queue: mpsc::Receiver<serde_json::Value>, url: String, service_name: String) {
    // The exporter may start before anything else has chosen TLS's crypto provider.
    tokenops_identity::install_crypto_provider();
    let client = match reqwest::Client::builder().timeout(Duration::from_secs(10)).build() {
        Ok(client) => client,
        Err(e) => {
            eprintln!("tokenops: OTLP export disabled: {e}");
            return;
        }
    };
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let first = match queue.recv().await {
            Some(span) => span,
            None => return,
        };
        batch.push(first);
        let deadline = tokio::time::Instant::now() + FLUSH_EVERY;
        while batch.len() < BATCH {
            match tokio::time::timeout_at(deadline, queue.recv()).await {
                Ok(Some(span)) => batch.push(span),
                Ok(None) | Err(_) => break,
            }
        }
        let body = serde_json::json!({
            "resourceSpans": [{
                "resource": { "attributes": [{ "key": "service.name", "value": { "stringValue": service_name } }] },
                "scopeSpans": [{ "scope": { "name": "tokenops", "version": env!("CARGO_PKG_VERSION") }, "spans": batch }],
            }],
        });
        batch = Vec::with_capacity(BATCH);
        // Not through tracing: a log line about exporting must not become more to export.
        match client.post(&url).json(&body).send().await {
            Ok(response) if response.status().is_success() => {}
            Ok(response) => eprintln!("tokenops: the OTLP collector at {url} answered {}", response.status()),
            Err(e) => eprintln!("tokenops: could not export spans to {url}: {e}"),
        }
    }
}
