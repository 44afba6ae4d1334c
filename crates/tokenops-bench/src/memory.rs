//! The service's resident memory, read from /proc (Linux): now, and at its peak over a stretch
//! of a benchmark.

use anyhow::Context;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Resident memory of `pid` in KiB (Linux).
pub(crate) fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The resident memory of a process before a stretch and at its peak during it, sampled every
/// `every` until [`Peak::stop`].
pub(crate) struct Peak {
    before: u64,
    peak: Arc<AtomicU64>,
    sampling: tokio::task::JoinHandle<()>,
}

impl Peak {
    pub(crate) fn start(pid: u32, every: Duration) -> anyhow::Result<Self> {
        let before = resident_kib(pid).context("resident memory")?;
        let peak = Arc::new(AtomicU64::new(before));
        let sampling = {
            let peak = peak.clone();
            tokio::spawn(async move {
                loop {
                    if let Some(kib) = resident_kib(pid) {
                        peak.fetch_max(kib, Ordering::Relaxed);
                    }
                    tokio::time::sleep(every).await;
                }
            })
        };
        Ok(Self { before, peak, sampling })
    }

    /// Stops sampling: the memory before and at the peak, in KiB.
    pub(crate) fn stop(self) -> (u64, u64) {
        self.sampling.abort();
        (self.before, self.peak.load(Ordering::Relaxed))
    }
}
