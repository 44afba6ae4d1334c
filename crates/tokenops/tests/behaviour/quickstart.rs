//! `docs/quickstart.md` works as written: every `sh` block, in order, in one bash session,
//! against the real binary on a fresh data directory, ends with the transfer CONFIRMED.

use crate::BINARY;
use std::collections::BTreeMap;
use std::time::Duration;
use tokenops_testkit::ServiceProcess;

/// The bodies of the page's fenced `sh` blocks, in order (`console` blocks are for the reader).
fn sh_blocks(page: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in page.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(lines), "```") => {
                blocks.push(lines.join("\n"));
                current = None;
            }
            (Some(lines), _) => lines.push(line),
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unclosed sh block");
    blocks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_block_of_the_quick_start_runs_in_order_against_a_fresh_service() {
    tokenops_identity::install_crypto_provider();
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/quickstart.md"))
        .expect("docs/quickstart.md");
    let blocks = sh_blocks(&page);
    assert!(blocks.len() >= 8, "the walk-through is in sh blocks: {}", blocks.len());

    let dir = std::env::temp_dir().join(format!("tokenops-quickstart-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    let env = BTreeMap::from([("TOKENOPS_DATA_DIR".to_owned(), dir.join("data").display().to_string())]);
    let service = ServiceProcess::start(BINARY, &env).await;

    let script = format!("set -euo pipefail\n{}\n", blocks.join("\n"));
    let run = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("BASE", &service.base_url)
        .current_dir(&dir)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the quick start finishes within two minutes")
        .expect("run bash");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the quick start failed ({}):\n{stdout}\n{stderr}", output.status);
    assert!(stdout.contains("/api/contracts/EUR status=ACTIVE"), "{stdout}");
    assert_eq!(stdout.matches("status=ACTIVE").count(), 3, "the contract and both accounts: {stdout}");
    assert_eq!(stdout.matches(" state=CONFIRMED").count(), 2, "the MINT and the TRANSFER: {stdout}");
    assert!(stdout.contains(r#""total":"125.00""#), "the savings account's balance: {stdout}");
    assert!(stdout.contains(r#""role":"SUPER_ADMIN""#) && stdout.contains(r#""status":"ACTIVE""#), "{stdout}");
    assert!(stdout.contains("UNSUPPORTED_API_VERSION"), "the error example: {stdout}");
    drop(service);
    let _ = std::fs::remove_dir_all(&dir);
}
