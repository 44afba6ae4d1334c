//! Dry runs of scripts (beyond the spec): one version of a script run now, in the sandbox,
//! against the organisation's live reads as the caller, with its submissions captured instead
//! of made. Nothing is written: no operation, no execution, no audit record.

use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tokenops_domain::TenantId;
use tokenops_domain::script::ScriptStatus;
use tokenops_scripting::Override;
use tokenops_store::Store;
use tokio::sync::Semaphore;
use uuid::Uuid;

use super::{declarations, import_sources, not_fitting, not_found};
use crate::automations::runs::{Halt, Sandbox, Script, Submissions, run_sources};
use crate::automations::values_json;
use crate::context::Caller;
use crate::error::{AppResult, Code, Error};

/// Dry runs at once per node; more wait their turn. Each holds a blocking thread for up to the
/// sandbox's wall-time limit, and requests must not be able to take every one.
pub const CONCURRENT_DRY_RUNS: usize = 4;

/// What to run: a version (default the current one), values over the declared defaults, and an
/// event for a script written for an EVENT trigger.
#[derive(Debug, Clone, Default)]
pub struct DryRunRequest {
    pub version: Option<u32>,
    pub overrides: Vec<Override>,
    pub event: Option<Value>,
}

/// What the run did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DryRunOut {
    pub script_id: Uuid,
    /// The version that ran.
    pub version: u32,
    /// SUCCEEDED or FAILED, as a run's history would record it.
    pub status: String,
    /// The parameters' values the run had.
    #[schema(value_type = Object)]
    pub parameters: Value,
    /// The bodies of the transactions the script would have submitted (as `POST
    /// /api/transactions` takes them), in order; none was submitted.
    #[schema(value_type = Vec<Object>)]
    pub submissions: Vec<Value>,
    /// The run's log as a run's history would show it (its value last, as `result: …`).
    pub log: Vec<String>,
    /// The error a run would record: `KIND: message (line, column)`.
    pub error: Option<String>,
}

/// A version ready to run.
struct Loaded {
    version: u32,
    source: String,
    /// The version's declared parameters, as stored.
    parameters: Value,
    sources: HashMap<String, String>,
}

pub struct DryRuns {
    pub store: Arc<dyn Store>,
    pub sandbox: Arc<Sandbox>,
    pub slots: Semaphore,
}

impl DryRuns {
    /// 404 for an unknown script or version, 409 for a deleted script, 422 for overrides that do
    /// not fit the version's parameters; 500 when the store failed under the run (its outcome
    /// would say nothing of the script). A script that fails is a 200 with its error.
    pub async fn run(
        &self,
        tenant: TenantId,
        caller: Caller,
        id: Uuid,
        request: DryRunRequest,
    ) -> AppResult<DryRunOut> {
        let loaded = self.load(tenant, id, &request).await?;
        let decls = declarations(&loaded.parameters)?;
        let values = tokenops_scripting::params::fit(&decls, &request.overrides).map_err(|problems| {
            not_fitting(Error::unprocessable, "overrides", problems).with_code(Code::OverridesDoNotFit)
        })?;
        let parameters = values_json(&values);
        let _slot = self.slots.acquire().await.map_err(Error::internal)?;
        let to_run = Script { source: loaded.source, sources: loaded.sources, values };
        let result = self.sandbox.run(tenant, caller, Submissions::Capture, to_run, request.event).await;
        if let Some(reason) = result.transient {
            return Err(Error::internal(format!("the dry run met a temporary failure: {reason}")));
        }
        Ok(DryRunOut {
            script_id: id,
            version: loaded.version,
            status: if result.error.is_some() { "FAILED" } else { "SUCCEEDED" }.to_owned(),
            parameters,
            submissions: result.captured,
            log: result.log,
            error: result.error,
        })
    }

    /// The version to run: its number, code, declared parameters and the sources of its
    /// imports (the current version's as a run resolves them; an older version's as their
    /// scripts are now).
    async fn load(&self, tenant: TenantId, id: Uuid, request: &DryRunRequest) -> AppResult<Loaded> {
        let mut tx = self.store.read().await?;
        let script = tx.scripts().get(tenant, id).await?.ok_or_else(|| not_found(id))?;
        if script.status == ScriptStatus::Deleted {
            return Err(Error::conflict(format!("Script {id} is deleted")).with_code(Code::ScriptStateConflict));
        }
        match request.version.filter(|v| *v != script.version) {
            None => {
                let sources = run_sources(tx.as_mut(), tenant, &script, false).await.map_err(|halt| match halt {
                    Halt::Fail(message) => Error::conflict(format!("Script {id} cannot run: {message}"))
                        .with_code(Code::ScriptStateConflict),
                    Halt::Retry(message) => Error::internal(message),
                })?;
                Ok(Loaded { version: script.version, source: script.source, parameters: script.parameters, sources })
            }
            Some(number) => {
                let version = tx.scripts().version(tenant, id, number).await?.ok_or_else(|| {
                    Error::not_found(format!("Script {id} has no version {number}")).with_code(Code::ScriptNotFound)
                })?;
                let sources = import_sources(tx.as_mut(), tenant, &version.source).await?;
                Ok(Loaded { version: number, source: version.source, parameters: version.parameters, sources })
            }
        }
    }
}
