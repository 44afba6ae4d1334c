//! The mail settings: where invitation mail goes (`TOKENOPS_MAIL_TRANSPORT`: the file outbox or
//! SMTP) and who sends it.

use super::redact::redact_url;
use super::sources::Reader;

/// Where invitation mail goes.
#[derive(Clone, PartialEq, Eq)]
pub enum MailSettings {
    /// One `.eml` file per message in `{data_dir}/outbox` (the default).
    File,
    /// An SMTP server: `TOKENOPS_SMTP_URL` (may carry a password; never printed).
    Smtp { url: String },
}

impl std::fmt::Debug for MailSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MailSettings::File => f.write_str("File"),
            MailSettings::Smtp { url } => write!(f, "Smtp({})", redact_url(url)),
        }
    }
}

pub(super) struct Mail {
    pub settings: MailSettings,
    /// The sender of invitation mail (RFC 5322 mailbox).
    pub from: String,
}

pub(super) fn read(r: &mut Reader) -> Mail {
    let from = r.text("TOKENOPS_MAIL_FROM").unwrap_or_else(|| "tokenops <no-reply@tokenops.local>".into());
    let smtp_url = r.text("TOKENOPS_SMTP_URL");
    let settings = match r.text("TOKENOPS_MAIL_TRANSPORT").as_deref() {
        None | Some("file") => MailSettings::File,
        Some("smtp") => match smtp_url {
            // Built only to check the URL and sender; it never sends, so its clock is unread.
            Some(url) => match tokenops_app::mail::SmtpTransport::new(
                &url,
                &from,
                std::sync::Arc::new(tokenops_app::clock::SystemClock),
            ) {
                Ok(_) => MailSettings::Smtp { url },
                Err(problem) => {
                    r.problems.push(format!("TOKENOPS_SMTP_URL={} / TOKENOPS_MAIL_FROM: {problem}", redact_url(&url)));
                    MailSettings::File
                }
            },
            None => {
                r.problems.push("TOKENOPS_SMTP_URL: required when TOKENOPS_MAIL_TRANSPORT=smtp".into());
                MailSettings::File
            }
        },
        Some(other) => {
            r.problems.push(format!("TOKENOPS_MAIL_TRANSPORT={other}: must be file or smtp"));
            MailSettings::File
        }
    };
    Mail { settings, from }
}

#[cfg(test)]
mod tests {
    use crate::config::MailSettings;
    use crate::config::tests::load;

    #[test]
    fn mail_goes_to_the_file_outbox_unless_smtp_is_configured() {
        assert_eq!(load(&[]).expect("valid").mail, MailSettings::File);
        let c = load(&[
            ("TOKENOPS_MAIL_TRANSPORT", "smtp"),
            ("TOKENOPS_SMTP_URL", "smtps://mailer:s3cret@smtp.bank.example:465"),
        ])
        .expect("valid");
        assert_eq!(c.mail, MailSettings::Smtp { url: "smtps://mailer:s3cret@smtp.bank.example:465".into() });
        assert!(!format!("{c:?}").contains("s3cret"), "the SMTP password is never printed");
        let e = load(&[("TOKENOPS_MAIL_TRANSPORT", "smtp")]).expect_err("no URL");
        assert!(e.to_string().contains("TOKENOPS_SMTP_URL: required"));
        let e = load(&[("TOKENOPS_MAIL_TRANSPORT", "smtp"), ("TOKENOPS_SMTP_URL", "ftp://u:s3cret@h")])
            .expect_err("bad URL");
        assert!(e.to_string().contains("TOKENOPS_SMTP_URL") && !e.to_string().contains("s3cret"), "{e}");
        let e = load(&[("TOKENOPS_MAIL_TRANSPORT", "pigeon")]).expect_err("unknown transport");
        assert!(e.to_string().contains("must be file or smtp"));
    }
}
