//! Builds the service from its configuration: opens and migrates the store named by the database
//! URL (for `serve`, waiting for a database that cannot be reached yet), loads the shared cursor
//! key, and assembles the app and the HTTP router.

use anyhow::Context;
use std::sync::Arc;
use std::time::Duration;
use tokenops_api::ApiState;
use tokenops_api::extract::paging::CursorCodec;
use tokenops_app::clock::Clock;
use tokenops_app::identity::ProviderSettings;
use tokenops_app::mail::{FileTransport, SmtpTransport};
use tokenops_app::webhooks::{WebhookAdapters, WebhookSettings};
use tokenops_app::{Adapters, App};
use tokenops_identity::{PublishedKeys, Sealer, TokenVerifier, VerifierSettings};
use tokenops_store::{Store, StoreError};
use tokenops_store_postgres::PostgresStore;
use tokenops_store_sqlite::SqliteStore;
use tokio_util::sync::CancellationToken;

use crate::config::{AuthProvider, Config, CustodySettings, DatabaseUrl, LedgerKind, MailSettings, redact_url};
use tokenops_custody::{Address, Custody, EmbeddedKeystore, RemoteSigner, RemoteSignerConfig};
use tokenops_ledger::{EmbeddedConfig, EmbeddedLedger, EvmConfig, EvmLedger, GasFunding, Ledger, U256};

/// Opens the configured store and applies its pending migrations, stamped by `clock`.
pub async fn open_store(config: &Config, clock: &dyn Clock) -> anyhow::Result<Arc<dyn Store>> {
    match &config.database {
        DatabaseUrl::Sqlite(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            }
            let store =
                SqliteStore::open(path).await.with_context(|| format!("opening SQLite database {}", path.display()))?;
            let applied = store.migrate(clock).await.context("migrating the SQLite database")?;
            tracing::info!(path = %path.display(), applied, "SQLite store ready");
            Ok(Arc::new(store))
        }
        DatabaseUrl::Postgres { url, schema } => {
            let store = PostgresStore::connect(url, schema.as_deref())
                .await
                .with_context(|| format!("connecting to PostgreSQL at {}", redact_url(url)))?;
            let applied = store.migrate(clock).await.context("migrating the PostgreSQL database")?;
            tracing::info!(url = %redact_url(url), applied, "PostgreSQL store ready");
            Ok(Arc::new(store))
        }
    }
}

/// The first pause between two attempts to open a store that cannot be reached, and the
/// longest: a database back within seconds is found quickly, and a long outage costs one
/// attempt (and one warning) every few seconds.
const OPEN_RETRY_FIRST: Duration = Duration::from_millis(250);
const OPEN_RETRY_LONGEST: Duration = Duration::from_secs(5);

/// Opens the configured store as [`open_store`] does, but a database that cannot be reached
/// (down, restarting, still in crash recovery: `StoreError::Unavailable`) is waited for: each
/// failed attempt logs a warning naming the store and the error, and the next one follows after
/// a pause that doubles up to 5 s. `None` when `stop` is cancelled first. A node started while
/// its database is down (an orchestrator restarting both) then comes up with it instead of
/// exiting. Any other failure (credentials refused, no such database, an edited migration)
/// still ends it at once: waiting would not mend it.
pub async fn open_store_when_reachable(
    config: &Config,
    clock: &dyn Clock,
    stop: &CancellationToken,
) -> anyhow::Result<Option<Arc<dyn Store>>> {
    let mut pause = OPEN_RETRY_FIRST;
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        let opened = tokio::select! {
            () = stop.cancelled() => return Ok(None),
            opened = open_store(config, clock) => opened,
        };
        let error = match opened {
            Ok(store) => {
                if attempt > 1 {
                    tracing::info!(store = %store_name(config), attempt, "the store is reachable again");
                }
                return Ok(Some(store));
            }
            Err(error) if !worth_waiting_for(&error) => return Err(error),
            Err(error) => error,
        };
        tracing::warn!(
            store = %store_name(config),
            attempt,
            retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
            error = causes(&error),
            "the store cannot be opened yet; trying again"
        );
        tokio::select! {
            () = stop.cancelled() => return Ok(None),
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(OPEN_RETRY_LONGEST);
    }
}

