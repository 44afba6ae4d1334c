//! `tokenops serve`: waits for its store, binds the listener, runs the HTTP API and/or the
//! workers (by role), and on SIGTERM or Ctrl-C stops accepting, lets in-flight requests and jobs
//! finish within the grace period (releasing the leases of jobs that do not), then closes the
//! store.

use anyhow::Context;
use std::sync::Arc;
use tokenops_app::clock::{Clock, SystemClock};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::wiring;

pub async fn run(config: Config) -> anyhow::Result<()> {
    // Watched from the start: a node still waiting for its database must stop when told to.
    run_until(config, watch_signals()).await
}

/// `serve` until `signalled` is cancelled (SIGTERM or Ctrl-C for `run`; the demo's end for
/// `tokenops demo`).
pub async fn run_until(config: Config, signalled: CancellationToken) -> anyhow::Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let Some(store) = wiring::open_store_when_reachable(&config, clock.as_ref(), &signalled).await? else {
        tracing::info!("stopped before the store could be opened");
        return Ok(());
    };
    let service = wiring::build(&config, store.clone(), clock).await?;
    wiring::bootstrap_operator(&config, &service.app).await?;
    let listener =
        tokio::net::TcpListener::bind(config.listen).await.with_context(|| format!("binding {}", config.listen))?;
    let router = if config.role.runs_api() {
        tokenops_api::router(service.state.clone())
    } else {
        tokenops_api::operations_only_router(service.state.clone())
    };
    let shutdown = CancellationToken::new();
    if config.role.runs_workers() {
        // Before anything new is signed: stored signatures of unsettled operations go out again.
        service.app.recover().await.context("resending the stored transactions of unsettled operations")?;
    }
    // The workers run on a runtime of their own: a request's task then never waits in a run
    // queue behind the many job tasks (tokio has no priorities), and the OS shares the cores
    // between the API's threads and the workers' (`TOKENOPS_WORKER_THREADS`).
    let worker_runtime = config
        .role
        .runs_workers()
        .then(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(config.worker_threads)
                .thread_name("tokenops-jobs")
                .enable_all()
                .build()
        })
        .transpose()
        .context("starting the workers' runtime")?;
    let workers = worker_runtime.as_ref().map(|rt| rt.spawn(service.app.jobs.clone().run(shutdown.clone())));
    if config.auth_provider == crate::config::AuthProvider::Embedded {
        // Replace the signing key when it reaches its rotation age, without a restart.
        let app = service.app.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut every_hour = tokio::time::interval(std::time::Duration::from_secs(3_600));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = every_hour.tick() => {
                        if let Err(e) = app.identity.ensure_current_key().await {
                            tracing::warn!(error = %e, "could not check the signing key's age");
                        }
                    }
                }
            }
        });
    }
    tracing::info!(
        listen = %config.listen,
        public_url = %config.public_url,
        role = ?config.role,
        store = store.backend().as_str(),
        issuer = %config.auth_issuer,
        "tokenops is serving"
    );
    let stop = shutdown.clone();
    let (state, drain) = (service.state.clone(), config.shutdown_drain);
    let listener = crate::listener::GuardedListener::new(listener, config.max_connections, config.connection_idle);
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            signalled.cancelled().await;
            // Not ready from now on, still serving: a load balancer sees /readyz fail and stops
            // sending before the listener closes.
            state.shutting_down.store(true, std::sync::atomic::Ordering::SeqCst);
            tracing::info!(drain_ms = drain.as_millis(), "shutting down: /readyz answers 503; then no new requests");
            tokio::time::sleep(drain).await;
            tracing::info!("shutting down: no new requests; finishing in-flight work");
            stop.cancel();
        })
        .await
        .context("serving HTTP")?;
    shutdown.cancel();
    if let Some(workers) = workers
        && let Err(e) = workers.await
    {
        tracing::warn!(error = %e, "the worker loop ended abnormally");
    }
    if let Some(rt) = worker_runtime {
        // Its jobs have finished or given back their leases; nothing there is awaited any more.
        rt.shutdown_background();
    }
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// A token cancelled at the first SIGTERM or Ctrl-C. SIGTERM's handler is installed before this
/// returns, so the signal can no longer end the process without a clean stop.
pub fn watch_signals() -> CancellationToken {
    let signalled = CancellationToken::new();
    #[cfg(unix)]
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the service cleanly");
            None
        }
    };
    let cancel = signalled.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        let terminate = async {
            match terminate.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let terminate = std::future::pending::<()>();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminate => {}
        }
        cancel.cancel();
    });
    signalled
}
