//! `registry.json`: the registry as data, for non-Rust readers and for the runtime's start-up
//! parity check against the database.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Artifact, EmitError, GENERATED_NOTICE, Layout};
use crate::digest;
use crate::duration;
use crate::model::{
    CompatMode, ConsumerMode, ContractSet, EventStatus, ExecutorKind, FailureClass, HandlerKind,
    InventoryRepair, Jitter, Ordering, RetryKind,
};

/// The manifest document.
#[derive(Debug, Serialize)]
pub struct Manifest<'a> {
    #[serde(rename = "$comment")]
    comment: &'static str,
    /// Project name.
    pub project: &'a str,
    /// Digest of everything below, so a database can tell whether it holds this registry.
    pub digest: String,
    /// The registry content.
    #[serde(flatten)]
    pub registry: Registry<'a>,
    /// The project's runtime settings. Outside the digest: the database's registry mirror
    /// does not hold them, each process applies the ones it was built with.
    pub settings: Settings<'a>,
}

/// The project's runtime settings, as the runtime applies them.
#[derive(Debug, Serialize)]
pub struct Settings<'a> {
    /// The payload policy checked at append.
    pub payload_policy: PayloadPolicyEntry<'a>,
    /// Envelope requirements checked at append.
    pub envelope: EnvelopeEntry,
    /// Dispatcher defaults.
    pub dispatcher: DispatcherEntry,
    /// Handler timeouts of the consumers that set one, by consumer.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub handler_timeouts: BTreeMap<&'a str, String>,
    /// Schedules, by name (left out when there are none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub schedules: BTreeMap<&'a str, ScheduleEntry<'a>>,
    /// Lag thresholds of the consumers that set any, by consumer, then producer class.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub lag_thresholds: BTreeMap<&'a str, BTreeMap<&'a str, String>>,
    /// Cut-over gates of the consumers that declare one, by consumer.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cutover_gates: BTreeMap<&'a str, CutoverGateEntry>,
    /// Retention periods (left out when the contracts declare none).
    #[serde(skip_serializing_if = "RetentionEntry::is_empty")]
    pub retention: RetentionEntry<'a>,
    /// Inventory rules of the consumers that declare them, by consumer.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub inventory: BTreeMap<&'a str, InventoryEntry>,
    /// The usage evidence the dispatcher records (left out: computed on demand only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<EvidenceEntry>,
}

/// Usage evidence recorded periodically, as the dispatcher records it.
#[derive(Debug, Serialize)]
pub struct EvidenceEntry {
    /// One snapshot per slot of this length.
    pub every: String,
    /// How long a snapshot is kept.
    pub keep: String,
    /// How far back a snapshot reads the ledger.
    pub window: String,
    /// The failing-together slot.
    pub correlation: String,
    /// The fewest occurrences a listed signal has.
    pub min_count: u32,
}

/// A consumer's inventory rules, as `evc inventory` classifies its events.
#[derive(Debug, Serialize)]
pub struct InventoryEntry {
    /// Age past which an event expires (left out: none expire).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
    /// `none` or `conform`.
    pub repair: InventoryRepair,
}

/// The retention periods, as the purge applies them; a table left out keeps its rows.
#[derive(Debug, Default, Serialize)]
pub struct RetentionEntry<'a> {
    /// The event types whose settled events are purged, by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub events: BTreeMap<&'a str, String>,
    /// Attempts of deliveries no longer open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<String>,
    /// Shadow runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconciliations: Option<String>,
    /// Rejected appends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejects: Option<String>,
    /// How long idempotency records outlive the event retention of their consumers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effects: Option<String>,
}

impl RetentionEntry<'_> {
    /// Whether no table has a period.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
            && self.attempts.is_none()
            && self.reconciliations.is_none()
            && self.rejects.is_none()
            && self.effects.is_none()
    }
}

/// A consumer's cut-over gate, as operators' moves to `live` are checked against it.
#[derive(Debug, Serialize)]
pub struct CutoverGateEntry {
    /// Compared shadow deliveries it needs.
    pub min_reconciled: u32,
    /// How long they must span, first to newest.
    pub min_span: String,
    /// Unexplained differences it lets pass.
    pub max_unexplained: u32,
}

