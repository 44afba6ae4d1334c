//! The `tokenops` command line: `serve` (the main job), `migrate`, operator tasks, `audit
//! verify` and `demo`.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tokenops::config::{Config, LogFormat, Sources};

#[derive(Parser)]
#[command(name = "tokenops", version, about = "Token operations service for banks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service (HTTP API and workers, per TOKENOPS_ROLE).
    Serve,
    /// Apply pending database migrations, then exit.
    Migrate,
    /// Platform operator tasks.
    #[command(subcommand)]
    Operator(OperatorCommand),
    /// Start the service on the embedded defaults and a fresh data directory and walk a bank's
    /// day through its API, printing each step; exit 0 at the summary, or name the failed step.
    Demo {
        /// Leave the service running afterwards (until Ctrl-C), to carry on with curl.
        #[arg(long)]
        keep: bool,
        /// Keep the service's files here instead of a fresh temporary directory.
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
    },
    /// The audit log's sealed chain.
    #[command(subcommand)]
    Audit(AuditCommand),
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Check an organisation's sealed audit chain against a signed head, from a CSV export
    /// (`--export`) or from the store of the service's configuration; exits 0 when it verifies,
    /// 1 naming the first record or block that does not, 2 when it cannot tell.
    Verify {
        /// An unfiltered export (`GET /api/audit/events/export`) to check instead of the store.
        #[arg(long)]
        export: Option<std::path::PathBuf>,
        /// A head kept from `GET /api/audit/chain/head` (its JSON, or the compact JWS alone).
        /// Needed with --export; without it the store's own head is used.
        #[arg(long)]
        head: Option<std::path::PathBuf>,
        /// The key set heads are signed with, as `/.well-known/webhook-jwks.json` serves it.
        /// Needed with --export; without it the store's keys are used.
        #[arg(long)]
        jwks: Option<std::path::PathBuf>,
        /// The organisation whose chain to check in the store; without it, the platform's own
        /// records' chain.
        #[arg(long)]
        tenant: Option<uuid::Uuid>,
        /// The store to read, instead of TOKENOPS_DATABASE_URL.
        #[arg(long)]
        database_url: Option<String>,
        /// The PostgreSQL schema, instead of TOKENOPS_DATABASE_SCHEMA.
        #[arg(long)]
        database_schema: Option<String>,
    },
}

/// `audit verify`: prints what it found on standard output; `Ok(false)` when the chain does not
/// verify.
async fn audit_verify(config: &Config, command: AuditCommand) -> anyhow::Result<bool> {
    use std::io::Write;
    use tokenops::audit_verify::{Outcome, read_head, read_json, verify_export, verify_store};
    let AuditCommand::Verify { export, head, jwks, tenant, .. } = command;
    let jwks = jwks.as_deref().map(read_json).transpose()?;
    let outcome = match export {
        Some(export) => {
            let (Some(head), Some(jwks)) = (head, jwks) else {
                anyhow::bail!("--export needs --head and --jwks: an export proves nothing without a signed head");
            };
            verify_export(&export, read_head(&head, &jwks)?.head)?
        }
        None => {
            let clock: std::sync::Arc<dyn tokenops_app::clock::Clock> =
                std::sync::Arc::new(tokenops_app::clock::SystemClock);
            let config = &one_off(config);
            let store = tokenops::wiring::open_store(config, clock.as_ref()).await?;
            let service = tokenops::wiring::build(config, store, clock).await?;
            let head = match head {
                Some(path) => {
                    let jwks = match jwks {
                        Some(jwks) => jwks,
                        None => service.app.audit_chain.jwks().await?,
                    };
                    Some(read_head(&path, &jwks)?.head)
                }
                None => None,
            };
            verify_store(&service.app, tenant.map(tokenops_domain::TenantId), head).await?
        }
    };
    // Standard output, not the log: the verdict is the command's result.
    writeln!(std::io::stdout().lock(), "{}", outcome.describe())?;
    Ok(matches!(outcome, Outcome::Verifies { .. }))
}

#[derive(Subcommand)]
enum OperatorCommand {
    /// Create another platform operator client of the embedded identity provider and print its
    /// credentials (JSON) on standard output, once: store them in your secret manager.
    CreateClient {
        /// A name to recognise the client by in the audit log.
        #[arg(long, default_value = "platform operator")]
        name: String,
    },
}

