//! The OpenAPI document as an integrator uses it: the real binary serves it, openapi-spec-validator
//! finds it valid OpenAPI 3.1, openapi-python-client generates a client from it without a
//! warning, and that generated client alone takes a new organisation's owner from the operator's
//! token through sign-in to a registered customer and a list of each paging style; then real
//! responses (scripts with parameter defaults of each type, customers, lists, the caller's
//! profile, audit and webhook events) are validated against the document's own response
//! schemas (`scripts/openapi_client_check.py`).
//!
//! The Python tools come from the virtualenv `scripts/test` prepares, named by
//! `TOKENOPS_TEST_PYTHON`. Without it the test fails: a check that passes without its tools
//! proves nothing.

use crate::BINARY;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tokenops_testkit::ServiceProcess;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/openapi_client_check.py");

fn python() -> String {
    std::env::var("TOKENOPS_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "TOKENOPS_TEST_PYTHON is not set: this test needs Python 3.11+ with openapi-spec-validator and \
             openapi-python-client. Run scripts/test (it prepares target/openapi-venv), or set \
             TOKENOPS_TEST_PYTHON to a python that has scripts/openapi-client-requirements.txt installed."
        )
    })
}

#[tokio::test]
async fn a_client_generated_from_the_document_signs_in_and_registers_a_customer() {
    let python = python();
    tokenops_identity::install_crypto_provider();
    let dir = std::env::temp_dir().join(format!("tokenops-openapi-client-{}", uuid::Uuid::now_v7().simple()));
    let data = dir.join("data");
    let env = BTreeMap::from([("TOKENOPS_DATA_DIR".to_owned(), data.display().to_string())]);
    let service = ServiceProcess::start(BINARY, &env).await;

    let check = tokio::process::Command::new(&python)
        .arg(PathBuf::from(SCRIPT))
        .args(["--base-url", &service.base_url])
        .arg("--data-dir")
        .arg(&data)
        .arg("--work-dir")
        .arg(dir.join("client"))
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), check)
        .await
        .expect("the client check finishes within two minutes")
        .unwrap_or_else(|e| panic!("running {python} {SCRIPT}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the generated client's check failed ({}):\n{stdout}\n{stderr}", output.status);
    assert!(stdout.contains("all checks passed"), "{stdout}\n{stderr}");

    drop(service);
    let _ = std::fs::remove_dir_all(&dir);
}
