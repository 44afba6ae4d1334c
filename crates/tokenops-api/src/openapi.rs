//! The OpenAPI 3.1 document: assembled from the handlers' annotations by `utoipa`, with the
//! common headers and the security schemes added to every API operation here, once; and the
//! parameters and response rows whose wording many operations share.

use axum::http::Method;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat};
use utoipa::openapi::security::{
    ClientCredentials, Flow, HttpAuthScheme, HttpBuilder, OAuth2, Scopes, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{Object, RefOr, Required, Response, Type};
use utoipa::{Modify, OpenApi};

use crate::access::Guard;
use crate::extract::api_version::{CURRENT, SUPPORTED};

/// The embedded identity provider's token endpoint, relative to the service.
pub const TOKEN_PATH: &str = "/idp/oauth2/token";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "tokenops",
        description = "Token operations service for banks: customers, accounts, token contracts and token operations over HTTP/JSON. Every request carries the API-Version header; errors use one envelope {timestamp, status, error, message, code, details?, requestId}. A request body field an operation does not take is ignored.",
    ),
    paths(
        crate::routes::idp::token,
        crate::routes::idp::discovery,
        crate::routes::idp::jwks,
        crate::routes::webhooks::jwks,
        crate::routes::operations::liveness,
        crate::routes::operations::readiness,
        crate::routes::operations::metrics
    ),
    // utoipa collects the schemas bodies and responses name, not those only a query parameter
    // names: the vocabularies of such filters are listed here so that their references resolve.
    components(schemas(
        ErrorBody,
        tokenops_domain::approval::ApprovalRequestStatus,
        tokenops_domain::approval::ApprovalTaskState,
        tokenops_domain::audit::AuditOutcome,
        tokenops_domain::audit::AuditSource,
        tokenops_domain::automation::TriggerType,
        tokenops_domain::event::EventType,
        tokenops_domain::identity::UserStatus,
        tokenops_domain::script::ScriptStatus,
        tokenops_domain::webhook::DeliveryStatus,
    )),
    tags(
        (name = "customers", description = "Customers of the organisation"),
        (name = "accounts", description = "Accounts of customers, one asset each, and their balances"),
        (name = "contracts", description = "The token contract of each asset"),
        (name = "transactions", description = "Token operations, their locks and breaks"),
        (name = "groups", description = "Approval groups of the organisation"),
        (name = "policies", description = "Policy templates, policies and their versions"),
        (name = "approvals", description = "Approval requests and their tasks: four-eyes sign-off by step, with separation of duties"),
        (name = "scripts", description = "Rhai scripts: compiled on save, parameters declared in the source, imports by name resolved at publication; statuses DRAFT, PUBLISHED, OUTDATED, DEPRECATED and deleted"),
        (name = "automations", description = "Automations of published scripts, on demand, on a schedule (cron in an explicit time zone) or on an event, acting as their creator; runs are durable jobs with a history"),
        (name = "idp", description = "The embedded identity provider: its OAuth 2.0 token endpoint, OpenID discovery and signing keys"),
        (name = "audit", description = "The audit log"),
        (name = "roles", description = "Roles of the organisation"),
        (name = "auth", description = "Sign-in with the embedded identity provider"),
        (name = "organisation", description = "Organisations and their users"),
        (name = "webhook-events", description = "The event history with every delivery, and replay"),
        (name = "webhooks", description = "Webhook registrations: signed deliveries of the organisation's events over HTTPS"),
        (name = "operations", description = "For operators: liveness, readiness and metrics; no token, no API-Version"),
    )
)]
pub struct ApiDoc;

