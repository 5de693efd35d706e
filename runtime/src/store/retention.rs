//! Retention (docs/runtime.md, "Retention"): which rows a purge removes, from the periods a
//! registry declares ([`RetentionDescriptor`]), the same on every store. A store runs the purge
//! in one transaction that first records who, why and how many rows per table; a dry run does
//! the same and rolls back, so its counts are exact.
//!
//! What keeps a row whatever its age: an event with a delivery still open (pending or leased)
//! keeps itself, its delivery rows, attempts, reconciliations and replay items; an attempt of
//! an open delivery stays; an idempotency record (a handler's effect key) stays while its event
//! does, and then for `effects` past the longest event retention of the consumers sharing its
//! idempotency scope, so a late redelivery still finds it.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::registry::{EventRetention, Registry, RetentionDescriptor};
use crate::store::rows::{leak, leak_slice};

/// Longest purge reason, in characters (the `evc_purges` check).
pub const MAX_PURGE_REASON_CHARS: usize = 500;

/// Longest purge actor, in characters (the `evc_purges` check).
pub const MAX_PURGE_ACTOR_CHARS: usize = 200;

/// Why a purge was refused. Nothing was deleted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PurgeError {
    /// No reason was given.
    #[error("a purge needs a reason (1 to {MAX_PURGE_REASON_CHARS} characters)")]
    ReasonMissing,
    /// The reason is too long.
    #[error(
        "the purge reason has {chars} characters; at most {MAX_PURGE_REASON_CHARS} are allowed"
    )]
    ReasonTooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// No actor was given.
    #[error("a purge needs an actor (1 to {MAX_PURGE_ACTOR_CHARS} characters)")]
    ActorMissing,
    /// The actor is too long.
    #[error("the purge actor has {chars} characters; at most {MAX_PURGE_ACTOR_CHARS} are allowed")]
    ActorTooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// The cutoff is before 1970 or not representable.
    #[error("the purge cutoff is not a time after 1970")]
    Cutoff,
    /// A session of one tenant asked: retention spans every tenant.
    #[error("a purge spans every tenant; a session of one tenant may not run it")]
    TenantScoped,
    /// The database failed or refused (a role without `DELETE` on the ledgers, the step
    /// that adds the purge not applied).
    #[error("outbox database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// What a retention purge removed, or would remove (a dry run), per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RetentionPurge {
    /// The audit row (`evc_purges`) that records the purge; `None` for a dry run.
    pub purge_id: Option<i64>,
    /// Settled events removed.
    pub events: u64,
    /// Their settled delivery rows.
    pub deliveries: u64,
    /// Attempt rows: those of the removed events and those past `attempts`.
    pub attempts: u64,
    /// Shadow runs: those of the removed events and those past `reconciliations`.
    pub reconciliations: u64,
    /// Replay items of the removed events.
    pub replay_items: u64,
    /// Rejected appends past `rejects`.
    pub rejects: u64,
    /// Idempotency records past their horizon whose event is gone.
    pub effects: u64,
}

impl RetentionPurge {
    /// Rows removed over every table.
    pub fn total(&self) -> u64 {
        self.events
            + self.deliveries
            + self.attempts
            + self.reconciliations
            + self.replay_items
            + self.rejects
            + self.effects
    }
}

/// A purge as its audit row records it ([`crate::Observe::purges`]): a retention purge
/// (`ledger` `retention`) or, on PostgreSQL, a purge of events or rejects before a fixed
/// cutoff. Times are epoch seconds of the store's clock.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PurgeRecord {
    /// The audit row.
    pub purge_id: i64,
    /// `retention`, `events` or `rejects`.
    pub ledger: String,
    /// The time a retention purge's periods counted back from; the fixed cutoff of the
    /// others.
    pub cutoff: f64,
    /// Why.
    pub reason: String,
    /// Who.
    pub actor: String,
    /// When it ran.
    pub purged_at: f64,
    /// Rows removed, by table, named as [`RetentionPurge`]'s fields (`events`, `attempts`,
    /// `effects`, ...).
    pub rows: BTreeMap<String, u64>,
}

impl PurgeRecord {
    /// Rows removed over every table.
    pub fn total(&self) -> u64 {
        self.rows.values().sum()
    }
}

/// An audit row's columns as both stores select them: id, ledger, cutoff, reason, actor,
/// when, and the counts by table as JSON.
pub(crate) type PurgeColumns = (i64, String, f64, String, String, f64, String);

