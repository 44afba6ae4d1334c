//! The binary's command line: configuration is validated at start with every bad setting named,
//! an unknown database URL scheme is refused, `migrate` applies migrations and exits, and
//! `serve` answers /healthz and /openapi.json soon after it starts.

use crate::BINARY;
use std::process::Command;
use std::time::{Duration, Instant};

fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let dir = std::env::temp_dir().join(format!("tokenops-bin-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    let output = Command::new(BINARY)
        .args(args)
        .env_clear()
        .env("TOKENOPS_DATA_DIR", dir.join("data"))
        .envs(env.iter().copied())
        .current_dir(&dir)
        .output()
        .expect("run tokenops");
    let _ = std::fs::remove_dir_all(&dir);
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn an_unknown_database_url_scheme_is_refused_at_start_naming_the_setting() {
    let (code, stderr) = run(&["serve"], &[("TOKENOPS_DATABASE_URL", "mysql://user:secret@localhost/db")]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("TOKENOPS_DATABASE_URL"), "{stderr}");
    assert!(stderr.contains("unsupported scheme \"mysql\""), "{stderr}");
    assert!(!stderr.contains("secret"), "the password must not be printed: {stderr}");
}

#[test]
fn every_bad_setting_is_reported_by_name() {
    let (code, stderr) = run(
        &["migrate"],
        &[("TOKENOPS_LISTEN", "not-an-address"), ("TOKENOPS_ROLE", "boss"), ("TOKENOPS_JOB_MAX_ATTEMPTS", "zero")],
    );
    assert_eq!(code, 2);
    for name in ["TOKENOPS_LISTEN", "TOKENOPS_ROLE", "TOKENOPS_JOB_MAX_ATTEMPTS"] {
        assert!(stderr.contains(name), "{name} missing: {stderr}");
    }
}

#[test]
fn migrate_applies_the_migrations_and_exits() {
    let dir = std::env::temp_dir().join(format!("tokenops-migrate-{}", uuid::Uuid::now_v7().simple()));
    let db = dir.join("tokenops.db");
    let url = format!("sqlite://{}", db.display());
    for _ in 0..2 {
        let status = Command::new(BINARY)
            .arg("migrate")
            .env_clear()
            .env("TOKENOPS_DATABASE_URL", &url)
            .env("TOKENOPS_LOG", "error")
            .status()
            .expect("run migrate");
        assert!(status.success(), "migrate must succeed, also when nothing is pending");
    }
    assert!(db.is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn logs_written_to_a_file_or_pipe_carry_no_colour_codes() {
    let dir = std::env::temp_dir().join(format!("tokenops-log-{}", uuid::Uuid::now_v7().simple()));
    let url = format!("sqlite://{}", dir.join("tokenops.db").display());
    let output = Command::new(BINARY)
        .arg("migrate")
        .env_clear()
        .env("TOKENOPS_DATABASE_URL", &url)
        .env("TOKENOPS_LOG", "info")
        .output()
        .expect("run migrate");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("INFO"), "something was logged: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "no ANSI escape codes in a piped log: {stderr:?}");
}

#[test]
fn operator_create_client_prints_new_credentials_once() {
    let dir = std::env::temp_dir().join(format!("tokenops-operator-{}", uuid::Uuid::now_v7().simple()));
    let output = Command::new(BINARY)
        .args(["operator", "create-client", "--name", "ci robot"])
        .env_clear()
        .env("TOKENOPS_DATA_DIR", &dir)
        .env("TOKENOPS_LOG", "error")
        .output()
        .expect("run tokenops");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let credentials: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON credentials on stdout");
    assert!(credentials["clientId"].as_str().is_some_and(|id| uuid::Uuid::parse_str(id).is_ok()));
    assert_eq!(credentials["clientSecret"].as_str().map(str::len), Some(43));
    assert_eq!(credentials["tokenUrl"], "http://127.0.0.1:8080/idp/oauth2/token");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn serve_answers_healthz_and_openapi_within_ten_seconds_of_starting() {
    tokenops_identity::install_crypto_provider();
    let dir = std::env::temp_dir().join(format!("tokenops-serve-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let started = Instant::now();
    let mut child = tokio::process::Command::new(BINARY)
        .arg("serve")
        .env_clear()
        .env("TOKENOPS_LISTEN", format!("127.0.0.1:{port}"))
        .env("TOKENOPS_LOG", "warn")
        .current_dir(&dir)
        .kill_on_drop(true)
        .spawn()
        .expect("start");
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let mut healthy = false;
    while started.elapsed() < Duration::from_secs(10) {
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(healthy, "no /healthz within 10 s");
    let doc: serde_json::Value =
        client.get(format!("{base}/openapi.json")).send().await.expect("openapi").json().await.expect("json");
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(dir.join("data/tokenops.db").is_file(), "the default store is a SQLite file under the data directory");
    let _ = child.start_kill();
    let _ = child.wait().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tokenops serve` on a data directory of its own with `settings`; the directory to remove.
async fn serve_with(name: &str, settings: &[(&str, &str)]) -> (tokenops_testkit::ServiceProcess, std::path::PathBuf) {
    tokenops_identity::install_crypto_provider();
    let dir = std::env::temp_dir().join(format!("tokenops-{name}-{}", uuid::Uuid::now_v7().simple()));
    let mut env =
        std::collections::BTreeMap::from([("TOKENOPS_DATA_DIR".to_owned(), dir.join("data").display().to_string())]);
    env.extend(settings.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    (tokenops_testkit::ServiceProcess::start(BINARY, &env).await, dir)
}

/// A service restarted while its EVM node is away starts all the same: it answers (organisation
/// reads, submissions) and `/readyz` names the ledger as failing until the node answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_while_its_evm_node_is_away_and_says_so_in_readyz() {
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port");
    let node = format!("http://{nobody}");
    let dir = std::env::temp_dir().join(format!("tokenops-evm-away-{}", uuid::Uuid::now_v7().simple()));
    let env = std::collections::BTreeMap::from([
        ("TOKENOPS_DATA_DIR".to_owned(), dir.join("data").display().to_string()),
        ("TOKENOPS_LEDGER".to_owned(), "evm".to_owned()),
        ("TOKENOPS_EVM_RPC_URL".to_owned(), node),
    ]);
    tokenops_identity::install_crypto_provider();
    let mut service = tokenops_testkit::ServiceProcess::spawn(BINARY, &env, None);
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("client");
    let deadline = Instant::now() + Duration::from_secs(30);
    let readyz = loop {
        assert!(service.exited_within(Duration::from_millis(1)).await.is_none(), "tokenops exited");
        if let Ok(reply) = client.get(format!("{}/readyz", service.base_url)).send().await {
            break reply;
        }
        assert!(Instant::now() < deadline, "no /readyz within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(readyz.status(), 503);
    let body: serde_json::Value = readyz.json().await.expect("json");
    assert!(body["failing"].as_array().is_some_and(|f| f.iter().any(|c| c == "ledger")), "{body}");
    let healthz = client.get(format!("{}/healthz", service.base_url)).send().await.expect("healthz");
    assert_eq!(healthz.status(), 200);
    drop(service);
    let _ = std::fs::remove_dir_all(&dir);
}

/// At SIGTERM the service says it is going (`/readyz` 503 within a second, naming the
/// shutdown) while it still answers for `TOKENOPS_SHUTDOWN_DRAIN_MS`, then exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_sigterm_readyz_turns_503_at_once_while_requests_are_still_answered() {
    let (service, dir) = serve_with("drain", &[("TOKENOPS_SHUTDOWN_DRAIN_MS", "3000")]).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().expect("client");
    let readyz = format!("{}/readyz", service.base_url);
    assert_eq!(client.get(&readyz).send().await.expect("readyz").status(), 200);

    service.sigterm();
    let signalled = Instant::now();
    let unready = loop {
        let reply = client.get(&readyz).send().await.expect("still answering");
        if reply.status() == 503 {
            break reply.json::<serde_json::Value>().await.expect("json");
        }
        assert!(signalled.elapsed() < Duration::from_secs(1), "/readyz still 200 a second after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(unready["status"], "shutting_down", "{unready}");
    assert_eq!(unready["failing"], serde_json::json!(["shutdown"]), "{unready}");
    // Still serving while draining: other requests are answered.
    let openapi = client.get(format!("{}/openapi.json", service.base_url)).send().await.expect("served while draining");
    assert_eq!(openapi.status(), 200);
    assert!(signalled.elapsed() < Duration::from_secs(3), "the drain lasts its setting");
    let status = service.terminate().await;
    assert!(status.success(), "a clean exit after the drain: {status}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that opens connections and sends nothing (or half a request) neither keeps them
/// nor, by opening many, uses up what the service needs: each is closed after
/// `TOKENOPS_CONNECTION_IDLE_MS`, and no more than `TOKENOPS_MAX_CONNECTIONS` are open at once;
/// a request beyond them waits for a slot and is then answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_open_ones_are_bounded() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let settings = [
        ("TOKENOPS_CONNECTION_IDLE_MS", "1000"),
        ("TOKENOPS_MAX_CONNECTIONS", "2"),
        // The idle limit must outlast the longest wait a request may make.
        ("TOKENOPS_CONTRACT_REGISTER_WAIT_MS", "0"),
        ("TOKENOPS_SCRIPT_MAX_WALL_MS", "500"),
    ];
    let (service, dir) = serve_with("idle", &settings).await;
    let address = service.base_url.trim_start_matches("http://").to_owned();
    let mut half_sent = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.expect("connect");
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.expect("half a request");
        half_sent.push(stream);
    }
    let healthz = format!("{}/healthz", service.base_url);
    let third = tokio::spawn(async move {
        let started = Instant::now();
        let status = reqwest::get(healthz).await.map(|r| r.status().as_u16());
        (status, started.elapsed())
    });
    for stream in &mut half_sent {
        let mut byte = [0_u8; 1];
        let ended = tokio::time::timeout(Duration::from_secs(15), stream.read(&mut byte)).await;
        let ended = ended.expect("an idle connection is closed within the deadline");
        assert!(matches!(ended, Ok(0) | Err(_)), "closed without an answer: {ended:?}");
    }
    let answered = tokio::time::timeout(Duration::from_secs(15), third).await.expect("answered once a slot is free");
    let (status, waited) = answered.expect("task");
    assert_eq!(status.expect("request"), 200);
    assert!(waited >= Duration::from_millis(500), "the third request waited for a slot: {waited:?}");
    drop(service);
    let _ = std::fs::remove_dir_all(&dir);
}
