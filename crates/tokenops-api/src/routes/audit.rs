//! `/api/audit/events`: search the audit log (paging style B, default sort occurredAt,desc), read
//! one record, and export the whole filtered log as CSV.

use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Serialize;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_domain::audit::{AuditFilter, AuditOutcome, AuditRecord, AuditSource};
use tokenops_domain::paging::{SortDirection, SortKey};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, AUDIT_SIZE, PageB, Style};
use crate::extract::{PathId, PathParam, QueryParams, TenantCall};
use crate::openapi::path_params;

pub const QUERY_MAX_LEN: usize = 128;

/// Sortable properties (API name → column).
const SORTABLE: &[(&str, &str)] = &[
    ("occurredAt", "occurred_at"),
    ("createdAt", "created_at"),
    ("action", "action"),
    ("category", "category"),
    ("source", "source"),
    ("actorId", "actor_id"),
    ("resourceType", "resource_type"),
    ("resourceId", "resource_id"),
    ("outcome", "outcome"),
];

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_audit_events))
        .routes(routes!(export_audit_events))
        .routes(routes!(get_audit_event))
        .routes(routes!(get_audit_chain_head))
}

/// The default order of the list and the export: newest first.
const NEWEST_FIRST: &[SortKey] = &[SortKey { column: "occurred_at", direction: SortDirection::Desc }];

/// The export's columns, in order: the record's fields as the list names them.
const EXPORT_COLUMNS: [&str; 19] = [
    "id",
    "occurredAt",
    "createdAt",
    "action",
    "category",
    "source",
    "actorId",
    "resourceType",
    "resourceId",
    "outcome",
    "requestId",
    "idempotencyKey",
    "httpStatus",
    "detail",
    "occurredAtMicros",
    "createdAtMicros",
    "chainSeq",
    "blockNumber",
    "recordHash",
];

/// `record` as one CSV row in [`EXPORT_COLUMNS`] order; `detail` as compact JSON, absent
/// values as empty cells.
fn push_export_row(out: &mut String, r: &AuditRecord) {
    let http_status = r.http_status.map(|s| s.to_string()).unwrap_or_default();
    let detail = if r.detail.is_null() { String::new() } else { r.detail.to_string() };
    let id = r.id.to_string();
    let (occurred, created) = (r.occurred_at.to_iso8601(), r.created_at.to_iso8601());
    let (occurred_micros, created_micros) =
        (r.occurred_at.as_micros().to_string(), r.created_at.as_micros().to_string());
    let (seq, block, hash) = match &r.seal {
        Some(seal) => (seal.chain_seq.to_string(), seal.block_number.to_string(), seal.record_hash.as_str()),
        None => (String::new(), String::new(), ""),
    };
    crate::csv::push_row(
        out,
        [
            id.as_str(),
            &occurred,
            &created,
            &r.action,
            &r.category,
            r.source.as_str(),
            r.actor_id.as_deref().unwrap_or(""),
            &r.resource_type,
            r.resource_id.as_deref().unwrap_or(""),
            r.outcome.as_str(),
            r.request_id.as_deref().unwrap_or(""),
            r.idempotency_key.as_deref().unwrap_or(""),
            &http_status,
            &detail,
            &occurred_micros,
            &created_micros,
            &seq,
            &block,
            hash,
        ],
    );
}

/// A page of audit records (style B).
pub type AuditEventPage = PageB<AuditEventOut>;

/// One audit record.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEventOut {
    pub id: uuid::Uuid,
    #[schema(value_type = String, format = DateTime)]
    pub occurred_at: String,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: String,
    /// Dotted verb, for example `customer.create`.
    pub action: String,
    pub category: String,
    /// API, WORKER or SYSTEM.
    pub source: String,
    pub actor_id: Option<String>,
    pub resource_type: String,
    pub resource_id: Option<String>,
    /// SUCCESS or FAILURE.
    pub outcome: String,
    pub request_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub http_status: Option<u16>,
    /// What changed, or why the attempt failed; null when the operation records nothing more.
    #[schema(value_type = Option<Object>, required = true)]
    pub detail: serde_json::Value,
}

impl From<&AuditRecord> for AuditEventOut {
    fn from(r: &AuditRecord) -> Self {
        Self {
            id: r.id,
            occurred_at: r.occurred_at.to_iso8601(),
            created_at: r.created_at.to_iso8601(),
            action: r.action.clone(),
            category: r.category.clone(),
            source: r.source.as_str().to_owned(),
            actor_id: r.actor_id.clone(),
            resource_type: r.resource_type.clone(),
            resource_id: r.resource_id.clone(),
            outcome: r.outcome.as_str().to_owned(),
            request_id: r.request_id.clone(),
            idempotency_key: r.idempotency_key.clone(),
            http_status: r.http_status,
            detail: r.detail.clone(),
        }
    }
}

