//! Configuration: the `TOKENOPS_*` environment variables of the operator interface, optionally
//! mirrored by a TOML file (`TOKENOPS_CONFIG`; keys are the variable names without the prefix,
//! lowercased). Environment wins over the file. Every setting is validated at start; all bad
//! settings are reported at once, each by name.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokenops_app::AppSettings;

/// Which parts of the service this node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// HTTP API and workers (the default).
    All,
    /// HTTP API only: jobs are left to worker nodes.
    Api,
    /// Workers only, with the operational endpoints (health, readiness, metrics).
    Worker,
}

impl Role {
    pub fn runs_api(self) -> bool {
        matches!(self, Role::All | Role::Api)
    }
    pub fn runs_workers(self) -> bool {
        matches!(self, Role::All | Role::Worker)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    Sqlite(PathBuf),
    Postgres { url: String, schema: Option<String> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerKind {
    Embedded,
    Evm,
}

/// Who issues the bearer tokens the service accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthProvider {
    /// The embedded identity provider at `{public_url}/idp` (the default).
    Embedded,
    /// The bank's own provider, named by `TOKENOPS_AUTH_ISSUER` (and its JWKS URL): the embedded
    /// provider and its sign-in endpoints are off.
    External,
}

/// Who holds the wallets' keys.
#[derive(Clone, PartialEq, Eq)]
pub enum CustodySettings {
    /// The embedded keystore: keys sealed in the service's own store (the default).
    Embedded,
    /// A remote signer speaking `crates/tokenops-custody/PROTOCOL.md`; the bearer token is a
    /// secret (never printed).
    Remote { url: String, token: Option<String> },
}

impl std::fmt::Debug for CustodySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CustodySettings::Embedded => f.write_str("Embedded"),
            CustodySettings::Remote { url, .. } => write!(f, "Remote({})", redact_url(url)),
        }
    }
}

/// Where invitation mail goes.
#[derive(Clone, PartialEq, Eq)]
pub enum MailSettings {
    /// One `.eml` file per message in `{data_dir}/outbox` (the default).
    File,
    /// An SMTP server: `TOKENOPS_SMTP_URL` (may carry a password; never printed).
    Smtp { url: String },
}

impl std::fmt::Debug for MailSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MailSettings::File => f.write_str("File"),
            MailSettings::Smtp { url } => write!(f, "Smtp({})", redact_url(url)),
        }
    }
}

/// Lifetimes of what the embedded provider issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenLifetimes {
    pub access_secs: i64,
    pub refresh_secs: i64,
    /// A signing key older than this is replaced; the old one stays published while tokens it
    /// signed may still be valid.
    pub signing_key_rotation_secs: i64,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub public_url: String,
    pub data_dir: PathBuf,
    pub database: DatabaseUrl,
    pub ledger: LedgerKind,
    pub evm_rpc_url: Option<String>,
    /// Blocks past a receipt's block before an EVM transaction counts as included.
    pub evm_confirmations: u64,
    /// Development nodes only (anvil): give each new wallet gas with `anvil_setBalance`.
    pub evm_dev_gas: bool,
    /// How often the embedded ledger produces a block while transactions wait.
    pub ledger_block_interval: Duration,
    pub custody: CustodySettings,
    pub webhook_allow_cidrs: Vec<String>,
    pub webhook_ca_file: Option<PathBuf>,
    pub webhook_retry_base_ms: i64,
    /// Replays an organisation may queue per hour (`TOKENOPS_WEBHOOK_REPLAY_BUDGET`, the spec's
    /// 1,000 by default; tests lower it to reach the 429).
    pub webhook_replay_budget: u64,
    /// Attempts in flight at once per webhook destination (origin), per node.
    pub webhook_max_in_flight_per_destination: usize,
    /// The age in days at which the JWS_ES256 delivery signing key is replaced (0: never).
    pub webhook_jws_key_rotation_days: u32,
    /// How long `serve` keeps answering after SIGTERM, with `/readyz` at 503, before it stops
    /// accepting (`TOKENOPS_SHUTDOWN_DRAIN_MS`): the time a load balancer needs to see it go.
    pub shutdown_drain: std::time::Duration,
    pub role: Role,
    /// Threads of the workers' runtime (`serve`).
    pub worker_threads: usize,
    pub log_format: LogFormat,
    pub log_filter: String,
    /// Where spans are exported over OTLP/HTTP (`TOKENOPS_OTLP_ENDPOINT`, e.g.
    /// `http://collector:4318`); none when unset.
    pub otlp_endpoint: Option<String>,
    pub auth_provider: AuthProvider,
    pub auth_issuer: String,
    pub auth_jwks_url: String,
    /// The master key (hex or base64 of 32 bytes) that seals signing and wallet keys at rest;
    /// `None` means a development key generated into the data directory.
    pub master_key: Option<String>,
    pub token_lifetimes: TokenLifetimes,
    /// When set, the `aud` every accepted token must carry.
    pub auth_audience: Option<String>,
    /// How long fetched issuer keys are trusted before they are fetched again.
    pub auth_jwks_ttl: Duration,
    pub max_body_bytes: usize,
    pub mail: MailSettings,
    /// The sender of invitation mail (RFC 5322 mailbox).
    pub mail_from: String,
    pub app: AppSettings,
}

