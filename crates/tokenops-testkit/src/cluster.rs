//! A throwaway PostgreSQL cluster owned by one test, on a free port, for tests that crash the
//! database server itself: the shared server the other tests use is never touched.

use sqlx::Row;
use sqlx::postgres::{PgPool, PgPoolOptions};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// How long a restarted cluster may take to finish crash recovery and accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A PostgreSQL cluster in a temporary directory. Dropping it stops the server and removes the
/// directory.
pub struct PgCluster {
    dir: PathBuf,
    port: u16,
    pg_ctl: PathBuf,
    /// initdb refuses to run as root: then the cluster belongs to `nobody` and every command
    /// runs through `runuser -u nobody --`.
    as_nobody: bool,
    pool: tokio::sync::OnceCell<PgPool>,
}

/// `name` on PATH, else the newest `/usr/lib/postgresql/*/bin/name` (Debian keeps the server's
/// tools off PATH).
fn pg_tool(name: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file());
    if on_path.is_some() {
        return on_path;
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.split('.').next()?.parse().ok()?;
            let tool = entry.path().join("bin").join(name);
            tool.is_file().then_some((version, tool))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, tool)| tool)
}

fn running_as_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

fn describe(output: &Output) -> String {
    format!(
        "{}; stdout: {}; stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout).trim(),
        String::from_utf8_lossy(&output.stderr).trim()
    )
}

