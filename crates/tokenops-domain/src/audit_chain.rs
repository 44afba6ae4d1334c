//! The audit log's sealed chain: the canonical bytes of a record, the hash of a block over the
//! previous block's hash and its records' hashes, the chain's head, and the verifier that walks
//! a chain in order and names the first record or block that does not match. `docs/audit.md`
//! specifies the byte forms for third-party verifiers.

use crate::audit::AuditRecord;
use crate::{TenantId, Timestamp};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use uuid::Uuid;

/// The first bytes of every record's canonical form: the format and its version.
pub const RECORD_PREFIX: &[u8] = b"tokenops.audit.record.v1\n";
/// The first bytes of every block's hash input.
pub const BLOCK_PREFIX: &[u8] = b"tokenops.audit.block.v1\n";
/// The "previous hash" of block 1.
pub const GENESIS: [u8; 32] = [0; 32];

/// The chain a record belongs to: its organisation's id, or the nil UUID for the platform's
/// own records (those of no organisation).
pub fn chain_id(tenant: Option<TenantId>) -> Uuid {
    tenant.map_or(Uuid::nil(), TenantId::as_uuid)
}

/// The organisation whose chain `chain_id` is: the inverse of [`chain_id`].
pub fn chain_tenant(chain_id: Uuid) -> Option<TenantId> {
    (!chain_id.is_nil()).then_some(TenantId(chain_id))
}

/// JSON with every object's members sorted by key (byte order of their UTF-8), no white space,
/// strings escaped as JSON's grammar requires and nothing more (serde_json's and Python's
/// `json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`'s escaping). The
/// stores keep `detail` in different key orders (PostgreSQL's `jsonb` reorders), so the hash
/// takes this form, never the stored text.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    push_json(&mut out, value);
    out
}

fn push_json(out: &mut String, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                push_json(out, member);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_json(out, item);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The record's canonical bytes: [`RECORD_PREFIX`], then fifteen fields in a fixed order, each
/// `0x00` when absent or `0x01`, its length as a 4-byte big-endian integer and its UTF-8 bytes.
/// Ids are lower-case hyphenated UUIDs, times decimal microseconds since the Unix epoch, the
/// HTTP status decimal, `detail` [`canonical_json`]. The seal itself is not part of it.
pub fn canonical_bytes(r: &AuditRecord) -> Vec<u8> {
    let tenant = r.tenant_id.map(|t| t.as_uuid().to_string());
    let http_status = r.http_status.map(|s| s.to_string());
    let fields: [Option<String>; 15] = [
        tenant,
        Some(r.id.to_string()),
        Some(r.occurred_at.as_micros().to_string()),
        Some(r.created_at.as_micros().to_string()),
        Some(r.action.clone()),
        Some(r.category.clone()),
        Some(r.source.as_str().to_owned()),
        r.actor_id.clone(),
        Some(r.resource_type.clone()),
        r.resource_id.clone(),
        Some(r.outcome.as_str().to_owned()),
        r.request_id.clone(),
        r.idempotency_key.clone(),
        http_status,
        Some(canonical_json(&r.detail)),
    ];
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(RECORD_PREFIX);
    for field in fields {
        match field {
            None => out.push(0),
            Some(text) => {
                out.push(1);
                // A field longer than 4 GiB cannot be stored; saturating keeps the form total.
                out.extend_from_slice(&u32::try_from(text.len()).unwrap_or(u32::MAX).to_be_bytes());
                out.extend_from_slice(text.as_bytes());
            }
        }
    }
    out
}

/// SHA-256 of [`canonical_bytes`].
pub fn record_hash(r: &AuditRecord) -> [u8; 32] {
    Sha256::digest(canonical_bytes(r)).into()
}

/// SHA-256 of [`BLOCK_PREFIX`], the chain id's 16 bytes, the block number (8 bytes, big-endian),
/// the previous block's hash (32 bytes; [`GENESIS`] for block 1), the record count (4 bytes,
/// big-endian) and each record's hash (32 bytes) in chain order.
pub fn block_hash(chain: Uuid, number: i64, previous: &[u8; 32], records: &[[u8; 32]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(BLOCK_PREFIX);
    hasher.update(chain.as_bytes());
    hasher.update(number.to_be_bytes());
    hasher.update(previous);
    hasher.update(u32::try_from(records.len()).unwrap_or(u32::MAX).to_be_bytes());
    for hash in records {
        hasher.update(hash);
    }
    hasher.finalize().into()
}

pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn from_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// One sealed block as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditBlock {
    pub chain_id: Uuid,
    pub number: i64,
    /// Hex; 64 zeros for block 1.
    pub previous_hash: String,
    pub hash: String,
    /// The chain position of its first record.
    pub first_seq: i64,
    pub record_count: i64,
    pub sealed_at: Timestamp,
    /// The compact JWS of the chain's head as of this block.
    pub head_signature: String,
}

impl AuditBlock {
    /// How many records the chain holds up to and including this block.
    pub fn chain_records(&self) -> i64 {
        self.first_seq + self.record_count - 1
    }
}

/// What a chain's head says: the signed statement a verifier checks a chain against.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainHead {
    pub chain_id: Uuid,
    pub block_number: i64,
    /// Lower-case hex of the block's hash.
    pub hash: String,
    /// Records in the chain up to and including that block.
    pub record_count: i64,
    /// ISO 8601 (UTC, milliseconds).
    pub sealed_at: String,
}

