//! Invitation mail over SMTP: with `TOKENOPS_MAIL_TRANSPORT=smtp` the owner's invitation goes
//! to a real SMTP server (a minimal one this test runs on a local port), and a server that
//! refuses the message leaves the mail job to be retried rather than lost.

use reqwest::Method;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use uuid::Uuid;

/// What the server saw of one accepted message.
#[derive(Debug, Clone, Default)]
struct Received {
    mail_from: String,
    rcpt_to: Vec<String>,
    data: String,
}

/// A small SMTP server (RFC 5321 subset: EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT). With
/// `refuse_recipients` it answers 550 to every RCPT.
async fn smtp_server(refuse_recipients: bool) -> (u16, Arc<Mutex<Vec<Received>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let received = Arc::new(Mutex::new(Vec::new()));
    let store = received.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let store = store.clone();
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read).lines();
                let mut current = Received::default();
                write.write_all(b"220 test-smtp ready\r\n").await.ok();
                while let Ok(Some(line)) = lines.next_line().await {
                    let upper = line.to_ascii_uppercase();
                    let reply: &[u8] = if upper.starts_with("EHLO") {
                        b"250-test-smtp\r\n250 8BITMIME\r\n"
                    } else if upper.starts_with("HELO") || upper.starts_with("NOOP") {
                        b"250 ok\r\n"
                    } else if upper.starts_with("MAIL FROM:") {
                        current = Received { mail_from: line[10..].trim().to_owned(), ..Received::default() };
                        b"250 ok\r\n"
                    } else if upper.starts_with("RCPT TO:") {
                        if refuse_recipients {
                            b"550 mailbox unavailable\r\n"
                        } else {
                            current.rcpt_to.push(line[8..].trim().to_owned());
                            b"250 ok\r\n"
                        }
                    } else if upper.starts_with("DATA") {
                        write.write_all(b"354 end with <CRLF>.<CRLF>\r\n").await.ok();
                        let mut data = String::new();
                        while let Ok(Some(l)) = lines.next_line().await {
                            if l == "." {
                                break;
                            }
                            data.push_str(l.strip_prefix('.').unwrap_or(&l));
                            data.push('\n');
                        }
                        current.data = data;
                        store.lock().expect("lock").push(std::mem::take(&mut current));
                        b"250 queued\r\n"
                    } else if upper.starts_with("RSET") {
                        current = Received::default();
                        b"250 ok\r\n"
                    } else if upper.starts_with("QUIT") {
                        write.write_all(b"221 bye\r\n").await.ok();
                        break;
                    } else {
                        b"502 not implemented\r\n"
                    };
                    if write.write_all(reply).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, received)
}

async fn spawn_with_smtp(backend: Backend, port: u16) -> TestApp {
    let extra = BTreeMap::from([
        ("TOKENOPS_MAIL_TRANSPORT".to_owned(), "smtp".to_owned()),
        ("TOKENOPS_SMTP_URL".to_owned(), format!("smtp://127.0.0.1:{port}")),
        ("TOKENOPS_MAIL_FROM".to_owned(), "Bank Onboarding <onboarding@bank.example>".to_owned()),
    ]);
    TestApp::spawn_embedded(backend, extra).await
}

async fn create_organisation(app: &TestApp, email: &str) -> Reply {
    let operator = app.operator_token().await;
    let body = json!({ "name": "Bank of Mail", "owner": { "email": email, "firstName": "Mia", "lastName": "Mail" } });
    let request = app
        .raw(Method::POST, "/api/tenants")
        .header("API-Version", "1.0.0")
        .header("Idempotency-Key", Uuid::now_v7().to_string())
        .bearer_auth(operator)
        .json(&body);
    Reply::read(request.send().await.expect("request")).await
}

backends!(invitations_are_sent_over_smtp, a_refusing_smtp_server_leaves_the_mail_to_be_retried);

async fn invitations_are_sent_over_smtp(backend: Backend) {
    let (port, received) = smtp_server(false).await;
    let app = spawn_with_smtp(backend, port).await;
    create_organisation(&app, "mia@bank.example").await.expect(201);
    let report = app.drain_jobs().await;
    assert!(report.retried == 0 && report.dead == 0 && report.completed >= 1, "mail job failed: {report:?}");
    let messages = received.lock().expect("lock").clone();
    assert_eq!(messages.len(), 1, "one invitation: {messages:?}");
    let message = &messages[0];
    assert_eq!(message.mail_from, "<onboarding@bank.example>");
    assert_eq!(message.rcpt_to, ["<mia@bank.example>"]);
    assert!(message.data.contains("To: mia@bank.example"), "{}", message.data);
    assert!(message.data.contains("Subject: You are invited to Bank of Mail on tokenops"), "{}", message.data);
    let password_line = message.data.lines().find(|l| l.starts_with("Temporary password: "));
    assert!(password_line.is_some_and(|l| l.len() > "Temporary password: ".len() + 8), "{}", message.data);
    // Nothing was written to the file outbox.
    assert!(!app.db.dir().join("outbox").exists());
}

async fn a_refusing_smtp_server_leaves_the_mail_to_be_retried(backend: Backend) {
    let (port, received) = smtp_server(true).await;
    let app = spawn_with_smtp(backend, port).await;
    create_organisation(&app, "rita@bank.example").await.expect(201);
    let report = app.drain_jobs().await;
    assert!(report.retried >= 1 && report.completed == 0, "the refusal is a failed attempt: {report:?}");
    assert!(received.lock().expect("lock").is_empty());
    let waiting = app
        .db
        .count("jobs", "kind = 'mail.send' AND status = 'queued' AND attempts >= 1 AND last_error LIKE '%SMTP%'")
        .await;
    assert_eq!(waiting, 1, "the mail waits for its retry");
}
