//! The custody settings: who holds the wallets' keys (`TOKENOPS_CUSTODY`), and the remote
//! signer's URL and token.

use super::redact::redact_url;
use super::sources::Reader;

/// Who holds the wallets' keys.
#[derive(Clone, PartialEq, Eq)]
pub enum CustodySettings {
    /// The embedded keystore: keys sealed in the service's own store (the default).
    Embedded,
    /// A remote signer speaking `crates/tokenops-custody/PROTOCOL.md`; the bearer token is a
    /// secret (never printed).
    Remote { url: String, token: Option<String> },
}

impl std::fmt::Debug for CustodySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CustodySettings::Embedded => f.write_str("Embedded"),
            CustodySettings::Remote { url, .. } => write!(f, "Remote({})", redact_url(url)),
        }
    }
}

pub(super) fn read(r: &mut Reader) -> CustodySettings {
    let custody_url = r.text("TOKENOPS_CUSTODY_URL");
    match r.text("TOKENOPS_CUSTODY").as_deref() {
        None | Some("embedded") => CustodySettings::Embedded,
        Some("remote") => match custody_url {
            Some(url) if url.starts_with("https://") || url.starts_with("http://") => CustodySettings::Remote {
                url: url.trim_end_matches('/').to_owned(),
                token: r.text("TOKENOPS_CUSTODY_TOKEN"),
            },
            Some(url) => {
                r.problems
                    .push(format!("TOKENOPS_CUSTODY_URL={}: must start with https:// or http://", redact_url(&url)));
                CustodySettings::Embedded
            }
            None => {
                r.problems.push("TOKENOPS_CUSTODY_URL: required when TOKENOPS_CUSTODY=remote".into());
                CustodySettings::Embedded
            }
        },
        Some(other) => {
            r.problems.push(format!("TOKENOPS_CUSTODY={other}: must be embedded or remote"));
            CustodySettings::Embedded
        }
    }
}