/// The error envelope, as rendered for every error.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct ErrorBody {
    /// ISO 8601 UTC with Z; `yyyy-MM-dd HH:mm:ss.SSS` UTC (no T, no offset) on the webhook,
    /// delivery history and sign-in (`/api/auth`) endpoints.
    timestamp: String,
    status: u16,
    /// The HTTP reason phrase.
    error: String,
    message: String,
    /// A stable machine-readable code: one of the error-code tables (`error::all_codes`).
    #[schema(schema_with = error_code_schema)]
    code: String,
    details: Option<Vec<tokenops_app::error::FieldError>>,
    #[schema(rename = "requestId")]
    request_id: String,
}

/// A JSON Web Key Set (RFC 7517) of P-256 public keys. Only documents the key sets the service
/// publishes (the identity provider's and the webhook signing keys).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct Jwks {
    keys: Vec<Jwk>,
}

/// One public key: `{kty: "EC", crv: "P-256", x, y, kid, alg: "ES256", use: "sig"}`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct Jwk {
    #[schema(example = "EC")]
    kty: String,
    #[schema(example = "P-256")]
    crv: String,
    /// The public point's coordinates, base64url without padding.
    x: String,
    y: String,
    /// Names the key in a JWS header.
    kid: String,
    #[schema(example = "ES256")]
    alg: String,
    #[schema(rename = "use", example = "sig")]
    use_: String,
}

/// Declares response sets of one error row each, `Name = status, "description";`: a type for
/// `responses(...)` whose row carries the error envelope.
macro_rules! error_rows {
    ($($(#[$attr:meta])* $vis:vis $name:ident = $status:literal, $description:literal;)*) => {$(
        $(#[$attr])*
        $vis struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                error_row($status, $description)
            }
        }
    )*};
}

error_rows! {
    /// The 422 row of a write whose Idempotency-Key was first used with another request.
    pub KeyReusedWithAnotherPayload = 422, "Idempotency-Key reused with a different payload";
    /// The 409 row of a write whose only conflict is its Idempotency-Key still being processed
    /// (`IDEMPOTENCY_CONFLICT`, always with Retry-After).
    pub KeyInFlight = 409, "The same Idempotency-Key is still being processed (Retry-After)";
    /// The 400 row of a read or write under an organisation whose path ids are its only bad
    /// request.
    pub PathIdNotUuid = 400, "A path id is not a UUID";
    /// The 400 row of a read of one resource with a page of its users.
    pub PathIdOrPagingInvalid = 400, "A path id is not a UUID, or invalid paging";
    /// The 400 row of an organisation's sorted list under `/api/tenants/{tenantId}`.
    pub TenantListInvalid = 400, "tenantId not a UUID, invalid paging, a sort direction other than asc or desc";
    /// The 500 row of the identity lists (users, roles, groups), where the spec answers an
    /// unknown sort property with 500.
    pub IdentitySortUnknown = 500, "UNKNOWN_SORT_PROPERTY: sort names a property the list does not have (the spec's 500 for the identity lists; the message names the sortable ones); otherwise System error occurred";
    /// The 400 row of a list filtered by status alone.
    pub PagingOrStatusInvalid = 400, "Invalid paging or unknown status";
    /// The 400 row of a registration whose Idempotency-Key is required.
    pub FieldOrKeyInvalid = 400, "Missing or invalid field, or bad Idempotency-Key";
    /// The 400 row of a query of the audit log (its list and its export).
    pub AuditQueryInvalid = 400, "Inverted range, unknown sort property, query too long, unparseable date";
    /// The 429 row of a replay of webhook events refused by the organisation's replay budget.
    pub ReplayBudgetExhausted = 429, "REPLAY_BUDGET_EXHAUSTED: nothing queued; no Retry-After";
    // The 404 rows of the operations on one resource, each worded once for all of them.
    pub NoSuchAccount = 404, "No such account in the organisation";
    pub NoSuchContract = 404, "No contract for the asset";
    pub NoSuchCustomer = 404, "No such customer in the organisation";
    pub NoSuchClient = 404, "No such client in the organisation";
    pub NoSuchGroup = 404, "No such group";
    pub NoSuchRole = 404, "No such role in the organisation";
    pub NoSuchUser = 404, "No such user in the organisation";
    /// A write that hands out a role by name, which only the embedded identity provider serves.
    pub NoRoleOrExternalProvider = 404, "Role {name} not found; or the deployment uses an external identity provider";
    pub NoSuchPolicy = 404, "No such policy in the organisation";
    pub NoSuchTemplate = 404, "No template with the key in the organisation's scope (SYSTEM templates included)";
    pub NoSuchRequest = 404, "No such request in the organisation";
    pub NoSuchTask = 404, "No such task in the organisation";
    /// A read or write of a script that may be deleted.
    pub NoSuchScript = 404, "No such script";
    /// A read or write of a script that is not deleted.
    pub NoSuchScriptOrDeleted = 404, "No such script, or deleted";
    pub NoSuchAutomationOrDeleted = 404, "No such automation, or deleted";
    pub NoSuchRegistration = 404, "No such registration in the organisation";
}

