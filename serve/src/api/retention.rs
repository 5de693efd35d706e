//! `/api/v1/retention`: the retention periods of the registry the server runs on (`retention`
//! of the contracts) and the newest purges, as their audit rows record them.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use evc_runtime::PurgeRecord;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::Params;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, Problem, Unavailable};

/// The retention periods and the newest purges.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RetentionView {
    /// Whether any table has a period (`false`: every row is kept).
    declared: bool,
    /// How long the settled events of each event type with a period stay, in milliseconds,
    /// by event type.
    events_ms: BTreeMap<String, u64>,
    /// How long attempts of deliveries no longer open stay, in milliseconds (null: kept).
    attempts_ms: Option<u64>,
    /// How long shadow runs stay, in milliseconds (null: kept).
    reconciliations_ms: Option<u64>,
    /// How long rejects stay, in milliseconds (null: kept).
    rejects_ms: Option<u64>,
    /// How long idempotency records outlive the event retention of their consumers, in
    /// milliseconds (null: kept).
    effects_ms: Option<u64>,
    /// The newest purges, newest first.
    purges: Vec<PurgeView>,
}

/// A purge, as its audit row records it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PurgeView {
    /// The audit row.
    purge_id: i64,
    /// `retention`, `events` or `rejects`.
    ledger: String,
    /// The time a retention purge's periods counted back from, or the fixed cutoff of the
    /// others (epoch seconds).
    cutoff: f64,
    /// Why.
    reason: String,
    /// Who.
    actor: String,
    /// When it ran (epoch seconds).
    purged_at: f64,
    /// Rows removed, by table: `events`, `deliveries`, `attempts`, `reconciliations`,
    /// `replay_items`, `rejects`, `effects`.
    rows: BTreeMap<String, u64>,
}

impl From<PurgeRecord> for PurgeView {
    fn from(purge: PurgeRecord) -> Self {
        Self {
            purge_id: purge.purge_id,
            ledger: purge.ledger,
            cutoff: purge.cutoff,
            reason: purge.reason,
            actor: purge.actor,
            purged_at: purge.purged_at,
            rows: purge.rows,
        }
    }
}

/// How many purges to list.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct PurgeLimit {
    /// At most this many (default 20, at most 1,000).
    limit: Option<u32>,
}

/// The retention periods of the registry and the newest purges.
#[utoipa::path(
    get,
    path = "/api/v1/retention",
    tag = "retention",
    params(PurgeLimit),
    responses(
        (status = 200, description = "The periods and the newest purges", body = RetentionView),
        (status = 400, description = "A bad limit", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn retention(
    State(state): State<AppState>,
    _caller: Caller,
    Params(query): Params<PurgeLimit>,
) -> Result<Json<RetentionView>, ApiError> {
    let limit = match query.limit.unwrap_or(20) {
        limit @ 1..=1_000 => limit,
        _ => {
            return Err(ApiError::BadRequest("limit must be 1 to 1000".to_owned()));
        }
    };
    let periods = state.outbox.registry().retention;
    let purges = state.outbox.purges(limit).await?;
    Ok(Json(RetentionView {
        declared: !periods.keeps_everything(),
        events_ms: periods
            .events
            .iter()
            .map(|entry| (entry.event_type.to_owned(), entry.ms))
            .collect(),
        attempts_ms: periods.attempts_ms,
        reconciliations_ms: periods.reconciliations_ms,
        rejects_ms: periods.rejects_ms,
        effects_ms: periods.effects_ms,
        purges: purges.into_iter().map(Into::into).collect(),
    }))
}
