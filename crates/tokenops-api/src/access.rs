//! Access control for the whole API, in one table: every endpoint names the guard it passes
//! (a permission of the catalogue, the platform operator, any signed-in caller, or none for the
//! bootstrap operations), and one layer enforces it before any handler runs. The same table is
//! the endpoint → permission table of `docs/permissions.md`.

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use tokenops_app::context::Principal;
use tokenops_app::{Code, Error};
use tokenops_domain::permission::Permission;

use crate::ApiState;
use crate::error::{ApiError, HttpCode};
use crate::extract::Authenticated;

/// What a caller must be to call an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// A bootstrap operation: no bearer token (its own credentials are in the request).
    Public,
    /// The platform operator (an operator client of the embedded provider).
    Operator,
    /// Any signed-in caller of an organisation, acting on its own data.
    SignedIn,
    /// A caller of an organisation holding the permission.
    Permission(Permission),
    /// A caller of an organisation holding at least one of the permissions; which one the
    /// request needs depends on its body, and the service checks that (inviting a member:
    /// `super_admin:create`, `admin:create` or `user:create` by the role handed out).
    AnyOf(&'static [Permission]),
}

use Guard::{Operator, Public, SignedIn};
use Permission as P;

/// The refusal of a token that names no organisation (the platform operator's) on an
/// organisation's endpoint: the spec makes a token lacking `tenant_id` a 401 (Authentication
/// rule 1; Errors, Envelope), not a 403.
pub const NO_TENANT_CLAIM: &str = "This operation acts for an organisation; the token names none (tenant_id)";

const fn needs(permission: Permission) -> Guard {
    Guard::Permission(permission)
}

