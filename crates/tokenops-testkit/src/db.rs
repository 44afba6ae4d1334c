//! A fresh store per test: a SQLite file in its own temporary directory, or a PostgreSQL schema
//! in the test database (`TOKENOPS_TEST_POSTGRES_URL`, default the local server). Raw SQL access
//! lets tests inspect rows and inject failures the way a real fault would occur.

use sqlx::{Executor, Row};
use std::path::{Path, PathBuf};
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// What [`TestDb::break_table`] renames a table to: its name with this appended.
const BROKEN_SUFFIX: &str = "_broken";

pub fn postgres_url() -> String {
    std::env::var("TOKENOPS_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

pub struct TestDb {
    pub backend: Backend,
    dir: PathBuf,
    schema: Option<String>,
    pool: tokio::sync::OnceCell<Pool>,
}

enum Pool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl TestDb {
    pub async fn create(backend: Backend) -> Self {
        let token = Uuid::now_v7().simple().to_string();
        let dir = std::env::temp_dir().join(format!("tokenops-test-{token}"));
        std::fs::create_dir_all(&dir).expect("test directory");
        let schema = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(format!("t_{}", &token[token.len() - 20..])),
        };
        Self { backend, dir, schema, pool: tokio::sync::OnceCell::new() }
    }

    /// The TOKENOPS_DATABASE_URL of this store.
    pub fn url(&self) -> String {
        match self.backend {
            Backend::Sqlite => format!("sqlite://{}", self.dir.join("tokenops.db").display()),
            Backend::Postgres => postgres_url(),
        }
    }

    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The settings the service needs to run on this store: the store, its schema and the data
    /// directory.
    pub fn service_settings(&self) -> std::collections::BTreeMap<String, String> {
        let mut env = std::collections::BTreeMap::new();
        env.insert("TOKENOPS_DATABASE_URL".to_owned(), self.url());
        if let Some(schema) = self.schema() {
            env.insert("TOKENOPS_DATABASE_SCHEMA".to_owned(), schema.to_owned());
        }
        env.insert("TOKENOPS_DATA_DIR".to_owned(), self.dir().display().to_string());
        env
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    async fn pool(&self) -> &Pool {
        self.pool
            .get_or_init(|| async {
                match self.backend {
                    Backend::Sqlite => {
                        // One connection: DDL (injected faults) and the reads after it see one schema.
                        Pool::Sqlite(
                            sqlx::sqlite::SqlitePoolOptions::new()
                                .max_connections(1)
                                .connect(&self.url())
                                .await
                                .expect("connect sqlite"),
                        )
                    }
                    Backend::Postgres => {
                        let schema = self.schema.clone().expect("postgres schema");
                        let options: sqlx::postgres::PgConnectOptions = postgres_url().parse().expect("postgres url");
                        Pool::Postgres(
                            sqlx::postgres::PgPoolOptions::new()
                                .max_connections(2)
                                .connect_with(options.options([("search_path", schema.as_str())]))
                                .await
                                .expect("connect postgres"),
                        )
                    }
                }
            })
            .await
    }

    /// Drops this test's PostgreSQL schema (nothing for SQLite, whose directory goes with the
    /// `TestDb`). Callable from `Drop` inside the test's runtime: it works on a thread of its
    /// own, and a lock a failed test left behind cannot hang it.
    pub fn drop_schema(&self) {
        let Some(schema) = self.schema.clone() else { return };
        let url = postgres_url();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let pool = sqlx::PgPool::connect(&url).await?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "SET lock_timeout = '5s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                )))
                .execute(&pool)
                .await?;
                pool.close().await;
                Ok::<_, sqlx::Error>(())
            })
        })
        .join();
        if let Ok(Err(error)) = dropped {
            eprintln!("could not drop the test schema: {error}");
        }
    }

    /// Executes statements (several separated by `;` are fine) against the test store.
    pub async fn execute(&self, sql: &str) {
        let sql = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()));
        match self.pool().await {
            Pool::Sqlite(pool) => pool.execute(sql).await.map(|_| ()),
            Pool::Postgres(pool) => pool.execute(sql).await.map(|_| ()),
        }
        .expect("execute");
    }

    /// The first column of the first row of `sql`, as an integer (cast counts with CAST(.. AS BIGINT)).
    pub async fn scalar(&self, sql: &str) -> i64 {
        let query = sqlx::AssertSqlSafe(sql.to_owned());
        match self.pool().await {
            Pool::Sqlite(pool) => sqlx::query(query).fetch_one(pool).await.and_then(|r| r.try_get(0)),
            Pool::Postgres(pool) => sqlx::query(query).fetch_one(pool).await.and_then(|r| r.try_get(0)),
        }
        .expect("integer query")
    }

    /// The first column of every row of `sql`, as text (cast ids with CAST(.. AS TEXT)).
    pub async fn strings(&self, sql: &str) -> Vec<String> {
        let query = sqlx::AssertSqlSafe(sql.to_owned());
        let rows: Result<Vec<String>, sqlx::Error> = match self.pool().await {
            Pool::Sqlite(pool) => sqlx::query(query)
                .fetch_all(pool)
                .await
                .and_then(|rows| rows.iter().map(|r| r.try_get::<String, _>(0)).collect()),
            Pool::Postgres(pool) => sqlx::query(query)
                .fetch_all(pool)
                .await
                .and_then(|rows| rows.iter().map(|r| r.try_get::<String, _>(0)).collect()),
        };
        rows.expect("text query")
    }

    /// The audit records with their seals (`chain_seq`, `block_number`, `record_hash`; NULL while
    /// unsealed), to read in place of a table: SQLite keeps a record's seal in its row,
    /// PostgreSQL in `audit_seals` (its migration 0023).
    pub fn sealed_audit_records(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "audit_records",
            Backend::Postgres => {
                "(SELECT r.*, s.chain_seq, s.block_number, s.record_hash
                  FROM audit_records r LEFT JOIN audit_seals s ON s.record_id = r.id) AS audit_records"
            }
        }
    }

    /// Counts the rows of `table` (optionally filtered by a WHERE clause).
    pub async fn count(&self, table: &str, condition: &str) -> i64 {
        let condition = if condition.is_empty() { String::new() } else { format!(" WHERE {condition}") };
        self.scalar(&format!("SELECT CAST(COUNT(*) AS BIGINT) FROM {table}{condition}")).await
    }

    /// Makes every insert into `table` fail, as a failing disk or constraint would.
    pub async fn fail_inserts_into(&self, table: &str) {
        self.inject_failure("INSERT", table, "1 = 1").await;
    }

    /// Makes every update of `table` fail.
    pub async fn fail_updates_of(&self, table: &str) {
        self.fail_updates_of_where(table, "1 = 1").await;
    }

    /// Makes the updates of `table` that match `condition` fail; the condition may name the
    /// row's `OLD` and `NEW` values, in SQL both stores understand.
    pub async fn fail_updates_of_where(&self, table: &str, condition: &str) {
        self.inject_failure("UPDATE", table, condition).await;
    }

    /// A trigger that makes each `event` (INSERT or UPDATE) on `table` for which `condition`
    /// holds fail.
    async fn inject_failure(&self, event: &str, table: &str, condition: &str) {
        match self.backend {
            Backend::Sqlite => {
                self.execute(&format!(
                    "CREATE TRIGGER injected_failure BEFORE {event} ON {table} WHEN {condition} BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
                ))
                .await
            }
            Backend::Postgres => {
                self.execute(&format!(
                    "CREATE FUNCTION injected_failure() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
                     CREATE TRIGGER injected_failure BEFORE {event} ON {table} FOR EACH ROW WHEN ({condition}) EXECUTE FUNCTION injected_failure()"
                ))
                .await
            }
        }
    }

    /// Makes every statement that touches `table` fail, reads included, as a lost connection or
    /// a damaged database would: the table is renamed away until [`TestDb::restore_table`].
    /// The app's own connections see it at their next statement: both stores check a prepared
    /// statement against the current schema before running it (SQLite prepares it again,
    /// PostgreSQL analyses it again), so a cached statement fails too.
    pub async fn break_table(&self, table: &str) {
        let renamed = format!("ALTER TABLE {table} RENAME TO {table}{BROKEN_SUFFIX}");
        match self.backend {
            Backend::Sqlite => self.execute(&renamed).await,
            // Waits for the app's open transactions on the table, but not forever.
            Backend::Postgres => self.execute(&format!("SET LOCAL lock_timeout = '10s'; {renamed}")).await,
        }
    }

    /// Undoes [`TestDb::break_table`]: the table, its rows and its indexes are back as they were.
    pub async fn restore_table(&self, table: &str) {
        let renamed = format!("ALTER TABLE {table}{BROKEN_SUFFIX} RENAME TO {table}");
        match self.backend {
            Backend::Sqlite => self.execute(&renamed).await,
            Backend::Postgres => self.execute(&format!("SET LOCAL lock_timeout = '10s'; {renamed}")).await,
        }
    }

    /// Locks `table` of this PostgreSQL schema against every other transaction, reads included,
    /// on a connection of its own, until [`HeldTable::release`]: a request that reaches the
    /// table waits there, still running.
    pub async fn hold_table(&self, table: &str) -> HeldTable {
        use sqlx::Connection;
        let schema = self.schema.clone().expect("holding a table is for PostgreSQL");
        let options: sqlx::postgres::PgConnectOptions = postgres_url().parse().expect("postgres url");
        let mut connection = sqlx::PgConnection::connect_with(&options.options([("search_path", schema.as_str())]))
            .await
            .expect("connect postgres");
        let lock = format!("BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE");
        connection.execute(sqlx::raw_sql(sqlx::AssertSqlSafe(lock))).await.expect("lock the table");
        HeldTable(connection)
    }

    /// How many lock requests on `table` of this PostgreSQL schema are waiting.
    pub async fn waiting_on(&self, table: &str) -> i64 {
        self.scalar(&format!(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_locks WHERE relation = '{table}'::regclass AND NOT granted"
        ))
        .await
    }

    /// How many transactions of this PostgreSQL database wait for another's row lock (a row
    /// lock wait is on the holder's transaction id, not on the table).
    pub async fn waiting_on_a_row(&self) -> i64 {
        self.scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted")
            .await
    }

    /// How many transactions wait for another's lock on a row of `table` of this PostgreSQL
    /// schema: the first waiter holds the row's tuple lock and waits on the holder's
    /// transaction id, later ones wait for the tuple lock (other schemas' waits do not count).
    pub async fn waiting_on_a_row_of(&self, table: &str) -> i64 {
        self.scalar(&format!(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_locks w WHERE NOT w.granted AND ( \
               (w.locktype = 'tuple' AND w.relation = '{table}'::regclass) \
               OR (w.locktype = 'transactionid' AND EXISTS (SELECT 1 FROM pg_locks t WHERE t.pid = w.pid \
                   AND t.locktype = 'tuple' AND t.granted AND t.relation = '{table}'::regclass)))"
        ))
        .await
    }

    /// Removes the failure injected by `fail_inserts_into` or `fail_updates_of(_where)`.
    pub async fn heal_inserts_into(&self, table: &str) {
        match self.backend {
            Backend::Sqlite => self.execute("DROP TRIGGER injected_failure").await,
            Backend::Postgres => {
                self.execute(&format!("DROP TRIGGER injected_failure ON {table}; DROP FUNCTION injected_failure()"))
                    .await
            }
        }
    }
}

/// A table locked by [`TestDb::hold_table`].
pub struct HeldTable(sqlx::PgConnection);

impl HeldTable {
    /// Ends the lock: the requests waiting on the table go on.
    pub async fn release(mut self) {
        self.0.execute("ROLLBACK").await.expect("release the table");
    }
}