fn filter(params: &QueryParams) -> Result<AuditFilter, Error> {
    let (occurred_from, occurred_to) = params.window_not_inverted("occurredFrom", "occurredTo")?;
    let query = params.one("query")?.map(str::to_owned);
    if query.as_ref().is_some_and(|q| q.chars().count() > QUERY_MAX_LEN) {
        return Err(Error::invalid_field("query", format!("must be at most {QUERY_MAX_LEN} characters")));
    }
    let text = |name: &str| params.one(name).map(|v| v.map(str::to_owned));
    let source = params.one_of("source", &AuditSource::ALL, AuditSource::as_str)?.map(|s| s.as_str().to_owned());
    let outcome = params.one_of("outcome", &AuditOutcome::ALL, AuditOutcome::as_str)?.map(|o| o.as_str().to_owned());
    Ok(AuditFilter {
        occurred_from,
        occurred_to,
        actor_ids: actor_ids(params.all("actorIds")),
        request_id: text("requestId")?,
        action: text("action")?,
        category: text("category")?,
        outcome,
        source,
        resource_type: text("resourceType")?,
        resource_id: text("resourceId")?,
        query,
    })
}

/// The actors asked for: each as given, and a UUID also in the form the service writes one
/// (a user's id, in either case as path ids are); a subject an external provider wrote in upper
/// case is still found as given.
fn actor_ids(given: Vec<String>) -> Vec<String> {
    let mut ids = Vec::with_capacity(given.len());
    for id in given {
        if let Some(uuid) = tokenops_domain::ids::canonical_uuid(&id).map(|u| u.to_string())
            && uuid != id
        {
            ids.push(uuid);
        }
        ids.push(id);
    }
    ids
}

/// The filters and sort of the audit search, which its export shares.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
struct AuditQuery {
    /// ISO 8601, inclusive
    #[param(rename = "occurredFrom", format = DateTime)]
    occurred_from: Option<String>,
    /// ISO 8601, exclusive; before occurredFrom is 400 (an inverted range), equal to it selects nothing
    #[param(rename = "occurredTo", format = DateTime)]
    occurred_to: Option<String>,
    /// Repeatable or comma-separated; a UUID in either case
    #[param(rename = "actorIds")]
    actor_ids: Option<Vec<String>>,
    #[param(rename = "requestId")]
    request_id: Option<String>,
    action: Option<String>,
    /// Beyond the spec's filters: the record's category (CUSTOMERS, TRANSACTIONS, …); another
    /// value selects nothing
    category: Option<String>,
    /// Beyond the spec's filters: SUCCESS or FAILURE (another value is 400)
    #[param(value_type = Option<AuditOutcome>)]
    outcome: Option<String>,
    /// API, WORKER or SYSTEM (another value is 400)
    #[param(value_type = Option<AuditSource>)]
    source: Option<String>,
    #[param(rename = "resourceType")]
    resource_type: Option<String>,
    #[param(rename = "resourceId")]
    resource_id: Option<String>,
    /// Case-insensitive prefix on identifier fields, at most 128 characters
    query: Option<String>,
    /// property or property,asc|desc; repeatable; default occurredAt,desc. Records equal in
    /// every property given are ordered by occurredAt, then id, in the direction of the last
    /// property given.
    sort: Option<Vec<String>>,
}

/// Search the audit log (paging style B).
#[utoipa::path(
    get, path = "/api/audit/events", tag = "audit", operation_id = "audit.events.list",
    params(
        AuditQuery,
        ("page" = Option<u64>, Query), ("size" = inline(Option<crate::openapi::AnyIntegerFromOne>), Query, description = "Default 20; below 1 is 400, above 100 is reduced to 100"),
    ),
    responses(
        (status = 200, description = "Style B page of audit records. The spec does not show the record's body: this service's fields are AuditEventOut's", body = AuditEventPage),
        crate::openapi::AuditQueryInvalid,
    )
)]
async fn list_audit_events(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let filter = filter(&params)?;
    let sort = paging::sort_keys(&params, SORTABLE, NEWEST_FIRST)?;
    paging::list(&params, AUDIT_SIZE, Style::B, async |page| {
        Ok(call.state.app.audit.list(call.scope.tenant, &filter, &sort, page).await?.map(|r| AuditEventOut::from(&r)))
    })
    .await
}