/// Every endpoint under `/api`, as routed (method, path template), with its guard.
pub const GUARDS: &[(&str, &str, Guard)] = &[
    // Sign-in and other bootstrap operations
    ("POST", "/api/auth/login", Public),
    ("POST", "/api/auth/refresh", Public),
    ("POST", "/api/auth/new-password", Public),
    ("POST", "/api/auth/activate", Public),
    ("GET", "/api/auth/client-secrets/{oneTimeToken}", Public),
    // Organisations, users, roles, groups, machine clients
    ("POST", "/api/tenants", Operator),
    ("GET", "/api/tenants/{tenantId}", Operator),
    ("GET", "/api/users/me", SignedIn),
    ("GET", "/api/users/{id}", needs(P::UserRead)),
    ("GET", "/api/permissions", needs(P::RoleRead)),
    ("GET", "/api/tenants/{tenantId}/users", needs(P::UserRead)),
    ("POST", "/api/tenants/{tenantId}/users", Guard::AnyOf(&[P::UserCreate, P::AdminCreate, P::SuperAdminCreate])),
    ("GET", "/api/tenants/{tenantId}/users/{userId}", needs(P::UserRead)),
    ("PATCH", "/api/tenants/{tenantId}/users/{userId}", needs(P::UserUpdate)),
    ("DELETE", "/api/tenants/{tenantId}/users/{userId}", needs(P::MemberRemove)),
    ("GET", "/api/tenants/{tenantId}/roles", needs(P::RoleRead)),
    ("POST", "/api/tenants/{tenantId}/roles", needs(P::RoleCreate)),
    ("GET", "/api/tenants/{tenantId}/roles/{roleId}", needs(P::RoleRead)),
    ("PATCH", "/api/tenants/{tenantId}/roles/{roleId}", needs(P::RoleUpdate)),
    ("DELETE", "/api/tenants/{tenantId}/roles/{roleId}", needs(P::RoleDelete)),
    ("GET", "/api/tenants/{tenantId}/groups", needs(P::GroupRead)),
    ("POST", "/api/tenants/{tenantId}/groups", needs(P::GroupManage)),
    ("GET", "/api/tenants/{tenantId}/groups/{groupId}", needs(P::GroupRead)),
    ("PATCH", "/api/tenants/{tenantId}/groups/{groupId}", needs(P::GroupManage)),
    ("POST", "/api/tenants/{tenantId}/groups/{groupId}/members", needs(P::GroupManage)),
    ("GET", "/api/tenants/{tenantId}/groups/{groupId}/members/{userId}", needs(P::GroupRead)),
    ("DELETE", "/api/tenants/{tenantId}/groups/{groupId}/members/{userId}", needs(P::GroupManage)),
    ("GET", "/api/tenants/{tenantId}/clients", needs(P::ClientRead)),
    ("POST", "/api/tenants/{tenantId}/clients", needs(P::ClientManage)),
    ("GET", "/api/tenants/{tenantId}/clients/{clientId}", needs(P::ClientRead)),
    ("DELETE", "/api/tenants/{tenantId}/clients/{clientId}", needs(P::ClientManage)),
    // Policies and templates
    ("GET", "/api/templates", needs(P::PolicyRead)),
    ("POST", "/api/templates", needs(P::TemplateCreate)),
    ("GET", "/api/templates/{key}", needs(P::PolicyRead)),
    ("PATCH", "/api/templates/{key}", needs(P::TemplateCreate)),
    ("POST", "/api/templates/{key}/deprecate", needs(P::TemplateCreate)),
    ("GET", "/api/policies", needs(P::PolicyRead)),
    ("POST", "/api/policies", needs(P::PolicyCreate)),
    ("GET", "/api/policies/{policyId}", needs(P::PolicyRead)),
    ("PATCH", "/api/policies/{policyId}", needs(P::PolicyUpdate)),
    ("POST", "/api/policies/{policyId}/activate", needs(P::PolicyUpdate)),
    ("POST", "/api/policies/{policyId}/archive", needs(P::PolicyUpdate)),
    ("GET", "/api/policies/{policyId}/versions", needs(P::PolicyRead)),
    ("POST", "/api/policies/{policyId}/versions", needs(P::PolicyVersionCreate)),
    ("PUT", "/api/policies/{policyId}/current-version", needs(P::PolicyUpdate)),
    ("POST", "/api/policies/simulations", needs(P::PolicyRead)),
    // Approvals
    ("GET", "/api/approvals/tasks", needs(P::ApprovalRead)),
    ("GET", "/api/approvals/tasks/{taskId}", needs(P::ApprovalRead)),
    ("POST", "/api/approvals/tasks/{taskId}/approve", needs(P::ApprovalDecide)),
    ("POST", "/api/approvals/tasks/{taskId}/reject", needs(P::ApprovalDecide)),
    ("POST", "/api/approvals/tasks/{taskId}/reassign", needs(P::ApprovalDecide)),
    ("GET", "/api/scripts", needs(P::ScriptRead)),
    ("POST", "/api/scripts", needs(P::ScriptWrite)),
    ("GET", "/api/scripts/{scriptId}", needs(P::ScriptRead)),
    ("PATCH", "/api/scripts/{scriptId}", needs(P::ScriptWrite)),
    ("DELETE", "/api/scripts/{scriptId}", needs(P::ScriptWrite)),
    ("GET", "/api/scripts/{scriptId}/download", needs(P::ScriptRead)),
    ("POST", "/api/scripts/{scriptId}/clone", needs(P::ScriptWrite)),
    ("POST", "/api/scripts/{scriptId}/dry-runs", needs(P::AutomationExecute)),
    ("GET", "/api/automations", needs(P::AutomationRead)),
    ("POST", "/api/automations", needs(P::AutomationWrite)),
    ("GET", "/api/automations/{automationId}", needs(P::AutomationRead)),
    ("PATCH", "/api/automations/{automationId}/status", needs(P::AutomationWrite)),
    ("POST", "/api/automations/{automationId}/executions", needs(P::AutomationExecute)),
    ("GET", "/api/automations/{automationId}/history", needs(P::AutomationRead)),
    ("GET", "/api/approvals/requests", needs(P::ApprovalRead)),
    ("POST", "/api/approvals/requests", needs(P::ApprovalRequest)),
    ("GET", "/api/approvals/requests/{requestId}", needs(P::ApprovalRead)),
    ("POST", "/api/approvals/requests/{requestId}/cancel", needs(P::ApprovalRequest)),
    // Customers
    ("POST", "/api/customers", needs(P::CustomerWrite)),
    ("GET", "/api/customers", needs(P::CustomerRead)),
    ("GET", "/api/customers/{customerRef}", needs(P::CustomerRead)),
    ("PATCH", "/api/customers/{customerRef}", needs(P::CustomerWrite)),
    // Contracts
    ("POST", "/api/contracts", needs(P::ContractManage)),
    ("GET", "/api/contracts", needs(P::ContractRead)),
    ("GET", "/api/contracts/{assetId}", needs(P::ContractRead)),
    ("PATCH", "/api/contracts/{assetId}", needs(P::ContractManage)),
    // Accounts and balances
    ("POST", "/api/accounts", needs(P::AccountWrite)),
    ("GET", "/api/accounts", needs(P::AccountRead)),
    ("GET", "/api/accounts/{accountRef}", needs(P::AccountRead)),
    ("PATCH", "/api/accounts/{accountRef}", needs(P::AccountWrite)),
    ("GET", "/api/accounts/{accountRef}/balances", needs(P::BalanceRead)),
    // Token operations, locks and breaks
    ("POST", "/api/transactions", needs(P::TransactionSubmit)),
    ("GET", "/api/transactions", needs(P::TransactionRead)),
    ("GET", "/api/transactions/breaks", needs(P::TransactionRead)),
    ("GET", "/api/transactions/{transactionId}", needs(P::TransactionRead)),
    ("GET", "/api/locks/{lockId}", needs(P::TransactionRead)),
    ("GET", "/api/accounts/{accountRef}/locks", needs(P::TransactionRead)),
    // Audit
    ("GET", "/api/audit/events", needs(P::AuditRead)),
    ("GET", "/api/audit/events/export", needs(P::AuditExport)),
    ("GET", "/api/audit/events/{eventId}", needs(P::AuditRead)),
    ("GET", "/api/audit/chain/head", needs(P::AuditRead)),
    // Webhooks
    ("POST", "/api/webhooks", needs(P::WebhookManage)),
    ("GET", "/api/webhooks", needs(P::WebhookRead)),
    ("GET", "/api/webhooks/{webhookId}", needs(P::WebhookRead)),
    ("PATCH", "/api/webhooks/{webhookId}", needs(P::WebhookManage)),
    ("DELETE", "/api/webhooks/{webhookId}", needs(P::WebhookManage)),
    ("POST", "/api/webhooks/{webhookId}/test", needs(P::WebhookManage)),
    ("POST", "/api/webhooks/{webhookId}/secret/rotate", needs(P::WebhookManage)),
    // Webhook history and replay
    ("GET", "/api/webhook-events", needs(P::WebhookRead)),
    ("GET", "/api/webhook-events/{eventId}", needs(P::WebhookRead)),
    ("POST", "/api/webhook-events/{eventId}/redeliver", needs(P::WebhookReplay)),
    ("POST", "/api/webhook-events/redeliver", needs(P::WebhookReplay)),
];