/// A schedule, as the dispatchers run it.
#[derive(Debug, Serialize)]
pub struct ScheduleEntry<'a> {
    /// The cron expression, in UTC.
    pub cron: &'a str,
    /// The tick event.
    pub event: &'a str,
    /// What happens to missed slots.
    pub missed: crate::format::Missed,
    /// The most missed slots a catch-up ticks.
    pub catch_up_limit: u32,
    /// The ticks' tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_scope: Option<&'a str>,
}

/// The payload policy.
#[derive(Debug, Serialize)]
pub struct PayloadPolicyEntry<'a> {
    /// Keys refused anywhere in a payload.
    pub denied_keys: &'a [String],
    /// Credential-shaped key names refused anywhere in a payload.
    pub credential_key_names: &'a [String],
    /// Cap of a payload whose event type sets none, in bytes.
    pub default_max_bytes: u32,
    /// Cap of every payload, in bytes.
    pub hard_max_bytes: u32,
}

/// Envelope requirements.
#[derive(Debug, Serialize)]
pub struct EnvelopeEntry {
    /// Whether an append without a tenant scope is refused.
    pub require_tenant_scope: bool,
    /// Whether every event must carry a W3C trace context.
    pub require_trace_context: bool,
}

/// Dispatcher defaults.
#[derive(Debug, Serialize)]
pub struct DispatcherEntry {
    /// Deliveries claimed per batch.
    pub batch_size: u32,
    /// Lease length.
    pub lease: String,
    /// Heartbeat interval.
    pub heartbeat: String,
    /// Attempts before dead-lettering, whatever a retry policy says.
    pub max_attempts: u32,
    /// Longest delay between attempts.
    pub backoff_ceiling: String,
}

/// Builds the manifest's settings part.
pub fn settings(set: &ContractSet) -> Settings<'_> {
    let project = &set.project;
    Settings {
        payload_policy: PayloadPolicyEntry {
            denied_keys: &project.payload_policy.denied_keys,
            credential_key_names: &project.payload_policy.credential_key_names,
            default_max_bytes: project.payload_policy.default_max_bytes,
            hard_max_bytes: project.payload_policy.hard_max_bytes,
        },
        envelope: EnvelopeEntry {
            require_tenant_scope: project.require_tenant_scope,
            require_trace_context: project.require_trace_context,
        },
        dispatcher: DispatcherEntry {
            batch_size: project.dispatcher.batch_size,
            lease: duration::format(project.dispatcher.lease),
            heartbeat: duration::format(project.dispatcher.heartbeat),
            max_attempts: project.dispatcher.max_attempts,
            backoff_ceiling: duration::format(project.dispatcher.backoff_ceiling),
        },
        handler_timeouts: set
            .consumers
            .iter()
            .filter_map(|(name, consumer)| {
                let timeout = consumer.handler_timeout?;
                Some((name.as_str(), duration::format(timeout)))
            })
            .collect(),
        schedules: set
            .schedules
            .iter()
            .map(|(name, schedule)| {
                (
                    name.as_str(),
                    ScheduleEntry {
                        cron: &schedule.cron,
                        event: &schedule.event,
                        missed: schedule.missed,
                        catch_up_limit: schedule.catch_up_limit,
                        tenant_scope: schedule.tenant_scope.as_deref(),
                    },
                )
            })
            .collect(),
        lag_thresholds: set
            .consumers
            .iter()
            .filter(|(_, consumer)| !consumer.lag_thresholds.is_empty())
            .map(|(name, consumer)| {
                let thresholds = consumer
                    .lag_thresholds
                    .iter()
                    .map(|(class, threshold)| (class.as_str(), duration::format(*threshold)))
                    .collect();
                (name.as_str(), thresholds)
            })
            .collect(),
        cutover_gates: set
            .consumers
            .iter()
            .filter_map(|(name, consumer)| {
                let gate = consumer.cutover_gate?;
                Some((
                    name.as_str(),
                    CutoverGateEntry {
                        min_reconciled: gate.min_reconciled,
                        min_span: duration::format(gate.min_span),
                        max_unexplained: gate.max_unexplained,
                    },
                ))
            })
            .collect(),
        retention: RetentionEntry {
            events: set
                .events
                .iter()
                .filter_map(|(name, event)| {
                    Some((name.as_str(), duration::format(event.retention?)))
                })
                .collect(),
            attempts: set.project.retention.attempts.map(duration::format),
            reconciliations: set.project.retention.reconciliations.map(duration::format),
            rejects: set.project.retention.rejects.map(duration::format),
            effects: set.project.retention.effects.map(duration::format),
        },
        inventory: set
            .consumers
            .iter()
            .filter(|(_, consumer)| consumer.inventory.is_declared())
            .map(|(name, consumer)| {
                (
                    name.as_str(),
                    InventoryEntry {
                        max_age: consumer.inventory.max_age.map(duration::format),
                        repair: consumer.inventory.repair,
                    },
                )
            })
            .collect(),
        evidence: project.evidence.map(|evidence| EvidenceEntry {
            every: duration::format(evidence.every),
            keep: duration::format(evidence.keep),
            window: duration::format(evidence.window),
            correlation: duration::format(evidence.correlation),
            min_count: evidence.min_count,
        }),
    }
}

