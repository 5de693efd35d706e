//! The contract file format: one serde type per kind of file.
//!
//! These types are the format. The loader deserializes into them, and `evc schema` derives the
//! editor schema from them with schemars, so the two cannot drift. Values that need parsing
//! (versions, durations, requirements) stay text here; validation parses them and points at the
//! exact node when one is wrong.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::names;

macro_rules! pattern_string {
    ($(#[$doc:meta])* $name:ident, $pattern:expr, $description:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// The text as written.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({
                    "type": "string",
                    "pattern": $pattern,
                    "description": $description,
                })
            }
        }
    };
}

pattern_string!(
    /// An event type name (`iu.born`).
    EventTypeName,
    names::EVENT_TYPE_PATTERN,
    "Event type: lower-case segments separated by dots, at least two (`iu.born`)."
);
pattern_string!(
    /// A consumer, producer class, retry policy or topic name.
    Name,
    names::NAME_PATTERN,
    "Name: lower-case segments separated by dots (`worker.dot.iu_axis`)."
);
pattern_string!(
    /// An executor class (`notification.email`).
    ExecutorClassRef,
    names::EXECUTOR_CLASS_PATTERN,
    "Executor class: its kind (dot, sql, ai, human, external, notification or render), a dot, and lower-case segments separated by dots (`notification.email`)."
);
pattern_string!(
    /// A duration (`30s`).
    DurationText,
    names::DURATION_PATTERN,
    "Duration: a whole number and a unit: ms, s, m, h or d (`30s`, `10m`, `14d`)."
);
pattern_string!(
    /// A semantic version (`1.2.0`).
    VersionText,
    names::VERSION_PATTERN,
    "Semantic version (`1.2.0`)."
);
pattern_string!(
    /// A subscription (`iu.born@^1`).
    SubscriptionText,
    names::SUBSCRIPTION_PATTERN,
    "Subscription: an event type, `@`, and a semver requirement (`iu.born@^1`, `step.ready@>=1.2, <3`)."
);
pattern_string!(
    /// A topic's event pattern (`iu.*`).
    EventPattern,
    names::EVENT_PATTERN_PATTERN,
    "Event type pattern; `*` stands for any run of characters (`iu.*`, `*_failed`)."
);
pattern_string!(
    /// The relay's NATS subject prefix (`evc`).
    SubjectPrefix,
    names::SUBJECT_PREFIX_PATTERN,
    "NATS subject prefix: tokens of letters, digits, `_` and `-` separated by dots, no wildcards (`evc`, `shop.events`)."
);
pattern_string!(
    /// A JetStream stream name (`EVC`).
    StreamName,
    names::STREAM_NAME_PATTERN,
    "JetStream stream name: letters, digits, `_` and `-`, at most 64 (`EVC`)."
);
pattern_string!(
    /// A topic key (`payload.iu_unit_id`, `envelope.trace_id`).
    TopicKey,
    names::TOPIC_KEY_PATTERN,
    "Partition key of a topic: `envelope.<field>` or `payload.<field>`."
);
pattern_string!(
    /// A payload field name.
    FieldName,
    names::FIELD_PATTERN,
    "A top-level payload property name."
);

/// How a format enum is written in contracts (`breaking_with_policy`, `transient`).
pub fn keyword<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(text)) => text,
        _ => String::new(),
    }
}

/// `evc.yaml`: project-wide settings.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "evc project settings (evc.yaml)")]
pub struct ProjectFile {
    /// Name of the project the contracts belong to.
    pub project: Name,
    /// What payloads may carry.
    pub payload_policy: PayloadPolicyDef,
    /// Envelope requirements.
    #[serde(default)]
    pub envelope: EnvelopeDef,
    /// Defaults for event types and consumers that do not say otherwise.
    #[serde(default)]
    pub defaults: DefaultsDef,
    /// Dispatcher defaults.
    #[serde(default)]
    pub dispatcher: DispatcherDef,
    /// How `evc relay` publishes the outbox to NATS JetStream, and the stream and consumers
    /// `evc generate` defines for it.
    #[serde(default)]
    pub relay: RelayDef,
    /// How long rows stay before the purge (`evc purge`) removes them; a table without a
    /// period keeps its rows.
    #[serde(default)]
    pub retention: RetentionDef,
    /// How the dispatcher records usage evidence (`evc evidence`) for later reading; without
    /// it, evidence is only computed on demand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<EvidenceDef>,
}

