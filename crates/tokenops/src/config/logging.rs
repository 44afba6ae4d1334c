//! The logging and tracing settings: the log format and filter, and the OTLP endpoint spans are
//! exported to.

use super::sources::Reader;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

pub(super) struct Logging {
    pub format: LogFormat,
    pub filter: String,
    pub otlp_endpoint: Option<String>,
}

pub(super) fn read(r: &mut Reader) -> Logging {
    let format = r.parse("TOKENOPS_LOG_FORMAT", LogFormat::Human, "must be human or json", |v| match v {
        "human" => Some(LogFormat::Human),
        "json" => Some(LogFormat::Json),
        _ => None,
    });
    let otlp_endpoint = r.text("TOKENOPS_OTLP_ENDPOINT").map(|v| v.trim_end_matches('/').to_owned());
    if let Some(endpoint) = &otlp_endpoint
        && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
    {
        r.problems.push(format!("TOKENOPS_OTLP_ENDPOINT={endpoint}: must be an http:// or https:// URL"));
    }
    let filter = r.text("TOKENOPS_LOG").or_else(|| r.text("RUST_LOG")).unwrap_or_else(|| "info,sqlx=warn".into());
    Logging { format, filter, otlp_endpoint }
}
