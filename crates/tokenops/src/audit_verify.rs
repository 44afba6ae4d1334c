//! `tokenops audit verify`: checks an organisation's sealed audit chain, from a CSV export or from
//! the store, against a signed head, and names the first record or block that does not match.

use anyhow::{Context, bail};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use tokenops_app::App;
use tokenops_app::audit_chain::{HeadClaims, open_head};
use tokenops_domain::audit::{AuditOutcome, AuditRecord, AuditSeal, AuditSource};
use tokenops_domain::audit_chain::{ChainHead, ChainVerifier, Mismatch, Verified};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

/// What a verification found.
#[derive(Debug)]
pub enum Outcome {
    Verifies { head: ChainHead, verified: Verified, unsealed: u64 },
    Mismatch(Mismatch),
}

impl Outcome {
    /// The line the command prints.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Verifies { head, verified, unsealed } => format!(
                "the chain verifies: {} records in {} blocks up to block {} (hash {}, sealed at {}); {} records not \
                 sealed yet; {} sealed after this head, not checked",
                verified.records,
                verified.blocks,
                head.block_number,
                head.hash,
                head.sealed_at,
                unsealed,
                verified.beyond_head
            ),
            Outcome::Mismatch(mismatch) => format!("the chain does not verify: {mismatch}"),
        }
    }
}

/// A head file: the JSON `GET /api/audit/chain/head` answers (its `signature` is what counts),
/// or the compact JWS alone. The head is taken from the signed payload once it verifies.
pub fn read_head(path: &Path, jwks: &Value) -> anyhow::Result<HeadClaims> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the head {}", path.display()))?;
    let text = text.trim();
    let jws = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(head)) => head
            .get("signature")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .context("the head file has no signature")?,
        _ => text.to_owned(),
    };
    open_head(&jws, jwks).map_err(anyhow::Error::msg)
}

pub fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// Checks an unfiltered CSV export of one organisation's audit log against `head`.
pub fn verify_export(path: &Path, head: ChainHead) -> anyhow::Result<Outcome> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the export {}", path.display()))?;
    let mut rows = parse_csv(&text, RecordEnds::CrlfOrLf)?.into_iter();
    let header = rows.next().context("the export is empty")?;
    let columns: HashMap<&str, usize> = header.iter().enumerate().map(|(i, name)| (name.as_str(), i)).collect();
    let tenant = (!head.chain_id.is_nil()).then_some(TenantId(head.chain_id));
    let mut sealed = Vec::new();
    let mut unsealed = 0u64;
    for (line, row) in rows.enumerate() {
        let record = export_record(&columns, &row, tenant)
            .with_context(|| format!("the export's record on data line {}", line + 1))?;
        if record.seal.is_some() {
            sealed.push(record);
        } else {
            unsealed += 1;
        }
    }
    sealed.sort_by_key(|r| r.seal.as_ref().map_or(0, |s| s.chain_seq));
    let mut verifier = ChainVerifier::new(head.clone());
    for record in &sealed {
        if let Err(mismatch) = verifier.push(record) {
            return Ok(Outcome::Mismatch(mismatch));
        }
    }
    Ok(match verifier.finish() {
        Ok(verified) => Outcome::Verifies { head, verified, unsealed },
        Err(mismatch) => Outcome::Mismatch(mismatch),
    })
}

/// Checks the stored chain of `chain` (an organisation, or `None` for the platform's records)
/// against `head`, or else against the stored head once its signature checks out.
pub async fn verify_store(app: &App, chain: Option<TenantId>, head: Option<ChainHead>) -> anyhow::Result<Outcome> {
    let shown = match &head {
        Some(head) => head.clone(),
        None => app.audit_chain.head(chain).await?.context("nothing of this chain is sealed yet")?.head,
    };
    Ok(match app.audit_chain.verify(chain, head).await? {
        Ok(outcome) => Outcome::Verifies { head: shown, verified: outcome.verified, unsealed: outcome.unsealed },
        Err(mismatch) => Outcome::Mismatch(mismatch),
    })
}