/// Usage evidence recorded periodically: the dispatcher computes the signals once per slot of
/// `every` and keeps each snapshot for `keep`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceDef {
    /// How often a snapshot is recorded: once per slot of this length, across every
    /// dispatcher process.
    pub every: DurationText,
    /// How long a snapshot is kept; the recording round removes older ones. At least `every`.
    pub keep: DurationText,
    /// How far back each snapshot reads the ledger (default 7d).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<DurationText>,
    /// Two consumers fail together when both fail within one slot of this length (default 1m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation: Option<DurationText>,
    /// The fewest occurrences a signal needs to be listed (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub min_count: Option<u32>,
}

/// Retention periods, per table. Each row's age counts from when it was written; a delivery
/// still open keeps its event, attempts and idempotency records whatever their age.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetentionDef {
    /// Events whose deliveries are all settled, with their delivery rows, attempts,
    /// reconciliations and replay items, unless the event type sets `retention`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<DurationText>,
    /// Attempt rows of deliveries no longer open (acked, dead, quarantined, replayed,
    /// discarded); the event stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<DurationText>,
    /// Shadow runs (intended effects); at least every cut-over gate's `min_span`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciliations: Option<DurationText>,
    /// Rejected appends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejects: Option<DurationText>,
    /// How long an idempotency record (a handler's effect key) outlives the retention of the
    /// events its consumer receives; it stays while its event does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effects: Option<DurationText>,
}

/// The payload policy: keys that may never appear and size caps.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PayloadPolicyDef {
    /// Keys that may never appear in any schema or payload (bodies, blobs).
    pub denied_keys: Vec<FieldName>,
    /// Credential-shaped names: a key containing one as a whole `_`-separated part is refused.
    pub credential_key_names: Vec<FieldName>,
    /// Size cap of one payload in bytes, unless an event type sets `max_payload_bytes`.
    #[serde(default = "default_max_payload_bytes")]
    #[schemars(range(min = 1, max = 67108864))]
    pub default_max_bytes: u32,
    /// No event type may set `max_payload_bytes` above this.
    #[serde(default = "default_hard_max_payload_bytes")]
    #[schemars(range(min = 1, max = 67108864))]
    pub hard_max_bytes: u32,
    /// Whether payload objects must list every key (`closed`, the default) or may carry keys
    /// they do not name (`open`); an event type may say otherwise.
    #[serde(default)]
    pub content: ContentModel,
}

/// Whether payload objects may carry keys their schema does not name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContentModel {
    /// Every object schema says `additionalProperties: false` (or `unevaluatedProperties:
    /// false`): a payload holds exactly the keys the contract names.
    #[default]
    Closed,
    /// Objects may accept keys they do not name; generated types keep them, and the deny-list
    /// and credential scan still run on every key at append.
    Open,
}

/// An event type's own payload policy: what it changes of the project's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventPayloadPolicyDef {
    /// `open` or `closed` content for this event type's payloads; absent: the project's.
    #[serde(default)]
    pub content: Option<ContentModel>,
}

fn default_max_payload_bytes() -> u32 {
    4096
}

fn default_hard_max_payload_bytes() -> u32 {
    65536
}

/// Envelope requirements every event must meet.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeDef {
    /// Whether every event must carry a tenant scope.
    #[serde(default)]
    pub require_tenant_scope: bool,
    /// Whether every event must carry a W3C trace context.
    #[serde(default = "default_true")]
    pub require_trace_context: bool,
}

impl Default for EnvelopeDef {
    fn default() -> Self {
        Self {
            require_tenant_scope: false,
            require_trace_context: true,
        }
    }
}

fn default_true() -> bool {
    true
}

/// Defaults applied where a contract is silent.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DefaultsDef {
    /// Compatibility mode of event types that set none (default `forward`).
    #[serde(default)]
    pub compat: Option<CompatMode>,
    /// Retry policy of consumers that set none.
    #[serde(default)]
    pub retry_policy: Option<Name>,
    /// Heartbeat threshold of consumers that set none (default `60s`).
    #[serde(default)]
    pub heartbeat_threshold: Option<DurationText>,
}