/// The purge record of an audit row's columns.
///
/// # Errors
/// [`sqlx::Error::Decode`] for counts that are not an object of counts (a broken database).
pub(crate) fn purge_record(columns: PurgeColumns) -> Result<PurgeRecord, sqlx::Error> {
    let (purge_id, ledger, cutoff, reason, actor, purged_at, counts) = columns;
    Ok(PurgeRecord {
        purge_id,
        ledger,
        cutoff,
        reason,
        actor,
        purged_at,
        rows: rows_of(&counts)?,
    })
}

/// The rows per table of an audit row's `counts` (a JSON object of counts by table), by the
/// names [`RetentionPurge`] gives the tables: `events`, `deliveries`, `attempts`,
/// `reconciliations`, `replay_items`, `rejects`, `effects`.
///
/// # Errors
/// [`sqlx::Error::Decode`] for anything else (a broken database).
fn rows_of(counts: &str) -> Result<BTreeMap<String, u64>, sqlx::Error> {
    let by_table: BTreeMap<String, u64> =
        serde_json::from_str(counts).map_err(|error| sqlx::Error::Decode(Box::new(error)))?;
    Ok(by_table
        .into_iter()
        .map(|(table, rows)| {
            let name = match table.as_str() {
                "evc_events" => "events",
                "evc_deliveries" => "deliveries",
                "evc_delivery_attempts" => "attempts",
                "evc_reconciliations" => "reconciliations",
                "evc_replay_items" => "replay_items",
                "evc_validation_rejects" => "rejects",
                "evc_consumer_effects" => "effects",
                other => other,
            };
            (name.to_owned(), rows)
        })
        .collect())
}

/// The cutoffs of one purge, in epoch seconds: a row older than its table's cutoff is expired.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Expiry {
    /// The time the periods count back from.
    pub as_of: f64,
    /// Per event type with a period, its cutoff.
    pub events: Vec<(&'static str, f64)>,
    pub attempts: Option<f64>,
    pub reconciliations: Option<f64>,
    pub rejects: Option<f64>,
    /// Per consumer whose idempotency records expire, their cutoff.
    pub effects: Vec<(&'static str, f64)>,
}

impl Expiry {
    /// Whether no table has a period: the purge has nothing to look at.
    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
            && self.attempts.is_none()
            && self.reconciliations.is_none()
            && self.rejects.is_none()
            && self.effects.is_empty()
    }
}

/// The reason and actor checked, then `registry`'s retention as cutoffs before `as_of`.
///
/// # Errors
/// [`PurgeError`] for a blank or too long reason or actor, or a time before 1970.
pub(crate) fn expiry(
    registry: &Registry,
    as_of: SystemTime,
    reason: &str,
    actor: &str,
) -> Result<Expiry, PurgeError> {
    let as_of = check(as_of, reason, actor)?;
    let retention = &registry.retention;
    let before = |ms: u64| as_of - Duration::from_millis(ms).as_secs_f64();
    let events = retention
        .events
        .iter()
        .map(|entry| (entry.event_type, before(entry.ms)))
        .collect();
    Ok(Expiry {
        as_of,
        events,
        attempts: retention.attempts_ms.map(before),
        reconciliations: retention.reconciliations_ms.map(before),
        rejects: retention.rejects_ms.map(before),
        effects: effect_horizons(registry)
            .into_iter()
            .map(|(consumer, ms)| (consumer, before(ms)))
            .collect(),
    })
}

/// Per consumer, how old its idempotency records must be to go: `effects` past the longest
/// event retention of every consumer sharing its idempotency scope (its executor class's
/// namespace, else itself). A scope with a consumer of an event type that keeps its events
/// keeps its records.
fn effect_horizons(registry: &Registry) -> Vec<(&'static str, u64)> {
    let retention = &registry.retention;
    let Some(window) = retention.effects_ms else {
        return Vec::new();
    };
    let scope_of = |consumer: &'static str| -> &'static str {
        registry
            .class_of(consumer)
            .map_or(consumer, |class| class.idempotency_namespace)
    };
    // The longest event retention per scope; `None` once one of its types keeps its events.
    let mut longest: HashMap<&'static str, Option<u64>> = HashMap::new();
    for consumer in registry.consumers {
        let mut own = Some(0u64);
        for subscription in consumer.subscriptions {
            own = own
                .zip(retention.events_ms(subscription.event))
                .map(|(a, b)| a.max(b));
        }
        let entry = longest.entry(scope_of(consumer.name)).or_insert(Some(0));
        *entry = entry.zip(own).map(|(a, b)| a.max(b));
    }
    registry
        .consumers
        .iter()
        .filter_map(|consumer| {
            let longest = longest.get(scope_of(consumer.name)).copied().flatten()?;
            Some((consumer.name, longest.saturating_add(window)))
        })
        .collect()
}

