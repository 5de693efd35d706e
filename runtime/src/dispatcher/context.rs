//! What a handler is given and what it implements: [`HandlerContext`], [`DynHandler`] and the
//! typed [`Consumer`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::append::AppendOptions;
use crate::handler::{Delivery, HandlerError};
use crate::store::postgres::PgStore;
use crate::store::{Claimed, Connection, Lease, Store};
use crate::trace::TraceContext;

/// A boxed, sendable future: what [`DynHandler::handle`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a handler is called with: the claimed delivery, the store and, for the transactional
/// kind, the handler's transaction. `S` is the store the dispatcher runs on (PostgreSQL
/// unless said otherwise).
#[non_exhaustive]
pub struct HandlerContext<'a, S: Store = PgStore> {
    /// The claimed delivery: its lease (token), the delivery and the payload.
    pub claimed: &'a Claimed,
    /// The store, for fenced effect writes ([`Store::record_effect`]).
    pub store: &'a S,
    transaction: Option<&'a mut Connection<S>>,
}

impl<S: Store> std::fmt::Debug for HandlerContext<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerContext")
            .field("claimed", &self.claimed)
            .field("transactional", &self.transaction.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a, S: Store> HandlerContext<'a, S> {
    /// A context (the dispatcher builds these; public for tests of handlers).
    pub fn new(
        claimed: &'a Claimed,
        store: &'a S,
        transaction: Option<&'a mut Connection<S>>,
    ) -> Self {
        Self {
            claimed,
            store,
            transaction,
        }
    }

    /// The delivery.
    pub fn delivery(&self) -> &Delivery {
        &self.claimed.delivery
    }

    /// The event's payload.
    pub fn payload(&self) -> &serde_json::Value {
        &self.claimed.payload
    }

    /// The lease (its fencing token is what effect writes present).
    pub fn lease(&self) -> &Lease {
        &self.claimed.lease
    }

    /// The transactional kind's transaction: the handler's writes on it commit with the
    /// effect row and the ack, or roll back with them. `None` for the leased kind.
    pub fn transaction(&mut self) -> Option<&mut Connection<S>> {
        self.transaction.as_deref_mut()
    }

    /// The trace a follow-up event continues: a child span of the delivered event's trace, or
    /// a fresh trace when the event carried none. Pass it to the generated producers.
    pub fn trace(&self) -> TraceContext {
        self.claimed
            .trace
            .as_ref()
            .map_or_else(TraceContext::fresh, TraceContext::child)
    }

    /// A publisher on the transactional kind's transaction: follow-up events commit with the
    /// handler's writes and the ack, or roll back with them. Their causation id is the
    /// delivered event. `None` for the leased kind, which has no transaction to append in.
    pub fn publisher(&mut self) -> Option<S::Publisher<'_>> {
        let cause = self.claimed.delivery.event_id.clone();
        let store = self.store;
        let connection = self.transaction.as_deref_mut()?;
        Some(store.publisher(connection, AppendOptions::new().causation_id(cause)))
    }

    /// Whether the consumer runs in shadow mode for this delivery ([`Lease::is_shadow`]): the
    /// handler's transaction writes are rolled back and its effect writes become intents, kept
    /// as the delivery's reconciliation row. A leased handler must make no external call then.
    pub fn is_shadow(&self) -> bool {
        self.claimed.lease.is_shadow()
    }
}

/// A consumer handler behind a trait object: takes the delivery and its payload (JSON), answers
/// with a [`HandlerError`] when it fails. The generated consumer traits adapt to it.
pub trait DynHandler<S: Store = PgStore>: Send + Sync + 'static {
    /// Handles one delivery. A panic counts as a [`FailureClass::Poison`] failure with code
    /// `handler_panicked`.
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a, S>,
    ) -> BoxFuture<'a, Result<(), HandlerError>>;
}

/// A typed consumer: a handler that knows which registered consumer it serves. The generated
/// consumer adapters and `#[evc::consumer]` impl blocks implement it; [`Dispatcher::serve`]
/// takes it with the consumer's settings from the registry.
pub trait Consumer<S: Store = PgStore>: DynHandler<S> {
    /// The registered consumer's name (`worker.notification.iu`).
    const NAME: &'static str;
}

/// A shared handler is a handler: the caller keeps a clone of the `Arc` to read what the
/// handler recorded (a test's counts, a service's metrics) while the dispatcher runs it.
impl<S: Store, H: DynHandler<S> + ?Sized> DynHandler<S> for Arc<H> {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a, S>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        (**self).handle(context)
    }
}