/// The first thing in a chain that does not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// A record whose content is not what was sealed, or that is missing (`id` is `None`).
    Record { seq: i64, block: i64, id: Option<Uuid>, reason: String },
    /// A block whose hash is not the one stored or the head names.
    Block { number: i64, reason: String },
    /// The chain does not end where the head says.
    Head { reason: String },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Record { seq, block, id: Some(id), reason } => {
                write!(f, "record {id} (chain position {seq}, block {block}): {reason}")
            }
            Mismatch::Record { seq, block, id: None, reason } => {
                write!(f, "record at chain position {seq} (block {block}): {reason}")
            }
            Mismatch::Block { number, reason } => write!(f, "block {number}: {reason}"),
            Mismatch::Head { reason } => write!(f, "head: {reason}"),
        }
    }
}

/// What a successful verification covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub blocks: i64,
    pub records: i64,
    /// Sealed records after the head's block (sealed after the head was taken): not checked.
    pub beyond_head: i64,
}

/// Walks one chain's sealed records in chain order ([`ChainVerifier::push`]) and checks each
/// record's hash, each block's hash (and, when given, the stored block hashes), and at
/// [`ChainVerifier::finish`] that the chain ends exactly at the head.
pub struct ChainVerifier {
    chain: Uuid,
    head: ChainHead,
    stored_blocks: BTreeMap<i64, String>,
    next_seq: i64,
    block: i64,
    previous: [u8; 32],
    hashes: Vec<[u8; 32]>,
    blocks: i64,
    beyond_head: i64,
}

impl ChainVerifier {
    pub fn new(head: ChainHead) -> Self {
        Self {
            chain: head.chain_id,
            head,
            stored_blocks: BTreeMap::new(),
            next_seq: 1,
            block: 0,
            previous: GENESIS,
            hashes: Vec::new(),
            blocks: 0,
            beyond_head: 0,
        }
    }

    /// Also check each block's hash against the one stored for it (number → hex).
    pub fn with_stored_blocks(mut self, blocks: BTreeMap<i64, String>) -> Self {
        self.stored_blocks = blocks;
        self
    }