/// The time as epoch seconds, after the reason and actor are checked.
pub(crate) fn check(time: SystemTime, reason: &str, actor: &str) -> Result<f64, PurgeError> {
    if reason.trim().is_empty() {
        return Err(PurgeError::ReasonMissing);
    }
    let chars = reason.chars().count();
    if chars > MAX_PURGE_REASON_CHARS {
        return Err(PurgeError::ReasonTooLong { chars });
    }
    if actor.trim().is_empty() {
        return Err(PurgeError::ActorMissing);
    }
    let chars = actor.chars().count();
    if chars > MAX_PURGE_ACTOR_CHARS {
        return Err(PurgeError::ActorTooLong { chars });
    }
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map(|since| since.as_secs_f64())
        .map_err(|_| PurgeError::Cutoff)
}

/// One event type's period, as a database holds it.
#[derive(Debug, Serialize, Deserialize)]
struct EventPeriod {
    event_type: String,
    ms: u64,
}

/// The retention as a database holds it for readers without a build of the application.
#[derive(Debug, Serialize, Deserialize)]
struct Periods {
    events: Vec<EventPeriod>,
    attempts_ms: Option<u64>,
    reconciliations_ms: Option<u64>,
    rejects_ms: Option<u64>,
    effects_ms: Option<u64>,
}

/// `retention` as a JSON object: PostgreSQL's `evc_settings.retention`, written by the
/// settings migrations, and a SQLite file's recorded registry document.
pub(crate) fn retention_value(retention: &RetentionDescriptor) -> Value {
    let periods = Periods {
        events: retention
            .events
            .iter()
            .map(|entry| EventPeriod {
                event_type: entry.event_type.to_owned(),
                ms: entry.ms,
            })
            .collect(),
        attempts_ms: retention.attempts_ms,
        reconciliations_ms: retention.reconciliations_ms,
        rejects_ms: retention.rejects_ms,
        effects_ms: retention.effects_ms,
    };
    serde_json::to_value(periods).unwrap_or(Value::Null)
}

