//! Shared test support: every test runs in a fresh, randomly named schema that is dropped at
//! the end, even when the test body panics.

use std::future::Future;
use tokenops_store::Store;
use tokenops_store_postgres::PostgresStore;
use uuid::Uuid;

pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

pub fn url() -> String {
    std::env::var("TOKENOPS_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// Opens another store on the same schema: another node of the same deployment.
pub async fn connect(schema: &str) -> PostgresStore {
    PostgresStore::connect(&url(), Some(schema)).await.expect("connect to the test PostgreSQL server")
}

/// Runs `body` with a store (not yet migrated) on a fresh schema, then closes the store and
/// drops the schema. A panic in `body` is re-raised after the cleanup.
pub async fn in_fresh_schema<F, Fut>(body: F)
where
    F: FnOnce(PostgresStore, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let schema = format!("test_{}", Uuid::now_v7().simple());
    let store = connect(&schema).await;
    let outcome = tokio::spawn(body(store.clone(), schema.clone())).await;
    store.close().await;
    drop_schema(&schema).await;
    if let Err(error) = outcome {
        match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(error) => panic!("test body did not finish: {error}"),
        }
    }
}

async fn drop_schema(schema: &str) {
    let pool = sqlx::PgPool::connect(&url()).await.expect("connect to drop the test schema");
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")))
        .execute(&pool)
        .await
        .expect("drop the test schema");
    pool.close().await;
}