/// Dispatcher defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DispatcherDef {
    /// Deliveries claimed per batch (default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000))]
    pub batch_size: Option<u32>,
    /// How long a claim holds before another dispatcher may take it over (default `30s`).
    #[serde(default)]
    pub lease: Option<DurationText>,
    /// How often a dispatcher reports it is alive (default `10s`).
    #[serde(default)]
    pub heartbeat: Option<DurationText>,
    /// Attempts before a delivery is dead-lettered, whatever its policy says (default 12).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub max_attempts: Option<u32>,
    /// Longest backoff between attempts (default `15m`).
    #[serde(default)]
    pub backoff_ceiling: Option<DurationText>,
}

/// The relay to NATS JetStream.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RelayDef {
    /// First subject tokens of every event (default `evc`): `<prefix>.<partition>.<event type>.v<major>`.
    #[serde(default)]
    pub subject_prefix: Option<SubjectPrefix>,
    /// The stream that takes them (default `EVC`).
    #[serde(default)]
    pub stream: Option<StreamName>,
    /// How long the broker remembers an event id and drops the event sent again (default
    /// `2m`); at least twice the relay's `lease`.
    #[serde(default)]
    pub duplicate_window: Option<DurationText>,
    /// How long a relay holds the cursor without moving it before another may take it
    /// (default `30s`).
    #[serde(default)]
    pub lease: Option<DurationText>,
    /// Subject partitions of each event type (default 1): events of one order key share one,
    /// and a per-key consumer gets one JetStream consumer per partition.
    #[serde(default)]
    #[schemars(range(min = 1, max = 64))]
    pub partitions: Option<u32>,
}

/// `events/<event.type>.yaml`: one event type and all its versions.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "evc event type (events/<event.type>.yaml)")]
pub struct EventFile {
    /// The event type; must match the file name.
    pub event: EventTypeName,
    /// What happened, in one or two sentences.
    pub description: String,
    /// The class of producer that emits it.
    pub producer_class: Name,
    /// Payload field (or fields) that order deliveries per key; absent: the envelope's aggregate.
    #[serde(default)]
    pub order_key: Option<OrderKeyDef>,
    /// How versions may evolve (default from `evc.yaml`, else `forward`).
    #[serde(default)]
    pub compat: Option<CompatMode>,
    /// `active`, or `deprecated` on the way to removal.
    #[serde(default)]
    pub status: EventStatus,
    /// Payload size cap in bytes; overrides `payload_policy.default_max_bytes`.
    #[serde(default)]
    #[schemars(range(min = 1, max = 67108864))]
    pub max_payload_bytes: Option<u32>,
    /// What this event type changes of the project's payload policy.
    #[serde(default)]
    pub payload_policy: Option<EventPayloadPolicyDef>,
    /// How long its events stay once their deliveries are settled; overrides
    /// `retention.events` of `evc.yaml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<DurationText>,
    /// Versions, oldest first.
    #[schemars(length(min = 1))]
    pub versions: Vec<VersionDef>,
}

/// One field name or several.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum OrderKeyDef {
    /// A single payload field.
    One(FieldName),
    /// Several payload fields, combined in order.
    Many(Vec<FieldName>),
}

impl OrderKeyDef {
    /// The fields, in order.
    pub fn fields(&self) -> Vec<&FieldName> {
        match self {
            Self::One(field) => vec![field],
            Self::Many(fields) => fields.iter().collect(),
        }
    }
}

/// One version of an event type.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionDef {
    /// Semantic version.
    pub version: VersionText,
    /// What changed in this version.
    #[serde(default)]
    pub description: Option<String>,
    /// JSON Schema of the payload: 2020-12, or the draft its `$schema` names (draft-07, -06,
    /// -04). Payloads are references (ids), never bodies.
    #[schemars(schema_with = "payload_schema_schema")]
    pub schema: std::sync::Arc<serde_json::Value>,
    /// How producers and consumers move across a major bump (required under
    /// `breaking_with_policy`).
    #[serde(default)]
    pub migration_policy: Option<MigrationPolicyDef>,
}

