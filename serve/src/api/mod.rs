//! `/api/v1`: the registry (event types, versions, schemas, which consumers accept which
//! versions), consumers (state, deliveries by status, lag, workers), dead letters and trace
//! timelines, as JSON. Every handler authenticates its caller ([`Caller`]); the OpenAPI
//! document is derived from the `#[utoipa::path]` attributes here.

use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use evc_runtime::{
    ConsumerDescriptor, ConsumerStatus, EventDescriptor, HandlerKind, Percentiles, Registry,
    ReplaySelection, SettledDelivery, StatusReport, TimelineEntry,
};
use serde::{Deserialize, Serialize};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, Problem, Unavailable};

mod cutover;
mod discard;
pub(crate) mod event;
mod evidence;
mod inventory;
mod payload;
mod registry;
mod replay;
mod retention;
mod schedule;
pub(crate) mod state;

/// The window of lag and latency percentiles when a request names none.
const DEFAULT_WINDOW_S: u32 = 300;
/// The longest window a request may name (a week).
const MAX_WINDOW_S: u32 = 7 * 24 * 3600;
/// Most dead letters one request lists.
const MAX_DEAD_LETTERS: u32 = 1_000;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "evc governance API",
        description = "Event types, consumers, dead letters and timelines of an evc outbox."
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    components(schemas(Problem))
)]
struct ApiDoc;

/// Declares the bearer scheme every `/api/v1` route requires.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The routes of `/api/v1` and the document describing them.
pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(event_types))
        .routes(routes!(event_type))
        .routes(routes!(consumers))
        .routes(routes!(consumer))
        .routes(routes!(dead_letters))
        .routes(routes!(timeline))
        .routes(routes!(replay::plan))
        .routes(routes!(replay::propose))
        .routes(routes!(replay::apply))
        .routes(routes!(discard::plan))
        .routes(routes!(discard::propose))
        .routes(routes!(discard::apply))
        .routes(routes!(state::pause))
        .routes(routes!(state::resume))
        .routes(routes!(state::mode))
        .routes(routes!(state::changes))
        .routes(routes!(cutover::report))
        .routes(routes!(cutover::explain))
        .routes(routes!(cutover::legacy_outcome))
        .routes(routes!(inventory::inventory))
        .routes(routes!(inventory::propose))
        .routes(routes!(inventory::apply))
        .routes(routes!(event::event))
        .routes(routes!(payload::payload))
        .routes(routes!(registry::parity))
        .routes(routes!(schedule::schedules))
        .routes(routes!(schedule::lag_breaches))
        .routes(routes!(retention::retention))
        .routes(routes!(evidence::evidence))
        .routes(routes!(evidence::snapshots))
}

/// A registered event type and who receives it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventTypeSummary {
    /// The event type's name.
    pub(crate) name: String,
    /// What happened.
    pub(crate) description: String,
    /// Who emits it.
    pub(crate) producer_class: String,
    /// Whether the type is deprecated.
    pub(crate) deprecated: bool,
    /// How its versions may evolve, as the contracts say; null when the server was started
    /// without them.
    pub(crate) compat: Option<String>,
    /// Its versions, ascending.
    pub(crate) versions: Vec<String>,
    /// The consumers subscribed to it.
    pub(crate) consumers: Vec<Subscriber>,
}

/// A consumer's subscription to one event type.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Subscriber {
    /// The consumer.
    pub(crate) consumer: String,
    /// Its semver requirement (`^1`).
    pub(crate) requirement: String,
    /// The versions the requirement accepts.
    pub(crate) versions: Vec<String>,
}