/// The 409 and 422 rows of a write whose only conflicts are its Idempotency-Key's.
pub struct KeyConflicts;

impl utoipa::IntoResponses for KeyConflicts {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let mut rows = <KeyInFlight as utoipa::IntoResponses>::responses();
        rows.extend(<KeyReusedWithAnotherPayload as utoipa::IntoResponses>::responses());
        rows
    }
}

/// One response row carrying the error envelope.
fn error_row(status: u16, description: &str) -> BTreeMap<String, RefOr<Response>> {
    BTreeMap::from([(status.to_string(), error_response(description))])
}

/// A UUID path parameter, by its name in the route, for the 400 rows that name it
/// ([`NotAUuid`], [`NotAUuidOrNoKey`]).
pub trait PathIdName {
    const NAME: &'static str;
}

/// The path parameters of the API, each stated once with its type and meaning: each marker is
/// a parameter set for `params(...)`, and the UUID ones name their 400 rows ([`NotAUuid`]).
pub mod path_params {
    use utoipa::openapi::path::{Parameter, ParameterIn};

    macro_rules! declare_path_params {
        (@name Uuid $marker:ident = $name:literal) => {
            impl super::PathIdName for $marker {
                const NAME: &'static str = $name;
            }
        };
        (@name Text $marker:ident = $name:literal) => {};
        ($($kind:ident $marker:ident = $name:literal $(: $description:literal)?,)*) => {$(
            #[doc = concat!("`{", $name, "}`", $(": ", $description)?)]
            pub struct $marker;

            impl utoipa::IntoParams for $marker {
                fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
                    vec![super::path_param($name, super::PathKind::$kind, None $(.or(Some($description)))?)]
                }
            }

            declare_path_params!(@name $kind $marker = $name);
        )*};
    }

    declare_path_params!(
        Text AccountRef = "accountRef",
        Text AssetId = "assetId": "ISO 4217 code (case-insensitive)",
        Uuid AutomationId = "automationId",
        Uuid ClientId = "clientId",
        Text CustomerRef = "customerRef",
        Uuid EventId = "eventId",
        Uuid GroupId = "groupId",
        Uuid LockId = "lockId": "The LOCK operation's transactionId",
        Uuid PolicyId = "policyId",
        Uuid RequestId = "requestId",
        Uuid RoleId = "roleId",
        Uuid ScriptId = "scriptId",
        Uuid TaskId = "taskId",
        Text TemplateKey = "key": "The template's key",
        Uuid TenantId = "tenantId": "Must be the caller's organisation",
        Uuid TransactionId = "transactionId",
        Uuid UserId = "userId",
        Uuid WebhookId = "webhookId",
    );
}

/// What a path parameter holds.
enum PathKind {
    Uuid,
    Text,
}

/// A required path parameter.
fn path_param(name: &str, kind: PathKind, description: Option<&str>) -> Parameter {
    let schema = ObjectBuilder::new().schema_type(Type::String);
    let schema = match kind {
        PathKind::Uuid => schema.format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid))),
        PathKind::Text => schema,
    };
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(description)
        .schema(Some(schema.build()))
        .build()
}