/// The log on standard error (filtered by `TOKENOPS_LOG`) and, when configured, the span export
/// over OTLP (the request and job spans, whatever the log's level).
fn init_logging(config: &Config) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal: escape codes in a log file or a collector are noise.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(colour);
    let log = match config.log_format {
        LogFormat::Json => log.json().flatten_event(true).with_current_span(true).with_filter(filter).boxed(),
        LogFormat::Human => log.with_filter(filter).boxed(),
    };
    let spans = config.otlp_endpoint.as_deref().map(|endpoint| {
        tokenops::otlp::layer(endpoint, "tokenops").with_filter(tracing_subscriber::filter::LevelFilter::INFO)
    });
    tracing_subscriber::registry().with(log).with(spans).init();
}

/// The settings of a one-off command (`audit verify`, `operator create-client`): it runs beside
/// the service on the same store, so it opens the embedded ledger as a reader (role api), never
/// as the producer the service already is.
fn one_off(config: &Config) -> Config {
    Config { role: tokenops::config::Role::Api, ..config.clone() }
}

async fn create_operator_client(config: &Config, name: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let clock: std::sync::Arc<dyn tokenops_app::clock::Clock> = std::sync::Arc::new(tokenops_app::clock::SystemClock);
    let config = &one_off(config);
    let store = tokenops::wiring::open_store(config, clock.as_ref()).await?;
    let service = tokenops::wiring::build(config, store, clock).await?;
    let credentials = service.app.identity.create_operator_client(name).await?;
    // Standard output, not the log: the secret is the command's result and is shown once.
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string_pretty(&credentials)?)?;
    Ok(())
}

/// The demo prints its own story; the service's log shows warnings only (or `TOKENOPS_LOG`).
#[allow(clippy::print_stdout)]
async fn demo(options: tokenops::demo::DemoOptions) -> ExitCode {
    let filter = std::env::var("TOKENOPS_LOG").unwrap_or_else(|_| "warn".to_owned());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    tokenops_identity::install_crypto_provider();
    match tokenops::demo::run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failed) => {
            println!("\nThe demo failed at step {}: {:#}", failed.step, failed.error);
            eprintln!("tokenops demo: failed at step {}: {:#}", failed.step, failed.error);
            ExitCode::FAILURE
        }
    }
}

/// mimalloc instead of the system allocator: a request and a pipeline step allocate and free
/// many small values across threads, where glibc's malloc showed a tenth of the service's CPU.
/// Wrapped in the counter of each thread's allocations, which is how the script sandbox holds a
/// run to `TOKENOPS_SCRIPT_MAX_MEMORY_BYTES` (`tokenops_scripting::memory`): one thread-local
/// add per allocation.
#[global_allocator]
static ALLOCATOR: tokenops_scripting::CountingAllocator<mimalloc::MiMalloc> =
    tokenops_scripting::CountingAllocator::new(mimalloc::MiMalloc);

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Demo { keep, data_dir } = cli.command {
        return demo(tokenops::demo::DemoOptions { keep, data_dir }).await;
    }
    let sources = match &cli.command {
        Command::Audit(AuditCommand::Verify { database_url, database_schema, .. }) => {
            let mut env: std::collections::BTreeMap<String, String> =
                std::env::vars().filter(|(k, _)| k.starts_with("TOKENOPS_") || k == "RUST_LOG").collect();
            if let Some(url) = database_url {
                env.insert("TOKENOPS_DATABASE_URL".into(), url.clone());
            }
            if let Some(schema) = database_schema {
                env.insert("TOKENOPS_DATABASE_SCHEMA".into(), schema.clone());
            }
            Sources::from_parts(env)
        }
        _ => Sources::from_env(),
    };
    let config = match sources.and_then(|s| Config::load(&s)) {
        Ok(c) => c,
        Err(e) => {
            eprint!("{e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config);
    let result = match cli.command {
        Command::Serve => tokenops::serve::run(config).await,
        Command::Migrate => {
            tokenops::wiring::open_store(&config, &tokenops_app::clock::SystemClock).await.map(|store| {
                tracing::info!("migrations applied");
                drop(store);
            })
        }
        Command::Operator(OperatorCommand::CreateClient { name }) => create_operator_client(&config, &name).await,
        Command::Demo { .. } => Ok(()),
        Command::Audit(command) => match audit_verify(&config, command).await {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => {
                eprintln!("tokenops: {e:#}");
                return ExitCode::from(2);
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("tokenops: {e:#}");
            ExitCode::FAILURE
        }
    }
}