/// The guard of a routed endpoint; `None` for a route missing from [`GUARDS`], which is refused.
pub fn guard_of(method: &Method, path: &str) -> Option<Guard> {
    GUARDS.iter().find(|(m, p, _)| *p == path && *m == method.as_str()).map(|(_, _, g)| *g)
}

/// The layer on every `/api` route: authenticates (401), then checks the route's guard (403).
pub async fn authorize(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    let path = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned()).unwrap_or_default();
    let Some(guard) = guard_of(request.method(), &path) else {
        // A method the path does not serve: the router answers 405 with Allow; no handler runs.
        if GUARDS.iter().any(|(_, p, _)| *p == path) {
            return next.run(request).await;
        }
        tracing::error!(method = %request.method(), path, "route has no guard in access::GUARDS; refused");
        return ApiError::App(Error::forbidden("This endpoint is not open to any caller")).into_response();
    };
    if guard == Public {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let caller = match Authenticated::from_request_parts(&mut parts, &state).await {
        Ok(Authenticated(caller)) => caller,
        Err(rejection) => return rejection.into_response(),
    };
    // The request's span (and every log line under it) names who asks, for which organisation.
    let span = tracing::Span::current();
    span.record("caller", caller.subject.as_str());
    if let Some(tenant) = caller.tenant {
        span.record("tenant_id", tracing::field::display(tenant));
    }
    if guard == Operator && !state.embedded_provider {
        // With the bank's own provider organisations are the bank's provider's business: the
        // operation does not exist.
        return ApiError::http(
            HttpCode::RouteNotFound,
            "Organisations are provisioned by the platform operator of the embedded identity provider",
        )
        .into_response();
    }
    let verdict = match guard {
        Public => Ok(()),
        Operator => match caller.principal {
            Principal::Operator(_) => Ok(()),
            _ => Err(Error::forbidden("Only the platform operator may do this").with_code(Code::PermissionDenied)),
        },
        SignedIn | Guard::Permission(_) | Guard::AnyOf(_) if caller.tenant.is_none() => {
            Err(Error::unauthorized(NO_TENANT_CLAIM))
        }
        SignedIn => Ok(()),
        Guard::Permission(permission) => caller.require(permission),
        Guard::AnyOf(permissions) => match permissions.iter().find(|p| caller.permissions.contains(**p)) {
            Some(_) => Ok(()),
            None => permissions.first().map_or(Ok(()), |first| caller.require(*first)),
        },
    };
    if let Err(error) = verdict {
        return ApiError::App(error).into_response();
    }
    next.run(Request::from_parts(parts, body)).await
}