/// The 400 row of an operation whose only bad request is its path id `P` not being a UUID.
pub struct NotAUuid<P>(PhantomData<P>);

impl<P: PathIdName> utoipa::IntoResponses for NotAUuid<P> {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_row(400, &format!("{} is not a UUID", P::NAME))
    }
}

/// The 400 row of a write without a body under the path id `P`, whose Idempotency-Key is
/// required.
pub struct NotAUuidOrNoKey<P>(PhantomData<P>);

impl<P: PathIdName> utoipa::IntoResponses for NotAUuidOrNoKey<P> {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        error_row(400, &format!("{} is not a UUID, Idempotency-Key missing", P::NAME))
    }
}

/// The paging query of an offset-paged list whose sizes run from 1 to 100.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct PageQuery {
    /// Zero-based, default 0
    page: Option<u64>,
    /// 1 to 100, default 20
    #[param(minimum = 1, maximum = 100)]
    size: Option<u32>,
}

/// The paging query of a read of one resource with a page of its users (a role's holders, a
/// group's members), sizes 1 to 100.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct UsersPageQuery {
    /// Page of its users (a role's holders, a group's members); zero-based, default 0
    page: Option<u64>,
    /// 1 to 100, default 20
    #[param(minimum = 1, maximum = 100)]
    size: Option<u32>,
}

/// The paging query of an offset-paged list whose sizes are clamped to 1 to 100
/// (`paging::CLAMPED_SIZE`) rather than refused: any integer is taken, a negative one too.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct ClampedPageQuery {
    /// Zero-based, default 0
    page: Option<u64>,
    /// Default 20; clamped to 1..100: above 100 is 100, below 1 (0 and negative values included) is 1
    #[param(value_type = Option<AnyInteger>, inline)]
    size: Option<i64>,
}

/// A whole number of any size: `type: integer` without a `format`, for a size the service clamps
/// rather than refuses, whatever its magnitude (past the 64-bit range too:
/// `paging::parse_saturating`). A format (`int32`, `int64`) would bound it where the service
/// does not.
pub struct AnyInteger;

impl utoipa::PartialSchema for AnyInteger {
    fn schema() -> RefOr<utoipa::openapi::schema::Schema> {
        Object::with_type(Type::Integer).into()
    }
}

impl utoipa::ToSchema for AnyInteger {}

/// [`AnyInteger`] from 1: a size below 1 is refused, any larger one clamped (`paging::AUDIT_SIZE`).
pub struct AnyIntegerFromOne;

impl utoipa::PartialSchema for AnyIntegerFromOne {
    fn schema() -> RefOr<utoipa::openapi::schema::Schema> {
        ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1)).build().into()
    }
}

impl utoipa::ToSchema for AnyIntegerFromOne {}

/// A customer's or an account's client-chosen reference as `customer::validate_reference`
/// takes it: 1 to `REFERENCE_MAX_LEN` of `A-Za-z0-9._:-`, not `.` or `..` (a URL reads them as
/// a path step). One schema for every body field that names one (`schema_with`).
fn reference(description: &str, example: Option<&str>) -> Object {
    use tokenops_domain::customer::REFERENCE_MAX_LEN;
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .examples(example.map(serde_json::Value::from))
        .min_length(Some(1))
        .max_length(Some(REFERENCE_MAX_LEN))
        .pattern(Some(format!(r"^(?!\.\.?$)[A-Za-z0-9._:-]{{1,{REFERENCE_MAX_LEN}}}$")))
        .build()
}

const NEW_REFERENCE: &str = "Client-chosen reference, unique in the organisation: 1-64 of `A-Za-z0-9._:-`, not `.` or `..` (a URL reads them as a path step).";

/// A new customer's reference.
pub fn new_customer_ref() -> Object {
    reference(NEW_REFERENCE, Some("cust-0001"))
}

