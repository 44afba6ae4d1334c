//! Roles one process at a time plays on a store (`Store::exclusive`): a session advisory lock,
//! per schema and role, held on a connection of its own outside the pool, so the holder's death
//! ends its connection and frees the role at once.

use crate::{ADVISORY_LOCK_CLASS, codec};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use std::time::Duration;
use tokenops_store::{Exclusive, StoreResult};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The class of the roles' advisory locks: not the migrations' (`ADVISORY_LOCK_CLASS`), whose
/// transaction-scoped lock on the schema a held role must never block.
const ROLE_LOCK_CLASS: i32 = ADVISORY_LOCK_CLASS + 1;
/// How often the holder checks its connection.
const CHECK_EVERY: Duration = Duration::from_secs(2);
/// The longest pause between attempts to take a role back after the connection was lost.
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Tries once to take `role` on a new connection; `None` while another session holds it.
async fn take(options: &PgConnectOptions, role: &str) -> StoreResult<Option<PgConnection>> {
    let mut connection = PgConnection::connect_with(options).await.map_err(codec::backend)?;
    let lock = sqlx::query_scalar::<_, bool>(
        "SELECT pg_try_advisory_lock($1, hashtext(coalesce(current_schema(), '') || '/' || $2))",
    )
    .bind(ROLE_LOCK_CLASS)
    .bind(role);
    let taken = lock.fetch_one(&mut connection).await.map_err(codec::backend)?;
    if taken {
        Ok(Some(connection))
    } else {
        let _ = connection.close().await;
        Ok(None)
    }
}

pub(crate) async fn exclusive(
    options: &PgConnectOptions,
    role: &str,
    store_closed: CancellationToken,
) -> StoreResult<Option<Exclusive>> {
    let Some(connection) = take(options, role).await? else { return Ok(None) };
    let (lost, watched) = watch::channel(false);
    let released = CancellationToken::new();
    tokio::spawn(keep(connection, options.clone(), role.to_owned(), lost, released.clone(), store_closed));
    Ok(Some(Exclusive::new(released.drop_guard(), watched)))
}

/// Holds the role until released or the store closes. A lost connection (a database restart)
/// took the lock with it: the role is taken again once the database answers, or, should another
/// process have taken it meanwhile, reported lost.
async fn keep(
    mut connection: PgConnection,
    options: PgConnectOptions,
    role: String,
    lost: watch::Sender<bool>,
    released: CancellationToken,
    store_closed: CancellationToken,
) {
    loop {
        tokio::select! {
            () = released.cancelled() => break,
            () = store_closed.cancelled() => break,
            () = tokio::time::sleep(CHECK_EVERY) => {}
        }
        if connection.ping().await.is_ok() {
            continue;
        }
        tracing::warn!(role, "lost the connection that holds this node's exclusive role; taking it again");
        let mut backoff = Duration::from_millis(250);
        connection = loop {
            tokio::select! {
                () = released.cancelled() => return,
                () = store_closed.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            match take(&options, &role).await {
                Ok(Some(connection)) => break connection,
                Ok(None) => {
                    tracing::error!(
                        role,
                        "another process took this node's exclusive role while the database was away"
                    );
                    let _ = lost.send(true);
                    return;
                }
                Err(_) => backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX),
            }
        };
        tracing::info!(role, "holds its exclusive role again");
    }
    let _ = connection.close().await;
}
