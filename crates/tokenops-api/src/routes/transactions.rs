//! `/api/transactions`: submit a token operation (202), read one, list them (style A, or style
//! D with limit/cursor; newest first) and list breaks; `/api/locks/{lockId}` and
//! `/api/accounts/{accountRef}/locks` show locks.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::operations::{BreakOut, LockOut, OperationOut, SUBMIT, Submission};
use tokenops_app::write::WriteResponse;
use tokenops_domain::account::AccountRef;
use tokenops_domain::operation::{
    BreakFilter, BreakReason, LockStatus, Operation, OperationFilter, OperationState, TxType,
};
use tokenops_domain::paging::KeysetPosition;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, CursorRequest, PageA, PageD, STRICT_SIZE, Style};
use crate::extract::{JsonBody, PathId, PathParam, PathText, QueryParams, TenantCall};
use crate::openapi::path_params;
use crate::write::{self, Reply, RequiredKeyWrite, Written};

const ENDPOINT: &str = "transactions.list";

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(submit_transaction, list_transactions))
        .routes(routes!(list_breaks))
        .routes(routes!(get_transaction))
        .routes(routes!(get_lock))
        .routes(routes!(list_account_locks))
}

/// A page of operations in style A.
pub type OperationPageA = PageA<OperationOut>;
/// A page of operations in style D.
pub type OperationPageD = PageD<OperationOut>;
/// A page of breaks (style A).
pub type BreakPage = PageA<BreakOut>;
/// A page of locks (style A).
pub type LockPage = PageA<LockOut>;

/// The operations list: style A by default, style D when `limit` or `cursor` is given.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum OperationList {
    Offset(OperationPageA),
    Keyset(OperationPageD),
}

/// Body of `POST /api/transactions`: the parser of a submission's shape (each field a string
/// when present, `params` any JSON value, nothing else). Which fields a type needs, and what
/// their values must be, are the operation rules of `app::operations`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransactionIn {
    /// TRANSFER, LOCK, RELEASE, CANCEL, MINT or BURN.
    #[schema(value_type = TxType, required = true)]
    pub tx_type: Option<String>,
    /// ISO 4217 code with an ACTIVE contract (not on RELEASE or CANCEL).
    pub asset_id: Option<String>,
    /// The originating account (not on RELEASE or CANCEL).
    pub account_ref: Option<String>,
    /// TRANSFER (required) or LOCK (optional: the lock's payee).
    pub counterparty_ref: Option<String>,
    /// Positive decimal string, no finer than the currency's minor unit, at most 2^63 − 1 minor
    /// units (`"92233720368547758.07"` EUR; 400 above, a bound the spec does not name: the
    /// service keeps amounts in 64 bits). Not on RELEASE or CANCEL.
    #[schema(example = "125.00")]
    pub amount: Option<String>,
    /// Scalars only. `lockId` on RELEASE and CANCEL; `expiresAt` (ISO 8601) optional on LOCK.
    #[schema(value_type = Option<Object>)]
    pub params: Option<serde_json::Value>,
}

impl From<TransactionIn> for Submission {
    fn from(body: TransactionIn) -> Self {
        Submission {
            tx_type: body.tx_type,
            asset_id: body.asset_id,
            account_ref: body.account_ref,
            counterparty_ref: body.counterparty_ref,
            amount: body.amount,
            params: body.params,
        }
    }
}

/// The operation's response: 202 and `Location`, always with the operation as it is now (a
/// replayed key answers the original operation in its current state, failed ones included).
fn accepted(operation: &Operation) -> tokenops_app::AppResult<Reply> {
    Reply::accepted(&OperationOut::from(operation), format!("/api/transactions/{}", operation.id))
}