/// A new account's reference.
pub fn new_account_ref() -> Object {
    reference(NEW_REFERENCE, Some("acc-0001"))
}

/// The reference of the customer an account is registered for.
pub fn owning_customer_ref() -> Object {
    reference("An existing, ACTIVE customer.", None)
}

/// The query of a cursor-paged list (style D).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct CursorQuery {
    /// 1 to 100, default 20
    #[param(minimum = 1, maximum = 100)]
    limit: Option<u32>,
    /// nextCursor of the previous page (a list with filters needs the same filters again)
    cursor: Option<String>,
}

/// The time window of a list filtered by when its items happened.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct TimeWindowQuery {
    /// ISO 8601, inclusive
    #[param(value_type = Option<String>, format = DateTime)]
    from: Option<String>,
    /// ISO 8601, exclusive
    #[param(value_type = Option<String>, format = DateTime)]
    to: Option<String>,
}

/// The Idempotency-Key header of an organisation write, where the key is optional.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub struct OptionalIdempotencyKey {
    /// Optional; 1-255 characters, not starting with `automation-run:` (the service's own
    /// runs' prefix). The same key and request replays the first answer (a 403, 404, 409 or 422
    /// too); a 400 binds nothing, so the corrected request may reuse the key.
    #[param(
        rename = "Idempotency-Key",
        min_length = 1,
        max_length = 255,
        pattern = r"^[\x20-\x7E]*[\x21-\x7E][\x20-\x7E]*$"
    )]
    key: Option<String>,
}

/// The Idempotency-Key header of a resource write, where the key is required.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub struct RequiredIdempotencyKey {
    /// Required; 1-255 characters, not starting with `automation-run:` (the service's own
    /// runs' prefix). The same key and request replays the first answer (a 403, 404, 409 or 422
    /// too); a 400 binds nothing, so the corrected request may reuse the key.
    #[param(
        rename = "Idempotency-Key",
        min_length = 1,
        max_length = 255,
        pattern = r"^[\x20-\x7E]*[\x21-\x7E][\x20-\x7E]*$"
    )]
    key: String,
}

/// The `code` property: a string enumerating every code of the tables, so the document cannot
/// list a code the server does not have.
fn error_code_schema() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some("A stable machine-readable code."))
        .enum_values(Some(crate::error::all_codes().map(|(wire, _)| wire)))
        .build()
}

/// Adds the common headers and the security schemes to every API operation, and the API's
/// version to `info`. Applied by [`finish`] once every router's paths are in the document (a
/// `modifiers` entry would run too early).
struct CommonHeaders;

fn error_response(description: &str) -> RefOr<Response> {
    utoipa::openapi::ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            utoipa::openapi::ContentBuilder::new()
                .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
        .into()
}

pub fn finish(document: &mut utoipa::openapi::OpenApi) {
    CommonHeaders.modify(document);
}

/// What the served document says of this deployment: its base URL as the one server, so that
/// the relative paths resolve, and the embedded provider's token endpoint as an absolute URL
/// (some generators refuse a relative `tokenUrl`). With the bank's own provider the scheme keeps
/// its description, which says that provider's endpoint takes this one's place.
pub fn for_deployment(document: &mut utoipa::openapi::OpenApi, public_url: &str, token_url: Option<String>) {
    document.servers = Some(vec![utoipa::openapi::server::Server::new(public_url.trim_end_matches('/'))]);
    let Some(token_url) = token_url else { return };
    let Some(components) = document.components.as_mut() else { return };
    if let Some(RefOr::T(SecurityScheme::OAuth2(oauth2))) = components.security_schemes.get_mut("oauth2") {
        for flow in oauth2.flows.values_mut() {
            if let Flow::ClientCredentials(credentials) = flow {
                credentials.token_url = token_url.clone();
            }
        }
    }
}

