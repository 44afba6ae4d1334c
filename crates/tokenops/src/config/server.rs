//! The HTTP server's settings: where it listens, the URL it is reached at, its data directory,
//! the largest request body, how long a contract registration waits for its deployment, the
//! drain before it stops, and its guards on connections (how many, how long one may idle).

use super::sources::Reader;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub(super) struct Server {
    pub listen: SocketAddr,
    pub public_url: String,
    pub data_dir: PathBuf,
    pub max_body_bytes: usize,
    pub contract_register_wait: Duration,
    pub shutdown_drain: Duration,
    pub max_connections: usize,
    pub connection_idle: Duration,
}

pub(super) fn read(r: &mut Reader) -> Server {
    let listen = r.parse(
        "TOKENOPS_LISTEN",
        SocketAddr::from(([127, 0, 0, 1], 8080)),
        "must be host:port, for example 127.0.0.1:8080",
        |v| v.parse().ok(),
    );
    let public_url = r.text("TOKENOPS_PUBLIC_URL").unwrap_or_else(|| format!("http://{listen}"));
    if !(public_url.starts_with("http://") || public_url.starts_with("https://")) {
        r.problems.push(format!("TOKENOPS_PUBLIC_URL={public_url}: must start with http:// or https://"));
    }
    let public_url = public_url.trim_end_matches('/').to_owned();
    let data_dir = PathBuf::from(r.text("TOKENOPS_DATA_DIR").unwrap_or_else(|| "./data".into()));
    let max_body_bytes = r.count("TOKENOPS_MAX_BODY_BYTES", 1_048_576, 1_024, 64 * 1_048_576);
    let contract_register_wait = r.millis("TOKENOPS_CONTRACT_REGISTER_WAIT_MS", 5_000, 0, 60_000);
    let shutdown_drain = r.millis("TOKENOPS_SHUTDOWN_DRAIN_MS", 1_000, 0, 600_000);
    let max_connections = r.count("TOKENOPS_MAX_CONNECTIONS", 1_024, 1, 1_000_000);
    let connection_idle = r.millis("TOKENOPS_CONNECTION_IDLE_MS", 75_000, 1_000, 3_600_000);
    Server {
        listen,
        public_url,
        data_dir,
        max_body_bytes,
        contract_register_wait,
        shutdown_drain,
        max_connections,
        connection_idle,
    }
}