fn payload_schema_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": ["object", "boolean"],
        "description": "JSON Schema of the payload: 2020-12 (the default when `$schema` is absent), draft-07, draft-06 or draft-04 (named by `$schema`; read as 2020-12). Under `content: closed` (the default) every object says `additionalProperties: false` or `unevaluatedProperties: false`.",
    })
}

/// The plan for a breaking change.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MigrationPolicyDef {
    /// How long producers keep emitting the previous major.
    pub producer_window: DurationText,
    /// How long consumers have to move to the new major.
    pub consumer_window: DurationText,
    /// What is emitted during the window.
    pub dual_write: String,
    /// How to roll back.
    pub rollback: String,
}

/// How an event type's versions may evolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompatMode {
    /// New writers, old readers: each version's payloads are readable by the previous version.
    Forward,
    /// Old writers, new readers: each version reads the previous version's payloads.
    Backward,
    /// Both forward and backward.
    Full,
    /// Forward against every earlier version of the same major.
    ForwardTransitive,
    /// Backward against every earlier version of the same major.
    BackwardTransitive,
    /// Full against every earlier version of the same major.
    FullTransitive,
    /// No compatibility checks.
    None,
    /// Forward within a major; a major bump is allowed with a `migration_policy`.
    BreakingWithPolicy,
}

/// Lifecycle of an event type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventStatus {
    /// In use.
    #[default]
    Active,
    /// On the way out; removal needs this first.
    Deprecated,
}

/// `consumers/<consumer>.yaml`: one consumer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "evc consumer (consumers/<consumer>.yaml)")]
pub struct ConsumerFile {
    /// The consumer; must match the file name.
    pub consumer: Name,
    /// What it does with the events.
    pub description: String,
    /// What kind of executor runs the handler.
    pub executor_kind: ExecutorKind,
    /// The executor class that runs it, one of `executor-classes.yaml` of its kind (required
    /// when that file exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_class: Option<ExecutorClassRef>,
    /// Event types and the versions it accepts (`iu.born@^1`).
    #[schemars(length(min = 1))]
    pub subscribes: Vec<SubscriptionText>,
    /// Retry policy by name (default from `evc.yaml`).
    #[serde(default)]
    pub retry_policy: Option<Name>,
    /// How the handler runs.
    pub handler: HandlerKind,
    /// Delivery order (default `per_key`).
    #[serde(default)]
    pub ordering: Ordering,
    /// Whether deliveries are made (default `live`).
    #[serde(default)]
    pub mode: ConsumerMode,
    /// Silence after which the consumer counts as stuck (default from `evc.yaml`, else `60s`).
    #[serde(default)]
    pub heartbeat_threshold: Option<DurationText>,
    /// Longest run of one handler attempt (Rust handlers); a longer one is cancelled and fails
    /// as transient with code `handler_timeout`. At most `1d`; unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler_timeout: Option<DurationText>,
    /// Lag thresholds by producer class: when the oldest open delivery to this consumer of an
    /// event of that class has waited longer, the dispatcher appends one `event_lag.breach`
    /// (registered in `events/`) for the breach.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("propertyNames" = { "pattern": names::NAME_PATTERN }))]
    pub lag_thresholds: BTreeMap<String, DurationText>,
    /// What shadow runs must show before an operator may move the consumer to `live`: the
    /// runtime refuses the move until the gate passes, and says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutover_gate: Option<CutoverGateDef>,
    /// How `evc inventory` classifies the events that exist before the consumer goes live
    /// (events of its types with no delivery to it): which expire, and whether a payload its
    /// subscription or schema refuses may be repaired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<InventoryDef>,
}

/// A consumer's inventory rules: how the events it would receive on going live are classified
/// (safe, repair, quarantine or expire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InventoryDef {
    /// An event older than this expires: it is never delivered to the consumer (`90d`;
    /// unset: no event expires).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<DurationText>,
    /// What happens to an event whose version the consumer no longer accepts, or whose payload
    /// its version's schema no longer accepts (default `none`: it is quarantined).
    #[serde(default)]
    pub repair: InventoryRepair,
}

/// How an inventory repairs an event the consumer cannot take as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InventoryRepair {
    /// No repair: the event is quarantined.
    #[default]
    None,
    /// The payload is conformed to the newest registered version the consumer accepts:
    /// properties a closed object of that schema does not declare are dropped, absent ones
    /// that declare a `default` are filled. Repaired when the result validates, else
    /// quarantined.
    Conform,
}