fn header(name: &str, description: &str, required: bool) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Header)
        .required(if required { Required::True } else { Required::False })
        .description(Some(description))
        .schema(Some(Object::with_type(Type::String)))
        .build()
}

impl Modify for CommonHeaders {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        // The crate's version is the build's; clients negotiate the API's (API-Version).
        openapi.info.version = CURRENT.to_owned();
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "oauth2",
            SecurityScheme::OAuth2(OAuth2::with_description(
                [Flow::ClientCredentials(ClientCredentials::new(TOKEN_PATH, Scopes::new()))],
                "Machine clients: the OAuth 2.0 client credentials grant at the embedded identity provider's token endpoint; the token is sent as Authorization: Bearer. Where the bank's own provider issues tokens, its token endpoint takes this one's place. No scopes: each client's role decides what it may do.",
            )),
        );
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "Users: the access token of a sign-in (/api/auth/login, /api/auth/new-password, /api/auth/activate, /api/auth/refresh)",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "clientBasic",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Basic)
                    .description(Some(
                        "A client's id and secret at the token endpoint (RFC 6749 §2.3.1), instead of client_id and client_secret in the form",
                    ))
                    .build(),
            ),
        );
        let version = format!("Interface version, major.minor.patch. Supported: {}", SUPPORTED.join(", "));
        let mut api_version = header("API-Version", &version, true);
        api_version.schema = Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(r"^\d+\.\d+\.\d+$"))
                .examples([CURRENT])
                .build()
                .into(),
        );
        for (path, item) in openapi.paths.paths.iter_mut() {
            if !path.starts_with("/api/") {
                continue;
            }
            let operations = [
                (Method::GET, &mut item.get),
                (Method::POST, &mut item.post),
                (Method::PATCH, &mut item.patch),
                (Method::PUT, &mut item.put),
                (Method::DELETE, &mut item.delete),
            ];
            for (method, operation) in operations {
                let Some(operation) = operation else { continue };
                let params = operation.parameters.get_or_insert_with(Vec::new);
                params.insert(0, api_version.clone().into());
                params.push(
                    header(
                        "X-Request-Id",
                        "Optional request id (1-128 of A-Za-z0-9._:-), echoed on the response",
                        false,
                    )
                    .into(),
                );
                // Operations that declare their own (the sign-in endpoints: none) keep it. Either
                // kind of token is accepted; which operations it reaches is its role's matter.
                if operation.security.is_none() {
                    operation.security = Some(vec![
                        SecurityRequirement::new("oauth2", Vec::<String>::new()),
                        SecurityRequirement::new("bearer", Vec::<String>::new()),
                    ]);
                }
                let has_body = operation.request_body.is_some();
                let takes_key = params.iter().any(|p| match p {
                    utoipa::openapi::RefOr::T(p) => p.name == "Idempotency-Key",
                    utoipa::openapi::RefOr::Ref(_) => false,
                });
                let responses = &mut operation.responses.responses;
                let guard = crate::access::guard_of(&method, path);
                let forbidden = forbidden(guard, path);
                let mut common = vec![
                    ("400", "Missing, malformed or unsupported API-Version, or an invalid request"),
                    ("401", unauthorized(guard)),
                    if takes_key {
                        ("500", "System error occurred: nothing was changed; retry with the same Idempotency-Key")
                    } else {
                        ("500", "System error occurred: nothing was changed; retry")
                    },
                ];
                // An endpoint that takes no token (sign-in) checks no permission.
                if guard != Some(Guard::Public) {
                    common.push(("403", forbidden.as_str()));
                }
                if has_body {
                    common.push(("413", "The body exceeds the size limit"));
                    common.push(("415", "Content-Type is not application/json"));
                }
                for (status, description) in common {
                    responses.entry(status.to_owned()).or_insert_with(|| error_response(description));
                }
                // The key's in-flight 409 (IDEMPOTENCY_CONFLICT) always says when to resend.
                if takes_key && let Some(RefOr::T(conflict)) = responses.get_mut("409") {
                    conflict.headers.insert("Retry-After".to_owned(), retry_after_header());
                }
            }
        }
    }
}

