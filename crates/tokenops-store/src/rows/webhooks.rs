//! Webhook registrations, deliveries and delivery signing keys as read from and written to
//! either backend.

use super::{Int, JsonTextList, Serde};
use crate::WebhookSigningKeyRecord;
use tokenops_domain::webhook::{Delivery, Webhook};

stored_table! {
    columns WEBHOOK_COLUMNS of "webhooks";
    table WEBHOOKS by id;
    decode webhook -> Webhook, encode;
    {
        id, tenant_id, url, signature_scheme,
        event_types: JsonTextList,
        status,
        consecutive_failures: Int,
        sealed_secret, sealed_previous_secret, previous_secret_expires_at, created_at, updated_at,
        deleted_at,
        past_subscriptions: Serde,
    }
}

stored_table! {
    columns DELIVERY_COLUMNS of "webhook_deliveries";
    table DELIVERIES by id;
    decode delivery -> Delivery, encode;
    {
        id, tenant_id, event_id, webhook_id,
        generation: Int,
        status,
        attempts: Int,
        created_at, updated_at, next_retry_at, failure_class, failure_reason, parked_at,
        last_attempt_at,
        last_status_code: Int,
    }
}

stored_table! {
    columns WEBHOOK_SIGNING_KEY_COLUMNS of "webhook_signing_keys";
    /// Not an organisation's: read whole, in order, and written by `kid`.
    table WEBHOOK_SIGNING_KEYS by kid;
    decode webhook_signing_key -> WebhookSigningKeyRecord, encode;
    { kid, sealed_key, created_at, retire_at }
}