/// A consumer's cut-over gate: the evidence, gathered since the consumer last entered shadow
/// mode, that its shadow handler intends what the legacy path did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CutoverGateDef {
    /// Shadow deliveries whose intended effects were compared with the outcome the legacy
    /// path recorded for the same event.
    #[schemars(range(min = 1, max = 1_000_000))]
    pub min_reconciled: u32,
    /// How long the compared deliveries must span, from the first to the newest (`3d`;
    /// unset: any span).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_span: Option<DurationText>,
    /// Differences no operator has explained that the gate lets pass (default 0).
    #[serde(default)]
    #[schemars(range(max = 1_000_000))]
    pub max_unexplained: u32,
}

/// What kind of executor runs a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorKind {
    /// A deterministic pipeline step.
    Dot,
    /// A SQL aggregation.
    Sql,
    /// A model call.
    Ai,
    /// A person.
    Human,
    /// A third-party system.
    External,
    /// A notification sender.
    Notification,
    /// A view renderer.
    Render,
}

/// How a consumer's handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HandlerKind {
    /// Database-only: handler, effect and ack commit in one transaction.
    Transactional,
    /// External I/O outside a transaction, fenced by a lease token.
    Leased,
}

/// Delivery order of a consumer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Ordering {
    /// One in flight per order key; the oldest blocks later ones.
    #[default]
    PerKey,
    /// Any order.
    None,
}

/// Whether a consumer receives deliveries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConsumerMode {
    /// No deliveries are created.
    Off,
    /// Deliveries are created and handled, effects are not committed.
    Shadow,
    /// Deliveries are created and handled.
    #[default]
    Live,
}

/// `executor-classes.yaml`: the executor classes consumers name.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "evc executor classes (executor-classes.yaml)")]
pub struct ExecutorClassesFile {
    /// Classes by reference: the kind, a dot, and a name (`notification.email`).
    #[schemars(extend("propertyNames" = { "pattern": names::EXECUTOR_CLASS_PATTERN }))]
    pub classes: BTreeMap<String, ExecutorClassDef>,
}

/// One executor class.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutorClassDef {
    /// What its executors do.
    pub description: String,
    /// Whether its handlers change state outside evc (send, write, call), so a redelivery must
    /// find their effects recorded.
    pub mutating: bool,
    /// Retry policy of its consumers that name none (before `defaults.retry_policy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<Name>,
    /// The namespace its consumers' idempotency (effect) keys belong to.
    pub idempotency_namespace: Name,
    /// Who answers when its workers fall silent (a team or service).
    #[schemars(length(min = 1, max = 200))]
    pub heartbeat_owner: String,
    /// Silence after which a worker of its consumers that set none counts as stuck (before
    /// `defaults.heartbeat_threshold`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_threshold: Option<DurationText>,
    /// Whether consumers may name it (default `true`). Retiring a class sets `false` once no
    /// consumer names it; only then may a later change remove it.
    #[serde(default = "active_by_default")]
    pub active: bool,
}

fn active_by_default() -> bool {
    true
}

/// `schedules.yaml`: cron schedules, each appending a tick event per slot.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "evc schedules (schedules.yaml)")]
pub struct SchedulesFile {
    /// Schedules by name (`nightly_digest`).
    #[schemars(extend("propertyNames" = { "pattern": names::SCHEDULE_NAME_PATTERN }))]
    pub schedules: BTreeMap<String, ScheduleDef>,
}

/// One schedule: a cron expression whose slots a dispatcher turns into tick events, one per
/// slot across every dispatcher process. A tick runs no work itself; its consumers do.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleDef {
    /// What the ticks are for.
    pub description: String,
    /// When the slots are, in UTC: five fields (`minute hour day-of-month month
    /// day-of-week`, `0 3 * * *`) or six with seconds first (`*/10 * * * * *`).
    #[schemars(length(min = 1, max = 200))]
    pub cron: String,
    /// The registered tick event each slot appends: `cron.tick.<schedule>`. Its payload gets
    /// `schedule` (the name) and `slot` (the slot's time, RFC 3339 UTC) where its schema
    /// declares them.
    pub event: EventTypeName,
    /// What happens to slots that passed while no dispatcher ran: `skip` (the default) ticks
    /// the newest only; `catch_up` ticks each, oldest first, at most `catch_up_limit`.
    #[serde(default)]
    pub missed: Missed,
    /// The most missed slots a catch-up ticks (the newest ones); default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub catch_up_limit: Option<u32>,
    /// The tenant the ticks belong to; required when `envelope.require_tenant_scope` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 200))]
    pub tenant_scope: Option<String>,
}