/// `Retry-After` on a 409: whole seconds after which the same request, with the same
/// Idempotency-Key, may be sent again.
fn retry_after_header() -> RefOr<utoipa::openapi::header::Header> {
    utoipa::openapi::header::HeaderBuilder::new()
        .schema(Some(Object::with_type(Type::Integer)))
        .description(Some(
            "With IDEMPOTENCY_CONFLICT (the same Idempotency-Key still being processed): seconds to wait before resending the same request with the same key",
        ))
        .build()
        .into()
}

/// The 401 row an operation has unless it writes its own. Behind any guard but `Public` the
/// caller is resolved from the token, and a user or client no longer ACTIVE is refused with the
/// spec's own message (`access::authorize`).
fn unauthorized(guard: Option<Guard>) -> &'static str {
    match guard {
        Some(Guard::Public) | None => "No token, or the token failed verification",
        Some(Guard::Operator) => "No usable token, or Your access has been revoked.",
        Some(_) => {
            "No usable token (a token that names no organisation, as the platform operator's, included), or Your access has been revoked."
        }
    }
}

/// The 403 row an operation has unless it writes its own: what its guard (`access::GUARDS`)
/// asks for, a permission or the platform operator, so that the document and the enforcement
/// cannot disagree; and on `/api/tenants/{tenantId}/…`, another organisation in the path.
fn forbidden(guard: Option<Guard>, path: &str) -> String {
    match guard {
        Some(Guard::Permission(permission)) if path.starts_with("/api/tenants/{tenantId}/") => {
            format!("Invalid tenant id, or missing permission {permission}")
        }
        Some(Guard::Permission(permission)) => format!("Missing permission {permission}"),
        Some(Guard::Operator) => "The caller is not the platform operator".to_owned(),
        _ => "The caller lacks the permission".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    #[test]
    fn the_document_enumerates_exactly_the_codes_of_the_tables() {
        let table: Vec<&str> = crate::error::all_codes().map(|(wire, _)| wire).collect();
        let unique: HashSet<&str> = table.iter().copied().collect();
        assert_eq!(unique.len(), table.len(), "a wire name is declared twice");
        let document = serde_json::to_value(crate::document()).expect("serialisable");
        let listed = document["components"]["schemas"]["ErrorBody"]["properties"]["code"]["enum"]
            .as_array()
            .expect("ErrorBody.code enumerates the codes");
        let listed: HashSet<&str> = listed.iter().map(|c| c.as_str().expect("a string")).collect();
        for code in &listed {
            assert!(unique.contains(code), "{code} is in the document but not in the table");
        }
        assert_eq!(listed, unique);
        for needed in ["VALIDATION_FAILED", "IDEMPOTENCY_CONFLICT", "METHOD_NOT_ALLOWED", "ROUTE_NOT_FOUND"] {
            assert!(listed.contains(needed), "{needed}");
        }
    }

    #[test]
    fn every_keyed_write_declares_retry_after_on_its_409() {
        let document = serde_json::to_value(crate::document()).expect("serialisable");
        let paths = document["paths"].as_object().expect("paths");
        let mut keyed = 0;
        for (path, item) in paths {
            for (method, operation) in item.as_object().expect("a path item") {
                let takes_key = operation["parameters"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["name"] == "Idempotency-Key"));
                let Some(conflict) = operation["responses"].get("409") else { continue };
                if takes_key {
                    keyed += 1;
                    assert!(conflict["headers"].get("Retry-After").is_some(), "{method} {path}: {conflict}");
                }
            }
        }
        assert!(keyed > 20, "the keyed writes with a 409: {keyed}");
        let customers = &paths["/api/customers"]["post"]["responses"]["409"]["headers"]["Retry-After"];
        assert_eq!(customers["schema"]["type"], "integer", "{customers}");
    }
}
