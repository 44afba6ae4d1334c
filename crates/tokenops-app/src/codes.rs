//! The error-code table: every stable `code` an error body can carry, each declared once with its
//! HTTP status and, where the message never varies, its default message. An [`Error`] carries a
//! [`Code`]; its status is the code's, so a code cannot be answered with two statuses. Codes of
//! HTTP itself (405, 413, 415, unknown routes, malformed JSON, `API-Version`) are the API's:
//! `tokenops_api::error::HttpCode`, declared with the same macro. The OpenAPI document enumerates
//! both tables (`tokenops_api::error::all_codes`).
//!
//! [`Error`]: crate::Error

/// Declares a table of error codes: `Variant = "WIRE_NAME", status[, "default message"];`.
/// Generates the enum with `wire()`, `status()`, `default_message()` and `ALL`.
#[macro_export]
macro_rules! error_codes {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, $status:literal $(, $message:literal)? ; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every code of the table, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The name on the wire (the body's `code`).
            pub const fn wire(self) -> &'static str {
                match self { $( $name::$variant => $wire, )* }
            }

            /// The HTTP status every error with this code is answered with.
            pub const fn status(self) -> u16 {
                match self { $( $name::$variant => $status, )* }
            }

            /// The message when the code's message never varies.
            pub const fn default_message(self) -> Option<&'static str> {
                match self { $( $name::$variant => $crate::error_codes!(@message $($message)?), )* }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.wire())
            }
        }
    };
    (@message $message:literal) => { Some($message) };
    (@message) => { None };
}

