//! The validated contract model: what every emitter and check downstream of the loader reads.
//!
//! Everything here has passed validation: names are valid and unique, versions are parsed and
//! ordered, references resolve and defaults are applied. Collections are ordered maps, so
//! anything generated from the model is byte-stable.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::format::{
    CompatMode, ConsumerMode, ContentModel, EventStatus, ExecutorKind, FailureClass, HandlerKind,
    InventoryRepair, Jitter, Ordering, RetryKind,
};
use crate::source::{Location, Sources};
use crate::yaml::Node;

/// A whole, valid contract set. It is read-only after validation: emitters cache values derived
/// from it (the registry digest), and loading records that its Rust names do not clash.
#[derive(Debug, Clone)]
pub struct ContractSet {
    /// The directory it was loaded from.
    pub dir: PathBuf,
    /// Project-wide settings from `evc.yaml`.
    pub project: Project,
    /// Event types by name.
    pub events: BTreeMap<String, EventType>,
    /// Consumers by name.
    pub consumers: BTreeMap<String, Consumer>,
    /// Retry policies by name.
    pub retry_policies: BTreeMap<String, RetryPolicy>,
    /// Topics by name.
    pub topics: BTreeMap<String, Topic>,
    /// Executor classes by reference (`notification.email`); empty without
    /// `executor-classes.yaml`.
    pub executor_classes: BTreeMap<String, ExecutorClass>,
    /// Schedules by name; empty without `schedules.yaml`.
    pub schedules: BTreeMap<String, Schedule>,
    /// Every file read, for diagnostics and for build scripts' `rerun-if-changed`.
    pub sources: Sources,
    /// The YAML tree of every parsed file, by display path: the source map from any node
    /// (schema keywords included) to its line and column.
    pub trees: BTreeMap<String, std::sync::Arc<Node>>,
    /// The registry digest, or why the registry did not serialize, computed once: every
    /// emitter writes it, and it hashes every schema.
    pub(crate) registry_digest: std::sync::OnceLock<Result<String, String>>,
    /// Whether loading made the Rust generator's name check and found no clash, so that
    /// rendering the crate need not walk every payload type again.
    pub(crate) rust_names_checked: bool,
}

impl ContractSet {
    /// The location of the node at `pointer` in `file`, or of the file itself when the node is
    /// not there.
    pub fn locate(&self, file: &str, pointer: &str) -> Location {
        self.trees
            .get(file)
            .and_then(|tree| tree.pointer(pointer))
            .zip(self.sources.get(file))
            .map_or_else(
                || Location::file(file),
                |(node, source)| node.location(source),
            )
    }

    /// The location of the key of the entry at `pointer` in `file` (of the node itself when it
    /// has no key, of the file when the node is not there).
    pub fn locate_key(&self, file: &str, pointer: &str) -> Location {
        self.trees
            .get(file)
            .and_then(|tree| tree.pointer_entry(pointer))
            .zip(self.sources.get(file))
            .map_or_else(
                || Location::file(file),
                |((key, node), source)| key.unwrap_or(node).location(source),
            )
    }

    /// Whether any table or event type has a retention period (`retention` of `evc.yaml` or
    /// of an event type): what the generated registry and settings render.
    pub fn declares_retention(&self) -> bool {
        let periods = &self.project.retention;
        self.events.values().any(|event| event.retention.is_some())
            || periods.attempts.is_some()
            || periods.reconciliations.is_some()
            || periods.rejects.is_some()
            || periods.effects.is_some()
    }

    /// Number of event versions across all event types.
    pub fn version_count(&self) -> usize {
        self.events.values().map(|event| event.versions.len()).sum()
    }
}

/// Project-wide settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// Project name.
    pub name: String,
    /// What payloads may carry.
    pub payload_policy: PayloadPolicy,
    /// Whether every event must carry a tenant scope.
    pub require_tenant_scope: bool,
    /// Whether every event must carry a W3C trace context.
    pub require_trace_context: bool,
    /// Dispatcher defaults.
    pub dispatcher: DispatcherSettings,
    /// The relay to NATS JetStream.
    pub relay: RelaySettings,
    /// Retention periods per table.
    pub retention: Retention,
    /// Usage evidence the dispatcher records periodically; `None`: computed on demand only.
    pub evidence: Option<EvidenceRecording>,
}

/// Usage evidence recorded periodically (`evidence` of `evc.yaml`), defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvidenceRecording {
    /// One snapshot per slot of this length.
    pub every: Duration,
    /// How long a snapshot is kept.
    pub keep: Duration,
    /// How far back a snapshot reads the ledger.
    pub window: Duration,
    /// The slot of the `failing_together` signal.
    pub correlation: Duration,
    /// The fewest occurrences a listed signal has.
    pub min_count: u32,
}

