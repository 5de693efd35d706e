//! `/api/v1/evidence`: what the ledger alone says over a window (docs/runtime.md, "Usage
//! evidence"), as `evc evidence` prints it, and the snapshots the dispatchers recorded of it
//! (`/api/v1/evidence/snapshots`, "Recorded evidence").

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use evc_runtime::{EvidenceQuery, EvidenceReport, EvidenceSnapshot, MAX_EVIDENCE_SNAPSHOTS};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::Params;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, Problem, Unavailable};

/// The window and thresholds of the report.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct EvidenceParams {
    /// How far back to read, in seconds (default a week; at most ten years).
    window_s: Option<u64>,
    /// The slot in which two consumers' failures count as failing together, in seconds
    /// (default 60).
    correlation_s: Option<u64>,
    /// List a signal seen at least this many times (default 2).
    min_count: Option<u32>,
}

/// The signals of one window.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EvidenceView {
    /// The start of the window (epoch seconds).
    since: f64,
    /// Its length, in seconds.
    window_s: f64,
    /// The slot of `failing_together`, in seconds.
    correlation_s: f64,
    /// The fewest occurrences a listed signal has.
    min_count: u32,
    /// Pairs of event types appended in one trace, with the traces holding both.
    co_triggered: Vec<PairView>,
    /// Pairs of consumers with a failed attempt each in one slot, with the slots.
    failing_together: Vec<PairView>,
    /// (producer class, consumer) pairs with repeated dead letters or lag breaches.
    chronic: Vec<ChronicView>,
    /// Deliveries dead-lettered or quarantined, by the step kind of the consumer's executor
    /// class.
    escalations: Vec<EscalationsView>,
}

/// Two names seen together, and how often.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PairView {
    /// The first, by name.
    first: String,
    /// The second.
    second: String,
    /// How often: traces (co-triggered) or slots (failing together).
    count: u64,
}

/// A consumer's trouble with the events of one producer class.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ChronicView {
    /// The producer class.
    producer_class: String,
    /// The consumer.
    consumer: String,
    /// Its deliveries of those events dead-lettered or quarantined.
    dead_letters: u64,
    /// Lag breaches of the pair opened.
    lag_breaches: u64,
}

/// Escalations of one step kind.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EscalationsView {
    /// The kind of the consumers' executor class, or `unclassified`.
    step_kind: String,
    /// Deliveries dead-lettered or quarantined.
    escalations: u64,
    /// Per consumer.
    consumers: BTreeMap<String, u64>,
}

impl From<EvidenceReport> for EvidenceView {
    fn from(report: EvidenceReport) -> Self {
        Self {
            since: report.since,
            window_s: report.window_s,
            correlation_s: report.correlation_s,
            min_count: report.min_count,
            co_triggered: report
                .co_triggered
                .into_iter()
                .map(|pair| PairView {
                    first: pair.first,
                    second: pair.second,
                    count: pair.traces,
                })
                .collect(),
            failing_together: report
                .failing_together
                .into_iter()
                .map(|pair| PairView {
                    first: pair.first,
                    second: pair.second,
                    count: pair.slots,
                })
                .collect(),
            chronic: report
                .chronic
                .into_iter()
                .map(|pair| ChronicView {
                    producer_class: pair.producer_class,
                    consumer: pair.consumer,
                    dead_letters: pair.dead_letters,
                    lag_breaches: pair.lag_breaches,
                })
                .collect(),
            escalations: report
                .escalations
                .into_iter()
                .map(|kind| EscalationsView {
                    step_kind: kind.step_kind,
                    escalations: kind.escalations,
                    consumers: kind.consumers,
                })
                .collect(),
        }
    }
}

/// The longest window read: ten years.
const MAX_WINDOW_S: u64 = 3_650 * 86_400;

/// Usage evidence over a window.
#[utoipa::path(
    get,
    path = "/api/v1/evidence",
    tag = "evidence",
    params(EvidenceParams),
    responses(
        (status = 200, description = "The signals of the window", body = EvidenceView),
        (status = 400, description = "A bad window, slot or threshold", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn evidence(
    State(state): State<AppState>,
    _caller: Caller,
    Params(params): Params<EvidenceParams>,
) -> Result<Json<EvidenceView>, ApiError> {
    let window = params.window_s.unwrap_or(7 * 86_400);
    let correlation = params.correlation_s.unwrap_or(60);
    if !(1..=MAX_WINDOW_S).contains(&window) || !(1..=MAX_WINDOW_S).contains(&correlation) {
        return Err(ApiError::BadRequest(format!(
            "window_s and correlation_s must be 1 to {MAX_WINDOW_S}"
        )));
    }
    let min_count = params.min_count.unwrap_or(2);
    if min_count == 0 {
        return Err(ApiError::BadRequest(
            "min_count must be at least 1".to_owned(),
        ));
    }
    let query = EvidenceQuery::over(std::time::Duration::from_secs(window))
        .correlation(std::time::Duration::from_secs(correlation))
        .min_count(min_count);
    Ok(Json(state.outbox.evidence(&query).await?.into()))
}

/// How many snapshots to list.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct SnapshotParams {
    /// At most this many, newest first (default 50; 1 to 1,000).
    limit: Option<u32>,
}

/// A report a dispatcher recorded for one slot.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SnapshotView {
    /// The start of the slot the snapshot stands for (epoch seconds).
    slot: f64,
    /// When it was recorded (epoch seconds).
    recorded_at: f64,
    /// The signals, each with the window and counts it was read with.
    report: EvidenceView,
}

/// The recorded snapshots, newest slot first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SnapshotsView {
    /// The snapshots.
    snapshots: Vec<SnapshotView>,
}

impl From<EvidenceSnapshot> for SnapshotView {
    fn from(snapshot: EvidenceSnapshot) -> Self {
        Self {
            slot: snapshot.slot,
            recorded_at: snapshot.recorded_at,
            report: snapshot.report.into(),
        }
    }
}

/// The usage evidence the dispatchers recorded (the contracts' `evidence` of `evc.yaml`).
#[utoipa::path(
    get,
    path = "/api/v1/evidence/snapshots",
    tag = "evidence",
    params(SnapshotParams),
    responses(
        (status = 200, description = "The newest snapshots, newest slot first",
            body = SnapshotsView),
        (status = 400, description = "A bad limit", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn snapshots(
    State(state): State<AppState>,
    _caller: Caller,
    Params(params): Params<SnapshotParams>,
) -> Result<Json<SnapshotsView>, ApiError> {
    let limit = params.limit.unwrap_or(50);
    if !(1..=MAX_EVIDENCE_SNAPSHOTS).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be 1 to {MAX_EVIDENCE_SNAPSHOTS}"
        )));
    }
    let snapshots = state.outbox.evidence_snapshots(limit).await?;
    Ok(Json(SnapshotsView {
        snapshots: snapshots.into_iter().map(SnapshotView::from).collect(),
    }))
}