/// Where settings come from: the environment, then the optional file.
pub struct Sources {
    values: BTreeMap<String, String>,
}

impl Sources {
    /// Reads `TOKENOPS_CONFIG` (if set) and the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        let env: BTreeMap<String, String> =
            std::env::vars().filter(|(k, _)| k.starts_with("TOKENOPS_") || k == "RUST_LOG").collect();
        Self::from_parts(env)
    }

    /// For tests and embedding: the given variables stand for the environment.
    pub fn from_parts(env: BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let mut values = BTreeMap::new();
        if let Some(path) = env.get("TOKENOPS_CONFIG") {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(vec![format!("TOKENOPS_CONFIG={path}: cannot read the file: {e}")]))?;
            let table: toml::Table =
                text.parse().map_err(|e| ConfigError(vec![format!("TOKENOPS_CONFIG={path}: not valid TOML: {e}")]))?;
            for (key, value) in table {
                let text = match value {
                    toml::Value::String(s) => s,
                    toml::Value::Array(items) => items
                        .iter()
                        .map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()))
                        .collect::<Vec<_>>()
                        .join(","),
                    other => other.to_string(),
                };
                values.insert(format!("TOKENOPS_{}", key.to_ascii_uppercase()), text);
            }
        }
        values.extend(env);
        Ok(Self { values })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str).filter(|v| !v.trim().is_empty())
    }
}

#[derive(Debug)]
pub struct ConfigError(pub Vec<String>);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "invalid configuration:")?;
        for problem in &self.0 {
            writeln!(f, "  - {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

struct Reader<'a> {
    sources: &'a Sources,
    problems: Vec<String>,
}

impl Reader<'_> {
    fn text(&self, name: &str) -> Option<String> {
        self.sources.get(name).map(str::to_owned)
    }

    fn parse<T>(&mut self, name: &str, default: T, what: &str, parse: impl Fn(&str) -> Option<T>) -> T {
        match self.sources.get(name) {
            None => default,
            Some(raw) => parse(raw.trim()).unwrap_or_else(|| {
                self.problems.push(format!("{name}={raw}: {what}"));
                default
            }),
        }
    }

    fn integer(&mut self, name: &str, default: i64, min: i64, max: i64) -> i64 {
        let what = format!("must be a whole number from {min} to {max}");
        self.parse(name, default, &what, |v| v.parse::<i64>().ok().filter(|n| (min..=max).contains(n)))
    }
}

fn valid_cidr(text: &str) -> bool {
    let Some((addr, prefix)) = text.split_once('/') else { return false };
    let Ok(addr) = addr.parse::<std::net::IpAddr>() else { return false };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    prefix.parse::<u8>().is_ok_and(|p| p <= max)
}

/// Jobs run at once per node unless configured. A job spends most of its time waiting for its
/// commit to be durable: on SQLite that wait is shared by the whole group, so many jobs cost
/// little; on PostgreSQL each running job holds one of the pool's connections, which the API
/// needs too, so fewer run (measured with `scripts/bench`: ARCHITECTURE.md, "Throughput").
fn default_worker_concurrency(database: &DatabaseUrl) -> i64 {
    match database {
        DatabaseUrl::Sqlite(_) => 256,
        DatabaseUrl::Postgres { .. } => 32,
    }
}

fn database_url(raw: &str, data_dir: &std::path::Path, schema: Option<String>) -> Result<DatabaseUrl, String> {
    if let Some(path) = raw.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err("sqlite:// needs a file path, for example sqlite://./data/tokenops.db".into());
        }
        return Ok(DatabaseUrl::Sqlite(PathBuf::from(path)));
    }
    if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
        return Ok(DatabaseUrl::Postgres { url: raw.to_owned(), schema });
    }
    let scheme = raw.split("://").next().unwrap_or(raw);
    let _ = data_dir;
    Err(format!("unsupported scheme {scheme:?}: use sqlite://<file> (the default) or postgres://…"))
}