/// The retention of a JSON object, its event types sorted as the registry keeps them. Its
/// strings are leaked, like the rest of a deployed registry's.
///
/// # Errors
/// What is wrong with the object (never its content).
pub(crate) fn retention_of(value: Value) -> Result<RetentionDescriptor, String> {
    let periods: Periods = serde_json::from_value(value)
        .map_err(|_| "the retention is not an object of periods".to_owned())?;
    let mut events: Vec<EventRetention> = periods
        .events
        .into_iter()
        .map(|entry| EventRetention {
            event_type: leak(entry.event_type),
            ms: entry.ms,
        })
        .collect();
    events.sort_by_key(|entry| entry.event_type);
    Ok(RetentionDescriptor {
        events: leak_slice(events),
        attempts_ms: periods.attempts_ms,
        reconciliations_ms: periods.reconciliations_ms,
        rejects_ms: periods.rejects_ms,
        effects_ms: periods.effects_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{
        ConsumerDescriptor, ConsumerMode, DispatcherDescriptor, ExecutorClassDescriptor,
        HandlerKind, PayloadPolicyDescriptor, SubscriptionDescriptor,
    };

    const fn consumer(
        name: &'static str,
        class: Option<&'static str>,
        subscriptions: &'static [SubscriptionDescriptor],
    ) -> ConsumerDescriptor {
        ConsumerDescriptor {
            name,
            handler: HandlerKind::Leased,
            mode: ConsumerMode::Live,
            per_key_ordering: false,
            retry_policy: "p",
            heartbeat_threshold_ms: 60_000,
            handler_timeout_ms: None,
            executor_class: class,
            subscriptions,
        }
    }

    const A: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
        event: "a.done",
        requirement: "^1",
        versions: &["1.0.0"],
    }];
    const B: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
        event: "b.done",
        requirement: "^1",
        versions: &["1.0.0"],
    }];
    const KEPT: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
        event: "kept.done",
        requirement: "^1",
        versions: &["1.0.0"],
    }];
    const DAY: u64 = 86_400_000;

    static REGISTRY: Registry = Registry {
        project: "t",
        digest: "",
        events: &[],
        consumers: &[
            consumer("alone", None, A),
            consumer("forever", None, KEPT),
            consumer("shared.long", Some("mail.send"), B),
            consumer("shared.short", Some("mail.send"), A),
        ],
        retry_policies: &[],
        executor_classes: &[ExecutorClassDescriptor {
            name: "mail.send",
            mutating: true,
            idempotency_namespace: "mail",
            heartbeat_owner: "mail",
            active: true,
        }],
        schedules: &[],
        lag_thresholds: &[],
        cutover_gates: &[],
        inventory_rules: &[],
        evidence_recording: None,
        retention: RetentionDescriptor {
            events: &[
                EventRetention {
                    event_type: "a.done",
                    ms: DAY,
                },
                EventRetention {
                    event_type: "b.done",
                    ms: 10 * DAY,
                },
            ],
            attempts_ms: Some(DAY),
            reconciliations_ms: None,
            rejects_ms: Some(2 * DAY),
            effects_ms: Some(DAY),
        },
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
    fn idempotency_records_outlive_the_longest_event_retention_of_their_scope() {
        let horizons = effect_horizons(&REGISTRY);
        // `alone` receives `a.done` (1 day): its records go a day after that.
        assert!(horizons.contains(&("alone", 2 * DAY)));
        // The namespace `mail` holds a consumer of `b.done` (10 days): both its consumers'
        // records wait for that, since either may find the other's key.
        assert!(horizons.contains(&("shared.long", 11 * DAY)));
        assert!(horizons.contains(&("shared.short", 11 * DAY)));
        // `kept.done` keeps its events, so its consumer's records stay.
        assert!(!horizons.iter().any(|(name, _)| *name == "forever"));
        assert_eq!(horizons.len(), 3);
    }

    #[test]
    fn cutoffs_count_back_from_the_given_time() {
        let as_of = SystemTime::UNIX_EPOCH + Duration::from_secs(100 * 86_400);
        let expiry = expiry(&REGISTRY, as_of, "retention", "ops").expect("expiry");
        let day = 86_400.0;
        assert_eq!(expiry.as_of, 100.0 * day);
        assert_eq!(
            expiry.events,
            vec![("a.done", 99.0 * day), ("b.done", 90.0 * day)]
        );
        assert_eq!(expiry.attempts, Some(99.0 * day));
        assert_eq!(expiry.reconciliations, None);
        assert_eq!(expiry.rejects, Some(98.0 * day));
        assert!(!expiry.is_empty());
        let no_periods = Registry {
            retention: RetentionDescriptor::KEEP,
            ..REGISTRY
        };
        assert!(expiry_of(&no_periods).is_empty());
    }

    fn expiry_of(registry: &Registry) -> Expiry {
        expiry(registry, SystemTime::now(), "retention", "ops").expect("expiry")
    }

    #[test]
    fn audit_counts_read_by_the_purge_report_names() {
        let rows = rows_of(r#"{"evc_events": 2, "evc_consumer_effects": 1}"#).expect("counts");
        assert_eq!(
            rows,
            BTreeMap::from([("effects".to_owned(), 1), ("events".to_owned(), 2)])
        );
        assert!(rows_of("[1]").is_err());
    }

    #[test]
    fn the_periods_read_back_equal() {
        let value = retention_value(&REGISTRY.retention);
        assert_eq!(retention_of(value).expect("periods"), REGISTRY.retention);
        assert!(retention_of(serde_json::json!([1, 2])).is_err());
    }

    #[test]
    fn reasons_and_actors_are_checked_before_the_database() {
        let now = SystemTime::now();
        assert!(check(now, "retention", "ops").is_ok());
        assert!(matches!(
            check(now, " ", "ops"),
            Err(PurgeError::ReasonMissing)
        ));
        assert!(matches!(
            check(now, &"é".repeat(501), "ops"),
            Err(PurgeError::ReasonTooLong { chars: 501 })
        ));
        assert!(check(now, &"é".repeat(500), "ops").is_ok());
        assert!(matches!(
            check(now, "retention", ""),
            Err(PurgeError::ActorMissing)
        ));
        assert!(matches!(
            check(now, "retention", &"a".repeat(201)),
            Err(PurgeError::ActorTooLong { chars: 201 })
        ));
        let before_epoch = SystemTime::UNIX_EPOCH - Duration::from_secs(1);
        assert!(matches!(
            check(before_epoch, "retention", "ops"),
            Err(PurgeError::Cutoff)
        ));
    }
}