impl EvidenceRecording {
    /// The window a snapshot reads when the contract names none: a week.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(7 * 86_400);
    /// The failing-together slot when the contract names none: a minute.
    pub const DEFAULT_CORRELATION: Duration = Duration::from_secs(60);
    /// The fewest occurrences when the contract names none.
    pub const DEFAULT_MIN_COUNT: u32 = 2;
}

/// Retention periods per table (`retention` of `evc.yaml`); `None` keeps the rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Settled events of event types that set no `retention` of their own.
    pub events: Option<Duration>,
    /// Attempts of deliveries no longer open.
    pub attempts: Option<Duration>,
    /// Shadow runs.
    pub reconciliations: Option<Duration>,
    /// Rejected appends.
    pub rejects: Option<Duration>,
    /// How long an idempotency record outlives the retention of its consumer's event types.
    pub effects: Option<Duration>,
}

/// The payload policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadPolicy {
    /// Keys that may never appear in a schema or payload.
    pub denied_keys: Vec<String>,
    /// Credential-shaped name parts.
    pub credential_key_names: Vec<String>,
    /// Default size cap of one payload, in bytes.
    pub default_max_bytes: u32,
    /// Largest cap an event type may set, in bytes.
    pub hard_max_bytes: u32,
    /// Whether payload objects may carry keys they do not name, unless an event type says.
    pub content: ContentModel,
}

impl Default for PayloadPolicy {
    fn default() -> Self {
        Self {
            denied_keys: ["body_text", "instruction_text", "payload_blob", "iu_body"]
                .map(String::from)
                .to_vec(),
            credential_key_names: [
                "password",
                "passwd",
                "pwd",
                "token",
                "api_key",
                "secret",
                "credential",
                "authorization",
                "private_key",
            ]
            .map(String::from)
            .to_vec(),
            default_max_bytes: 4096,
            hard_max_bytes: 65536,
            content: ContentModel::Closed,
        }
    }
}

impl PayloadPolicy {
    /// The deny-listed key `key` is a spelling of, if any. Spellings are compared by their
    /// parts joined, so `bodyText`, `Body_Text` and `BODYTEXT` are `body_text`. The runtime's
    /// scan at append uses the same rule.
    pub fn denied_as(&self, key: &str) -> Option<&str> {
        let key_joined = name_parts(key).concat();
        self.denied_keys
            .iter()
            .find(|denied| {
                let joined = name_parts(denied).concat();
                !joined.is_empty() && joined == key_joined
            })
            .map(String::as_str)
    }

    /// The credential name `key` is shaped like, if any: a key matches when adjacent whole
    /// parts of it, joined, spell the name joined (`api_key` matches `partner_api_key`,
    /// `apiKey`, `APIKEY` and `x-api-key`; `token` matches `refresh_token` but not `tokenizer`).
    /// The runtime's scan at append uses the same rule, so a schema `evc check` accepts never
    /// names a key every payload would then be refused for.
    pub fn credential_shape(&self, key: &str) -> Option<&str> {
        let key_parts = name_parts(key);
        self.credential_key_names
            .iter()
            .find(|name| {
                let joined = name_parts(name).concat();
                !joined.is_empty() && spells(&key_parts, &joined)
            })
            .map(String::as_str)
    }
}

/// Whether adjacent whole parts of `parts`, joined, are exactly `joined`.
fn spells(parts: &[String], joined: &str) -> bool {
    (0..parts.len()).any(|start| {
        let mut length = 0;
        for part in &parts[start..] {
            if !joined[length..].starts_with(part.as_str()) {
                return false;
            }
            length += part.len();
            if length == joined.len() {
                return true;
            }
        }
        false
    })
}

