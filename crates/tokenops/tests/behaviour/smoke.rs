//! The kit's own smoke test: a customer registered over HTTP can be read back, on both stores.

use serde_json::json;
use tokenops_testkit::{Backend, TestApp, backends};

async fn a_registered_customer_can_be_read_back(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let created = app.post("/api/customers", &json!({ "customerRef": "c-1" })).await;
    created.expect(201);
    assert_eq!(created.header("location"), Some("/api/customers/c-1"));
    let read = app.get("/api/customers/c-1").await;
    read.expect(200);
    assert_eq!(read.body["customerRef"], "c-1");
    assert_eq!(read.body["status"], "ACTIVE");
}

backends!(a_registered_customer_can_be_read_back);