/// An event type with every version's schema.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventTypeDetail {
    /// The event type's name.
    pub(crate) name: String,
    /// What happened.
    pub(crate) description: String,
    /// Who emits it.
    pub(crate) producer_class: String,
    /// Payload fields that order deliveries (empty: the envelope's aggregate).
    pub(crate) order_key: Vec<String>,
    /// Whether the type is deprecated.
    pub(crate) deprecated: bool,
    /// Payload size cap in bytes.
    pub(crate) max_payload_bytes: u32,
    /// How its versions may evolve (`forward`, `breaking_with_policy`, ...), as the contracts
    /// say; null when the server was started without them.
    pub(crate) compat: Option<String>,
    /// Its versions, ascending.
    pub(crate) versions: Vec<VersionDetail>,
}

/// One version of an event type.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct VersionDetail {
    /// The semantic version.
    pub(crate) version: String,
    /// The payload's JSON Schema (2020-12).
    #[schema(value_type = Object)]
    pub(crate) schema: serde_json::Value,
    /// SHA-256 of the schema's canonical JSON, lower-case hex.
    pub(crate) schema_digest: String,
    /// The consumers whose requirement accepts this version.
    pub(crate) accepted_by: Vec<String>,
}

/// A consumer: what its contract declares and what its deliveries look like now.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ConsumerView {
    /// The consumer's name.
    pub(crate) name: String,
    /// `transactional` or `leased`.
    pub(crate) handler: String,
    /// The mode its contract declares (`off`, `shadow` or `live`).
    pub(crate) declared_mode: String,
    /// Whether deliveries are ordered per key.
    pub(crate) per_key_ordering: bool,
    /// Its retry policy.
    pub(crate) retry_policy: String,
    /// The executor class it runs on; null when the contracts register no classes.
    pub(crate) executor_class: Option<String>,
    /// Who answers when its workers fall silent (its class's `heartbeat_owner`); null
    /// without a class.
    pub(crate) heartbeat_owner: Option<String>,
    /// What it subscribes to.
    pub(crate) subscriptions: Vec<Subscription>,
    /// The mode in force: an operator's override, else the declared one.
    pub(crate) mode: String,
    /// Paused by an operator.
    pub(crate) paused: bool,
    /// Deliveries waiting to be claimed (due or backing off).
    pub(crate) pending: i64,
    /// Deliveries leased to a worker now.
    pub(crate) leased: i64,
    /// Dead-lettered deliveries.
    pub(crate) dead: i64,
    /// Quarantined deliveries.
    pub(crate) quarantined: i64,
    /// Seconds the oldest pending delivery has waited; null when nothing is pending.
    pub(crate) oldest_pending_s: Option<f64>,
    /// Fenced operations refused for a stale token.
    pub(crate) stale_rejections: i64,
    /// Produce-to-ack lag per producer class, over the window.
    pub(crate) lag: Vec<ClassLag>,
    /// Attempt durations over the window; null without attempts.
    pub(crate) attempt_latency: Option<Latency>,
    /// Workers with a heartbeat row.
    pub(crate) workers: Vec<Worker>,
    /// Its cut-over gate and the progress toward it, in counts (operators read the judgement
    /// at `/api/v1/consumers/{name}/cutover`); null when its contract declares none, or for a
    /// server of one tenant.
    pub(crate) cutover_gate: Option<GateProgressView>,
}

/// A consumer's cut-over gate and how far its shadow runs are toward it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GateProgressView {
    /// Compared deliveries the gate needs.
    pub(crate) min_reconciled: u32,
    /// How long they must span, first to newest, in milliseconds.
    pub(crate) min_span_ms: u64,
    /// Unexplained differences the gate lets pass.
    pub(crate) max_unexplained: u32,
    /// When an operator last moved it to shadow (epoch seconds); null: every run counts.
    pub(crate) since: Option<f64>,
    /// Deliveries run in shadow mode since (counted up to 100,000, or the gate's count when
    /// that is more).
    pub(crate) shadow_runs: u64,
    /// Of those, the ones with a legacy outcome to compare with (counted as far).
    pub(crate) compared: u64,
}

