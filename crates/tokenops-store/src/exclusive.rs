//! A role that one process at a time may play on a store (the embedded ledger's block
//! producer): held by a [`Store::exclusive`](crate::Store::exclusive) answer until it is dropped.

use tokio::sync::watch;

/// A role held on a store. Dropping it lets another process take the role; a crashed holder
/// loses it with its connection (PostgreSQL) or its open file (SQLite).
pub struct Exclusive {
    lost: watch::Receiver<bool>,
    _held: Box<dyn Send + Sync>,
}

impl std::fmt::Debug for Exclusive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exclusive").field("lost", &*self.lost.borrow()).finish_non_exhaustive()
    }
}

impl Exclusive {
    /// A role held while `held` lives; `lost` turns true if the backend finds it lost meanwhile
    /// (its connection went away and another process took the role before it was taken again).
    pub fn new(held: impl Send + Sync + 'static, lost: watch::Receiver<bool>) -> Self {
        Self { lost, _held: Box::new(held) }
    }

    /// A role that can only end by being dropped.
    pub fn until_dropped(held: impl Send + Sync + 'static) -> Self {
        let (never, lost) = watch::channel(false);
        Self::new((held, never), lost)
    }

    /// Resolves once the role is lost; never while it is held.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut lost = self.lost.clone();
        async move {
            if lost.wait_for(|lost| *lost).await.is_err() {
                // The backend's keeper ended without a loss (the store closed): nothing will come.
                std::future::pending::<()>().await;
            }
        }
    }

    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }
}