/// Everything the manifest digest covers.
#[derive(Debug, Serialize)]
pub struct Registry<'a> {
    /// Event types by name.
    pub event_types: BTreeMap<&'a str, EventEntry<'a>>,
    /// Consumers by name.
    pub consumers: BTreeMap<&'a str, ConsumerEntry<'a>>,
    /// Retry policies by name.
    pub retry_policies: BTreeMap<&'a str, RetryPolicyEntry<'a>>,
    /// Executor classes by reference (left out when there are none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub executor_classes: BTreeMap<&'a str, ExecutorClassEntry<'a>>,
}

/// One event type.
#[derive(Debug, Serialize)]
pub struct EventEntry<'a> {
    /// What happened.
    pub description: &'a str,
    /// Who emits it.
    pub producer_class: &'a str,
    /// Payload fields ordering deliveries (empty: the envelope's aggregate).
    pub order_key: &'a [String],
    /// Compatibility mode.
    pub compat: CompatMode,
    /// Lifecycle status.
    pub status: EventStatus,
    /// Payload size cap in bytes.
    pub max_payload_bytes: u32,
    /// Versions, ascending.
    pub versions: Vec<VersionEntry<'a>>,
}

/// One event version.
#[derive(Debug, Serialize)]
pub struct VersionEntry<'a> {
    /// Semantic version.
    pub version: String,
    /// SHA-256 of the canonical schema JSON.
    pub schema_digest: String,
    /// The payload schema.
    pub schema: &'a serde_json::Value,
}

/// One consumer.
#[derive(Debug, Serialize)]
pub struct ConsumerEntry<'a> {
    /// What it does.
    pub description: &'a str,
    /// Executor kind.
    pub executor_kind: ExecutorKind,
    /// Executor class, if the contracts register classes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_class: Option<&'a str>,
    /// Subscriptions: event type to version requirement.
    pub subscribes: BTreeMap<&'a str, String>,
    /// Retry policy.
    pub retry_policy: &'a str,
    /// Handler kind.
    pub handler: HandlerKind,
    /// Delivery order.
    pub ordering: Ordering,
    /// Delivery mode.
    pub mode: ConsumerMode,
    /// Heartbeat threshold.
    pub heartbeat_threshold: String,
}

/// One executor class.
#[derive(Debug, Serialize)]
pub struct ExecutorClassEntry<'a> {
    /// What its executors do.
    pub description: &'a str,
    /// Whether its handlers change state outside evc.
    pub mutating: bool,
    /// Retry policy of its consumers that name none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<&'a str>,
    /// Namespace of its consumers' idempotency keys.
    pub idempotency_namespace: &'a str,
    /// Who answers when its workers fall silent.
    pub heartbeat_owner: &'a str,
    /// Heartbeat threshold of its consumers that set none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_threshold: Option<String>,
    /// Whether consumers may name it.
    pub active: bool,
}

