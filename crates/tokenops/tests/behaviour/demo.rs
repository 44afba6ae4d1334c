//! `tokenops demo` walks the bank's day to its summary and exits 0 on a fresh machine's
//! defaults; when a step cannot succeed (here the webhook registration, told by the environment
//! that loopback is not an allowed destination), it names that step and exits non-zero.

use crate::BINARY;
use std::process::Output;
use std::time::Duration;

async fn demo(env: &[(&str, &str)]) -> (Output, String) {
    let dir = std::env::temp_dir().join(format!("tokenops-demo-test-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    let run = tokio::process::Command::new(BINARY)
        .args(["demo", "--data-dir"])
        .arg(dir.join("data"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .current_dir(&dir)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run).await.expect("the demo ends").expect("run");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (output, stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_walks_the_day_to_its_summary_and_exits_0() {
    let (output, stdout) = demo(&[]).await;
    assert!(output.status.success(), "{}\n{stdout}\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    for step in [
        "creates the organisation",
        "the owner signs in and sets a password",
        "put in approval groups",
        "a MINT of 50,000.00 EUR",
        "a large transfer waits, is approved by both, and settles",
        "a LOCK, and its RELEASE",
        "the audit trail of the day, exported",
        "summary",
    ] {
        assert!(stdout.contains(step), "no step {step:?}:\n{stdout}");
    }
    assert!(stdout.contains("state AWAITING_APPROVAL"), "the large transfer waited:\n{stdout}");
    assert_eq!(stdout.matches(" CONFIRMED  block ").count(), 5, "five operations CONFIRMED in the summary:\n{stdout}");
    assert!(stdout.contains("acme-reserve     total   16000.00"), "the balances:\n{stdout}");
    assert!(!stdout.contains("signature NOT verified"), "every delivery verified:\n{stdout}");
    assert!(stdout.contains("[receiver] approval.granted (signature verified"), "{stdout}");
    assert!(stdout.contains("The demo's day ended well."), "{stdout}");
    assert!(!stdout.contains("Demo-Password-2026!"), "passwords are masked in the printed requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_fails_is_named_and_the_demo_exits_non_zero() {
    let (output, stdout) = demo(&[("TOKENOPS_WEBHOOK_ALLOW_CIDRS", "10.99.0.0/16")]).await;
    assert!(!output.status.success(), "the demo cannot succeed:\n{stdout}");
    assert!(
        stdout.contains("The demo failed at step 5. a webhook registration"),
        "names the step that failed:\n{stdout}"
    );
    assert!(stdout.contains("answered 400"), "and why:\n{stdout}");
    assert!(!stdout.contains("== 6."), "stops there:\n{stdout}");
}
