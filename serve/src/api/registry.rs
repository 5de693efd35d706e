//! `/api/v1/registry`: the registry the server was opened on, against what the database holds
//! now (another deployment may have migrated it since).

use axum::Json;
use axum::extract::State;
use evc_runtime::StoreError;
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, Unavailable, report};

/// The server's registry against the database's.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RegistryParity {
    /// The digest of the registry the server was opened on.
    digest: String,
    /// Whether the database holds that registry, row for row.
    in_parity: bool,
    /// Each difference, one line each, in a fixed order (empty in parity).
    differences: Vec<String>,
}

/// Compares the registry the server was opened on with the database's rows.
#[utoipa::path(
    get,
    path = "/api/v1/registry",
    tag = "registry",
    responses(
        (status = 200, description = "The registry's parity with the database",
            body = RegistryParity),
        Unavailable,
    )
)]
pub(crate) async fn parity(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<Json<RegistryParity>, ApiError> {
    let differences = match state.outbox.ready().await {
        Ok(()) => Vec::new(),
        Err(StoreError::Drift(drift)) => {
            drift.differences.iter().map(ToString::to_string).collect()
        }
        Err(error) => {
            report(&error);
            return Err(ApiError::Store);
        }
    };
    Ok(Json(RegistryParity {
        digest: state.outbox.registry().digest.to_owned(),
        in_parity: differences.is_empty(),
        differences,
    }))
}
