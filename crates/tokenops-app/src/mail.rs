//! The mail outbox: messages are enqueued as durable `mail.send` jobs in the transaction of the
//! write that causes them (an invitation commits with its mail, or neither), and a transport
//! delivers them. Bodies can carry a temporary password, so the job payload is sealed under the
//! master key; the default file transport writes one RFC 5322 `.eml` per message, named by its
//! job, so a rerun after a crash rewrites the same file instead of sending twice.

use crate::clock::Clock;
use crate::jobs::{Finished, JobContext, JobError, JobHandler, kinds};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use tokenops_identity::Sealer;
use tokenops_store::{Job, Store};

/// A plain-text message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailMessage {
    pub to: String,
    pub subject: String,
    pub body: String,
}

/// Associated data binding a sealed message to its purpose.
const SEAL_AAD: &[u8] = b"tokenops mail v1";

/// The payload of a `mail.send` job: the message, sealed.
pub fn job_payload(sealer: &Sealer, message: &MailMessage) -> Result<serde_json::Value, serde_json::Error> {
    let plain = serde_json::to_vec(message)?;
    Ok(serde_json::json!({ "sealed": sealer.seal(&plain, SEAL_AAD) }))
}

/// Where mail goes.
#[async_trait]
pub trait MailTransport: Send + Sync + 'static {
    /// Delivers `message`; `message_id` is stable across retries of the same job.
    async fn send(&self, message_id: &str, message: &MailMessage) -> Result<(), String>;
}

/// Writes each message as `{dir}/{message_id}.eml`.
#[derive(Clone)]
pub struct FileTransport {
    pub dir: PathBuf,
    pub from: String,
    /// Dates each message (its `Date` header): the service's clock.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for FileTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileTransport").field("dir", &self.dir).field("from", &self.from).finish_non_exhaustive()
    }
}

impl FileTransport {
    fn render(&self, message_id: &str, message: &MailMessage) -> String {
        let date =
            self.clock.now().to_datetime().format(&time::format_description::well_known::Rfc2822).unwrap_or_default();
        // Headers cannot contain line breaks: a recipient or subject with one is cut there.
        let one_line = |s: &str| s.lines().next().unwrap_or("").to_owned();
        format!(
            "From: {}\r\nTo: {}\r\nSubject: {}\r\nDate: {date}\r\nMessage-ID: <{message_id}@tokenops>\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n{}\r\n",
            one_line(&self.from),
            one_line(&message.to),
            one_line(&message.subject),
            message.body.replace('\n', "\r\n"),
        )
    }
}

#[async_trait]
impl MailTransport for FileTransport {
    async fn send(&self, message_id: &str, message: &MailMessage) -> Result<(), String> {
        let dir = self.dir.clone();
        let path = self.dir.join(format!("{message_id}.eml"));
        let partial = self.dir.join(format!(".{message_id}.eml.partial"));
        let text = self.render(message_id, message);
        // Messages can carry temporary passwords: owner-only files in an owner-only folder,
        // written whole then renamed so a reader never sees half a message.
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            use std::io::Write;
            let mut dirs = std::fs::DirBuilder::new();
            dirs.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut dirs, 0o700);
            dirs.create(&dir)?;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(&partial)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&partial, &path)
        })
        .await
        .map_err(|e| format!("writing mail: {e}"))?
        .map_err(|e| format!("writing mail: {e}"))
    }
}

/// `mail.send`: opens the sealed message and hands it to the transport.
pub struct SendMail {
    pub store: Arc<dyn Store>,
    pub sealer: Arc<Sealer>,
    pub transport: Arc<dyn MailTransport>,
}

#[async_trait]
impl JobHandler for SendMail {
    fn kind(&self) -> &'static str {
        kinds::MAIL_SEND
    }

    async fn run(&self, job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let sealed = job
            .payload
            .get("sealed")
            .and_then(|v| v.as_str())
            .ok_or_else(|| JobError::Permanent("mail job without a sealed message".into()))?;
        let plain = self
            .sealer
            .open(sealed, SEAL_AAD)
            .map_err(|_| JobError::Permanent("the mail cannot be opened with this master key".into()))?;
        let message: MailMessage =
            serde_json::from_slice(&plain).map_err(|e| JobError::Permanent(format!("mail message: {e}")))?;
        self.transport.send(&job.id.to_string(), &message).await.map_err(JobError::Retry)?;
        ctx.finish(self.store.write().await?).await
    }
}

/// Sends each message to an SMTP server: `smtps://` (implicit TLS), `smtp://…?tls=required`
/// (STARTTLS or nothing), `?tls=opportunistic`, or plain `smtp://` for a local relay;
/// credentials in the URL's user info.
/// The server is trusted to deliver; a refusal or an unreachable server makes the job retry.
pub struct SmtpTransport {
    transport: lettre::AsyncSmtpTransport<lettre::Tokio1Executor>,
    from: lettre::message::Mailbox,
    /// Dates each message (its `Date` header, which lettre would otherwise take from the system).
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SmtpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The transport holds the SMTP password: never printed.
        f.debug_struct("SmtpTransport").field("from", &self.from.to_string()).finish_non_exhaustive()
    }
}

impl SmtpTransport {
    /// `url`: `smtps://[user:password@]host[:port]` or `smtp://…[?tls=required]`; `from` is an
    /// RFC 5322 mailbox (`tokenops <no-reply@bank.example>`). Errors never echo the URL, which
    /// may carry a password. `clock` dates the messages.
    pub fn new(url: &str, from: &str, clock: Arc<dyn Clock>) -> Result<Self, String> {
        let transport = lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::from_url(url)
            .map_err(|e| format!("not a usable SMTP URL ({})", e.to_string().split(':').next().unwrap_or("invalid")))?
            .timeout(Some(std::time::Duration::from_secs(30)))
            .build();
        let from = from.parse().map_err(|_| "not an email address with an optional display name".to_owned())?;
        Ok(Self { transport, from, clock })
    }
}

#[async_trait]
impl MailTransport for SmtpTransport {
    async fn send(&self, message_id: &str, message: &MailMessage) -> Result<(), String> {
        use lettre::AsyncTransport;
        let to: lettre::message::Mailbox =
            message.to.parse().map_err(|e| format!("recipient {:?}: {e}", message.to))?;
        let email = lettre::Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(message.subject.clone())
            .message_id(Some(format!("<{message_id}@tokenops>")))
            .date(self.clock.now().to_datetime().into())
            .header(lettre::message::header::ContentType::TEXT_PLAIN)
            .body(message.body.clone())
            .map_err(|e| format!("building the message: {e}"))?;
        self.transport.send(email).await.map(|_| ()).map_err(|e| format!("SMTP: {e}"))
    }
}
