//! The realtime gateway: Server-Sent Events per topic of `topics.yaml` (docs/serve.md, "The
//! realtime gateway").
//!
//! `GET /api/v1/topics/{topic}/stream` streams the topic's events as they commit, each once,
//! in feed order ([`evc_runtime::Observe::feed`]). The server applies the topic's filter, the
//! partition value the client names (`?key=`) and the client's permissions (the topics its
//! token lists, the tenant it is bound to) before anything is sent. Each message's id is its
//! feed position: a client that reconnects with `Last-Event-ID` gets what it missed from the
//! store, then the live events. A client that falls behind is sent one summary for a burst
//! instead of each event, and is dropped when even that is too far behind; a comment line
//! every 15 s keeps idle connections open. Messages carry the envelope (trace id included) and
//! the partition value, never the payload.

mod hub;
mod queue;
mod stream;
mod topic;

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;
use crate::api::{Params, Segment};
use crate::auth::Subscriber;
use crate::error::{ApiError, Problem, Unavailable};

pub(crate) use hub::{Hub, Interest};
pub(crate) use stream::respond;
pub use topic::{EnvelopeField, Topic, TopicKey, TopicKeyError};

/// How the realtime gateway runs: its topics and its limits.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// The topics clients may subscribe to.
    pub topics: Vec<Topic>,
    /// How often an idle stream is sent a comment line (15 s).
    pub ping_every: Duration,
    /// Messages a client may have unsent before further events collapse into a summary (256).
    pub buffer: usize,
    /// Events a summary may cover before the client is dropped, to resume from its last id
    /// (10,000).
    pub overflow: u64,
    /// How often the feed is read while it has nothing new (50 ms).
    pub poll_every: Duration,
}

impl GatewayConfig {
    /// The gateway of `topics`, with the default limits.
    pub fn new(topics: Vec<Topic>) -> Self {
        Self {
            topics,
            ping_every: Duration::from_secs(15),
            buffer: 256,
            overflow: 10_000,
            poll_every: Duration::from_millis(50),
        }
    }
}

impl Default for GatewayConfig {
    /// A gateway without topics.
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

/// The routes of the gateway.
pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(topics))
        .routes(routes!(subscribe))
}

/// A topic a caller may subscribe to.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TopicView {
    /// The topic's name.
    name: String,
    /// What its subscribers see.
    description: String,
    /// The event types it carries.
    event_types: Vec<String>,
    /// What partitions it (`payload.FIELD` or `envelope.FIELD`); null when nothing does.
    key: Option<String>,
}

/// Lists the topics the caller may subscribe to.
#[utoipa::path(
    get,
    path = "/api/v1/topics",
    tag = "gateway",
    responses(
        (status = 200, description = "The topics the caller may read", body = Vec<TopicView>),
        Unavailable,
    )
)]
async fn topics(
    State(state): State<AppState>,
    Subscriber(caller): Subscriber,
) -> impl IntoResponse {
    Json(
        state
            .gateway
            .config
            .topics
            .iter()
            .filter(|topic| caller.may_read_topic(&topic.name))
            .map(|topic| TopicView {
                name: topic.name.clone(),
                description: topic.description.clone(),
                event_types: topic.event_types.iter().cloned().collect(),
                key: topic.key.as_ref().map(ToString::to_string),
            })
            .collect::<Vec<_>>(),
    )
}

/// Which partition of a topic to stream.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct StreamParams {
    /// Only events whose partition value is this (the topic must have a key).
    key: Option<String>,
}

/// Streams a topic's events as Server-Sent Events (`event: event`, `event: summary` after a
/// burst the client fell behind on, `event: overflow` before the server drops a client too
/// far behind). Each id is a feed position; send the last one received as `Last-Event-ID` to
/// resume.
#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}/stream",
    tag = "gateway",
    params(
        ("topic" = String, Path, description = "The topic's name"),
        StreamParams,
        ("Last-Event-ID" = Option<String>, Header,
            description = "The id of the last message received: resume after it"),
    ),
    responses(
        (status = 200, description = "The topic's events, as they commit",
            content_type = "text/event-stream", body = String),
        (status = 400, description = "A malformed Last-Event-ID, or a key for a topic without one",
            body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller may not read the topic", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "No such topic", body = Problem,
            content_type = "application/problem+json"),
        Unavailable,
    )
)]
async fn subscribe(
    State(state): State<AppState>,
    Subscriber(caller): Subscriber,
    Segment(name): Segment,
    Params(params): Params<StreamParams>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let gateway = &state.gateway;
    let index = gateway
        .config
        .topics
        .iter()
        .position(|topic| topic.name == name)
        .ok_or_else(|| ApiError::NotFound(format!("topic `{name}`")))?;
    if !caller.may_read_topic(&name) {
        return Err(ApiError::NotPermitted(format!(
            "the caller's token does not list the topic `{name}`"
        )));
    }
    if params.key.is_some() && gateway.config.topics[index].key.is_none() {
        return Err(ApiError::BadRequest(format!(
            "the topic `{name}` has no key to filter by"
        )));
    }
    let resume = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .ok_or_else(|| {
                    ApiError::BadRequest(
                        "Last-Event-ID must be an id this stream sent (WRITER-SEQ)".to_owned(),
                    )
                })?,
        ),
    };
    let interest = hub::Interest {
        topic: Some(index),
        key: params.key,
        tenant: caller.tenant.clone(),
    };
    let subscription = gateway.subscribe(interest.clone()).await?;
    Ok(stream::respond(
        std::sync::Arc::clone(gateway),
        interest,
        subscription,
        resume,
    ))
}
