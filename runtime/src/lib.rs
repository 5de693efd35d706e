//! evc-runtime: what running code needs from the contracts.
//!
//! Generated code (`evc generate`) fills the `'static` registry descriptors of [`registry`],
//! builds [`OutgoingEvent`]s in its producer functions and routes deliveries to consumer
//! handlers that answer with a [`HandlerError`] when they fail. Producer functions append through
//! [`Publish`]; the outbox behind it is a [`store::Store`] (PostgreSQL:
//! [`store::postgres::PgStore`]; an embedded file: [`store::sqlite::SqliteStore`]), which checks every event ([`append`], [`policy`]) before it
//! writes the event and its deliveries in the caller's transaction. The [`Dispatcher`] claims
//! deliveries, runs consumer handlers and settles every attempt with a fenced ack or fail,
//! retried by [`retry`] policy. This crate depends on neither evc-codegen nor any
//! code-generation crate.

pub mod append;
mod dispatcher;
pub mod handler;
pub mod policy;
pub mod publish;
pub mod registry;
pub mod retry;
pub mod store;
pub mod trace;

pub use append::{
    AppendError, AppendOptions, AppendReceipt, Checker, CredentialKind, NewEvent, Rejection,
    SchemaCompileError,
};
pub use dispatcher::{
    BoxFuture, Consumer, DispatchStats, Dispatcher, DispatcherConfig, DispatcherHandle, DynHandler,
    HandlerContext,
};
pub use handler::{Delivery, FailureClass, HandlerError};
pub use policy::{CredentialShape, DigestKey, DigestKeyError, PayloadPolicy};
pub use publish::{OutgoingEvent, PayloadError, Publish, RegisteredEvent};
pub use registry::{
    ConsumerDescriptor, ConsumerMode, DispatcherDescriptor, EventDescriptor, HandlerKind,
    PayloadPolicyDescriptor, Registry, RetryPolicyDescriptor, SubscriptionDescriptor,
    VersionDescriptor,
};
pub use retry::{RetryDecision, RetryPolicy, SplitMix64};
pub use store::postgres::{
    AttemptLatency, Console, ConsumerState, ConsumerStatus, DEAD_LETTERED, DISCARDED,
    DiscardApplied, DiscardPlan, DiscardedDelivery, Doorbell, EventsPurged, Lag, NotReplayable,
    NotReplayableReason, Percentiles, PgPublisher, PgStore, PgStoreBuilder, PolicySource, Problem,
    PurgeError, REPLAY_COMPLETED, REPLAY_FAILED, REPLAY_SCHEDULED, REPLAYED_JOB_FAILED,
    RejectsPurged, ReplayApplied, ReplayApproval, ReplayError, ReplayPlan, ReplaySelection,
    SettledDelivery, SettledStatus, SilentWorker, StatusReport, TimelineEntry, WatchedConsumer,
    WorkerSettings, deployed_registry, replay_uuid,
};
pub use store::sqlite::{SqliteOpenError, SqlitePublisher, SqliteStore, SqliteStoreBuilder};
pub use store::{
    AckBatch, AttemptRecord, ClaimRequest, Claimed, Connection, DeliveryRecord, DeliveryStatus,
    DispatchError, Drift, Heartbeat, Hold, Intent, Lease, Observe, Operate, RegistryDrift,
    RegistryObject, RejectRecord, ShadowLog, Store, StoreError,
};
pub use trace::{TraceContext, TraceContextError};