error_codes! {
    /// The codes of the services and the extractors' validation; the single table of them.
    pub enum Code {
        // The constructors' defaults.
        /// A request that breaks a rule; `details` names the fields.
        ValidationFailed = "VALIDATION_FAILED", 400;
        Unauthorized = "UNAUTHORIZED", 401;
        Forbidden = "FORBIDDEN", 403;
        NotFound = "NOT_FOUND", 404;
        Conflict = "CONFLICT", 409;
        Unprocessable = "UNPROCESSABLE", 422;
        /// An unexpected failure (a dependency's included); its cause is logged, never shown.
        InternalError = "INTERNAL_ERROR", 500, "System error occurred";

        // 400
        InvalidCursor = "INVALID_CURSOR", 400;
        InvalidRequestParameter = "INVALID_REQUEST_PARAMETER", 400;
        PasswordPolicy = "PASSWORD_POLICY", 400;
        UnknownPermissions = "UNKNOWN_PERMISSIONS", 400;
        PlatformRoleReadOnly = "PLATFORM_ROLE_READ_ONLY", 400, "Platform roles cannot be edited";
        SelfChange = "SELF_CHANGE", 400, "You cannot change or remove yourself";
        OwnerChange = "OWNER_CHANGE", 400, "The organisation's owner cannot be changed or removed";

        // 401
        InvalidCredentials = "INVALID_CREDENTIALS", 401, "Invalid credentials.";
        InvalidRefreshToken = "INVALID_REFRESH_TOKEN", 401, "Refresh token is invalid or expired.";
        AccessRevoked = "ACCESS_REVOKED", 401, "Your access has been revoked.";

        // 403
        PermissionDenied = "PERMISSION_DENIED", 403;

        // 404
        AccountNotFound = "ACCOUNT_NOT_FOUND", 404;
        ClientNotFound = "CLIENT_NOT_FOUND", 404;
        ContractNotFound = "CONTRACT_NOT_FOUND", 404;
        CustomerNotFound = "CUSTOMER_NOT_FOUND", 404;
        GroupNotFound = "GROUP_NOT_FOUND", 404;
        LockNotFound = "LOCK_NOT_FOUND", 404;
        /// A lock whose LOCK operation has not settled yet: the same request may succeed later.
        LockNotYetVisible = "LOCK_NOT_YET_VISIBLE", 404;
        MemberNotFound = "MEMBER_NOT_FOUND", 404;
        NoActiveContract = "NO_ACTIVE_CONTRACT", 404;
        PolicyNotFound = "POLICY_NOT_FOUND", 404;
        PolicyVersionNotFound = "POLICY_VERSION_NOT_FOUND", 404;
        TemplateNotFound = "TEMPLATE_NOT_FOUND", 404;
        RevealNotFound = "REVEAL_NOT_FOUND", 404, "This secret link is unknown, used or expired";
        RoleNotFound = "ROLE_NOT_FOUND", 404;
        TransactionNotFound = "TRANSACTION_NOT_FOUND", 404;
        UserNotFound = "USER_NOT_FOUND", 404;

        // 409
        AccountExists = "ACCOUNT_EXISTS", 409;
        ContractExists = "CONTRACT_EXISTS", 409;
        CustomerExists = "CUSTOMER_EXISTS", 409;
        EmailExists = "EMAIL_EXISTS", 409;
        GroupDeactivated = "GROUP_DEACTIVATED", 409;
        GroupKeyInUse = "GROUP_KEY_IN_USE", 409;
        /// The same Idempotency-Key while its first request is still running (with `Retry-After`).
        IdempotencyConflict = "IDEMPOTENCY_CONFLICT", 409;
        /// Another non-archived policy holds the (ruleType, action, templateKey) slot.
        PolicySlotTaken = "POLICY_SLOT_TAKEN", 409;
        /// An archived policy cannot be activated, nor take versions.
        PolicyArchived = "POLICY_ARCHIVED", 409;
        RoleInUse = "ROLE_IN_USE", 409;
        RoleNameInUse = "ROLE_NAME_IN_USE", 409;
        RoleNameReserved = "ROLE_NAME_RESERVED", 409;
        TemplateKeyExists = "TEMPLATE_KEY_EXISTS", 409;
        UserNotActivated = "USER_NOT_ACTIVATED", 409;

        // 422
        AccountNotProvisioned = "ACCOUNT_NOT_PROVISIONED", 422;
        CustomerInactive = "CUSTOMER_INACTIVE", 422;
        IdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED", 422;
        TransitionNotAllowed = "TRANSITION_NOT_ALLOWED", 422;

        // 500
        LedgerUnavailable = "LEDGER_UNAVAILABLE", 500;
        /// A sort by a property the identity list (users, roles, groups) does not have: the
        /// spec's 500 for these lists, with the sortable properties named.
        UnknownSortProperty = "UNKNOWN_SORT_PROPERTY", 500;

        // Scripts and automations
        ScriptNotFound = "SCRIPT_NOT_FOUND", 404;
        /// A script's name is taken (the spec answers 400 for a duplicate name).
        ScriptNameExists = "SCRIPT_NAME_EXISTS", 400;
        /// The script's status forbids the change (see the script status machine).
        ScriptStateConflict = "SCRIPT_STATE_CONFLICT", 409;
        AutomationNotFound = "AUTOMATION_NOT_FOUND", 404;
        /// The automation's status or trigger forbids the run, or its script is not PUBLISHED.
        AutomationStateConflict = "AUTOMATION_STATE_CONFLICT", 409;
        /// Overrides that do not fit the script's declared parameters.
        OverridesDoNotFit = "OVERRIDES_DO_NOT_FIT", 422;
        /// A run that could not be requested: nothing was recorded; retry with the same key.
        RunNotRequested = "RUN_NOT_REQUESTED", 500;

        // Approvals
        SeparationOfDuties = "SEPARATION_OF_DUTIES", 403;
        ApprovalRequestNotFound = "APPROVAL_REQUEST_NOT_FOUND", 404;
        ApprovalTaskNotFound = "APPROVAL_TASK_NOT_FOUND", 404;
        ApprovalNotPending = "APPROVAL_NOT_PENDING", 409, "The approval request is no longer pending";
        TaskAlreadyActedOn = "TASK_ALREADY_ACTED_ON", 409, "The task has already been acted on";
        EarlierStepPending = "EARLIER_STEP_PENDING", 409, "An earlier step of the approval request is still pending";
        ApproversUnchanged = "APPROVERS_UNCHANGED", 409, "The approver set is unchanged";
        // Webhooks and delivery history.
        WebhookNotFound = "WEBHOOK_NOT_FOUND", 404;
        EventNotFound = "EVENT_NOT_FOUND", 404;
        DeliveryNotFound = "DELIVERY_NOT_FOUND", 404;
        WebhookUrlTaken = "WEBHOOK_URL_TAKEN", 409;
        WebhookInactive = "WEBHOOK_INACTIVE", 409;
        DeliveryStillQueued = "DELIVERY_STILL_QUEUED", 409;
        ReplayBudgetExhausted = "REPLAY_BUDGET_EXHAUSTED", 429;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_unique_and_statuses_are_errors() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            assert!(seen.insert(code.wire()), "{} declared twice", code.wire());
            assert!((400..600).contains(&code.status()), "{code}");
        }
    }
}