/// Export the whole filtered audit log as CSV.
#[utoipa::path(
    get, path = "/api/audit/events/export", tag = "audit", operation_id = "audit.events.export",
    description = "The whole filtered set, unpaged, newest first unless `sort` says otherwise (the same sort \
        properties as the list). RFC 4180 CSV with a header row and one column per field of AuditEventOut: \
        id, occurredAt, createdAt, action, category, source, actorId, resourceType, resourceId, outcome, \
        requestId, idempotencyKey, httpStatus, detail (compact JSON), then what verifying the sealed chain \
        needs (docs/audit.md): occurredAtMicros and createdAtMicros (the times in microseconds since the \
        epoch, as the chain hashes them), chainSeq, blockNumber and recordHash (empty while the record is \
        not sealed yet); an absent value is an empty cell. A cell starting with =, +, -, @, a tab or a \
        carriage return is written with a leading ' so that spreadsheets show it as text (OWASP CSV \
        injection), and so is a cell starting with ' itself: removing one leading ' from a cell that has one \
        gives the value back. `tokenops audit verify --export` checks an unfiltered export. The export covers the records that occurred before it began; \
        it is streamed from the store in batches, so memory stays flat whatever its size. Should the store fail \
        once rows are under way, the connection is closed without the final line break instead of ending \
        normally: a client that sees the transfer end early must not take the file as complete. `page` and \
        `size` are ignored.",
    params(AuditQuery),
    responses(
        (status = 200, description = "The filtered audit records as CSV", content_type = "text/csv", body = String),
        crate::openapi::AuditQueryInvalid,
    )
)]
async fn export_audit_events(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let filter = filter(&params)?;
    let sort = paging::sort_keys(&params, SORTABLE, NEWEST_FIRST)?;
    let mut export = call.state.app.audit.export(call.scope.tenant, &filter, &sort);
    // The first batch is read before answering, so that a store that cannot be read is an error
    // response, not a 200 that breaks off.
    let first = export.next_batch().await?;
    let mut head = String::new();
    crate::csv::push_row(&mut head, EXPORT_COLUMNS);
    if let Some(batch) = &first {
        batch.iter().for_each(|r| push_export_row(&mut head, r));
    }
    let rest = futures::stream::try_unfold(export, |mut export| async move {
        let Some(batch) = export.next_batch().await.map_err(|e| std::io::Error::other(e.to_string()))? else {
            return Ok(None);
        };
        let mut chunk = String::with_capacity(batch.len() * 256);
        batch.iter().for_each(|r| push_export_row(&mut chunk, r));
        Ok(Some((axum::body::Bytes::from(chunk), export)))
    });
    let body = futures::stream::once(async move { Ok::<_, std::io::Error>(axum::body::Bytes::from(head)) })
        .chain(if first.is_some() { rest.left_stream() } else { futures::stream::empty().right_stream() });
    Ok((
        [
            (axum::http::header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (axum::http::header::CONTENT_DISPOSITION, "attachment; filename=\"audit-events.csv\""),
        ],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}

/// Read one audit record.
#[utoipa::path(
    get, path = "/api/audit/events/{eventId}", tag = "audit", operation_id = "audit.events.get",
    params(path_params::EventId),
    responses(
        (status = 200, description = "The audit record", body = AuditEventOut),
        crate::openapi::NotAUuid<path_params::EventId>,
        (status = 404, description = "Not in the organisation", body = crate::openapi::ErrorBody),
    )
)]
async fn get_audit_event(call: TenantCall<PathId>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(id)| Ok(AuditEventOut::from(&app.audit.get(tenant, id).await?))).await
}

/// The signed head of the organisation's audit chain.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditChainHeadOut {
    /// The organisation's id: the chain's id.
    pub chain_id: uuid::Uuid,
    /// The latest sealed block, counting from 1.
    pub block_number: i64,
    /// Lower-case hex SHA-256 of that block (docs/audit.md).
    pub hash: String,
    /// Records sealed up to and including that block.
    pub record_count: i64,
    #[schema(value_type = String, format = DateTime)]
    pub sealed_at: String,
    /// Compact JWS (ES256, header typ `tokenops-audit-head+jws`) whose payload is this head with
    /// `iss`, the service's public URL; verify it with the key set at `jwksUri`. Only the
    /// signed payload is authoritative.
    pub signature: String,
    pub jwks_uri: String,
}

/// Read the signed head of the organisation's sealed audit chain.
#[utoipa::path(
    get, path = "/api/audit/chain/head", tag = "audit", operation_id = "audit.chain.head",
    description = "Beyond the spec. Audit records are sealed, in the order they were committed, into blocks whose \
        hash covers the previous block's hash and each record's canonical bytes; the sealer runs every \
        TOKENOPS_AUDIT_SEAL_MS. The head names the latest block and is signed with the platform key published \
        at /.well-known/webhook-jwks.json. Keep heads you fetch: `tokenops audit verify` checks an export or \
        the store against one. docs/audit.md specifies the byte forms.",
    responses(
        (status = 200, description = "The chain's signed head", body = AuditChainHeadOut),
        (status = 404, description = "Nothing of the organisation's audit log is sealed yet", body = crate::openapi::ErrorBody),
    )
)]
async fn get_audit_chain_head(call: TenantCall) -> ApiResult<Response> {
    let Some(signed) = call.state.app.audit_chain.head(Some(call.scope.tenant)).await? else {
        return Err(Error::not_found("Nothing of the audit log is sealed yet").into());
    };
    let head = signed.head;
    Ok(axum::Json(AuditChainHeadOut {
        chain_id: head.chain_id,
        block_number: head.block_number,
        hash: head.hash,
        record_count: head.record_count,
        sealed_at: head.sealed_at,
        signature: signed.signature,
        jwks_uri: format!("{}/.well-known/webhook-jwks.json", call.state.app.audit_chain.issuer()),
    })
    .into_response())
}
