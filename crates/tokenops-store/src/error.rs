//! Store errors: the few outcomes callers branch on, and everything else as `Backend`.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique constraint refused the write (for example a reference that already exists).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Stored data could not be decoded into its type: a bug or a tampered database.
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The database failed or could not be reached.
    #[error("store failure: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

pub type StoreResult<T> = Result<T, StoreError>;
