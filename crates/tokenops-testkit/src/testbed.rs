//! What a test or a benchmark starts the service from: a trusted token issuer, a fresh store, a
//! clock and an organisation with a token, and the settings that put the service on them.

use crate::{Backend, Tenant, TestDb, TestIssuer};
use std::collections::BTreeMap;
use tokenops_app::clock::{Clock, ManualClock, SystemClock};

/// A trusted token issuer (kept alive while the service verifies tokens against it), a fresh
/// store, a clock standing at the system's time, and an organisation whose token, an hour of
/// that clock long, outlasts the test.
pub struct Testbed {
    pub issuer: TestIssuer,
    pub db: TestDb,
    pub clock: ManualClock,
    pub tenant: Tenant,
}

impl Testbed {
    pub async fn start(backend: Backend) -> Self {
        tokenops_identity::install_crypto_provider();
        let issuer = TestIssuer::start().await;
        let db = TestDb::create(backend).await;
        let clock = ManualClock::starting_at(SystemClock.now());
        let tenant = issuer.new_tenant(&clock);
        Self { issuer, db, clock, tenant }
    }

    /// The settings every node of the real binary needs: the store, the data directory, the
    /// identity provider and the node's role (`all`, `api` or `worker`). Tests and the
    /// benchmarks add their own.
    pub fn environment(&self, role: &str) -> BTreeMap<String, String> {
        let mut env = self.db.service_settings();
        env.extend(self.issuer.service_settings());
        env.insert("TOKENOPS_ROLE".to_owned(), role.to_owned());
        env
    }
}
