//! W3C trace context: the `traceparent` a request brings (or a new one), carried by the task
//! that serves it and by the jobs it enqueues, so an operation's settlement is found from its
//! submission by one trace id (in the logs, and in spans exported over OTLP).

use rand::RngCore;

/// One span's place in a trace: `00-{trace id}-{span id}-{flags}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

tokio::task_local! {
    static CURRENT: TraceContext;
}

impl TraceContext {
    /// A new trace, sampled.
    pub fn root() -> Self {
        let mut trace_id = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut trace_id);
        Self { trace_id, span_id: new_span_id(), sampled: true }
    }

    /// Parses a `traceparent` header (version 00; any later version read as 00, as the
    /// recommendation says); `None` for anything malformed, an all-zero id included.
    pub fn parse(header: &str) -> Option<Self> {
        let parts: Vec<&str> = header.trim().split('-').collect();
        let [version, trace, span, flags, ..] = parts.as_slice() else { return None };
        if version.len() != 2 || *version == "ff" || (*version == "00" && parts.len() != 4) {
            return None;
        }
        let trace_id: [u8; 16] = hex_bytes(trace)?;
        let span_id: [u8; 8] = hex_bytes(span)?;
        let [flags]: [u8; 1] = hex_bytes(flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self { trace_id, span_id, sampled: flags & 1 == 1 })
    }

    /// A child span of this one: same trace, new span id.
    pub fn child(&self) -> Self {
        Self { span_id: new_span_id(), ..*self }
    }

    pub fn header(&self) -> String {
        format!("00-{}-{}-{:02x}", hex(&self.trace_id), hex(&self.span_id), u8::from(self.sampled))
    }

    pub fn trace_hex(&self) -> String {
        hex(&self.trace_id)
    }

    pub fn span_hex(&self) -> String {
        hex(&self.span_id)
    }

    /// Runs `work` with this as the current context: jobs it enqueues carry it.
    pub async fn scope<F: std::future::Future>(self, work: F) -> F::Output {
        CURRENT.scope(self, work).await
    }

    /// The context of the request or job this task serves, if any.
    pub fn current() -> Option<TraceContext> {
        CURRENT.try_with(|c| *c).ok()
    }
}

/// The `traceparent` a job enqueued now carries: the current span's.
pub fn current_header() -> Option<String> {
    TraceContext::current().map(|c| c.header())
}

/// The key of a job's payload that carries the `traceparent` of what enqueued it.
const PAYLOAD_KEY: &str = "traceparent";

/// `payload` with the current context's `traceparent` (unchanged outside any request or job).
pub fn stamp(payload: serde_json::Value) -> serde_json::Value {
    stamp_with(payload, TraceContext::current())
}

/// `payload` carrying `context` (a follow-up job of a batch carries its parent job's).
pub fn stamp_with(mut payload: serde_json::Value, context: Option<TraceContext>) -> serde_json::Value {
    if let (Some(context), Some(object)) = (context, payload.as_object_mut()) {
        object.insert(PAYLOAD_KEY.to_owned(), serde_json::Value::String(context.header()));
    }
    payload
}

/// The context a job was enqueued in, if it carries one.
pub fn of_job(job: &tokenops_store::Job) -> Option<TraceContext> {
    job.payload.get(PAYLOAD_KEY).and_then(|v| v.as_str()).and_then(TraceContext::parse)
}

/// The span of a job run: a child of the context the job was enqueued in, its ids recorded on
/// the span (`trace_id`, `span_id`, `parent_span_id`) for the logs and the OTLP exporter.
pub fn job_span(job: &tokenops_store::Job) -> (tracing::Span, Option<TraceContext>) {
    let span = tracing::info_span!(
        "job",
        job_id = %job.id,
        kind = %job.kind,
        attempt = job.attempts,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
        parent_span_id = tracing::field::Empty,
    );
    let own = of_job(job).map(|parent| {
        let own = parent.child();
        span.record("trace_id", own.trace_hex());
        span.record("span_id", own.span_hex());
        span.record("parent_span_id", parent.span_hex());
        own
    });
    (span, own)
}

fn new_span_id() -> [u8; 8] {
    let mut id = [0u8; 8];
    while id == [0; 8] {
        rand::thread_rng().fill_bytes(&mut id);
    }
    id
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_bytes<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_malformed_ones_are_refused() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed = TraceContext::parse(header).expect("valid");
        assert_eq!(parsed.header(), header);
        assert!(parsed.sampled);
        let child = parsed.child();
        assert_eq!(child.trace_id, parsed.trace_id);
        assert_ne!(child.span_id, parsed.span_id);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
        // A later version may carry more fields; its first four are read.
        assert!(TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-x").is_some());
    }

    #[tokio::test]
    async fn the_current_context_is_the_scoped_one() {
        assert_eq!(TraceContext::current(), None);
        let root = TraceContext::root();
        let seen = root.scope(async { current_header() }).await;
        assert_eq!(seen, Some(root.header()));
    }
}
