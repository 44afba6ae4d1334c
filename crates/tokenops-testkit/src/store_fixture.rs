//! A fresh, migrated store per test (a SQLite file or a PostgreSQL schema, from the test kit),
//! opened the way the service opens it. The PostgreSQL schema is dropped with the fixture.

use crate::{Backend, TestDb};
use std::sync::Arc;
use tokenops_domain::SystemClock;
use tokenops_store::Store;
use tokenops_store_postgres::PostgresStore;
use tokenops_store_sqlite::SqliteStore;

pub struct StoreFixture {
    pub db: TestDb,
    pub store: Arc<dyn Store>,
}

impl StoreFixture {
    pub async fn new(backend: Backend) -> Self {
        let db = TestDb::create(backend).await;
        let store = open(&db).await;
        Self { db, store }
    }

    /// Another handle on the same store, as after a restart.
    pub async fn reopen(&self) -> Arc<dyn Store> {
        open(&self.db).await
    }
}

pub async fn open(db: &TestDb) -> Arc<dyn Store> {
    match db.backend {
        Backend::Sqlite => {
            let url = db.url();
            let path = url.strip_prefix("sqlite://").expect("a sqlite:// URL");
            let store = SqliteStore::open(path.as_ref()).await.expect("open the SQLite store");
            store.migrate(&SystemClock).await.expect("migrate");
            Arc::new(store)
        }
        Backend::Postgres => {
            let store =
                PostgresStore::connect(&db.url(), db.schema()).await.expect("connect to the test PostgreSQL server");
            store.migrate(&SystemClock).await.expect("migrate");
            Arc::new(store)
        }
    }
}

impl Drop for StoreFixture {
    fn drop(&mut self) {
        self.db.drop_schema();
    }
}
