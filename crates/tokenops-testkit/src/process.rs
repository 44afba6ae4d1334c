//! The real `tokenops` binary as a child process, for tests that kill it or take its database
//! away while it runs.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

pub struct ServiceProcess {
    pub base_url: String,
    port: u16,
    child: Child,
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// Whether process `pid` holds the socket listening on 127.0.0.1:`port` (Linux: the listening
/// socket's inode in `/proc/net/tcp`, among the process's open files). Elsewhere, true.
fn listens_on(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else { return true };
    let local = format!("0100007F:{port:04X}");
    let Some(inode) = table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A"))
            .then(|| fields.get(9).map(|i| i.to_string()))?
    }) else {
        return false;
    };
    let socket = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == socket.as_str()))
        })
        .unwrap_or(false)
}

impl ServiceProcess {
    /// Starts `binary serve` with `env` on a free port and waits until `/readyz` answers 200.
    pub async fn start(binary: &str, env: &BTreeMap<String, String>) -> Self {
        let mut process = Self::spawn(binary, env, None);
        process.wait_ready(Duration::from_secs(30)).await;
        process
    }

    /// Starts `binary serve` with `env` on a free port without waiting for it: a service whose
    /// store cannot be reached yet keeps trying, and only [`Self::wait_ready`] tells when it
    /// serves. With `log`, its standard error is appended to that file instead of the test's.
    pub fn spawn(binary: &str, env: &BTreeMap<String, String>, log: Option<&Path>) -> Self {
        let port = free_port();
        let stderr = match log {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .unwrap_or_else(|e| panic!("opening the service's log {}: {e}", path.display())),
            ),
            None => Stdio::inherit(),
        };
        let mut command = Command::new(binary);
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("TOKENOPS_LISTEN", format!("127.0.0.1:{port}"))
            .env("TOKENOPS_LOG", "warn")
            .envs(env)
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true);
        let child = command.spawn().unwrap_or_else(|e| panic!("starting {binary}: {e}"));
        Self { base_url: format!("http://127.0.0.1:{port}"), port, child }
    }

    /// The process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits until `/readyz` answers 200 (the store is reachable); panics if the process exits
    /// first or the timeout passes.
    pub async fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("HTTP client");
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("tokenops exited with {status} before it was ready");
            }
            match client.get(format!("{}/readyz", self.base_url)).send().await {
                // Another test's service may have taken the port between `free_port` and this
                // child's bind (the child then exits): only our own process's answer counts.
                Ok(r) if r.status().is_success() && self.child.id().is_some_and(|pid| listens_on(pid, self.port)) => {
                    return;
                }
                Ok(r) if r.status().is_success() => last = format!("port {} is another process's", self.port),
                Ok(r) => last = format!("/readyz answered {}", r.status()),
                Err(e) => last = format!("/readyz: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("tokenops did not become ready within {timeout:?} ({last})");
    }

    /// The process's exit status once it exits, if it does within `timeout` (a node that refuses
    /// its settings stops on its own).
    pub async fn exited_within(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait()).await.ok().map(|status| status.expect("wait for tokenops"))
    }

    /// SIGKILL: the process gets no chance to clean up.
    pub async fn kill9(mut self) {
        self.child.start_kill().expect("kill");
        let _ = self.child.wait().await;
    }

    /// Sends SIGTERM without waiting: the service drains, then stops.
    pub fn sigterm(&self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        }
    }

    /// SIGTERM, then waits for a clean exit; returns the exit status.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        self.sigterm();
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("exit after SIGTERM")
            .expect("wait")
    }
}