/// One retry policy.
#[derive(Debug, Serialize)]
pub struct RetryPolicyEntry<'a> {
    /// How delays grow.
    pub kind: RetryKind,
    /// First delay.
    pub base_delay: String,
    /// Longest delay, if capped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_delay: Option<String>,
    /// Attempts in all.
    pub max_attempts: u32,
    /// Delay randomization.
    pub jitter: Jitter,
    /// Failure classes retried.
    pub retry_on: &'a [FailureClass],
}

/// Builds the manifest's registry part.
pub fn registry(set: &ContractSet) -> Registry<'_> {
    Registry {
        event_types: set
            .events
            .iter()
            .map(|(name, event)| {
                let versions = event
                    .versions
                    .iter()
                    .map(|version| VersionEntry {
                        version: version.version.to_string(),
                        schema_digest: digest::json_digest(&version.schema),
                        schema: &version.schema,
                    })
                    .collect();
                let entry = EventEntry {
                    description: &event.description,
                    producer_class: &event.producer_class,
                    order_key: &event.order_key,
                    compat: event.compat,
                    status: event.status,
                    max_payload_bytes: event.max_payload_bytes,
                    versions,
                };
                (name.as_str(), entry)
            })
            .collect(),
        consumers: set
            .consumers
            .iter()
            .map(|(name, consumer)| {
                let entry = ConsumerEntry {
                    description: &consumer.description,
                    executor_kind: consumer.executor_kind,
                    executor_class: consumer.executor_class.as_deref(),
                    subscribes: consumer
                        .subscriptions
                        .iter()
                        .map(|s| (s.event.as_str(), s.requirement.to_string()))
                        .collect(),
                    retry_policy: &consumer.retry_policy,
                    handler: consumer.handler,
                    ordering: consumer.ordering,
                    mode: consumer.mode,
                    heartbeat_threshold: duration::format(consumer.heartbeat_threshold),
                };
                (name.as_str(), entry)
            })
            .collect(),
        retry_policies: set
            .retry_policies
            .iter()
            .map(|(name, policy)| {
                let entry = RetryPolicyEntry {
                    kind: policy.kind,
                    base_delay: duration::format(policy.base_delay),
                    max_delay: policy.max_delay.map(duration::format),
                    max_attempts: policy.max_attempts,
                    jitter: policy.jitter,
                    retry_on: &policy.retry_on,
                };
                (name.as_str(), entry)
            })
            .collect(),
        executor_classes: set
            .executor_classes
            .iter()
            .map(|(name, class)| {
                let entry = ExecutorClassEntry {
                    description: &class.description,
                    mutating: class.mutating,
                    retry_policy: class.retry_policy.as_deref(),
                    idempotency_namespace: &class.idempotency_namespace,
                    heartbeat_owner: &class.heartbeat_owner,
                    heartbeat_threshold: class.heartbeat_threshold.map(duration::format),
                    active: class.active,
                };
                (name.as_str(), entry)
            })
            .collect(),
    }
}

/// The digest of the registry: SHA-256 of its canonical JSON.
///
/// Computed once per set: emitters on other threads that ask meanwhile wait for it rather
/// than hash every schema a second time.
pub fn registry_digest(set: &ContractSet) -> Result<String, EmitError> {
    set.registry_digest
        .get_or_init(|| {
            serde_json::to_value(registry(set))
                .map(|value| digest::json_digest(&value))
                .map_err(|error| error.to_string())
        })
        .clone()
        .map_err(|message| EmitError::Serialize {
            document: "registry.json",
            message,
        })
}

/// Renders `registry.json`.
pub fn render(set: &ContractSet, layout: &Layout) -> Result<Artifact, EmitError> {
    let manifest = Manifest {
        comment: GENERATED_NOTICE,
        project: &set.project.name,
        digest: registry_digest(set)?,
        registry: registry(set),
        settings: settings(set),
    };
    let mut contents =
        serde_json::to_string_pretty(&manifest).map_err(|error| EmitError::Serialize {
            document: "registry.json",
            message: error.to_string(),
        })?;
    contents.push('\n');
    Ok(Artifact {
        path: layout.crate_dir.join("registry.json"),
        contents,
    })
}