impl Config {
    pub fn load(sources: &Sources) -> Result<Self, ConfigError> {
        let mut r = Reader { sources, problems: Vec::new() };
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
        let schema = r.text("TOKENOPS_DATABASE_SCHEMA");
        let raw_url = r
            .text("TOKENOPS_DATABASE_URL")
            .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("tokenops.db").display()));
        let database = match database_url(&raw_url, &data_dir, schema) {
            Ok(db) => db,
            Err(problem) => {
                r.problems.push(format!("TOKENOPS_DATABASE_URL={}: {problem}", redact_url(&raw_url)));
                DatabaseUrl::Sqlite(data_dir.join("tokenops.db"))
            }
        };
        let ledger = r.parse("TOKENOPS_LEDGER", LedgerKind::Embedded, "must be embedded or evm", |v| match v {
            "embedded" => Some(LedgerKind::Embedded),
            "evm" => Some(LedgerKind::Evm),
            _ => None,
        });
        let evm_rpc_url = r.text("TOKENOPS_EVM_RPC_URL");
        if ledger == LedgerKind::Evm && evm_rpc_url.is_none() {
            r.problems.push("TOKENOPS_EVM_RPC_URL: required when TOKENOPS_LEDGER=evm".into());
        }
        let evm_confirmations = r.integer("TOKENOPS_EVM_CONFIRMATIONS", 0, 0, 1_000).unsigned_abs();
        let evm_dev_gas = r.parse("TOKENOPS_EVM_GAS_FUNDING", false, "must be none or dev", |v| match v {
            "none" => Some(false),
            "dev" => Some(true),
            _ => None,
        });
        let ledger_block_interval =
            Duration::from_millis(r.integer("TOKENOPS_LEDGER_BLOCK_INTERVAL_MS", 200, 1, 60_000).unsigned_abs());
        let custody_url = r.text("TOKENOPS_CUSTODY_URL");
        let custody = match r.text("TOKENOPS_CUSTODY").as_deref() {
            None | Some("embedded") => CustodySettings::Embedded,
            Some("remote") => match custody_url {
                Some(url) if url.starts_with("https://") || url.starts_with("http://") => CustodySettings::Remote {
                    url: url.trim_end_matches('/').to_owned(),
                    token: r.text("TOKENOPS_CUSTODY_TOKEN"),
                },
                Some(url) => {
                    r.problems.push(format!(
                        "TOKENOPS_CUSTODY_URL={}: must start with https:// or http://",
                        redact_url(&url)
                    ));
                    CustodySettings::Embedded
                }
                None => {
                    r.problems.push("TOKENOPS_CUSTODY_URL: required when TOKENOPS_CUSTODY=remote".into());
                    CustodySettings::Embedded
                }
            },
            Some(other) => {
                r.problems.push(format!("TOKENOPS_CUSTODY={other}: must be embedded or remote"));
                CustodySettings::Embedded
            }
        };
        let webhook_allow_cidrs: Vec<String> = r
            .text("TOKENOPS_WEBHOOK_ALLOW_CIDRS")
            .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        for cidr in &webhook_allow_cidrs {
            if !valid_cidr(cidr) {
                r.problems.push(format!("TOKENOPS_WEBHOOK_ALLOW_CIDRS: {cidr:?} is not a CIDR such as 10.0.0.0/8"));
            }
        }
        let webhook_ca_file = r.text("TOKENOPS_WEBHOOK_CA_FILE").map(PathBuf::from);
        if let Some(path) = &webhook_ca_file
            && !path.is_file()
        {
            r.problems.push(format!("TOKENOPS_WEBHOOK_CA_FILE={}: no such file", path.display()));
        }
        let webhook_retry_base_ms = r.integer("TOKENOPS_WEBHOOK_RETRY_BASE_MS", 30_000, 1, 3_600_000);
        let webhook_replay_budget = r.integer("TOKENOPS_WEBHOOK_REPLAY_BUDGET", 1_000, 1, 1_000_000).unsigned_abs();
        let webhook_max_in_flight_per_destination = usize::try_from(r.integer(
            "TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION",
            i64::try_from(tokenops_webhooks::destinations::DEFAULT_MAX_IN_FLIGHT).unwrap_or(8),
            1,
            256,
        ))
        .unwrap_or(tokenops_webhooks::destinations::DEFAULT_MAX_IN_FLIGHT);
        let webhook_jws_key_rotation_days =
            u32::try_from(r.integer("TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS", 90, 0, 3_650)).unwrap_or(90);
        let shutdown_drain =
            std::time::Duration::from_millis(r.integer("TOKENOPS_SHUTDOWN_DRAIN_MS", 1_000, 0, 600_000).unsigned_abs());
        // One by default: more settle faster, but their jobs then hold SQLite's writer and the
        // cores so often that the 202's p99 leaves 20 ms at a third of the rate (measured with
        // `scripts/bench`: ARCHITECTURE.md, "Throughput").
        let worker_threads = usize::try_from(r.integer("TOKENOPS_WORKER_THREADS", 1, 1, 64)).unwrap_or(1);
        let role = r.parse("TOKENOPS_ROLE", Role::All, "must be all, api or worker", |v| match v {
            "all" => Some(Role::All),
            "api" => Some(Role::Api),
            "worker" => Some(Role::Worker),
            _ => None,
        });
        let log_format = r.parse("TOKENOPS_LOG_FORMAT", LogFormat::Human, "must be human or json", |v| match v {
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
        let log_filter =
            r.text("TOKENOPS_LOG").or_else(|| r.text("RUST_LOG")).unwrap_or_else(|| "info,sqlx=warn".into());
        let external_issuer = r.text("TOKENOPS_AUTH_ISSUER");
        let auth_provider = if external_issuer.is_some() { AuthProvider::External } else { AuthProvider::Embedded };
        let auth_issuer = external_issuer.unwrap_or_else(|| format!("{public_url}/idp"));
        let master_key = r.text("TOKENOPS_MASTER_KEY");
        if let Some(key) = &master_key
            && tokenops_identity::Sealer::from_text(key).is_err()
        {
            // The value itself is a secret: never repeat it.
            r.problems.push("TOKENOPS_MASTER_KEY: must be 32 bytes as 64 hex digits or base64".into());
        }
        let token_lifetimes = TokenLifetimes {
            access_secs: r.integer("TOKENOPS_ACCESS_TOKEN_TTL_SECS", 3_600, 60, 86_400),
            refresh_secs: r.integer("TOKENOPS_REFRESH_TOKEN_TTL_SECS", 43_200, 300, 30 * 86_400),
            signing_key_rotation_secs: r.integer(
                "TOKENOPS_SIGNING_KEY_ROTATION_SECS",
                30 * 86_400,
                3_600,
                365 * 86_400,
            ),
        };
        let explicit_jwks_url = r.text("TOKENOPS_AUTH_JWKS_URL");
        let jwks_url_is_derived = explicit_jwks_url.is_none();
        let auth_jwks_url = explicit_jwks_url.unwrap_or_else(|| format!("{auth_issuer}/.well-known/jwks.json"));
        // Only an external provider's keys are fetched; the embedded provider's are read in-process.
        if auth_provider == AuthProvider::External
            && let Err(problem) = tokenops_identity::check_jwks_url(&auth_jwks_url)
        {
            let origin = if jwks_url_is_derived {
                " (derived from TOKENOPS_AUTH_ISSUER / TOKENOPS_PUBLIC_URL; set TOKENOPS_AUTH_JWKS_URL explicitly)"
            } else {
                ""
            };
            r.problems.push(format!("TOKENOPS_AUTH_JWKS_URL={}: {problem}{origin}", redact_url(&auth_jwks_url)));
        }
        let auth_audience = r.text("TOKENOPS_AUTH_AUDIENCE").map(|a| a.trim().to_owned());
        let auth_jwks_ttl =
            Duration::from_secs(r.integer("TOKENOPS_AUTH_JWKS_TTL_SECS", 300, 10, 86_400).unsigned_abs());
        let max_body_bytes = r.integer("TOKENOPS_MAX_BODY_BYTES", 1_048_576, 1_024, 64 * 1_048_576);
        let mail_from = r.text("TOKENOPS_MAIL_FROM").unwrap_or_else(|| "tokenops <no-reply@tokenops.local>".into());
        let smtp_url = r.text("TOKENOPS_SMTP_URL");
        let mail = match r.text("TOKENOPS_MAIL_TRANSPORT").as_deref() {
            None | Some("file") => MailSettings::File,
            Some("smtp") => match smtp_url {
                // Built only to check the URL and sender; it never sends, so its clock is unread.
                Some(url) => match tokenops_app::mail::SmtpTransport::new(
                    &url,
                    &mail_from,
                    std::sync::Arc::new(tokenops_app::clock::SystemClock),
                ) {
                    Ok(_) => MailSettings::Smtp { url },
                    Err(problem) => {
                        r.problems
                            .push(format!("TOKENOPS_SMTP_URL={} / TOKENOPS_MAIL_FROM: {problem}", redact_url(&url)));
                        MailSettings::File
                    }
                },
                None => {
                    r.problems.push("TOKENOPS_SMTP_URL: required when TOKENOPS_MAIL_TRANSPORT=smtp".into());
                    MailSettings::File
                }
            },
            Some(other) => {
                r.problems.push(format!("TOKENOPS_MAIL_TRANSPORT={other}: must be file or smtp"));
                MailSettings::File
            }
        };
        let defaults = AppSettings::default();
        // The spec requires idempotency records to be kept at least 24 hours.
        let retention_secs = r.integer("TOKENOPS_IDEMPOTENCY_RETENTION_SECS", 86_400, 86_400, 90 * 86_400);
        let app = AppSettings {
            idempotency_lease_ms: r.integer(
                "TOKENOPS_IDEMPOTENCY_LEASE_MS",
                defaults.idempotency_lease_ms,
                1_000,
                3_600_000,
            ),
            idempotency_retention_ms: retention_secs * 1_000,
            finished_job_retention_ms: r.integer(
                "TOKENOPS_JOB_RETENTION_SECS",
                defaults.finished_job_retention_ms / 1_000,
                60,
                90 * 86_400,
            ) * 1_000,
            job_max_attempts: u32::try_from(r.integer(
                "TOKENOPS_JOB_MAX_ATTEMPTS",
                i64::from(defaults.job_max_attempts),
                1,
                1_000,
            ))
            .unwrap_or(10),
            job_lease_ms: r.integer("TOKENOPS_JOB_LEASE_MS", defaults.job_lease_ms, 100, 3_600_000),
            job_backoff_base_ms: r.integer("TOKENOPS_JOB_BACKOFF_BASE_MS", defaults.job_backoff_base_ms, 1, 3_600_000),
            job_backoff_cap_ms: r.integer("TOKENOPS_JOB_BACKOFF_CAP_MS", defaults.job_backoff_cap_ms, 1, 86_400_000),
            worker_concurrency: usize::try_from(r.integer(
                "TOKENOPS_WORKER_CONCURRENCY",
                default_worker_concurrency(&database),
                1,
                256,
            ))
            .unwrap_or(8),
            worker_poll_interval: Duration::from_millis(
                r.integer("TOKENOPS_WORKER_POLL_MS", 2_000, 10, 60_000).unsigned_abs(),
            ),
            maintenance_interval: Duration::from_secs(
                r.integer("TOKENOPS_MAINTENANCE_INTERVAL_SECS", 600, 1, 86_400).unsigned_abs(),
            ),
            shutdown_grace: Duration::from_millis(
                r.integer("TOKENOPS_SHUTDOWN_GRACE_MS", 10_000, 0, 600_000).unsigned_abs(),
            ),
            receipt_poll_ms: r.integer("TOKENOPS_RECEIPT_POLL_MS", defaults.receipt_poll_ms, 10, 600_000),
            lock_sweep_interval: Duration::from_millis(
                r.integer("TOKENOPS_LOCK_SWEEP_MS", 5_000, 10, 3_600_000).unsigned_abs(),
            ),
            reconcile_interval: Duration::from_secs(
                r.integer("TOKENOPS_RECONCILE_INTERVAL_SECS", 600, 1, 86_400).unsigned_abs(),
            ),
            resume_sweep_interval: Duration::from_secs(
                r.integer("TOKENOPS_RESUME_SWEEP_SECS", 60, 1, 86_400).unsigned_abs(),
            ),
            nonce_gap_sweep_interval: Duration::from_millis(
                r.integer("TOKENOPS_NONCE_GAP_SWEEP_MS", 5_000, 10, 3_600_000).unsigned_abs(),
            ),
            nonce_gap_grace: Duration::from_millis(
                r.integer("TOKENOPS_NONCE_GAP_GRACE_MS", 10_000, 10, 3_600_000).unsigned_abs(),
            ),
            // From a second (tests) to a year.
            approval_lifetime_ms: r.integer(
                "TOKENOPS_APPROVAL_LIFETIME_MS",
                defaults.approval_lifetime_ms,
                1_000,
                365 * 86_400_000,
            ),
            // From a second (tests) to a day.
            policy_decision_timeout_ms: r.integer(
                "TOKENOPS_POLICY_DECISION_TIMEOUT_MS",
                defaults.policy_decision_timeout_ms,
                1_000,
                86_400_000,
            ),
            script_limits: script_limits(&mut r, &defaults.script_limits),
            automation_schedule_interval: Duration::from_millis(
                r.integer("TOKENOPS_AUTOMATION_SCHEDULE_MS", 5_000, 10, 3_600_000).unsigned_abs(),
            ),
            audit_seal_interval: Duration::from_millis(
                r.integer("TOKENOPS_AUDIT_SEAL_MS", 10_000, 10, 86_400_000).unsigned_abs(),
            ),
            automation_disable_after_failures: u32::try_from(r.integer(
                "TOKENOPS_AUTOMATION_DISABLE_AFTER_FAILURES",
                i64::from(defaults.automation_disable_after_failures),
                0,
                1_000,
            ))
            .unwrap_or(5),
        };
        if r.problems.is_empty() {
            Ok(Config {
                listen,
                public_url,
                data_dir,
                database,
                ledger,
                evm_rpc_url,
                evm_confirmations,
                evm_dev_gas,
                ledger_block_interval,
                custody,
                webhook_allow_cidrs,
                webhook_ca_file,
                webhook_retry_base_ms,
                webhook_replay_budget,
                webhook_max_in_flight_per_destination,
                webhook_jws_key_rotation_days,
                shutdown_drain,
                role,
                worker_threads,
                log_format,
                log_filter,
                otlp_endpoint,
                auth_provider,
                auth_issuer,
                auth_jwks_url,
                master_key,
                token_lifetimes,
                auth_audience,
                auth_jwks_ttl,
                max_body_bytes: usize::try_from(max_body_bytes).unwrap_or(1_048_576),
                mail,
                mail_from,
                app,
            })
        } else {
            Err(ConfigError(r.problems))
        }
    }
}