/// A subscription of a consumer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Subscription {
    /// The event type.
    pub(crate) event_type: String,
    /// The semver requirement.
    pub(crate) requirement: String,
    /// The versions it accepts.
    pub(crate) versions: Vec<String>,
}

/// Produce-to-ack lag of one producer class's events.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ClassLag {
    /// The producer class.
    pub(crate) producer_class: String,
    /// The lag's percentiles.
    pub(crate) latency: Latency,
}

/// p50, p95 and p99 of a sample, in seconds.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Latency {
    /// Values in the sample.
    pub(crate) samples: i64,
    /// Median.
    pub(crate) p50_s: f64,
    /// 95th percentile.
    pub(crate) p95_s: f64,
    /// 99th percentile.
    pub(crate) p99_s: f64,
}

/// A worker of a consumer, by its heartbeat.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Worker {
    /// The worker (lease owner).
    pub(crate) owner: String,
    /// Seconds since its last heartbeat, when past the consumer's threshold; null while it
    /// beats in time.
    pub(crate) silent_for_s: Option<f64>,
}

/// A dead or quarantined delivery. No payload: the event id leads to it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeadLetter {
    /// The event.
    pub(crate) event_id: String,
    /// The event type.
    pub(crate) event_type: String,
    /// The version the event was produced with.
    pub(crate) version: String,
    /// 0 for the delivery the append wrote; one more per replay since.
    pub(crate) generation: i32,
    /// `dead` or `quarantined`.
    pub(crate) status: String,
    /// Attempts made.
    pub(crate) attempts: i32,
    /// The last attempt's error code (never a message).
    pub(crate) last_error_code: Option<String>,
    /// When it settled, epoch seconds.
    pub(crate) settled_at: f64,
    /// Whether the consumer still accepts the event's version (a replay needs it).
    pub(crate) version_supported: bool,
}

/// One thing recorded for a trace.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TimelineItem {
    /// When, epoch seconds of the store's clock.
    pub(crate) at: f64,
    /// `event`, `delivery`, `attempt`, `replay` or `discard`.
    pub(crate) kind: String,
    /// The event.
    pub(crate) event_id: String,
    /// The consumer (deliveries and attempts).
    pub(crate) consumer: Option<String>,
    /// What happened (type and version, status, outcome and error code, approval).
    pub(crate) detail: String,
    /// The attempt number, or a delivery's attempts so far.
    pub(crate) attempt: Option<i32>,
}

/// The window of percentiles.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct Window {
    /// Seconds of attempts the lag and latency percentiles read (default 300, at most a
    /// week).
    pub(crate) window_s: Option<u32>,
}

impl Window {
    fn duration(&self) -> Result<Duration, ApiError> {
        match self.window_s.unwrap_or(DEFAULT_WINDOW_S) {
            0 => Err(ApiError::BadRequest(
                "window_s must be at least 1".to_owned(),
            )),
            seconds if seconds > MAX_WINDOW_S => Err(ApiError::BadRequest(format!(
                "window_s must be at most {MAX_WINDOW_S} (a week)"
            ))),
            seconds => Ok(Duration::from_secs(u64::from(seconds))),
        }
    }
}

/// How many dead letters to list.
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct Limit {
    /// At most this many, oldest first (default and maximum 1,000).
    pub(crate) limit: Option<u32>,
}

/// Every registered event type, by name.
#[utoipa::path(
    get,
    path = "/api/v1/event-types",
    tag = "registry",
    responses(
        (status = 200, description = "The event types", body = Vec<EventTypeSummary>),
        Unavailable,
    )
)]
async fn event_types(
    State(state): State<AppState>,
    _caller: Caller,
) -> Json<Vec<EventTypeSummary>> {
    let registry = state.outbox.registry();
    Json(
        registry
            .events
            .iter()
            .map(|event| EventTypeSummary {
                name: event.name.to_owned(),
                description: event.description.to_owned(),
                producer_class: event.producer_class.to_owned(),
                deprecated: event.deprecated,
                compat: state.catalog.compat.get(event.name).cloned(),
                versions: event
                    .versions
                    .iter()
                    .map(|v| v.version.to_owned())
                    .collect(),
                consumers: subscribers(registry, event),
            })
            .collect(),
    )
}

