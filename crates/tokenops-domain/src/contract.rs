//! Token contracts: one per asset per organisation, deployed or adopted on the ledger; their
//! status and the criteria of their list.

use crate::asset::AssetId;
use crate::chain::Address;
use crate::wire::wire_enum;
use crate::{TenantId, Timestamp};
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    pub id: Uuid,
    pub tenant_id: TenantId,
    /// Unique per organisation.
    pub asset_id: AssetId,
    pub name: String,
    pub symbol: String,
    /// The currency's minor unit: the token's `decimals`.
    pub decimals: u8,
    pub status: ContractStatus,
    /// The token's address: set once deployed or adopted (`None` while PENDING, and when a
    /// deployment FAILED).
    pub address: Option<Address>,
    /// An existing token to adopt instead of deploying one (as requested).
    pub adopt_address: Option<Address>,
    /// Why deployment failed (FAILED only).
    pub failure_reason: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// Which contracts a list shows.
#[derive(Debug, Clone, Default)]
pub struct ContractFilter {
    pub asset_id: Option<AssetId>,
    pub status: Option<ContractStatus>,
}

wire_enum! {
    /// A token contract's status: PENDING while it is deployed (or adopted), then ACTIVE; INACTIVE
    /// switched off by the bank; FAILED when deployment failed (the asset may be registered again).
    ContractStatus {
        Pending => "PENDING",
        Active => "ACTIVE",
        Inactive => "INACTIVE",
        Failed => "FAILED",
    }
}