/// An error and its causes on one line, each cause once: a store error's message already
/// quotes its source, which `{:#}` would print a second time.
fn causes(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if text.ends_with(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// The store as a log names it: never with the URL's password.
fn store_name(config: &Config) -> String {
    match &config.database {
        DatabaseUrl::Sqlite(path) => format!("SQLite database {}", path.display()),
        DatabaseUrl::Postgres { url, schema, .. } => match schema {
            Some(schema) => format!("PostgreSQL at {} (schema {schema})", redact_url(url)),
            None => format!("PostgreSQL at {}", redact_url(url)),
        },
    }
}

/// Whether a failure to open the store may pass by itself: the store reported that it could not
/// reach the database, rather than that the database refused or failed something.
fn worth_waiting_for(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.downcast_ref::<StoreError>().is_some_and(StoreError::is_unavailable))
}

/// The cursor signing key every node shares: created by the first node, read by the others.
async fn cursor_key(store: &dyn Store) -> anyhow::Result<Vec<u8>> {
    let candidate: [u8; 32] = rand::random();
    let mut tx = store.write().await?;
    let stored = tx.settings().get_or_insert("cursor_signing_key", &hex::encode(candidate)).await?;
    tx.commit().await?;
    hex::decode(stored).context("the stored cursor signing key is not hex")
}

/// The assembled service.
pub struct Service {
    pub app: Arc<App>,
    pub state: Arc<ApiState>,
}

pub async fn build(config: &Config, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> anyhow::Result<Service> {
    tokenops_identity::install_crypto_provider();
    let sealer = Arc::new(match &config.master_key {
        Some(text) => Sealer::from_text(text).map_err(|_| anyhow::anyhow!("TOKENOPS_MASTER_KEY is not 32 bytes"))?,
        None => Sealer::load_or_create_dev_key(&config.data_dir.join("master.key"))
            .with_context(|| format!("creating the development master key in {}", config.data_dir.display()))?,
    });
    let custody: Arc<dyn Custody> = match &config.custody {
        CustodySettings::Embedded => Arc::new(EmbeddedKeystore::new(store.clone(), sealer.clone(), clock.clone())),
        CustodySettings::Remote { url, token } => {
            let mut settings = RemoteSignerConfig::new(url.clone());
            settings.bearer_token = token.clone();
            Arc::new(RemoteSigner::new(settings).context("building the remote signer's HTTP client")?)
        }
    };
    let ledger = open_ledger(config, &store, &custody, &clock).await?;
    let transport = tokenops_webhooks::transport::Transport::from_settings(
        &config.webhook_allow_cidrs.join(","),
        config.webhook_ca_file.as_deref(),
    )?;
    let webhooks = WebhookAdapters {
        transport: Arc::new(transport),
        settings: WebhookSettings {
            retry_base_ms: config.webhook_retry_base_ms,
            replay_budget: config.webhook_replay_budget,
            max_in_flight_per_destination: config.webhook_max_in_flight_per_destination,
            jws_key_rotation_days: config.webhook_jws_key_rotation_days,
            issuer: config.public_url.clone(),
            job_max_attempts: config.app.job_max_attempts,
        },
    };
    let adapters = Adapters {
        webhooks,
        custody,
        ledger,
        sealer,
        mail: match &config.mail {
            MailSettings::File => Arc::new(FileTransport {
                dir: config.data_dir.join("outbox"),
                from: config.mail_from.clone(),
                clock: clock.clone(),
            }),
            MailSettings::Smtp { url } => Arc::new(
                SmtpTransport::new(url, &config.mail_from, clock.clone())
                    .map_err(|problem| anyhow::anyhow!("TOKENOPS_SMTP_URL: {problem}"))?,
            ),
        },
        provider: ProviderSettings {
            issuer: format!("{}/idp", config.public_url),
            access_ttl_secs: config.token_lifetimes.access_secs,
            refresh_ttl_secs: config.token_lifetimes.refresh_secs,
            signing_key_rotation_secs: config.token_lifetimes.signing_key_rotation_secs,
            ring_refresh_ms: 30_000,
        },
    };
    let app = App::new(store.clone(), clock, config.app.clone(), adapters);
    let verifier = match config.auth_provider {
        AuthProvider::Embedded => {
            app.identity.ensure_current_key().await.context("preparing the identity provider's signing key")?;
            let keys: Arc<dyn PublishedKeys> = app.identity.clone();
            TokenVerifier::embedded(app.identity.issuer(), keys)
        }
        AuthProvider::External => TokenVerifier::new(VerifierSettings {
            issuer: config.auth_issuer.clone(),
            jwks_url: config.auth_jwks_url.clone(),
            audience: config.auth_audience.clone(),
            leeway_secs: 30,
            refresh_interval: Duration::from_secs(10),
            keys_ttl: config.auth_jwks_ttl,
        })
        .context("building the token verifier's HTTP client")?,
    };
    let state = Arc::new(ApiState {
        app: app.clone(),
        verifier: Arc::new(verifier),
        cursors: CursorCodec::new(cursor_key(&*store).await?),
        max_body_bytes: config.max_body_bytes,
        contract_register_wait: config.contract_register_wait,
        metrics: tokenops_api::metrics::handle(),
        embedded_provider: config.auth_provider == AuthProvider::Embedded,
        public_url: config.public_url.clone(),
        shutting_down: std::sync::atomic::AtomicBool::new(false),
    });
    Ok(Service { app, state })
}

/// The platform's issuer wallet: the custody wallet that deploys every token and signs mints and
/// burns. Created on the first start and named in the store's settings, so every node and every
/// restart uses the same one.
async fn issuer_wallet(store: &Arc<dyn Store>, custody: &Arc<dyn Custody>) -> anyhow::Result<Address> {
    const SETTING: &str = "ledger.issuer_address";
    let parse = |text: &str| text.parse::<Address>().with_context(|| format!("the stored issuer address {text:?}"));
    let existing = store.read().await?.settings().get(SETTING).await?;
    if let Some(text) = existing {
        return parse(&text);
    }
    let created = custody.create_wallet("platform issuer").await.context("creating the issuer wallet")?;
    let mut tx = store.write().await?;
    // First writer wins: a node that lost the race leaves its wallet unused.
    let stored = tx.settings().get_or_insert(SETTING, &format!("{created:#x}")).await?;
    tx.commit().await?;
    parse(&stored)
}

/// The configured ledger, with the issuer wallet ready on it.
async fn open_ledger(
    config: &Config,
    store: &Arc<dyn Store>,
    custody: &Arc<dyn Custody>,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<Arc<dyn Ledger>> {
    let issuer = issuer_wallet(store, custody).await?;
    Ok(match config.ledger {
        LedgerKind::Embedded => {
            // Hold expiry on the embedded ledger follows the service's clock.
            let settings = EmbeddedConfig {
                block_interval: config.ledger_block_interval,
                clock: clock.clone(),
                ..EmbeddedConfig::default()
            };
            // The chain's mempool and nonces live in the one process that produces its blocks:
            // the workers' node. A node of role api only reads it.
            let ledger = if config.role.runs_workers() {
                EmbeddedLedger::open(store.clone(), issuer, custody.clone(), settings).await
            } else {
                EmbeddedLedger::open_reader(store.clone(), issuer, custody.clone(), settings).await
            }
            .context("opening the embedded ledger")?;
            Arc::new(ledger)
        }
        LedgerKind::Evm => {
            let url = config.evm_rpc_url.clone().unwrap_or_default();
            let mut settings = EvmConfig::new(url.clone());
            settings.confirmations = config.evm_confirmations;
            if config.evm_dev_gas {
                settings.gas_funding = GasFunding::DevSetBalance(U256::from(10u64).pow(U256::from(21u64)));
            }
            // Other worker nodes on this store sign for the same wallets: the store's leases
            // say which one signs for each.
            let ledger = EvmLedger::connect(settings, issuer, custody.clone())
                .await
                .with_context(|| format!("connecting to the EVM node at {}", redact_url(&url)))?
                .with_signing_leases(store.clone());
            // A node away at start does not stop the service: reads and submissions go on, and
            // what needs the node retries as in any outage (ARCHITECTURE.md, settlement); the
            // issuer's gas is then funded at its first deployment.
            match ledger.register_wallet(issuer).await {
                Err(e) if e.is_temporary() => {
                    tracing::warn!(error = %e, "the issuer wallet could not be prepared on the EVM node yet")
                }
                other => other.context("preparing the issuer wallet on the EVM node")?,
            }
            Arc::new(ledger)
        }
    })
}

/// On a store without any operator client (the first start), creates one and writes its
/// credentials to `{data_dir}/operator-credentials.json` with mode 0600. The secret is never
/// logged; the file's path is.
pub async fn bootstrap_operator(config: &Config, app: &App) -> anyhow::Result<()> {
    if config.auth_provider != AuthProvider::Embedded {
        // The bank's own provider issues the operator's credentials.
        return Ok(());
    }
    let path = config.data_dir.join("operator-credentials.json");
    let keep = |credentials: &tokenops_app::identity::OperatorCredentials| {
        let json = serde_json::to_vec_pretty(credentials).map_err(std::io::Error::other)?;
        write_secret_file(&path, &json).map_err(std::io::Error::other)
    };
    let Some(credentials) = app.identity.bootstrap_operator(keep).await.context("creating the operator client")? else {
        return Ok(());
    };
    tracing::info!(path = %path.display(), client_id = %credentials.client_id, "created the platform operator client; its credentials are in the file");
    Ok(())
}

/// Writes a file readable by its owner only: a new 0600 file beside the target, renamed over
/// it, so it never inherits an existing file's mode and never writes through a symlink.
pub fn write_secret_file(path: &std::path::Path, contents: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let partial = dir.join(format!(
        ".{}.partial-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("secret"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&partial);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&partial).with_context(|| format!("writing {}", partial.display()))?;
    file.write_all(contents)?;
    file.sync_all()?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Sources;
    use std::collections::BTreeMap;

    fn config(url: &str) -> Config {
        let env = BTreeMap::from([("TOKENOPS_DATABASE_URL".to_owned(), url.to_owned())]);
        Config::load(&Sources::from_parts(env).expect("sources")).expect("configuration")
    }

    #[test]
    fn only_a_database_that_could_not_be_reached_is_waited_for() {
        let unreachable = anyhow::Error::new(StoreError::Unavailable("pool timed out".into())).context("connecting");
        assert!(worth_waiting_for(&unreachable));
        let refused =
            anyhow::Error::new(StoreError::Backend("password authentication failed".into())).context("connecting");
        assert!(!worth_waiting_for(&refused));
        let edited = anyhow::Error::new(StoreError::Corrupt("migration 3 differs".into())).context("migrating");
        assert!(!worth_waiting_for(&edited));
    }

    #[test]
    fn a_cause_the_message_already_quotes_is_not_repeated() {
        let error = anyhow::Error::new(StoreError::Unavailable("pool timed out".into())).context("connecting to x");
        let text = causes(&error);
        assert!(text.starts_with("connecting to x: ") && text.matches("pool timed out").count() == 1, "{text}");
    }

    #[test]
    fn the_store_is_named_without_its_password() {
        let name = store_name(&config("postgres://u:secret@127.0.0.1:1/db"));
        assert!(name.starts_with("PostgreSQL at ") && !name.contains("secret"), "{name}");
    }
}
