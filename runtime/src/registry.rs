//! The static registry: every event type, consumer and retry policy the contracts define, and
//! the project's runtime settings (payload policy, envelope requirements, dispatcher block), as
//! `'static` data that generated code fills in.

/// One version of an event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionDescriptor {
    /// The semantic version (`1.2.0`).
    pub version: &'static str,
    /// Major version.
    pub major: u64,
    /// The payload's JSON Schema 2020-12, as canonical JSON text.
    pub schema: &'static str,
    /// SHA-256 of `schema`, lower-case hex.
    pub schema_digest: &'static str,
}

/// One event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventDescriptor {
    /// Event type name (`iu.born`).
    pub name: &'static str,
    /// What happened.
    pub description: &'static str,
    /// Who emits it.
    pub producer_class: &'static str,
    /// Payload fields that order deliveries (empty: the envelope's aggregate).
    pub order_key: &'static [&'static str],
    /// Whether the type is deprecated.
    pub deprecated: bool,
    /// Payload size cap in bytes.
    pub max_payload_bytes: u32,
    /// Versions, ascending.
    pub versions: &'static [VersionDescriptor],
}

/// How a consumer's handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerKind {
    /// Handler, effect and ack in one database transaction.
    Transactional,
    /// External I/O outside a transaction, fenced by a lease token.
    Leased,
}

/// Whether a consumer receives deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerMode {
    /// No deliveries.
    Off,
    /// Deliveries handled, effects not committed.
    Shadow,
    /// Deliveries handled.
    Live,
}

impl ConsumerMode {
    /// The contract format's keyword (`off`, `shadow`, `live`), as the database stores it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Shadow => "shadow",
            Self::Live => "live",
        }
    }

    /// The mode a keyword names.
    pub fn parse(keyword: &str) -> Option<Self> {
        [Self::Off, Self::Shadow, Self::Live]
            .into_iter()
            .find(|mode| mode.as_str() == keyword)
    }
}

/// A consumer's subscription to one event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriptionDescriptor {
    /// Event type.
    pub event: &'static str,
    /// Semver requirement (`^1`).
    pub requirement: &'static str,
    /// The versions of the event type the requirement matches.
    pub versions: &'static [&'static str],
}

/// One consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerDescriptor {
    /// Name.
    pub name: &'static str,
    /// Handler kind.
    pub handler: HandlerKind,
    /// Delivery mode.
    pub mode: ConsumerMode,
    /// Whether deliveries are ordered per key.
    pub per_key_ordering: bool,
    /// Retry policy name.
    pub retry_policy: &'static str,
    /// Heartbeat threshold in milliseconds.
    pub heartbeat_threshold_ms: u64,
    /// Longest run of one handler attempt in milliseconds (`handler_timeout`); `None`: no
    /// limit. Outside the registry digest: each process applies the one it was built with.
    pub handler_timeout_ms: Option<u64>,
    /// The executor class it runs on ([`Registry::executor_classes`]); `None` in a project
    /// without `executor-classes.yaml`.
    pub executor_class: Option<&'static str>,
    /// Subscriptions.
    pub subscriptions: &'static [SubscriptionDescriptor],
}

/// One executor class (`executor-classes.yaml`): what its consumers' handlers are, and who
/// answers when their workers fall silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutorClassDescriptor {
    /// Reference, its kind first (`notification.email`).
    pub name: &'static str,
    /// Whether its handlers change state outside evc.
    pub mutating: bool,
    /// The namespace its consumers' idempotency (effect) keys belong to.
    pub idempotency_namespace: &'static str,
    /// Who answers when its workers fall silent (a team or service).
    pub heartbeat_owner: &'static str,
    /// Whether consumers may name it (`false`: retired).
    pub active: bool,
}

impl ExecutorClassDescriptor {
    /// Its kind, the reference's first segment (`notification`).
    pub fn kind(&self) -> &'static str {
        self.name
            .split_once('.')
            .map_or(self.name, |(kind, _)| kind)
    }
}

