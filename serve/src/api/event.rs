//! One event and what became of it: its envelope, and for each consumer whose subscription
//! accepts its version, every delivery generation and attempt (ids, statuses, error codes,
//! times; never a payload).

use axum::Json;
use axum::extract::State;
use evc_runtime::{AttemptRecord, DeliveryRecord, EventRecord};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::AppState;
use crate::api::Segment;
use crate::auth::Caller;
use crate::error::{ApiError, Problem, Unavailable};

/// An event's envelope and its deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventDetail {
    /// The event.
    pub(crate) event_id: String,
    /// Its place in the outbox's append order.
    pub(crate) seq: i64,
    /// The event type.
    pub(crate) event_type: String,
    /// The version it was produced with.
    pub(crate) version: String,
    /// The order key its deliveries hold.
    pub(crate) order_key: String,
    /// Who produced it.
    pub(crate) producer_class: String,
    /// Its tenant, if any.
    pub(crate) tenant: Option<String>,
    /// The producer's idempotency key, if any.
    pub(crate) idempotency_key: Option<String>,
    /// Its W3C trace id.
    pub(crate) trace_id: Option<String>,
    /// Its correlation id, if any.
    pub(crate) correlation_id: Option<String>,
    /// The event that caused it, if any.
    pub(crate) causation_id: Option<String>,
    /// The payload's size in bytes (the payload itself is not shown).
    pub(crate) payload_bytes: u64,
    /// The delivery of each consumer whose subscription accepts the event's version.
    pub(crate) deliveries: Vec<ConsumerDelivery>,
}

/// What became of an event at one consumer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ConsumerDelivery {
    /// The consumer.
    pub(crate) consumer: String,
    /// Every generation that has a row, oldest first; empty once its only generation was
    /// acked (an ack removes the row; its attempt stays).
    pub(crate) generations: Vec<Generation>,
    /// Every attempt, every generation, in the order they were made.
    pub(crate) attempts: Vec<Attempt>,
}

/// One generation of a delivery.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Generation {
    /// 0 for the delivery the append wrote; one more per replay.
    pub(crate) generation: u32,
    /// `pending`, `leased`, `dead`, `quarantined`, `replayed` or `discarded`.
    pub(crate) status: String,
    /// Attempts made.
    pub(crate) attempts: u32,
    /// The worker holding its lease, when leased.
    pub(crate) owner: Option<String>,
    /// When it is due, epoch seconds.
    pub(crate) available_at: f64,
    /// The last attempt's error code.
    pub(crate) last_error_code: Option<String>,
    /// The replay that wrote it, if any.
    pub(crate) replay_id: Option<i64>,
}

/// One attempt at a delivery.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Attempt {
    /// The generation it belongs to.
    pub(crate) generation: u32,
    /// The attempt number, from 1.
    pub(crate) attempt: u32,
    /// The worker that made it.
    pub(crate) owner: String,
    /// `acked`, `retry`, `dead`, `quarantined` or `lease_expired`.
    pub(crate) outcome: String,
    /// The error code of a failure.
    pub(crate) error_code: Option<String>,
    /// When the handler started, epoch seconds.
    pub(crate) started_at: f64,
    /// How long it took, in milliseconds.
    pub(crate) duration_ms: u64,
}

/// An event's envelope, and every delivery and attempt of it.
#[utoipa::path(
    get,
    path = "/api/v1/events/{event_id}",
    tag = "timeline",
    params(("event_id" = String, Path, description = "The event's UUID")),
    responses(
        (status = 200, description = "The event and its deliveries", body = EventDetail),
        (status = 400, description = "Not a UUID", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such event", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
pub(crate) async fn event(
    State(state): State<AppState>,
    _caller: Caller,
    Segment(event_id): Segment,
) -> Result<Json<EventDetail>, ApiError> {
    let id: Uuid = event_id
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("`{event_id}` is not a UUID")))?;
    Ok(Json(load(&state, id).await?))
}

/// The event `id` and its deliveries, as the API and the web page show them.
pub(crate) async fn load(state: &AppState, id: Uuid) -> Result<EventDetail, ApiError> {
    let record = state
        .outbox
        .event(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("event {id}")))?;
    let registry = state.outbox.registry();
    let mut deliveries = Vec::new();
    for consumer in registry.consumers.iter().filter(|c| {
        c.subscriptions.iter().any(|s| {
            s.event == record.event_type && s.versions.contains(&record.schema_version.as_str())
        })
    }) {
        let (generations, attempts) = state.outbox.delivery_history(id, consumer.name).await?;
        deliveries.push(ConsumerDelivery {
            consumer: consumer.name.to_owned(),
            generations: generations.iter().map(generation).collect(),
            attempts: attempts.iter().map(attempt).collect(),
        });
    }
    Ok(detail(id, record, deliveries))
}

fn detail(id: Uuid, record: EventRecord, deliveries: Vec<ConsumerDelivery>) -> EventDetail {
    EventDetail {
        event_id: id.to_string(),
        seq: record.seq,
        event_type: record.event_type,
        version: record.schema_version,
        order_key: record.order_key,
        producer_class: record.producer_class,
        tenant: record.tenant_scope,
        idempotency_key: record.idempotency_key,
        trace_id: record.trace_id,
        correlation_id: record.correlation_id,
        causation_id: record.causation_id,
        payload_bytes: record.payload_bytes,
        deliveries,
    }
}

fn generation(record: &DeliveryRecord) -> Generation {
    Generation {
        generation: record.generation,
        status: record.status.as_str().to_owned(),
        attempts: record.attempts,
        owner: record.owner.clone(),
        available_at: record.available_at,
        last_error_code: record.last_error_code.clone(),
        replay_id: record.replay_id,
    }
}

fn attempt(record: &AttemptRecord) -> Attempt {
    Attempt {
        generation: record.generation,
        attempt: record.attempt,
        owner: record.owner.clone(),
        outcome: record.outcome.clone(),
        error_code: record.error_code.clone(),
        started_at: record.started_at,
        duration_ms: record.duration_ms,
    }
}