/// The endpoint → permission table in Markdown, as published in `docs/permissions.md`.
pub fn markdown_table() -> String {
    let mut out = String::from("| Method | Path | Guard |\n|---|---|---|\n");
    for (method, path, guard) in GUARDS {
        let guard = match guard {
            Public => "none (bootstrap: credentials in the request)".to_owned(),
            Operator => "platform operator".to_owned(),
            SignedIn => "any signed-in caller of an organisation".to_owned(),
            Guard::Permission(p) => format!("`{p}`"),
            Guard::AnyOf(permissions) => {
                let names: Vec<String> = permissions.iter().map(|p| format!("`{p}`")).collect();
                format!("one of {} (the service checks the one the request needs)", names.join(", "))
            }
        };
        out.push_str(&format!("| {method} | `{path}` | {guard} |\n"));
    }
    out
}

/// The permission catalogue in Markdown, with the platform roles that hold each permission.
pub fn markdown_catalogue() -> String {
    let mut out = String::from("| Permission | Allows | SUPER_ADMIN | ADMIN | USER |\n|---|---|---|---|---|\n");
    for p in Permission::ALL {
        let mark = |role: &str| {
            if tokenops_domain::permission::platform_grants(role).is_some_and(|g| g.contains(*p)) { "✓" } else { "" }
        };
        out.push_str(&format!(
            "| `{p}` | {} | {} | {} | {} |\n",
            p.description(),
            mark("SUPER_ADMIN"),
            mark("ADMIN"),
            mark("USER")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_routed_endpoint_has_exactly_one_guard() {
        let document = crate::document();
        let mut routed = Vec::new();
        // The document also describes the identity provider's token endpoint, which is outside
        // the API and its access layer.
        for (path, item) in document.paths.paths.iter().filter(|(path, _)| path.starts_with("/api/")) {
            for (method, operation) in [
                ("GET", &item.get),
                ("POST", &item.post),
                ("PUT", &item.put),
                ("PATCH", &item.patch),
                ("DELETE", &item.delete),
            ] {
                if operation.is_some() {
                    routed.push((method, path.clone()));
                }
            }
        }
        let unguarded: Vec<_> = routed
            .iter()
            .filter(|(m, p)| guard_of(&Method::from_bytes(m.as_bytes()).unwrap_or(Method::GET), p).is_none())
            .collect();
        assert!(unguarded.is_empty(), "endpoints missing from access::GUARDS: {unguarded:?}");
        let stale: Vec<_> = GUARDS
            .iter()
            .filter(|(m, p, _)| !routed.iter().any(|(rm, rp)| rm == m && rp == p))
            .map(|(m, p, _)| format!("{m} {p}"))
            .collect();
        assert!(stale.is_empty(), "access::GUARDS names endpoints that are not routed: {stale:?}");
        let mut keys: Vec<_> = GUARDS.iter().map(|(m, p, _)| (*m, *p)).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), GUARDS.len(), "an endpoint is listed twice");
    }

    #[test]
    fn the_published_tables_match_the_code() {
        let doc = include_str!("../../../docs/permissions.md");
        let table = markdown_table();
        let catalogue = markdown_catalogue();
        assert!(doc.contains(&table), "docs/permissions.md is out of date; the endpoint table is:\n{table}");
        assert!(doc.contains(&catalogue), "docs/permissions.md is out of date; the catalogue is:\n{catalogue}");
    }
}