/// A consumer's cut-over gate (`cutover_gate` of its contract): what its shadow runs must show,
/// since it last entered shadow mode, before an operator may move it to `live`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutoverGateDescriptor {
    /// The consumer.
    pub consumer: &'static str,
    /// Shadow deliveries compared with the legacy path's recorded outcome.
    pub min_reconciled: u32,
    /// How long the compared deliveries must span, first to newest, in milliseconds.
    pub min_span_ms: u64,
    /// Differences no operator explained that the gate lets pass.
    pub max_unexplained: u32,
}

/// A consumer's inventory rules (`inventory` of its contract): how the events that exist
/// before it goes live are classified ([`crate::Operate::inventory`]). A consumer whose
/// contract declares none has [`InventoryRulesDescriptor::DEFAULT`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InventoryRulesDescriptor {
    /// The consumer.
    pub consumer: &'static str,
    /// Events older than this, in milliseconds, expire; `None`: none expire.
    pub max_age_ms: Option<u64>,
    /// Whether an event the consumer cannot take as it is may be repaired.
    pub repair: InventoryRepair,
}

impl InventoryRulesDescriptor {
    /// The rules of a consumer whose contract declares none: nothing expires, nothing is
    /// repaired.
    pub const DEFAULT: Self = Self {
        consumer: "",
        max_age_ms: None,
        repair: InventoryRepair::None,
    };
}

/// Usage evidence the dispatcher records periodically (`evidence` of `evc.yaml`): one snapshot
/// per slot of `every_ms` across every process, each kept for `keep_ms`
/// ([`crate::Store::record_evidence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvidenceRecordingDescriptor {
    /// The slot length, in milliseconds.
    pub every_ms: u64,
    /// How long a snapshot is kept, in milliseconds.
    pub keep_ms: u64,
    /// How far back a snapshot reads the ledger, in milliseconds.
    pub window_ms: u64,
    /// The failing-together slot, in milliseconds.
    pub correlation_ms: u64,
    /// The fewest occurrences a listed signal has.
    pub min_count: u32,
}

impl EvidenceRecordingDescriptor {
    /// The query each snapshot runs.
    pub fn query(&self) -> crate::EvidenceQuery {
        crate::EvidenceQuery::over(std::time::Duration::from_millis(self.window_ms))
            .correlation(std::time::Duration::from_millis(self.correlation_ms))
            .min_count(self.min_count)
    }
}

/// How an inventory repairs an event a consumer cannot take as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InventoryRepair {
    /// No repair: the event is quarantined.
    None,
    /// The payload is conformed to the newest registered version the consumer accepts
    /// (undeclared properties of closed objects dropped, declared defaults filled); repaired
    /// when the result validates.
    Conform,
}

impl InventoryRepair {
    /// The contract's spelling (`none`, `conform`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Conform => "conform",
        }
    }

    /// The repair spelled `text`, if any.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "none" => Some(Self::None),
            "conform" => Some(Self::Conform),
            _ => None,
        }
    }
}

/// How long rows stay before the purge removes them (`retention` of `evc.yaml` and of each
/// event type's contract). A period that is `None` keeps its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionDescriptor {
    /// The event types whose settled events are purged, sorted by name, each with its period;
    /// a type not listed keeps its events.
    pub events: &'static [EventRetention],
    /// Attempts of deliveries no longer open, in milliseconds.
    pub attempts_ms: Option<u64>,
    /// Shadow runs (reconciliations), in milliseconds.
    pub reconciliations_ms: Option<u64>,
    /// Rejected appends, in milliseconds.
    pub rejects_ms: Option<u64>,
    /// How long an idempotency record outlives the longest event retention of its consumer's
    /// event types, in milliseconds.
    pub effects_ms: Option<u64>,
}

impl RetentionDescriptor {
    /// Keeps every row: the retention of contracts that declare none.
    pub const KEEP: Self = Self {
        events: &[],
        attempts_ms: None,
        reconciliations_ms: None,
        rejects_ms: None,
        effects_ms: None,
    };

    /// Whether no table has a period.
    pub fn keeps_everything(&self) -> bool {
        *self == Self::KEEP
    }

