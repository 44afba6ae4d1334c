//! Store errors: the few outcomes callers branch on, and everything else as `Backend`.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique constraint refused the write (for example a reference that already exists).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Another transaction holds what this write needs right now (on PostgreSQL, the lock of
    /// an Idempotency-Key whose request is still running): the same request may go through once
    /// that transaction has ended.
    #[error("busy: {0}")]
    Busy(String),
    /// Stored data could not be decoded into its type: a bug or a tampered database.
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The database could not be reached: no connection within the bound, the connection
    /// lost, the server shutting down or starting. The same request may succeed once it is back.
    #[error("store unavailable: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The database failed.
    #[error("store failure: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// Whether the database could not be reached (rather than refusing or failing a statement).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

pub type StoreResult<T> = Result<T, StoreError>;