/// A database URL with its passwords hidden, for messages and logs: the one in the user info
/// (`user:password@`) and any `password` query parameter (`?user=u&password=secret`, which
/// PostgreSQL URLs accept as well).
pub fn redact_url(url: &str) -> String {
    let url = redact_user_info(url);
    let Some(query_start) = url.find('?') else { return url };
    // No fragment is split off: database URLs have none, and a '#' inside a password value
    // must not end the redaction.
    let (base, query) = url.split_at(query_start + 1);
    let mut parts = Vec::new();
    // Inside a password value: a raw '&' in it would otherwise leak the rest of the value as a
    // parameter without '=', so such pieces are hidden as well.
    let mut in_password = false;
    for piece in query.split('&') {
        match piece.split_once('=') {
            Some((name, _)) if is_password_parameter(name) => {
                in_password = true;
                parts.push(format!("{name}=***"));
            }
            Some(_) => {
                in_password = false;
                parts.push(piece.to_owned());
            }
            None if in_password => {}
            None => parts.push(piece.to_owned()),
        }
    }
    format!("{base}{}", parts.join("&"))
}

/// `password`, and its variants such as libpq's `sslpassword`, in any case.
fn is_password_parameter(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with("password")
}

fn redact_user_info(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else { return url.to_owned() };
    let rest = &url[scheme_end + 3..];
    // The user info ends at the last '@' before the query; if there is none there, at the last
    // '@' of all, which may hide too much (a '@' in the query) but never too little (a '?' in
    // the password).
    let before_query = rest.find('?').map_or(rest, |q| &rest[..q]);
    let Some(at) = before_query.rfind('@').or_else(|| rest.rfind('@')) else { return url.to_owned() };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &rest[at..]),
        None => url.to_owned(),
    }
}

