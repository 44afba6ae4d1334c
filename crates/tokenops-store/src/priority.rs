//! Who goes first at the store: a request's writes before background jobs' writes. Job runs are
//! marked with [`in_background`]; a backend whose writes queue for one writer (SQLite) lets only a
//! few background writes queue at a time, so a request waits behind a handful of jobs, not behind
//! every job running. Jobs lose little by it: their time goes in waiting for durability, which
//! does not hold the writer.

use std::future::Future;

tokio::task_local! {
    static BACKGROUND: ();
}

/// Runs `work` as background work (a job), for the store to rank behind requests.
pub async fn in_background<F: Future>(work: F) -> F::Output {
    BACKGROUND.scope((), work).await
}

/// Whether the running task does background work.
pub fn is_background() -> bool {
    BACKGROUND.try_with(|_| ()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_work_run_in_background_is_background() {
        assert!(!is_background());
        assert!(in_background(async { is_background() }).await);
        assert!(!is_background());
    }
}
