//! The real `tokenops` binary as a child process, for tests that kill it.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

pub struct ServiceProcess {
    pub base_url: String,
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

impl ServiceProcess {
    /// Starts `binary serve` with `env` on a free port and waits until `/readyz` answers 200.
    pub async fn start(binary: &str, env: &BTreeMap<String, String>) -> Self {
        let port = free_port();
        let mut command = Command::new(binary);
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("TOKENOPS_LISTEN", format!("127.0.0.1:{port}"))
            .env("TOKENOPS_LOG", "warn")
            .envs(env)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let child = command.spawn().expect("start tokenops");
        let process = Self { base_url: format!("http://127.0.0.1:{port}"), child };
        process.wait_ready(Duration::from_secs(30)).await;
        process
    }

    /// The process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    async fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let client = reqwest::Client::new();
        while Instant::now() < deadline {
            if let Ok(r) = client.get(format!("{}/readyz", self.base_url)).send().await
                && r.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("tokenops did not become ready within {timeout:?}");
    }

    /// SIGKILL: the process gets no chance to clean up.
    pub async fn kill9(mut self) {
        self.child.start_kill().expect("kill");
        let _ = self.child.wait().await;
    }

    /// SIGTERM, then waits for a clean exit; returns the exit status.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        }
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("exit after SIGTERM")
            .expect("wait")
    }
}