/// The sandbox's limits (`TOKENOPS_SCRIPT_*`), each bounded so that a typo cannot lift one.
fn script_limits(r: &mut Reader, d: &tokenops_scripting::Limits) -> tokenops_scripting::Limits {
    let mut count = |name: &str, default: usize, max: i64| {
        usize::try_from(r.integer(name, i64::try_from(default).unwrap_or(max), 1, max)).unwrap_or(default)
    };
    let max_call_depth = count("TOKENOPS_SCRIPT_MAX_CALL_DEPTH", d.max_call_depth, 1_000);
    let max_string_len = count("TOKENOPS_SCRIPT_MAX_STRING_BYTES", d.max_string_len, 64 * 1_048_576);
    let max_array_len = count("TOKENOPS_SCRIPT_MAX_ARRAY_LEN", d.max_array_len, 10_000_000);
    let max_map_len = count("TOKENOPS_SCRIPT_MAX_MAP_LEN", d.max_map_len, 10_000_000);
    let max_log_lines = count("TOKENOPS_SCRIPT_MAX_LOG_LINES", d.max_log_lines, 1_000_000);
    let max_submissions = count("TOKENOPS_SCRIPT_MAX_SUBMISSIONS", d.max_submissions, 100_000);
    let max_operations = r
        .integer("TOKENOPS_SCRIPT_MAX_OPERATIONS", i64::try_from(d.max_operations).unwrap_or(i64::MAX), 1, i64::MAX)
        .unsigned_abs();
    let wall_ms = i64::try_from(d.max_wall.as_millis()).unwrap_or(30_000);
    let max_wall =
        Duration::from_millis(r.integer("TOKENOPS_SCRIPT_MAX_WALL_MS", wall_ms, 10, 3_600_000).unsigned_abs());
    tokenops_scripting::Limits {
        max_operations,
        max_call_depth,
        max_string_len,
        max_array_len,
        max_map_len,
        max_log_lines,
        max_submissions,
        max_wall,
        ..d.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::load(&Sources::from_parts(env)?)
    }

    #[test]
    fn defaults_need_nothing() {
        let c = load(&[]).expect("defaults are valid");
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.public_url, "http://127.0.0.1:8080");
        assert_eq!(c.database, DatabaseUrl::Sqlite(PathBuf::from("./data/tokenops.db")));
        assert_eq!(c.auth_issuer, "http://127.0.0.1:8080/idp");
        assert_eq!(c.role, Role::All);
    }

    #[test]
    fn every_bad_setting_is_named() {
        let e = load(&[
            ("TOKENOPS_LISTEN", "nowhere"),
            ("TOKENOPS_DATABASE_URL", "mysql://u:secret@h/db"),
            ("TOKENOPS_LEDGER", "evm"),
            ("TOKENOPS_ROLE", "boss"),
            ("TOKENOPS_IDEMPOTENCY_RETENTION_SECS", "60"),
        ])
        .expect_err("invalid");
        let text = e.to_string();
        for name in [
            "TOKENOPS_LISTEN",
            "TOKENOPS_DATABASE_URL",
            "TOKENOPS_EVM_RPC_URL",
            "TOKENOPS_ROLE",
            "TOKENOPS_IDEMPOTENCY_RETENTION_SECS",
        ] {
            assert!(text.contains(name), "{name} missing from {text}");
        }
        assert!(text.contains("unsupported scheme \"mysql\""));
        assert!(!text.contains("secret"), "password leaked: {text}");
    }

    #[test]
    fn ledger_and_custody_settings() {
        let c = load(&[]).expect("valid");
        assert_eq!(c.ledger, LedgerKind::Embedded);
        assert_eq!(c.custody, CustodySettings::Embedded);
        assert_eq!(c.ledger_block_interval, Duration::from_millis(200));
        let c = load(&[
            ("TOKENOPS_LEDGER", "evm"),
            ("TOKENOPS_EVM_RPC_URL", "http://127.0.0.1:8545"),
            ("TOKENOPS_EVM_CONFIRMATIONS", "3"),
            ("TOKENOPS_EVM_GAS_FUNDING", "dev"),
            ("TOKENOPS_CUSTODY", "remote"),
            ("TOKENOPS_CUSTODY_URL", "https://signer.bank.example/"),
            ("TOKENOPS_CUSTODY_TOKEN", "t0ken-s3cret"),
        ])
        .expect("valid");
        assert_eq!((c.ledger, c.evm_confirmations, c.evm_dev_gas), (LedgerKind::Evm, 3, true));
        assert_eq!(
            c.custody,
            CustodySettings::Remote { url: "https://signer.bank.example".into(), token: Some("t0ken-s3cret".into()) }
        );
        assert!(!format!("{:?}", c.custody).contains("t0ken-s3cret"), "the signer's token is never printed");
        let e = load(&[
            ("TOKENOPS_CUSTODY", "remote"),
            ("TOKENOPS_EVM_GAS_FUNDING", "plenty"),
            ("TOKENOPS_LEDGER_BLOCK_INTERVAL_MS", "0"),
        ])
        .expect_err("invalid");
        for name in ["TOKENOPS_CUSTODY_URL", "TOKENOPS_EVM_GAS_FUNDING", "TOKENOPS_LEDGER_BLOCK_INTERVAL_MS"] {
            assert!(e.to_string().contains(name), "{name} missing from {e}");
        }
    }

    #[test]
    fn webhook_destination_bound_and_key_rotation() {
        let c = load(&[]).expect("valid");
        assert_eq!((c.webhook_max_in_flight_per_destination, c.webhook_jws_key_rotation_days), (8, 90));
        let c = load(&[
            ("TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION", "2"),
            ("TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS", "0"),
        ])
        .expect("valid");
        assert_eq!((c.webhook_max_in_flight_per_destination, c.webhook_jws_key_rotation_days), (2, 0));
        let e = load(&[
            ("TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION", "0"),
            ("TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS", "-1"),
        ])
        .expect_err("invalid");
        for name in ["TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION", "TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS"] {
            assert!(e.to_string().contains(name), "{name} missing from {e}");
        }
    }

    #[test]
    fn mail_goes_to_the_file_outbox_unless_smtp_is_configured() {
        assert_eq!(load(&[]).expect("valid").mail, MailSettings::File);
        let c = load(&[
            ("TOKENOPS_MAIL_TRANSPORT", "smtp"),
            ("TOKENOPS_SMTP_URL", "smtps://mailer:s3cret@smtp.bank.example:465"),
        ])
        .expect("valid");
        assert_eq!(c.mail, MailSettings::Smtp { url: "smtps://mailer:s3cret@smtp.bank.example:465".into() });
        assert!(!format!("{c:?}").contains("s3cret"), "the SMTP password is never printed");
        let e = load(&[("TOKENOPS_MAIL_TRANSPORT", "smtp")]).expect_err("no URL");
        assert!(e.to_string().contains("TOKENOPS_SMTP_URL: required"));
        let e = load(&[("TOKENOPS_MAIL_TRANSPORT", "smtp"), ("TOKENOPS_SMTP_URL", "ftp://u:s3cret@h")])
            .expect_err("bad URL");
        assert!(e.to_string().contains("TOKENOPS_SMTP_URL") && !e.to_string().contains("s3cret"), "{e}");
        let e = load(&[("TOKENOPS_MAIL_TRANSPORT", "pigeon")]).expect_err("unknown transport");
        assert!(e.to_string().contains("must be file or smtp"));
    }

    #[test]
    fn file_mirrors_environment_and_environment_wins() {
        let dir = std::env::temp_dir().join(format!("tokenops-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("tokenops.toml");
        std::fs::write(&file, "listen = \"127.0.0.1:9000\"\nrole = \"api\"\n").expect("write");
        let c = load(&[("TOKENOPS_CONFIG", file.to_str().expect("utf8")), ("TOKENOPS_ROLE", "worker")]).expect("valid");
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.role, Role::Worker);
    }

    #[test]
    fn jwks_url_must_be_https_unless_loopback() {
        for url in [
            "https://idp.example.com/.well-known/jwks.json",
            "http://127.0.0.1:9000/jwks",
            "http://127.1.2.3/jwks",
            "http://[::1]:9000/jwks",
            "http://localhost:9000/jwks",
        ] {
            let c = load(&[("TOKENOPS_AUTH_ISSUER", "https://idp.example.com"), ("TOKENOPS_AUTH_JWKS_URL", url)])
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(c.auth_jwks_url, url);
        }
        for url in [
            "http://idp.example.com/.well-known/jwks.json",
            "http://10.1.2.3/jwks",
            "http://127.0.0.1.nip.io/jwks",
            "ftp://idp.example.com/jwks",
            "jwks.json",
        ] {
            let text = load(&[("TOKENOPS_AUTH_ISSUER", "https://idp.example.com"), ("TOKENOPS_AUTH_JWKS_URL", url)])
                .expect_err(url)
                .to_string();
            assert!(text.contains("TOKENOPS_AUTH_JWKS_URL"), "{url}: {text}");
        }
        let text = load(&[
            ("TOKENOPS_AUTH_ISSUER", "https://idp.example.com"),
            ("TOKENOPS_AUTH_JWKS_URL", "http://idp.example.com/jwks"),
        ])
        .expect_err("http")
        .to_string();
        assert!(text.contains("https://"), "{text}");
    }

    #[test]
    fn the_default_jwks_url_follows_the_public_url() {
        assert_eq!(load(&[]).expect("default").auth_jwks_url, "http://127.0.0.1:8080/idp/.well-known/jwks.json");
        let c = load(&[("TOKENOPS_PUBLIC_URL", "https://tokenops.example.com")]).expect("https public URL");
        assert_eq!(c.auth_jwks_url, "https://tokenops.example.com/idp/.well-known/jwks.json");
        // The embedded provider's keys are read in-process: a plain-http public URL is fine.
        load(&[("TOKENOPS_PUBLIC_URL", "http://tokenops.internal:8080")]).expect("embedded, nothing fetched");
        // An external issuer on plain http yields a refused derived JWKS URL, and the message
        // says where it came from.
        let text = load(&[("TOKENOPS_AUTH_ISSUER", "http://idp.internal")]).expect_err("http").to_string();
        assert!(text.contains("TOKENOPS_AUTH_JWKS_URL") && text.contains("derived"), "{text}");
        // An https issuer of its own fixes it.
        let c = load(&[
            ("TOKENOPS_PUBLIC_URL", "http://tokenops.internal:8080"),
            ("TOKENOPS_AUTH_ISSUER", "https://idp.example.com"),
        ])
        .expect("https issuer");
        assert_eq!(c.auth_jwks_url, "https://idp.example.com/.well-known/jwks.json");
    }

    #[test]
    fn audience_and_key_ttl_settings() {
        let c = load(&[]).expect("defaults");
        assert_eq!(c.auth_audience, None);
        assert_eq!(c.auth_jwks_ttl, Duration::from_secs(300));
        let c = load(&[("TOKENOPS_AUTH_AUDIENCE", " https://api.example.com "), ("TOKENOPS_AUTH_JWKS_TTL_SECS", "60")])
            .expect("valid");
        assert_eq!(c.auth_audience.as_deref(), Some("https://api.example.com"));
        assert_eq!(c.auth_jwks_ttl, Duration::from_secs(60));
        for ttl in ["9", "86401", "five", "-1"] {
            let text = load(&[("TOKENOPS_AUTH_JWKS_TTL_SECS", ttl)]).expect_err(ttl).to_string();
            assert!(text.contains("TOKENOPS_AUTH_JWKS_TTL_SECS"), "{ttl}: {text}");
        }
        for ttl in ["10", "86400"] {
            load(&[("TOKENOPS_AUTH_JWKS_TTL_SECS", ttl)]).unwrap_or_else(|e| panic!("{ttl}: {e}"));
        }
    }

    #[test]
    fn redact_url_hides_passwords_in_user_info_and_query() {
        for (url, redacted) in [
            ("postgres://u:secret@host/db", "postgres://u:***@host/db"),
            ("postgres://u:p@ss@host/db", "postgres://u:***@host/db"),
            ("postgres://u:pa?ss@host/db", "postgres://u:***@host/db"),
            ("postgres://u:secret@host/db?sslmode=require&x=a@b", "postgres://u:***@host/db?sslmode=require&x=a@b"),
            ("postgres://u@host/db", "postgres://u@host/db"),
            ("postgres://host/db?user=u&password=secret", "postgres://host/db?user=u&password=***"),
            ("postgres://host/db?password=secret&user=u", "postgres://host/db?password=***&user=u"),
            ("postgres://host/db?user=u&PASSWORD=secret", "postgres://host/db?user=u&PASSWORD=***"),
            ("postgres://host/db?sslpassword=secret", "postgres://host/db?sslpassword=***"),
            ("postgres://host/db?password=se&cret&user=u", "postgres://host/db?password=***&user=u"),
            ("postgres://host/db?password=se#cret", "postgres://host/db?password=***"),
            ("postgres://u:secret@host/db?password=other", "postgres://u:***@host/db?password=***"),
            ("postgres://host/db?sslmode=require", "postgres://host/db?sslmode=require"),
            ("sqlite://./data/tokenops.db", "sqlite://./data/tokenops.db"),
        ] {
            assert_eq!(redact_url(url), redacted, "{url}");
            assert!(!redact_url(url).contains("secret") && !redact_url(url).contains("cret"), "{url}");
        }
    }

    #[test]
    fn a_bad_database_url_does_not_leak_a_query_password() {
        let text =
            load(&[("TOKENOPS_DATABASE_URL", "mysql://host/db?user=u&password=secret")]).expect_err("bad").to_string();
        assert!(text.contains("TOKENOPS_DATABASE_URL") && !text.contains("secret"), "{text}");
    }
}