    /// The retention of events of type `name`, in milliseconds, if they are purged.
    pub fn events_ms(&self, name: &str) -> Option<u64> {
        self.events
            .binary_search_by(|entry| entry.event_type.cmp(name))
            .ok()
            .map(|index| self.events[index].ms)
    }
}

/// How long the settled events of one type stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRetention {
    /// The event type.
    pub event_type: &'static str,
    /// Its period, in milliseconds.
    pub ms: u64,
}

/// A consumer's lag threshold for the events of one producer class (`lag_thresholds` of its
/// contract): when the oldest open delivery to the consumer of such an event has waited
/// longer, the dispatcher appends one `event_lag.breach` for the breach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LagThresholdDescriptor {
    /// The consumer.
    pub consumer: &'static str,
    /// The producer class of the events whose lag is measured.
    pub producer_class: &'static str,
    /// The longest wait that is not a breach, in milliseconds.
    pub threshold_ms: u64,
}

/// What a scheduler does with the slots of a schedule that passed while no dispatcher ran it
/// (all were stopped, the clock jumped ahead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissedSlots {
    /// Appends a tick for each missed slot, oldest first, at most the schedule's
    /// `catch_up_limit` of the newest; older ones are skipped.
    CatchUp,
    /// Appends a tick for the newest missed slot only; the others are skipped.
    Skip,
}

/// One schedule (`schedules.yaml`): a cron expression whose slots the dispatcher's scheduler
/// turns into ticks, one event per slot, appended once across every process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleDescriptor {
    /// Name (`nightly_digest`).
    pub name: &'static str,
    /// The cron expression, in UTC: five fields, or six with seconds first.
    pub cron: &'static str,
    /// The tick event type it appends (`cron.tick.<name>`).
    pub event: &'static str,
    /// What happens to slots that passed unticked.
    pub missed: MissedSlots,
    /// The most missed slots a catch-up appends at once.
    pub catch_up_limit: u32,
    /// The tenant its ticks belong to, if any.
    pub tenant_scope: Option<&'static str>,
}

/// One retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicyDescriptor {
    /// Name.
    pub name: &'static str,
    /// `exponential_backoff`, `fixed_delay`, `fibonacci` or `no_retry`.
    pub kind: &'static str,
    /// First delay in milliseconds.
    pub base_delay_ms: u64,
    /// Longest delay in milliseconds, if capped.
    pub max_delay_ms: Option<u64>,
    /// Attempts in all.
    pub max_attempts: u32,
    /// `none`, `full`, `equal` or `decorrelated`.
    pub jitter: &'static str,
    /// Failure classes retried.
    pub retry_on: &'static [&'static str],
}

/// The project's payload policy (`payload_policy` of `evc.yaml`), applied at append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadPolicyDescriptor {
    /// Keys refused anywhere in a payload.
    pub denied_keys: &'static [&'static str],
    /// Credential-shaped key names refused anywhere in a payload.
    pub credential_key_names: &'static [&'static str],
    /// Size cap of a payload whose event type sets none, in bytes (each event type's own cap
    /// is [`EventDescriptor::max_payload_bytes`]).
    pub default_max_bytes: u32,
    /// Cap of every payload in bytes, whatever its event type's cap says.
    pub hard_max_bytes: u32,
}

/// The project's dispatcher defaults (`dispatcher` of `evc.yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatcherDescriptor {
    /// Deliveries claimed per batch.
    pub batch_size: u32,
    /// Lease length in milliseconds.
    pub lease_ms: u64,
    /// Heartbeat interval in milliseconds.
    pub heartbeat_ms: u64,
    /// Attempts before dead-lettering, whatever a retry policy says.
    pub max_attempts: u32,
    /// Longest delay between attempts in milliseconds.
    pub backoff_ceiling_ms: u64,
}

impl DispatcherDescriptor {
    /// The contract format's defaults (an `evc.yaml` without a `dispatcher` block).
    pub const FORMAT_DEFAULTS: Self = Self {
        batch_size: 50,
        lease_ms: 30_000,
        heartbeat_ms: 10_000,
        max_attempts: 12,
        backoff_ceiling_ms: 15 * 60 * 1000,
    };
}

