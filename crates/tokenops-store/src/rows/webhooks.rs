//! Webhook registrations, deliveries and delivery signing keys as read from and written to
//! either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::encode::{int4, names_text};
use crate::{StoreResult, WebhookSigningKeyRecord};
use tokenops_domain::webhook::{Delivery, DeliveryStatus, FailureClass, SignatureScheme, Webhook, WebhookStatus};

pub const WEBHOOK_COLUMNS: &str = "id, tenant_id, url, signature_scheme, event_types, status, consecutive_failures, sealed_secret, \
     sealed_previous_secret, previous_secret_expires_at, created_at, updated_at, deleted_at";

pub const DELIVERY_COLUMNS: &str = "id, tenant_id, event_id, webhook_id, generation, status, attempts, created_at, updated_at, \
     next_retry_at, failure_class, failure_reason, parked_at, last_attempt_at, last_status_code";

pub const WEBHOOKS: Table = Table { name: "webhooks", columns: WEBHOOK_COLUMNS, key: "id" };
pub const DELIVERIES: Table = Table { name: "webhook_deliveries", columns: DELIVERY_COLUMNS, key: "id" };

pub fn webhook(row: &impl Columns) -> StoreResult<Webhook> {
    Ok(Webhook {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        url: row.text("url")?,
        signature_scheme: row.parsed("signature_scheme", "signature scheme", SignatureScheme::parse)?,
        event_types: row.names("event_types")?,
        status: row.parsed("status", "webhook status", WebhookStatus::parse)?,
        consecutive_failures: row.narrow("consecutive_failures", "consecutive failure count")?,
        sealed_secret: row.opt_text("sealed_secret")?,
        sealed_previous_secret: row.opt_text("sealed_previous_secret")?,
        previous_secret_expires_at: row.opt_timestamp("previous_secret_expires_at")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
        deleted_at: row.opt_timestamp("deleted_at")?,
    })
}

pub fn delivery(row: &impl Columns) -> StoreResult<Delivery> {
    Ok(Delivery {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        event_id: row.uuid("event_id")?,
        webhook_id: row.uuid("webhook_id")?,
        generation: row.narrow("generation", "delivery generation")?,
        status: row.parsed("status", "delivery status", DeliveryStatus::parse)?,
        attempts: row.narrow("attempts", "delivery attempts")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
        next_retry_at: row.opt_timestamp("next_retry_at")?,
        failure_class: row.opt_parsed("failure_class", "failure class", FailureClass::parse)?,
        failure_reason: row.opt_text("failure_reason")?,
        parked_at: row.opt_timestamp("parked_at")?,
        last_attempt_at: row.opt_timestamp("last_attempt_at")?,
        last_status_code: row
            .opt_int("last_status_code")?
            .map(|v| u16::try_from(v).map_err(|_| crate::StoreError::Corrupt(format!("HTTP status {v}"))))
            .transpose()?,
    })
}

/// Not an organisation's: read whole, in order, and written by `kid`.
pub const WEBHOOK_SIGNING_KEYS: Table =
    Table { name: "webhook_signing_keys", columns: "kid, sealed_key, created_at, retire_at", key: "kid" };

pub fn webhook_signing_key(row: &impl Columns) -> StoreResult<WebhookSigningKeyRecord> {
    Ok(WebhookSigningKeyRecord {
        kid: row.text("kid")?,
        sealed_key: row.text("sealed_key")?,
        created_at: row.timestamp("created_at")?,
        retire_at: row.opt_timestamp("retire_at")?,
    })
}

/// The event types as the JSON text the table keeps on both backends.
impl Encode for Webhook {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            (&self.url).into(),
            self.signature_scheme.as_str().into(),
            names_text(&self.event_types).into(),
            self.status.as_str().into(),
            int4(self.consecutive_failures, "failure count")?.into(),
            self.sealed_secret.as_ref().into(),
            self.sealed_previous_secret.as_ref().into(),
            self.previous_secret_expires_at.into(),
            self.created_at.into(),
            self.updated_at.into(),
            self.deleted_at.into(),
        ])
    }
}

impl Encode for Delivery {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.event_id.into(),
            self.webhook_id.into(),
            int4(self.generation, "generation")?.into(),
            self.status.as_str().into(),
            int4(self.attempts, "attempts")?.into(),
            self.created_at.into(),
            self.updated_at.into(),
            self.next_retry_at.into(),
            self.failure_class.map(|c| c.as_str()).into(),
            self.failure_reason.as_ref().into(),
            self.parked_at.into(),
            self.last_attempt_at.into(),
            self.last_status_code.map(i32::from).into(),
        ])
    }
}

impl Encode for WebhookSigningKeyRecord {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![(&self.kid).into(), (&self.sealed_key).into(), self.created_at.into(), self.retire_at.into()])
    }
}