    /// The next sealed record in chain order; an unsealed one is refused.
    pub fn push(&mut self, record: &AuditRecord) -> Result<(), Mismatch> {
        let Some(seal) = &record.seal else {
            return Err(Mismatch::Record {
                seq: self.next_seq,
                block: self.block,
                id: Some(record.id),
                reason: "it is not sealed but stands among sealed records".into(),
            });
        };
        if seal.block_number > self.head.block_number {
            self.beyond_head += 1;
            return Ok(());
        }
        if seal.chain_seq != self.next_seq {
            let reason = if seal.chain_seq > self.next_seq {
                format!("missing (the next record present is at position {})", seal.chain_seq)
            } else {
                format!("position {} appears again", seal.chain_seq)
            };
            return Err(Mismatch::Record { seq: self.next_seq, block: self.block.max(1), id: None, reason });
        }
        if seal.block_number == self.block + 1 {
            self.close_block()?;
            self.block = seal.block_number;
        } else if seal.block_number != self.block {
            return Err(Mismatch::Block {
                number: self.block + 1,
                reason: format!("missing (record {} names block {})", record.id, seal.block_number),
            });
        }
        let hash = record_hash(record);
        if to_hex(&hash) != seal.record_hash {
            return Err(Mismatch::Record {
                seq: seal.chain_seq,
                block: seal.block_number,
                id: Some(record.id),
                reason: "its content does not match the hash it was sealed with".into(),
            });
        }
        self.hashes.push(hash);
        self.next_seq += 1;
        Ok(())
    }

    fn close_block(&mut self) -> Result<(), Mismatch> {
        if self.block == 0 {
            return Ok(());
        }
        let hash = block_hash(self.chain, self.block, &self.previous, &self.hashes);
        if let Some(stored) = self.stored_blocks.get(&self.block)
            && *stored != to_hex(&hash)
        {
            return Err(Mismatch::Block {
                number: self.block,
                reason: "its records do not hash to the stored block hash (a record was changed along with its \
                         record hash, or removed)"
                    .into(),
            });
        }
        self.previous = hash;
        self.hashes.clear();
        self.blocks += 1;
        Ok(())
    }

    pub fn finish(mut self) -> Result<Verified, Mismatch> {
        self.close_block()?;
        let records = self.next_seq - 1;
        if self.block != self.head.block_number {
            return Err(Mismatch::Head {
                reason: format!(
                    "the chain ends at block {} but the head names block {}",
                    self.block, self.head.block_number
                ),
            });
        }
        if to_hex(&self.previous) != self.head.hash {
            return Err(Mismatch::Head {
                reason: format!("block {}'s hash does not match the signed head's", self.block),
            });
        }
        if records != self.head.record_count {
            return Err(Mismatch::Head {
                reason: format!("the chain holds {records} records but the head says {}", self.head.record_count),
            });
        }
        Ok(Verified { blocks: self.blocks, records, beyond_head: self.beyond_head })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditOutcome, AuditSeal, AuditSource};
    use serde_json::json;

    fn record(n: u128) -> AuditRecord {
        AuditRecord {
            id: Uuid::from_u128(n),
            tenant_id: Some(TenantId(Uuid::from_u128(7))),
            occurred_at: Timestamp::from_micros(1_700_000_000_000_000 + n as i64),
            created_at: Timestamp::from_micros(1_700_000_000_000_000 + n as i64),
            action: "customer.create".into(),
            category: "CUSTOMERS".into(),
            source: AuditSource::Api,
            actor_id: Some("user-1".into()),
            resource_type: "customer".into(),
            resource_id: Some(format!("c-{n}")),
            outcome: AuditOutcome::Success,
            request_id: None,
            idempotency_key: None,
            http_status: Some(201),
            detail: json!({"b": 1, "a": [true, null, "x\u{1}"]}),
            seal: None,
        }
    }

    /// Seals `records` into blocks of `per_block` as the sealer does, returning them and the head.
    fn sealed(mut records: Vec<AuditRecord>, per_block: usize) -> (Vec<AuditRecord>, ChainHead) {
        let chain = Uuid::from_u128(7);
        let mut previous = GENESIS;
        let mut number = 0;
        for (i, chunk) in records.chunks_mut(per_block).enumerate() {
            number = i as i64 + 1;
            let mut hashes = Vec::new();
            for (j, r) in chunk.iter_mut().enumerate() {
                let hash = record_hash(r);
                hashes.push(hash);
                r.seal = Some(AuditSeal {
                    chain_seq: (i * per_block + j + 1) as i64,
                    block_number: number,
                    record_hash: to_hex(&hash),
                });
            }
            previous = block_hash(chain, number, &previous, &hashes);
        }
        let count = records.len() as i64;
        let head = ChainHead {
            chain_id: chain,
            block_number: number,
            hash: to_hex(&previous),
            record_count: count,
            sealed_at: String::new(),
        };
        (records, head)
    }