/// Everything registered, each list sorted by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registry {
    /// Project name.
    pub project: &'static str,
    /// Digest of the registry (the same as `registry.json`'s).
    pub digest: &'static str,
    /// Event types, sorted by name.
    pub events: &'static [EventDescriptor],
    /// Consumers, sorted by name.
    pub consumers: &'static [ConsumerDescriptor],
    /// Retry policies, sorted by name.
    pub retry_policies: &'static [RetryPolicyDescriptor],
    /// Executor classes, sorted by name; empty in a project without `executor-classes.yaml`.
    pub executor_classes: &'static [ExecutorClassDescriptor],
    /// Schedules, sorted by name; empty in a project without `schedules.yaml`.
    pub schedules: &'static [ScheduleDescriptor],
    /// Lag thresholds, sorted by consumer then producer class.
    pub lag_thresholds: &'static [LagThresholdDescriptor],
    /// Cut-over gates, sorted by consumer.
    pub cutover_gates: &'static [CutoverGateDescriptor],
    /// Retention periods: a runtime setting, outside the digest.
    pub retention: RetentionDescriptor,
    /// Inventory rules, sorted by consumer: a runtime setting, outside the digest.
    pub inventory_rules: &'static [InventoryRulesDescriptor],
    /// The usage evidence the dispatcher records: a runtime setting, outside the digest;
    /// `None` records none.
    pub evidence_recording: Option<EvidenceRecordingDescriptor>,
    /// The payload policy every append is checked against.
    pub payload_policy: PayloadPolicyDescriptor,
    /// Whether an append without a tenant scope is refused (`envelope.require_tenant_scope`).
    pub require_tenant_scope: bool,
    /// Dispatcher defaults.
    pub dispatcher: DispatcherDescriptor,
}

impl Registry {
    /// The event type called `name`, if registered.
    pub fn event(&self, name: &str) -> Option<&'static EventDescriptor> {
        self.events
            .binary_search_by(|event| event.name.cmp(name))
            .ok()
            .map(|index| &self.events[index])
    }

    /// The exact version of an event type, if registered.
    pub fn version(&self, name: &str, version: &str) -> Option<&'static VersionDescriptor> {
        self.event(name)?
            .versions
            .iter()
            .find(|v| v.version == version)
    }

    /// The consumer called `name`, if registered.
    pub fn consumer(&self, name: &str) -> Option<&'static ConsumerDescriptor> {
        self.consumers
            .binary_search_by(|consumer| consumer.name.cmp(name))
            .ok()
            .map(|index| &self.consumers[index])
    }

    /// The executor class called `name`, if registered.
    pub fn executor_class(&self, name: &str) -> Option<&'static ExecutorClassDescriptor> {
        self.executor_classes
            .binary_search_by(|class| class.name.cmp(name))
            .ok()
            .map(|index| &self.executor_classes[index])
    }

    /// The cut-over gate of consumer `consumer`, if its contract declares one.
    pub fn cutover_gate(&self, consumer: &str) -> Option<&'static CutoverGateDescriptor> {
        self.cutover_gates
            .binary_search_by(|gate| gate.consumer.cmp(consumer))
            .ok()
            .map(|index| &self.cutover_gates[index])
    }

    /// The inventory rules of consumer `consumer` ([`InventoryRulesDescriptor::DEFAULT`]'s
    /// when its contract declares none).
    pub fn inventory_rules(&self, consumer: &str) -> InventoryRulesDescriptor {
        self.inventory_rules
            .binary_search_by(|rules| rules.consumer.cmp(consumer))
            .map_or(InventoryRulesDescriptor::DEFAULT, |index| {
                self.inventory_rules[index]
            })
    }

    /// The executor class consumer `consumer` runs on, if it is registered and names one.
    pub fn class_of(&self, consumer: &str) -> Option<&'static ExecutorClassDescriptor> {
        self.executor_class(self.consumer(consumer)?.executor_class?)
    }

    /// The consumers a new event of `name` at `version` fans out to: subscribed, with a
    /// matching requirement, and not off.
    pub fn subscribers<'a>(
        &'a self,
        name: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'static ConsumerDescriptor> + 'a {
        self.consumers.iter().filter(move |consumer| {
            consumer.mode != ConsumerMode::Off
                && consumer
                    .subscriptions
                    .iter()
                    .any(|s| s.event == name && s.versions.contains(&version))
        })
    }
}

