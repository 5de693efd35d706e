//! evc-runtime: what running code needs from the contracts.
//!
//! Generated code (`evc generate`) fills the `'static` registry descriptors ([`Registry`]),
//! builds [`OutgoingEvent`]s in its producer functions and routes deliveries to consumer
//! handlers that answer with a [`HandlerError`] when they fail. Producer functions append through
//! [`Publish`]; the outbox behind it is a [`Store`] (PostgreSQL: [`PgStore`]; an embedded file:
//! [`SqliteStore`]), which checks every event ([`Checker`], [`PayloadPolicy`]) before it writes
//! the event and its deliveries in the caller's transaction. The [`Dispatcher`] claims
//! deliveries, runs consumer handlers and settles every attempt with a fenced ack or fail,
//! retried by [`RetryPolicy`]. This crate depends on neither evc-codegen nor any
//! code-generation crate.
//!
//! Every public item has one path: the crate root. The modules are private.

mod append;
mod dispatcher;
mod handler;
mod policy;
mod publish;
mod registry;
mod retry;
mod store;
mod tenant;
mod trace;

pub use append::{
    AppendError, AppendOptions, AppendReceipt, Checker, CredentialKind, MAX_PAYLOAD_DEPTH,
    NewEvent, Rejection, SchemaCompileError, canonical_json, sha256_hex,
};
pub use dispatcher::{
    BoxFuture, Consumer, DeliveryRunner, DispatchStats, Dispatcher, DispatcherConfig,
    DispatcherHandle, DynHandler, HandlerContext, Outcome,
};
pub use handler::{Delivery, FailureClass, HandlerError};
pub use policy::{
    CredentialShape, DigestKey, DigestKeyError, PayloadPolicy, REDACTED, credential_shape,
};
pub use publish::{OutgoingEvent, PayloadError, Publish, RegisteredEvent, order_key_part};
pub use registry::{
    ConsumerDescriptor, ConsumerMode, CutoverGateDescriptor, DispatcherDescriptor, EventDescriptor,
    EventRetention, EvidenceRecordingDescriptor, ExecutorClassDescriptor, HandlerKind,
    InventoryRepair, InventoryRulesDescriptor, LagThresholdDescriptor, MissedSlots,
    PayloadPolicyDescriptor, Registry, RetentionDescriptor, RetryPolicyDescriptor,
    ScheduleDescriptor, SubscriptionDescriptor, VersionDescriptor,
};
pub use retry::{Jitter, RetryDecision, RetryKind, RetryPolicy, RetryPolicyError};
pub use store::postgres::{
    AttemptLatency, AttemptOutcomes, AttemptTotals, ClassHealth, ClassOwner, Console,
    ConsumerState, ConsumerStatus, CopyRows, DEFAULT_REPLAY_LIMIT, DURATION_BUCKETS_MS,
    DiscardApplied, DiscardPlan, DiscardRecord, DiscardedDelivery, Doorbell, EventsPurged, Lag,
    LeasedDelivery, MAX_REPLAY_REASON_CHARS, MAX_REPLAY_REF_CHARS, NOTIFY_CHANNEL, NotReplayable,
    NotReplayableReason, Percentiles, PgPublisher, PgStore, PgStoreBuilder, PolicySource, Problem,
    Proposed, RELAY_BEHIND_COUNTED, RecentRejects, RejectsPurged, RelayStatus, ReplayApplied,
    ReplayApproval, ReplayError, ReplayItem, ReplayPlan, ReplayRecord, ReplaySelection, Role,
    RoleCheck, SCHEDULE_GRACE, ScheduleStatus, SettledDelivery, SettledStatus, SilentWorker,
    StatusReport, TableSpace, TimelineEntry, WatchedConsumer, WorkerSettings, deployed_registry,
};
pub use store::sqlite::{
    CommitBell, SqliteOpenError, SqlitePublisher, SqliteStore, SqliteStoreBuilder,
};
pub use store::{
    AckBatch, AttemptRecord, ClaimRequest, Claimed, ClaimedEvents, Connection, CursorLease,
    CursorProgress, CursorState, Cursors, DeliveryRecord, DeliveryStatus, DispatchError, Drift,
    EffectRecord, EventRecord, FeedEvent, FeedPosition, FeedPositionError, Heartbeat, Hold, Intent,
    Lease, MAX_CURSOR_ERROR_CHARS, MAX_CURSOR_NAME_CHARS, MAX_CURSOR_OWNER_CHARS, Observe, Operate,
    ReconciliationRecord, RegistryDrift, RegistryObject, RejectRecord, ShadowLog, StateChange,
    StateChangeRecord, Store, StoreError, Unclaimed,
};
pub use store::{
    COUNTED_RUNS, CutoverReport, CutoverTerms, Difference, GateProgress, MAX_LEGACY_EFFECTS,
    MAX_LEGACY_TEXT_CHARS, MAX_LISTED_DIFFERENCES, compare, normalise,
};
pub use store::{
    ChronicPair, CoTriggered, Escalations, EvidenceQuery, EvidenceReport, EvidenceRound,
    EvidenceSnapshot, FailingTogether, MAX_EVIDENCE_SNAPSHOTS, MAX_SIGNAL_ROWS,
};
pub use store::{
    DEAD_LETTERED, DISCARDED, REPLAY_COMPLETED, REPLAY_FAILED, REPLAY_SCHEDULED,
    REPLAYED_JOB_FAILED, replay_uuid,
};
pub use store::{
    InventoryApplied, InventoryClass, InventoryCounts, InventoryItem, InventoryReason,
    InventoryRecord, InventoryReport, MAX_INVENTORY_EVENTS,
};
pub use store::{LAG_BREACH, LagBreach, LagRound, MAX_COUNTED_SKIPS, ScheduleRound, ScheduleState};
pub use store::{
    MAX_PURGE_ACTOR_CHARS, MAX_PURGE_REASON_CHARS, PurgeError, PurgeRecord, RetentionPurge,
};
pub use tenant::{ALL_TENANTS, TenantScope, TenantScopeError};
pub use trace::{TraceContext, TraceContextError, check_trace_id};