    fn verify(records: &[AuditRecord], head: &ChainHead) -> Result<Verified, Mismatch> {
        let mut verifier = ChainVerifier::new(head.clone());
        for r in records {
            verifier.push(r)?;
        }
        verifier.finish()
    }

    #[test]
    fn canonical_json_sorts_members_and_drops_white_space() {
        let v: Value =
            serde_json::from_str(r#"{ "z": 1, "a": {"d": "é\n", "c": [1.5, -2]}, "B": null }"#).expect("JSON");
        assert_eq!(canonical_json(&v), r#"{"B":null,"a":{"c":[1.5,-2],"d":"é\n"},"z":1}"#);
    }

    #[test]
    fn canonical_bytes_are_length_prefixed_fields_in_a_fixed_order() {
        let bytes = canonical_bytes(&record(1));
        assert!(bytes.starts_with(RECORD_PREFIX));
        let rest = &bytes[RECORD_PREFIX.len()..];
        assert_eq!(rest[0], 1);
        assert_eq!(&rest[1..5], &36u32.to_be_bytes());
        assert_eq!(&rest[5..41], b"00000000-0000-0000-0000-000000000007");
        // A record hashes the same whatever order its detail's members were stored in.
        let mut reordered = record(1);
        reordered.detail = json!({"a": [true, null, "x\u{1}"], "b": 1});
        assert_eq!(record_hash(&reordered), record_hash(&record(1)));
    }

    #[test]
    fn an_untouched_chain_verifies() {
        let (records, head) = sealed((1..=7).map(record).collect(), 3);
        assert_eq!(verify(&records, &head), Ok(Verified { blocks: 3, records: 7, beyond_head: 0 }));
    }

    #[test]
    fn a_changed_record_is_named() {
        let (mut records, head) = sealed((1..=7).map(record).collect(), 3);
        records[4].action = "customer.delete".into();
        match verify(&records, &head) {
            Err(Mismatch::Record { seq: 5, block: 2, id: Some(id), .. }) => assert_eq!(id, Uuid::from_u128(5)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_record_changed_with_its_hash_breaks_the_head_or_its_stored_block() {
        let (mut records, head) = sealed((1..=7).map(record).collect(), 3);
        records[4].action = "customer.delete".into();
        let rehashed = to_hex(&record_hash(&records[4]));
        if let Some(seal) = records[4].seal.as_mut() {
            seal.record_hash = rehashed;
        }
        assert!(matches!(verify(&records, &head), Err(Mismatch::Head { .. })));
        let (untouched, _) = sealed((1..=7).map(record).collect(), 3);
        let mut stored = BTreeMap::new();
        let mut previous = GENESIS;
        for (n, chunk) in untouched.chunks(3).enumerate() {
            let hashes: Vec<_> = chunk.iter().map(record_hash).collect();
            previous = block_hash(Uuid::from_u128(7), n as i64 + 1, &previous, &hashes);
            stored.insert(n as i64 + 1, to_hex(&previous));
        }
        let mut verifier = ChainVerifier::new(head).with_stored_blocks(stored);
        let outcome = records.iter().try_for_each(|r| verifier.push(r)).and_then(|()| verifier.finish().map(|_| ()));
        assert!(matches!(outcome, Err(Mismatch::Block { number: 2, .. })), "{outcome:?}");
    }

    #[test]
    fn a_removed_record_is_named_by_its_position() {
        let (mut records, head) = sealed((1..=7).map(record).collect(), 3);
        records.remove(3);
        assert!(matches!(verify(&records, &head), Err(Mismatch::Record { seq: 4, id: None, .. })));
        let (mut records, head) = sealed((1..=7).map(record).collect(), 3);
        records.pop();
        assert!(matches!(verify(&records, &head), Err(Mismatch::Head { .. })));
    }

    #[test]
    fn records_sealed_after_an_older_head_are_left_out() {
        let (records, _) = sealed((1..=7).map(record).collect(), 3);
        let (_, older) = sealed((1..=6).map(record).collect(), 3);
        assert_eq!(verify(&records, &older), Ok(Verified { blocks: 2, records: 6, beyond_head: 1 }));
    }
}