/// Splits a key into lower-case parts at `_`, `-`, `.` and camelCase boundaries.
fn name_parts(key: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in key.chars() {
        if matches!(c, '_' | '-' | '.' | ' ') {
            if !current.is_empty() {
                parts.push(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            parts.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts
}

/// Dispatcher defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatcherSettings {
    /// Deliveries claimed per batch.
    pub batch_size: u32,
    /// Lease length.
    pub lease: Duration,
    /// Heartbeat interval.
    pub heartbeat: Duration,
    /// Attempts before dead-lettering, whatever a policy says.
    pub max_attempts: u32,
    /// Longest delay between attempts.
    pub backoff_ceiling: Duration,
}

impl Default for DispatcherSettings {
    fn default() -> Self {
        Self {
            batch_size: 50,
            lease: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
            max_attempts: 12,
            backoff_ceiling: Duration::from_secs(15 * 60),
        }
    }
}

/// The relay to NATS JetStream (`relay` of `evc.yaml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelaySettings {
    /// First subject tokens (`evc`).
    pub subject_prefix: String,
    /// The stream's name (`EVC`).
    pub stream: String,
    /// How long the broker remembers an event id.
    pub duplicate_window: Duration,
    /// How long a relay holds its cursor without moving it.
    pub lease: Duration,
    /// Subject partitions of each event type.
    pub partitions: u32,
}

impl Default for RelaySettings {
    fn default() -> Self {
        Self {
            subject_prefix: "evc".to_owned(),
            stream: "EVC".to_owned(),
            duplicate_window: Duration::from_secs(120),
            lease: Duration::from_secs(30),
            partitions: 1,
        }
    }
}

/// One event type.
#[derive(Debug, Clone, PartialEq)]
pub struct EventType {
    /// Name (`iu.born`).
    pub name: String,
    /// What happened.
    pub description: String,
    /// Who emits it.
    pub producer_class: String,
    /// Payload fields that order deliveries; empty: the envelope's aggregate.
    pub order_key: Vec<String>,
    /// How versions may evolve.
    pub compat: CompatMode,
    /// Lifecycle status.
    pub status: EventStatus,
    /// Payload size cap in bytes (policy default applied).
    pub max_payload_bytes: u32,
    /// Whether its payload objects may carry keys they do not name.
    pub content: ContentModel,
    /// How long its settled events stay (its own `retention`, else the project's); `None`:
    /// kept.
    pub retention: Option<Duration>,
    /// Versions, ascending.
    pub versions: Vec<EventVersion>,
    /// Display path of the file that defines it.
    pub file: String,
}

impl EventType {
    /// The newest version of each major, ascending by major.
    pub fn latest_per_major(&self) -> Vec<&EventVersion> {
        let mut latest: BTreeMap<u64, &EventVersion> = BTreeMap::new();
        for version in &self.versions {
            latest.insert(version.version.major, version);
        }
        latest.into_values().collect()
    }
}

/// One version of an event type.
#[derive(Debug, Clone, PartialEq)]
pub struct EventVersion {
    /// The version.
    pub version: semver::Version,
    /// What changed.
    pub description: Option<String>,
    /// JSON Schema 2020-12 of the payload, translated from the draft it was written in; shared
    /// with the loads of one command that read the same file (see [`crate::LoadCache`]).
    pub schema: std::sync::Arc<serde_json::Value>,
    /// The plan for a breaking change, on major bumps.
    pub migration_policy: Option<MigrationPolicy>,
    /// JSON pointer of this version in its file (`/versions/1`).
    pub pointer: String,
}

/// The plan for a breaking change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationPolicy {
    /// How long producers keep emitting the previous major.
    pub producer_window: Duration,
    /// How long consumers have to move.
    pub consumer_window: Duration,
    /// What is emitted during the window.
    pub dual_write: String,
    /// How to roll back.
    pub rollback: String,
}

/// One consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// Name (`worker.notification.iu`).
    pub name: String,
    /// What it does.
    pub description: String,
    /// Executor kind.
    pub executor_kind: ExecutorKind,
    /// Executor class (it exists, is active and of the consumer's kind); `None` only without
    /// `executor-classes.yaml`.
    pub executor_class: Option<String>,
    /// Subscriptions, in file order.
    pub subscriptions: Vec<Subscription>,
    /// Retry policy name (default applied; it exists).
    pub retry_policy: String,
    /// Handler kind.
    pub handler: HandlerKind,
    /// Delivery order.
    pub ordering: Ordering,
    /// Delivery mode.
    pub mode: ConsumerMode,
    /// Silence after which the consumer counts as stuck.
    pub heartbeat_threshold: Duration,
    /// Longest run of one handler attempt; `None`: no limit.
    pub handler_timeout: Option<Duration>,
    /// Lag thresholds by producer class (each produces an event it subscribes to).
    pub lag_thresholds: BTreeMap<String, Duration>,
    /// What shadow runs must show before an operator may move it to `live`.
    pub cutover_gate: Option<CutoverGate>,
    /// How `evc inventory` classifies the events that exist before it goes live.
    pub inventory: Inventory,
    /// Display path of the file that defines it.
    pub file: String,
}

/// A consumer's inventory rules (`inventory`); the default expires nothing and repairs
/// nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Events older than this expire; `None`: none expire.
    pub max_age: Option<Duration>,
    /// Whether a refused event may be conformed to an accepted version.
    pub repair: InventoryRepair,
}