/// What a schedule does with slots that passed while no dispatcher ran it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Tick the newest missed slot only.
    #[default]
    Skip,
    /// Tick every missed slot, oldest first, at most `catch_up_limit` of the newest.
    CatchUp,
}

/// `retry-policies.yaml`: named retry policies.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "evc retry policies (retry-policies.yaml)")]
pub struct RetryPoliciesFile {
    /// Policies by name.
    #[schemars(extend("propertyNames" = { "pattern": names::NAME_PATTERN }))]
    pub policies: BTreeMap<String, RetryPolicyDef>,
}

/// One retry policy.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicyDef {
    /// What the policy is for.
    #[serde(default)]
    pub description: Option<String>,
    /// How delays grow.
    pub kind: RetryKind,
    /// First delay (required unless `kind: no_retry`).
    #[serde(default)]
    pub base_delay: Option<DurationText>,
    /// Longest delay.
    #[serde(default)]
    pub max_delay: Option<DurationText>,
    /// Attempts in all, the first included.
    #[schemars(range(min = 1, max = 1000))]
    pub max_attempts: u32,
    /// Randomization of delays (default `none`).
    #[serde(default)]
    pub jitter: Jitter,
    /// Failure classes that are retried (default `[transient]`).
    #[serde(default = "default_retry_on")]
    pub retry_on: Vec<FailureClass>,
}

fn default_retry_on() -> Vec<FailureClass> {
    vec![FailureClass::Transient]
}

/// How retry delays grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RetryKind {
    /// `base * 2^(attempt-1)`, capped.
    ExponentialBackoff,
    /// `base` every time.
    FixedDelay,
    /// `base * fib(attempt)`, capped.
    Fibonacci,
    /// One attempt only.
    NoRetry,
}

/// Randomization of retry delays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    /// Exact delays.
    #[default]
    None,
    /// Uniform in `[0, delay]`.
    Full,
    /// `delay/2` plus uniform in `[0, delay/2]`.
    Equal,
    /// Uniform in `[base, previous * 3]`, capped.
    Decorrelated,
}

/// Classes of handler failure.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// May succeed later (timeouts, unavailable peers).
    Transient,
    /// Will never succeed; dead-lettered.
    Permanent,
    /// The event itself breaks the handler; dead-lettered.
    Poison,
    /// Outside the consumer's scope; quarantined.
    Scope,
    /// Payload does not match the schema; quarantined.
    Schema,
    /// Data integrity violated; quarantined.
    Integrity,
}

impl FailureClass {
    /// Whether failures of this class are quarantined (never retried).
    pub fn is_quarantined(self) -> bool {
        matches!(self, Self::Scope | Self::Schema | Self::Integrity)
    }
}

/// `topics.yaml`: realtime topics that group events for gateways and dashboards.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "evc topics (topics.yaml)")]
pub struct TopicsFile {
    /// Topics by name.
    #[schemars(extend("propertyNames" = { "pattern": names::NAME_PATTERN }))]
    pub topics: BTreeMap<String, TopicDef>,
}

/// One topic.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TopicDef {
    /// What subscribers of the topic see.
    pub description: String,
    /// Event type patterns routed to the topic.
    #[schemars(length(min = 1))]
    pub events: Vec<EventPattern>,
    /// Partition key; one stream per value.
    #[serde(default)]
    pub key: Option<TopicKey>,
    /// Payload field equality filters: an event passes when each named field has one of the
    /// listed values.
    #[serde(default)]
    #[schemars(extend("propertyNames" = { "pattern": names::FIELD_PATTERN }))]
    pub filter: BTreeMap<String, Vec<serde_json::Value>>,
}
