//! evc-serve: the governance surface of an evc outbox over HTTP (docs/serve.md).
//!
//! [`run`] serves an [`Outbox`] (a PostgreSQL or a SQLite store) to the callers of the bearer
//! [`Tokens`] that map callers to a [`Role`]:
//! - `/api/v1/...`: event types with their versions and schemas, consumers with their state,
//!   deliveries by status, lag and dead letters, events and trace timelines, replays by two
//!   people, pause, resume and modes, as JSON. Every route needs a token but
//!   `/api/v1/openapi.json`, which serves the document [`openapi`] returns (OpenAPI 3.1,
//!   derived from the handlers).
//! - `/api/v1/topics/{topic}/stream`: the realtime gateway, Server-Sent Events of the topics a
//!   [`GatewayConfig`] names (`topics.yaml`), filtered by each caller's permissions.
//! - `/healthz`, `/readyz` and `/metrics`: the operations endpoints, open like any probe.
//!
//! The `evc serve` command is [`run`] on a listener.

mod api;
mod auth;
mod error;
mod gateway;
mod ops;
mod outbox;
mod page;

use std::sync::Arc;

use axum::Router;

use crate::error::ApiError;
use utoipa::openapi::OpenApi;

pub use auth::{Principal, Role, Tokens, TokensError};
pub use gateway::{EnvelopeField, GatewayConfig, Topic, TopicKey, TopicKeyError};
pub use outbox::{Outbox, PgStores};

/// What every handler reads: the outbox and who may call.
#[derive(Clone)]
struct AppState {
    outbox: Arc<Outbox>,
    tokens: Arc<Tokens>,
    /// One `/metrics` report at a time: scrapes need no token, and each report reads the
    /// store, so concurrent scrapes wait in turn instead of taking every connection the API
    /// needs.
    metrics: Arc<tokio::sync::Semaphore>,
    /// Signs and opens the web page's sessions.
    sessions: Arc<page::SessionKey>,
    /// The realtime gateway's topics, clients and feed reader.
    gateway: Arc<gateway::Hub>,
    /// What the contracts say that the database does not hold.
    catalog: Arc<Catalog>,
}

/// What the contracts say that the outbox's registry does not hold, for the API and the pages:
/// each event type's compatibility mode. Empty when the server runs without the contracts.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Catalog {
    /// Each event type's compatibility mode as `evc.yaml` and its file write it
    /// (`forward`, `breaking_with_policy`, ...), by event type.
    pub compat: std::collections::BTreeMap<String, String>,
}

impl Catalog {
    /// A catalog of these compatibility modes.
    pub fn new(compat: std::collections::BTreeMap<String, String>) -> Self {
        Self { compat }
    }
}

/// The whole service on `outbox`, callers authenticated by `tokens`, the realtime gateway
/// configured by `gateway`; and the gateway, whose streams must be ended for the server to
/// stop ([`run`] does).
fn service(
    outbox: Outbox,
    tokens: Tokens,
    gateway: GatewayConfig,
    catalog: Catalog,
) -> (Router, Arc<gateway::Hub>) {
    let outbox = Arc::new(outbox);
    let hub = Arc::new(gateway::Hub::new(Arc::clone(&outbox), gateway));
    let state = AppState {
        outbox,
        tokens: Arc::new(tokens),
        metrics: Arc::new(tokio::sync::Semaphore::new(1)),
        sessions: Arc::new(page::SessionKey::draw()),
        gateway: Arc::clone(&hub),
        catalog: Arc::new(catalog),
    };
    let (api, document) = api::routes().merge(gateway::routes()).split_for_parts();
    let document = Arc::new(document);
    let router = api
        .merge(ops::routes())
        .merge(page::routes())
        .fallback(|| async { ApiError::NotFound("no such route".to_owned()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .route(
            "/api/v1/openapi.json",
            axum::routing::get(move || {
                let document = Arc::clone(&document);
                async move { axum::Json(document.as_ref().clone()) }
            }),
        )
        .with_state(state);
    (router, hub)
}

/// The OpenAPI 3.1 document of `/api/v1`, as `/api/v1/openapi.json` serves it.
pub fn openapi() -> OpenApi {
    api::routes().merge(gateway::routes()).split_for_parts().1
}

/// How long the requests in flight may take to finish once `shutdown` resolved; connections
/// still open then (a client that stopped reading its stream) are dropped.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves the service on `listener` until `shutdown` resolves, then ends the realtime streams
/// and lets the other requests in flight finish (for at most 10 s).
///
/// # Errors
/// When accepting connections fails.
pub async fn run(
    listener: tokio::net::TcpListener,
    outbox: Outbox,
    tokens: Tokens,
    gateway: GatewayConfig,
    catalog: Catalog,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (router, hub) = service(outbox, tokens, gateway, catalog);
    let mut closing = hub.closing();
    let serving = axum::serve(listener, router).with_graceful_shutdown(async move {
        shutdown.await;
        // A stream never ends by itself: the graceful shutdown would wait on it forever.
        hub.close();
    });
    tokio::select! {
        served = serving => served,
        // A stream whose client stopped reading is never polled again, so it never sees the
        // close: past the drain, dropping the server drops its connections.
        () = async {
            let _ = closing.wait_for(|closed| *closed).await;
            tokio::time::sleep(DRAIN).await;
        } => Ok(()),
    }
}