/// One export row as the record it stands for. The export writes a cell that starts with `'`
/// with one more in front, so one leading `'` is removed from any cell that has one.
fn export_record(
    columns: &HashMap<&str, usize>,
    row: &[String],
    tenant: Option<TenantId>,
) -> anyhow::Result<AuditRecord> {
    let cell = |name: &str| -> anyhow::Result<&str> {
        let index = *columns.get(name).with_context(|| format!("the export has no {name} column"))?;
        let value = row.get(index).map(String::as_str).unwrap_or("");
        Ok(value.strip_prefix('\'').unwrap_or(value))
    };
    let optional = |name: &str| -> anyhow::Result<Option<String>> {
        let value = cell(name)?;
        Ok((!value.is_empty()).then(|| value.to_owned()))
    };
    let micros = |name: &str| -> anyhow::Result<Timestamp> {
        Ok(Timestamp::from_micros(cell(name)?.parse().with_context(|| format!("{name} is not an integer"))?))
    };
    let detail = cell("detail")?;
    let seal = match (optional("chainSeq")?, optional("blockNumber")?, optional("recordHash")?) {
        (Some(seq), Some(block), Some(hash)) => Some(AuditSeal {
            chain_seq: seq.parse().context("chainSeq is not an integer")?,
            block_number: block.parse().context("blockNumber is not an integer")?,
            record_hash: hash,
        }),
        _ => None,
    };
    Ok(AuditRecord {
        id: Uuid::parse_str(cell("id")?).context("id is not a UUID")?,
        tenant_id: tenant,
        occurred_at: micros("occurredAtMicros")?,
        created_at: micros("createdAtMicros")?,
        action: cell("action")?.to_owned(),
        category: cell("category")?.to_owned(),
        source: AuditSource::parse(cell("source")?).context("source is not API, WORKER or SYSTEM")?,
        actor_id: optional("actorId")?,
        resource_type: cell("resourceType")?.to_owned(),
        resource_id: optional("resourceId")?,
        outcome: AuditOutcome::parse(cell("outcome")?).context("outcome is not SUCCESS or FAILURE")?,
        request_id: optional("requestId")?,
        idempotency_key: optional("idempotencyKey")?,
        http_status: optional("httpStatus")?.map(|s| s.parse()).transpose().context("httpStatus")?,
        detail: if detail.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(detail).context("detail is not JSON")?
        },
        seal,
    })
}

/// How the records of a CSV text may end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordEnds {
    /// CRLF only, as RFC 4180 and the service's exports write them.
    Crlf,
    /// CRLF or LF: an export a person may have saved again with another editor.
    CrlfOrLf,
}

/// RFC 4180: records end as `ends` allows; a quoted cell may hold commas, line breaks and
/// doubled quotes.
pub fn parse_csv(text: &str, ends: RecordEnds) -> anyhow::Result<Vec<Vec<String>>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => cell.push(c),
            (false, '"') if cell.is_empty() => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut cell)),
            (false, '\r') if chars.peek() == Some(&'\n') => {
                chars.next();
                row.push(std::mem::take(&mut cell));
                rows.push(std::mem::take(&mut row));
            }
            (false, '\r') if ends == RecordEnds::Crlf => bail!("a CR outside a quoted cell ends no record"),
            (false, '\n') if ends == RecordEnds::Crlf => bail!("a record ends with LF rather than CRLF"),
            (false, '\n') => {
                row.push(std::mem::take(&mut cell));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => cell.push(c),
        }
    }
    if quoted {
        bail!("the export ends inside a quoted cell: it was cut short");
    }
    if !cell.is_empty() || !row.is_empty() {
        bail!("the export's last line has no line end: it was cut short");
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_cells_with_quotes_commas_and_line_breaks_parse_back() {
        for ends in [RecordEnds::Crlf, RecordEnds::CrlfOrLf] {
            let rows = parse_csv("a,\"b,\"\"c\"\"\",\"x\r\ny\"\r\n,,\r\n", ends).expect("CSV");
            assert_eq!(rows, vec![vec!["a", "b,\"c\"", "x\r\ny"], vec!["", "", ""]]);
            assert!(parse_csv("a,b", ends).is_err(), "a cut-short export is refused");
        }
        assert_eq!(parse_csv("a\nb\r\n", RecordEnds::CrlfOrLf).expect("LF"), vec![vec!["a"], vec!["b"]]);
        assert!(parse_csv("a\nb\r\n", RecordEnds::Crlf).is_err(), "LF where CRLF is required");
        assert!(parse_csv("a\rb\r\n", RecordEnds::Crlf).is_err(), "a bare CR where CRLF is required");
    }
}