/// Submit a token operation.
#[utoipa::path(
    post, path = "/api/transactions", tag = "transactions", operation_id = "transactions.submit",
    params(crate::openapi::RequiredIdempotencyKey),
    request_body = TransactionIn,
    responses(
        (status = 202, description = "Accepted: the operation (SUBMITTED) with Location; its outcome is reported on it and by events, never as an HTTP error. The ACTIVE policies of its action then decide: approved → PENDING_SETTLEMENT → SETTLING → CONFIRMED (or FAILED); refused by a rule → FAILED VALIDATION_REJECTED (reasonCode POLICY_REJECTED, POLICY_EVALUATION_FAILED when a rule names a field the operation lacks, APPROVERS_UNRESOLVABLE when the approvers named resolve to nobody but the submitter) with transaction.rejected; approvers needed → AWAITING_APPROVAL with a POLICY approval request whose resourceId is the transactionId (a policy that matched no rule and asks for a manual review is reviewed by every ACTIVE user holding policy:update but the submitter), then approved → settled, rejected → FAILED APPROVAL_REJECTED (transaction.rejected), expired → FAILED POLICY_EXPIRED (transaction.failed), request cancelled → CANCELLED (transaction.cancelled); policies that cannot be read within TOKENOPS_POLICY_DECISION_TIMEOUT_MS of submission → FAILED POLICY_TIMEOUT (transaction.failed). RELEASE and CANCEL are not evaluated. The same key returns the original operation in its current state. The spec does not show this body: this service answers the operation as GET /api/transactions/{transactionId} does", body = OperationOut, headers(("Location" = String))),
        (status = 400, description = "Any rule of the submission: key missing, blank or over 255; counterpartyRef on a type other than TRANSFER or LOCK, or missing on a TRANSFER; assetId not a recognised ISO 4217 code or without an ACTIVE contract; amount not positive or finer than the minor unit; a named account missing, holding another asset or not ACTIVE; a non-scalar params value; params.lockId on a LOCK; RELEASE or CANCEL without a valid lockId, with a lock not ACTIVE or being completed, or with assetId, accountRef or amount; a RELEASE of a lock past its expiresAt (a CANCEL is accepted); a RELEASE or CANCEL of a lock whose asset has no ACTIVE contract; a key given twice in the body, or a number too large to keep exactly", body = crate::openapi::ErrorBody),
        (status = 403, description = "Missing permission transaction:submit (transaction:mint for MINT and BURN)", body = crate::openapi::ErrorBody),
        (status = 404, description = "RELEASE or CANCEL whose lock is not visible yet: retry with the same key", body = crate::openapi::ErrorBody),
        crate::openapi::KeyConflicts,
    )
)]
async fn submit_transaction(call: RequiredKeyWrite, body: JsonBody<TransactionIn>) -> ApiResult<Response> {
    let submission = Submission::from(body.value);
    let request = call.request(&SUBMIT, &body.document);
    let written = write::run_or_replay(&call.state, request, async |app, w| {
        accepted(&app.operations.submit(w, submission).await?)
    })
    .await?;
    // A replay answers with the operation as it is now, not as it was accepted.
    if let Written::Replayed(stored) = &written
        && stored.status == StatusCode::ACCEPTED.as_u16()
        && let Some(id) = replayed_operation(stored)
    {
        let current = call.state.app.operations.get(call.scope.tenant, id).await?;
        let mut fresh = accepted(&current)?.into_response();
        fresh.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
        return Ok(fresh);
    }
    Ok(written.into_response())
}

/// The operation an accepted submission's stored response is about: the resource id the write
/// stored with it. A record completed before the store kept resource ids (migration 0007) has
/// none, and its stored `Location` names the operation instead: read from there, so that such a
/// key keeps answering the operation as it is now until retention prunes it. (Answering its
/// stored response as is would answer the operation as accepted, a behaviour change.)
fn replayed_operation(stored: &WriteResponse) -> Option<uuid::Uuid> {
    match &stored.resource_id {
        Some(id) => uuid::Uuid::parse_str(id).ok(),
        None => {
            let location = stored.headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("location"));
            location.and_then(|(_, l)| l.rsplit('/').next()).and_then(|id| uuid::Uuid::parse_str(id).ok())
        }
    }
}

/// Read one operation.
#[utoipa::path(
    get, path = "/api/transactions/{transactionId}", tag = "transactions", operation_id = "transactions.get",
    params(path_params::TransactionId),
    responses(
        (status = 200, description = "The operation in its current state", body = OperationOut),
        crate::openapi::NotAUuid<path_params::TransactionId>,
        (status = 404, description = "No such operation", body = crate::openapi::ErrorBody),
    )
)]
async fn get_transaction(call: TenantCall<PathId>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(id)| Ok(OperationOut::from(&app.operations.get(tenant, id).await?))).await
}

fn operation_filter(params: &QueryParams) -> Result<OperationFilter, Error> {
    let state = params.one_of("state", &OperationState::ALL, OperationState::as_str)?;
    let tx_type = params.one_of("txType", &TxType::ALL, TxType::as_str)?;
    let account = |name: &str| {
        params.non_blank(name)?.map(|r| AccountRef::parse(r).map_err(|e| Error::invalid_field(name, e))).transpose()
    };
    let (account_ref, counterparty_ref) = (account("accountRef")?, account("counterpartyRef")?);
    Ok(OperationFilter { state, account_ref, counterparty_ref, tx_type, ..OperationFilter::default() })
}