/// Whether the semver `requirement` (`^1`, `>=1, <3`) accepts `version`; `false` when either
/// does not parse. The one rule for "a consumer accepts this version" at run time (replay's
/// check, the registry read back from a database).
pub(crate) fn accepts(requirement: &str, version: &str) -> bool {
    match (
        semver::VersionReq::parse(requirement),
        semver::Version::parse(version),
    ) {
        (Ok(requirement), Ok(version)) => requirement.matches(&version),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BORN: &[VersionDescriptor] = &[
        VersionDescriptor {
            version: "1.0.0",
            major: 1,
            schema: "{}",
            schema_digest: "",
        },
        VersionDescriptor {
            version: "1.1.0",
            major: 1,
            schema: "{}",
            schema_digest: "",
        },
    ];
    const fn event(name: &'static str, versions: &'static [VersionDescriptor]) -> EventDescriptor {
        EventDescriptor {
            name,
            description: "",
            producer_class: "p",
            order_key: &[],
            deprecated: false,
            max_payload_bytes: 4096,
            versions,
        }
    }
    const fn consumer(
        name: &'static str,
        mode: ConsumerMode,
        subscriptions: &'static [SubscriptionDescriptor],
    ) -> ConsumerDescriptor {
        ConsumerDescriptor {
            name,
            handler: HandlerKind::Transactional,
            mode,
            per_key_ordering: true,
            retry_policy: "r",
            heartbeat_threshold_ms: 60_000,
            handler_timeout_ms: None,
            executor_class: None,
            subscriptions,
        }
    }
    const ONLY_1_1: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
        event: "iu.born",
        requirement: "^1.1",
        versions: &["1.1.0"],
    }];
    const REGISTRY: Registry = Registry {
        project: "t",
        digest: "",
        events: &[event("iu.born", BORN), event("step.ready", &[])],
        consumers: &[
            consumer("a", ConsumerMode::Live, ONLY_1_1),
            consumer("b", ConsumerMode::Off, ONLY_1_1),
        ],
        retry_policies: &[],
        executor_classes: &[],
        schedules: &[],
        lag_thresholds: &[],
        cutover_gates: &[],
        inventory_rules: &[],
        evidence_recording: None,
        retention: crate::registry::RetentionDescriptor::KEEP,
        payload_policy: PayloadPolicyDescriptor {
            denied_keys: &[],
            credential_key_names: &[],
            default_max_bytes: 4096,
            hard_max_bytes: 65_536,
        },
        require_tenant_scope: false,
        dispatcher: DispatcherDescriptor::FORMAT_DEFAULTS,
    };

    #[test]
    fn finds_registered_types_and_versions_only() {
        assert_eq!(REGISTRY.event("iu.born").map(|e| e.name), Some("iu.born"));
        assert!(REGISTRY.event("iu.bron").is_none());
        assert!(REGISTRY.version("iu.born", "1.1.0").is_some());
        assert!(REGISTRY.version("iu.born", "2.0.0").is_none());
        assert!(REGISTRY.version("step.ready", "1.0.0").is_none());
    }

    #[test]
    fn fan_out_follows_requirements_and_skips_off_consumers() {
        let names = |version| -> Vec<&str> {
            REGISTRY
                .subscribers("iu.born", version)
                .map(|c| c.name)
                .collect()
        };
        assert_eq!(names("1.1.0"), ["a"]);
        assert!(names("1.0.0").is_empty());
        assert_eq!(
            REGISTRY.consumer("b").map(|c| c.mode),
            Some(ConsumerMode::Off)
        );
    }
}