/// One event type with each version's schema and the consumers accepting it.
#[utoipa::path(
    get,
    path = "/api/v1/event-types/{name}",
    tag = "registry",
    params(("name" = String, Path, description = "The event type's name")),
    responses(
        (status = 200, description = "The event type", body = EventTypeDetail),
        (status = 404, description = "No such event type", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
async fn event_type(
    State(state): State<AppState>,
    _caller: Caller,
    Segment(name): Segment,
) -> Result<Json<EventTypeDetail>, ApiError> {
    Ok(Json(event_type_detail(&state, &name)?))
}

/// The event type `name` with each version's schema and the consumers accepting it.
pub(crate) fn event_type_detail(state: &AppState, name: &str) -> Result<EventTypeDetail, ApiError> {
    let registry = state.outbox.registry();
    let event = registry
        .event(name)
        .ok_or_else(|| ApiError::NotFound(format!("event type `{name}`")))?;
    let subscribers = subscribers(registry, event);
    let versions = event
        .versions
        .iter()
        .map(|version| VersionDetail {
            version: version.version.to_owned(),
            // The registry holds canonical JSON it generated; a schema that does not parse
            // would be a broken build, shown as null rather than a failed page.
            schema: serde_json::from_str(version.schema).unwrap_or_default(),
            schema_digest: version.schema_digest.to_owned(),
            accepted_by: subscribers
                .iter()
                .filter(|s| s.versions.iter().any(|v| v == version.version))
                .map(|s| s.consumer.clone())
                .collect(),
        })
        .collect();
    Ok(EventTypeDetail {
        name: event.name.to_owned(),
        description: event.description.to_owned(),
        producer_class: event.producer_class.to_owned(),
        order_key: event.order_key.iter().map(|&k| k.to_owned()).collect(),
        deprecated: event.deprecated,
        max_payload_bytes: event.max_payload_bytes,
        compat: state.catalog.compat.get(event.name).cloned(),
        versions,
    })
}

/// Every registered consumer with its deliveries, lag and workers.
#[utoipa::path(
    get,
    path = "/api/v1/consumers",
    tag = "consumers",
    params(Window),
    responses(
        (status = 200, description = "The consumers", body = Vec<ConsumerView>),
        (status = 400, description = "A bad window", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
async fn consumers(
    State(state): State<AppState>,
    _caller: Caller,
    Params(window): Params<Window>,
) -> Result<Json<Vec<ConsumerView>>, ApiError> {
    let report = state.outbox.status(window.duration()?).await?;
    let registry = state.outbox.registry();
    Ok(Json(
        registry
            .consumers
            .iter()
            .map(|consumer| consumer_view(registry, consumer, &report))
            .collect(),
    ))
}

/// One consumer with its deliveries, lag and workers.
#[utoipa::path(
    get,
    path = "/api/v1/consumers/{name}",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name"), Window),
    responses(
        (status = 200, description = "The consumer", body = ConsumerView),
        (status = 400, description = "A bad window", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
async fn consumer(
    State(state): State<AppState>,
    _caller: Caller,
    Segment(name): Segment,
    Params(window): Params<Window>,
) -> Result<Json<ConsumerView>, ApiError> {
    let window = window.duration()?;
    let descriptor = registered_consumer(state.outbox.registry(), &name)?;
    let report = state.outbox.status(window).await?;
    Ok(Json(consumer_view(
        state.outbox.registry(),
        descriptor,
        &report,
    )))
}

/// A consumer's dead and quarantined deliveries, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/consumers/{name}/dead-letters",
    tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name"), Limit),
    responses(
        (status = 200, description = "The dead letters", body = Vec<DeadLetter>),
        (status = 400, description = "A bad limit", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such consumer", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
async fn dead_letters(
    State(state): State<AppState>,
    _caller: Caller,
    Segment(name): Segment,
    Params(limit): Params<Limit>,
) -> Result<Json<Vec<DeadLetter>>, ApiError> {
    let limit = match limit.limit.unwrap_or(MAX_DEAD_LETTERS) {
        limit @ 1..=MAX_DEAD_LETTERS => limit,
        _ => {
            return Err(ApiError::BadRequest(format!(
                "limit must be between 1 and {MAX_DEAD_LETTERS}"
            )));
        }
    };
    registered_consumer(state.outbox.registry(), &name)?;
    let selection = ReplaySelection::consumer(name).limit(limit);
    let dead = state.outbox.dead_letters(&selection).await?;
    Ok(Json(dead.iter().map(dead_letter).collect()))
}

/// Everything recorded for one W3C trace id, in time order.
#[utoipa::path(
    get,
    path = "/api/v1/timeline/{trace_id}",
    tag = "timeline",
    params(("trace_id" = String, Path, description = "32 lower-case hex digits")),
    responses(
        (status = 200, description = "The trace's timeline (empty for an unknown trace)",
            body = Vec<TimelineItem>),
        (status = 400, description = "Not a W3C trace id", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
async fn timeline(
    State(state): State<AppState>,
    _caller: Caller,
    Segment(trace_id): Segment,
) -> Result<Json<Vec<TimelineItem>>, ApiError> {
    let entries = state.outbox.timeline(&trace_id).await?;
    Ok(Json(entries.iter().map(timeline_item).collect()))
}

/// A JSON request body; one that does not parse, or has an unknown field, is answered with a
/// problem document like every other refusal.
pub(crate) struct Body<T>(pub(crate) T);

impl<T: serde::de::DeserializeOwned> FromRequest<AppState> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(
        request: axum::extract::Request,
        state: &AppState,
    ) -> Result<Self, ApiError> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(Self(value)),
            Err(rejection)
                if rejection.status() == axum::http::StatusCode::UNPROCESSABLE_ENTITY =>
            {
                Err(ApiError::Unprocessable(rejection.body_text()))
            }
            Err(rejection) => Err(ApiError::BadRequest(rejection.body_text())),
        }
    }
}

/// Query parameters; ones that do not parse are answered with a problem document (400).
pub(crate) struct Params<T>(pub(crate) T);

impl<T: serde::de::DeserializeOwned> FromRequestParts<AppState> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| Self(value))
            .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))
    }
}

/// The one path segment a route names; one that does not decode is answered with a problem
/// document (400).
pub(crate) struct Segment(pub(crate) String);

impl FromRequestParts<AppState> for Segment {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| Self(value))
            .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))
    }
}