/// List operations, newest first: style A (page, size), or style D (limit, cursor).
#[utoipa::path(
    get, path = "/api/transactions", tag = "transactions", operation_id = "transactions.list",
    params(
        ("state" = Option<OperationState>, Query), ("accountRef" = Option<String>, Query, description = "The originating account (the operation's accountRef)"),
        ("counterpartyRef" = Option<String>, Query, description = "An addition to the spec's filters: the receiving account of a TRANSFER, or the counterparty of a LOCK (and of its RELEASE). An account's whole history is its accountRef list and its counterpartyRef list"),
        ("txType" = Option<TxType>, Query),
        ("page" = Option<u64>, Query, description = "Style A: zero-based, default 0"),
        ("size" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Style A: 1 to 100, default 20"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Style D: 1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "Style D: nextCursor of the previous page, with the same filters"),
    ),
    responses(
        (status = 200, description = "Style A page (content, page, size, totalElements, totalPages), or style D (items, nextCursor, limit) when limit or cursor is given", body = OperationList),
        (status = 400, description = "Negative page, size or limit outside 1 to 100, unknown state or txType, mixed paging styles, a foreign cursor", body = crate::openapi::ErrorBody),
    )
)]
async fn list_transactions(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let filter = operation_filter(&params)?;
    let keyset = params.has("limit") || params.has("cursor");
    if keyset && (params.has("page") || params.has("size")) {
        return Err(Error::bad_request("Use page/size (style A) or limit/cursor (style D), not both").into());
    }
    if !keyset {
        let page = paging::page_request(&params, STRICT_SIZE)?;
        let operations = call.state.app.operations.list(call.scope.tenant, &filter, page).await?;
        let view = operations.map(|o| OperationOut::from(&o));
        return Ok(axum::Json(OperationList::Offset(PageA::new(view, page))).into_response());
    }
    let filters = paging::filters_fingerprint(&[
        ("state", filter.state.map(|s| s.as_str().to_owned())),
        ("accountRef", filter.account_ref.as_ref().map(ToString::to_string)),
        ("counterpartyRef", filter.counterparty_ref.as_ref().map(ToString::to_string)),
        ("txType", filter.tx_type.map(|t| t.as_str().to_owned())),
    ]);
    let request =
        CursorRequest::parse(&params, STRICT_SIZE, &call.state.cursors, ENDPOINT, call.scope.tenant, &filters)?;
    let operations = call.state.app.operations.list_after(call.scope.tenant, &filter, request.window()).await?;
    let body = request.envelope(
        operations,
        |o: &Operation| KeysetPosition { at_micros: o.created_at.as_micros(), id: o.id },
        |o: &Operation| OperationOut::from(o),
        &call.state.cursors,
    );
    Ok(axum::Json(OperationList::Keyset(body)).into_response())
}

/// List breaks, newest first (style A).
#[utoipa::path(
    get, path = "/api/transactions/breaks", tag = "transactions", operation_id = "transactions.breaks",
    params(
        ("reason" = Option<String>, Query, description = "CHAIN_FAILED, RETRY_EXHAUSTED, BALANCE_MISMATCH; another value gives an empty page"),
        ("accountRef" = Option<String>, Query),
        crate::openapi::TimeWindowQuery,
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style A page of breaks, newest first. The spec shows a break's reason and detail only; this service adds id, transactionId (when an operation broke), accountRef, assetId and detectedAt", body = BreakPage),
        (status = 400, description = "from not before to, negative page, size outside 1 to 100", body = crate::openapi::ErrorBody),
    )
)]
async fn list_breaks(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let page = paging::page_request(&params, STRICT_SIZE)?;
    let (from, to) = params.window("from", "to")?;
    let empty = || paging::respond(Style::A, &paging::none_match::<BreakOut>(), page);
    let reason = match params.non_blank("reason")? {
        None => None,
        Some(text) => match BreakReason::parse(text) {
            Some(reason) => Some(reason),
            None => return Ok(empty()),
        },
    };
    let account_ref = match params.non_blank("accountRef")? {
        None => None,
        Some(text) => match AccountRef::parse(text) {
            Ok(r) => Some(r),
            Err(_) => return Ok(empty()),
        },
    };
    let breaks = call
        .state
        .app
        .operations
        .breaks(call.scope.tenant, &BreakFilter { reason, account_ref, from, to }, page)
        .await?;
    let view = breaks.map(|b| BreakOut::from(&b));
    Ok(paging::respond(Style::A, &view, page))
}

/// Read a lock (visible once its LOCK is on the ledger).
#[utoipa::path(
    get, path = "/api/locks/{lockId}", tag = "transactions", operation_id = "locks.get",
    params(path_params::LockId),
    responses(
        (status = 200, description = "The lock", body = LockOut),
        crate::openapi::NotAUuid<path_params::LockId>,
        (status = 404, description = "No such lock (or its LOCK is not on the ledger yet)", body = crate::openapi::ErrorBody),
    )
)]
async fn get_lock(call: TenantCall<PathId>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(id)| Ok(LockOut::from(&app.operations.lock(tenant, id).await?))).await
}

/// An account's locks, newest first (style A).
#[utoipa::path(
    get, path = "/api/accounts/{accountRef}/locks", tag = "transactions", operation_id = "locks.list",
    params(
        path_params::AccountRef,
        ("status" = Option<LockStatus>, Query),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style A page of the account's locks, newest first", body = LockPage),
        crate::openapi::PagingOrStatusInvalid,
        crate::openapi::NoSuchAccount,
    )
)]
async fn list_account_locks(call: TenantCall<PathText>, params: QueryParams) -> ApiResult<Response> {
    let account_ref = call.path.0;
    let status = params.one_of("status", &LockStatus::ALL, LockStatus::as_str)?;
    paging::list(&params, STRICT_SIZE, Style::A, async |page| {
        let locks = call.state.app.operations.locks_of(call.scope.tenant, &account_ref, status, page).await?;
        Ok(locks.map(|l| LockOut::from(&l)))
    })
    .await
}