impl Inventory {
    /// Whether the contract declares rules other than the defaults.
    pub fn is_declared(&self) -> bool {
        *self != Self::default()
    }
}

/// A consumer's cut-over gate (`cutover_gate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutoverGate {
    /// Compared shadow deliveries it needs.
    pub min_reconciled: u32,
    /// How long they must span, first to newest.
    pub min_span: Duration,
    /// Unexplained differences it lets pass.
    pub max_unexplained: u32,
}

/// An executor class of `executor-classes.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorClass {
    /// Reference (`notification.email`).
    pub name: String,
    /// Its kind, the reference's first segment.
    pub kind: ExecutorKind,
    /// What its executors do.
    pub description: String,
    /// Whether its handlers change state outside evc.
    pub mutating: bool,
    /// Retry policy of its consumers that name none (it exists).
    pub retry_policy: Option<String>,
    /// Namespace of its consumers' idempotency keys.
    pub idempotency_namespace: String,
    /// Who answers when its workers fall silent.
    pub heartbeat_owner: String,
    /// Heartbeat threshold of its consumers that set none.
    pub heartbeat_threshold: Option<Duration>,
    /// Whether consumers may name it.
    pub active: bool,
}

/// A schedule of `schedules.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Name (`nightly_digest`).
    pub name: String,
    /// What its ticks are for.
    pub description: String,
    /// The cron expression (it parses), in UTC.
    pub cron: String,
    /// The tick event type (registered, `cron.tick.<name>`).
    pub event: String,
    /// What happens to missed slots.
    pub missed: crate::format::Missed,
    /// The most missed slots a catch-up ticks.
    pub catch_up_limit: u32,
    /// The tenant its ticks belong to.
    pub tenant_scope: Option<String>,
}

/// A consumer's subscription to an event type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The event type.
    pub event: String,
    /// The versions accepted.
    pub requirement: semver::VersionReq,
}

/// One retry policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Name.
    pub name: String,
    /// What it is for.
    pub description: Option<String>,
    /// How delays grow.
    pub kind: RetryKind,
    /// First delay (zero for `no_retry`).
    pub base_delay: Duration,
    /// Longest delay, if capped.
    pub max_delay: Option<Duration>,
    /// Attempts in all.
    pub max_attempts: u32,
    /// Delay randomization.
    pub jitter: Jitter,
    /// Failure classes that are retried.
    pub retry_on: Vec<FailureClass>,
}

/// One topic.
#[derive(Debug, Clone, PartialEq)]
pub struct Topic {
    /// Name.
    pub name: String,
    /// What subscribers see.
    pub description: String,
    /// Event type patterns.
    pub events: Vec<String>,
    /// Partition key (`payload.iu_unit_id`, `envelope.trace_id`).
    pub key: Option<String>,
    /// Payload field filters.
    pub filter: BTreeMap<String, Vec<serde_json::Value>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_shapes_match_whole_parts() {
        let policy = PayloadPolicy::default();
        assert_eq!(policy.credential_shape("refresh_token"), Some("token"));
        assert_eq!(policy.credential_shape("partnerApiKey"), Some("api_key"));
        assert_eq!(policy.credential_shape("DB_PASSWORD"), Some("password"));
        assert_eq!(policy.credential_shape("tokenizer"), None);
        assert_eq!(policy.credential_shape("iu_unit_id"), None);
        assert_eq!(policy.denied_as("bodyText"), Some("body_text"));
        assert_eq!(policy.denied_as("Body_Text"), Some("body_text"));
        assert_eq!(policy.denied_as("body_text_ref"), None);
    }

    /// The spellings the runtime's append scan refuses (runtime/src/policy.rs) are the ones
    /// `evc check` refuses in a schema.
    #[test]
    fn joined_spellings_match_like_the_runtime_scan() {
        let policy = PayloadPolicy::default();
        for key in [
            "apikey",
            "APIKey",
            "APIKEY",
            "x-api-key",
            "api-key",
            "API_KEY",
        ] {
            assert_eq!(policy.credential_shape(key), Some("api_key"), "{key}");
        }
        for (key, name) in [
            ("passwd", "passwd"),
            ("user_pwd", "pwd"),
            ("privateKey", "private_key"),
            ("PRIVATEKEY", "private_key"),
        ] {
            assert_eq!(policy.credential_shape(key), Some(name), "{key}");
        }
        for key in ["passage", "keyboard", "bypass", "public_key", "tokenizer"] {
            assert_eq!(policy.credential_shape(key), None, "{key}");
        }
        assert_eq!(policy.denied_as("BODYTEXT"), Some("body_text"));
    }
}