pub(crate) fn registered_consumer(
    registry: &Registry,
    name: &str,
) -> Result<&'static ConsumerDescriptor, ApiError> {
    registry
        .consumer(name)
        .ok_or_else(|| ApiError::NotFound(format!("consumer `{name}`")))
}

fn subscribers(registry: &Registry, event: &EventDescriptor) -> Vec<Subscriber> {
    registry
        .consumers
        .iter()
        .flat_map(|consumer| {
            consumer
                .subscriptions
                .iter()
                .filter(|s| s.event == event.name)
                .map(|s| Subscriber {
                    consumer: consumer.name.to_owned(),
                    requirement: s.requirement.to_owned(),
                    versions: s.versions.iter().map(|&v| v.to_owned()).collect(),
                })
        })
        .collect()
}

pub(crate) fn consumer_view(
    registry: &Registry,
    consumer: &ConsumerDescriptor,
    report: &StatusReport,
) -> ConsumerView {
    let class = registry.class_of(consumer.name);
    let status = report
        .consumers
        .iter()
        .find(|s| s.consumer == consumer.name);
    let count = |field: fn(&ConsumerStatus) -> i64| status.map_or(0, field);
    let silent = |owner: &str| {
        report
            .silent_workers
            .iter()
            .find(|w| w.consumer == consumer.name && w.owner == owner)
            .map(|w| w.silent_for.as_secs_f64())
    };
    ConsumerView {
        name: consumer.name.to_owned(),
        handler: match consumer.handler {
            HandlerKind::Transactional => "transactional",
            HandlerKind::Leased => "leased",
        }
        .to_owned(),
        declared_mode: consumer.mode.as_str().to_owned(),
        per_key_ordering: consumer.per_key_ordering,
        retry_policy: consumer.retry_policy.to_owned(),
        executor_class: class.map(|class| class.name.to_owned()),
        heartbeat_owner: class.map(|class| class.heartbeat_owner.to_owned()),
        subscriptions: consumer
            .subscriptions
            .iter()
            .map(|s| Subscription {
                event_type: s.event.to_owned(),
                requirement: s.requirement.to_owned(),
                versions: s.versions.iter().map(|&v| v.to_owned()).collect(),
            })
            .collect(),
        mode: status.map_or(consumer.mode, |s| s.mode).as_str().to_owned(),
        paused: status.is_some_and(|s| s.paused),
        pending: count(|s| s.pending),
        leased: count(|s| s.leased),
        dead: count(|s| s.dead),
        quarantined: count(|s| s.quarantined),
        oldest_pending_s: status.and_then(|s| s.oldest_pending.map(|age| age.as_secs_f64())),
        stale_rejections: count(|s| s.stale_rejections),
        lag: report
            .lag
            .iter()
            .filter(|lag| lag.consumer == consumer.name)
            .map(|lag| ClassLag {
                producer_class: lag.producer_class.clone(),
                latency: latency(&lag.latency),
            })
            .collect(),
        attempt_latency: report
            .attempts
            .iter()
            .find(|a| a.consumer == consumer.name)
            .map(|a| latency(&a.latency)),
        workers: report
            .workers
            .iter()
            .filter(|w| w.consumer == consumer.name)
            .map(|w| Worker {
                owner: w.owner.clone(),
                silent_for_s: silent(&w.owner),
            })
            .collect(),
        cutover_gate: report
            .cutover_gates
            .iter()
            .find(|g| g.consumer == consumer.name)
            .map(|g| GateProgressView {
                min_reconciled: g.gate.min_reconciled,
                min_span_ms: g.gate.min_span_ms,
                max_unexplained: g.gate.max_unexplained,
                since: g.since,
                shadow_runs: g.shadow_runs,
                compared: g.compared,
            }),
    }
}

fn latency(percentiles: &Percentiles) -> Latency {
    Latency {
        samples: percentiles.samples,
        p50_s: percentiles.p50.as_secs_f64(),
        p95_s: percentiles.p95.as_secs_f64(),
        p99_s: percentiles.p99.as_secs_f64(),
    }
}

pub(crate) fn dead_letter(delivery: &SettledDelivery) -> DeadLetter {
    DeadLetter {
        event_id: delivery.event_id.to_string(),
        event_type: delivery.event_type.clone(),
        version: delivery.version.clone(),
        generation: delivery.generation,
        status: delivery.status.as_str().to_owned(),
        attempts: delivery.attempts,
        last_error_code: delivery.last_error_code.clone(),
        settled_at: delivery.settled_at,
        version_supported: delivery.version_supported(),
    }
}

pub(crate) fn timeline_item(entry: &TimelineEntry) -> TimelineItem {
    TimelineItem {
        at: entry.at,
        kind: entry.kind.clone(),
        event_id: entry.event_id.to_string(),
        consumer: entry.consumer.clone(),
        detail: entry.detail.clone(),
        attempt: entry.attempt,
    }
}
