//! The `tokenops` command line: `serve` (the main job), `migrate`, operator tasks and `demo`.

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

async fn create_operator_client(config: &Config, name: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let clock: std::sync::Arc<dyn tokenops_app::clock::Clock> = std::sync::Arc::new(tokenops_app::clock::SystemClock);
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
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Demo { keep, data_dir } = cli.command {
        return demo(tokenops::demo::DemoOptions { keep, data_dir }).await;
    }
    let config = match Sources::from_env().and_then(|s| Config::load(&s)) {
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