impl PgCluster {
    /// Creates a cluster (initdb) and starts it with fsync and synchronous commit on, since
    /// the tests that use it check what survives a crash. Panics, saying what to install, when
    /// PostgreSQL's server tools are missing: a test that needs them must not pass without.
    pub async fn start() -> Self {
        let (Some(initdb), Some(pg_ctl)) = (pg_tool("initdb"), pg_tool("pg_ctl")) else {
            panic!(
                "this test runs a PostgreSQL cluster of its own and needs initdb and pg_ctl, on PATH or under \
                 /usr/lib/postgresql/*/bin; neither place has them. Install the PostgreSQL server \
                 (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql)"
            );
        };
        let dir = std::env::temp_dir().join(format!("tokenops-pg-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let as_nobody = running_as_root();
        let mut cluster = Self { dir, port: free_port(), pg_ctl, as_nobody, pool: tokio::sync::OnceCell::new() };
        if as_nobody {
            let chown = std::process::Command::new("chown")
                .arg("nobody")
                .arg(&cluster.dir)
                .output()
                .unwrap_or_else(|e| panic!("chown nobody {}: {e}", cluster.dir.display()));
            assert!(chown.status.success(), "chown nobody {}: {}", cluster.dir.display(), describe(&chown));
        }
        let data = cluster.data_dir();
        let mut init = cluster.command(&initdb);
        init.arg("-D").arg(&data).args(["-U", "postgres", "-A", "trust", "--no-sync"]);
        let output = init.output().await.unwrap_or_else(|e| panic!("running {:?}: {e}", init.as_std()));
        assert!(output.status.success(), "initdb failed: {}", describe(&output));
        let conf = data.join("postgresql.conf");
        let initial = std::fs::read_to_string(&conf).unwrap_or_else(|e| panic!("reading {}: {e}", conf.display()));
        // The free port was released before the server binds it: another test's process may
        // take it meanwhile, so a start that fails is tried again on another port.
        for attempt in 1..=3 {
            // The settings live in the cluster's own file, so every later start uses them unchanged.
            let settings = format!(
                "\n# tokenops test cluster\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
                 fsync = on\nsynchronous_commit = on\nfull_page_writes = on\nmax_connections = 100\n",
                cluster.port,
                cluster.dir.display()
            );
            std::fs::write(&conf, format!("{initial}{settings}"))
                .unwrap_or_else(|e| panic!("writing {}: {e}", conf.display()));
            match cluster.try_start().await {
                Ok(()) => return cluster,
                Err(problem) if attempt < 3 => {
                    eprintln!("the test cluster did not start on port {}; another port: {problem}", cluster.port);
                    // Whatever half started goes, so the next start owns the data directory.
                    let _ = cluster.pg_ctl(&["-m", "immediate", "-w", "stop"]).await;
                    cluster.port = free_port();
                }
                Err(problem) => panic!("{problem}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// The TOKENOPS_DATABASE_URL of this cluster.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The server's own log (crash recovery, refused connections), for a failure message.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// A directory the test may keep its own files in; removed with the cluster.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn command(&self, program: &Path) -> Command {
        let mut command = if self.as_nobody {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        // The server inherits nothing it could hold open; its output goes to its log file.
        command.stdin(std::process::Stdio::null()).kill_on_drop(true);
        command
    }

    async fn pg_ctl(&self, args: &[&str]) -> Output {
        let mut command = self.command(&self.pg_ctl);
        command.arg("-D").arg(self.data_dir()).args(args);
        command.output().await.unwrap_or_else(|e| panic!("running {:?}: {e}", command.as_std()))
    }

    /// Kills the server the way a power cut would look to its clients: `pg_ctl stop -m
    /// immediate` ends every process without a checkpoint, so the next start runs crash
    /// recovery from the WAL.
    pub async fn crash(&self) {
        let output = self.pg_ctl(&["-m", "immediate", "-w", "stop"]).await;
        assert!(output.status.success(), "pg_ctl stop -m immediate failed: {}", describe(&output));
    }

    /// Starts the server again on the same port and data directory, and waits until it
    /// accepts connections (after crash recovery).
    pub async fn restart(&self) {
        if let Err(problem) = self.try_start().await {
            panic!("{problem}");
        }
    }

    async fn try_start(&self) -> Result<(), String> {
        let log = self.log_path();
        let timeout = READY_TIMEOUT.as_secs().to_string();
        let output = self.pg_ctl(&["-l", &log.display().to_string(), "-w", "-t", &timeout, "start"]).await;
        if !output.status.success() {
            return Err(format!("pg_ctl start failed: {}; server log:\n{}", describe(&output), self.log_tail(30)));
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last = String::new();
        while Instant::now() < deadline {
            match self.probe().await {
                Ok(()) => return Ok(()),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("the cluster did not accept connections within {READY_TIMEOUT:?}: {last}"))
    }

    async fn probe(&self) -> Result<(), sqlx::Error> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(2))
            .connect(&self.url())
            .await?;
        sqlx::query("SELECT 1").execute(&pool).await?;
        pool.close().await;
        Ok(())
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    async fn pool(&self) -> &PgPool {
        // Connections a crash broke are found by the ping before each use and replaced.
        self.pool
            .get_or_init(|| async {
                PgPoolOptions::new()
                    .max_connections(2)
                    .acquire_timeout(Duration::from_secs(10))
                    .test_before_acquire(true)
                    .connect_lazy(&self.url())
                    .expect("the cluster's URL")
            })
            .await
    }

    /// The first column of every row of `sql`, as text (cast other types with CAST(.. AS TEXT)).
    /// Panics, naming the statement, when the server is down: ask only while it runs.
    pub async fn strings(&self, sql: &str) -> Vec<String> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_all(self.pool().await)
            .await
            .and_then(|rows| rows.iter().map(|r| r.try_get::<String, _>(0)).collect::<Result<Vec<_>, _>>());
        rows.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The first column of the first row of `sql`, as an integer.
    pub async fn scalar(&self, sql: &str) -> i64 {
        sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(self.pool().await)
            .await
            .and_then(|row| row.try_get::<i64, _>(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Counts the rows of `table` (optionally filtered by a WHERE clause).
    pub async fn count(&self, table: &str, condition: &str) -> i64 {
        let condition = if condition.is_empty() { String::new() } else { format!(" WHERE {condition}") };
        self.scalar(&format!("SELECT CAST(COUNT(*) AS BIGINT) FROM {table}{condition}")).await
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // Synchronous: Drop may run while the test's runtime is shutting down.
        let mut stop = if self.as_nobody {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(&self.pg_ctl);
            c
        } else {
            std::process::Command::new(&self.pg_ctl)
        };
        stop.arg("-D").arg(self.data_dir()).args(["-m", "immediate", "-w", "stop"]);
        let _ = stop.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
