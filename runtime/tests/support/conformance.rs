//! What the store conformance tests (`runtime/tests/store_conformance.rs`) need of a store
//! beyond [`Store`], [`Operate`] and [`Observe`]: its name, and the replay tests' setup. Implemented for [`PgStore`] (a fresh database per test, `support::with_database`) and
//! [`SqliteStore`] (a fresh file in a temporary directory per test).

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::Duration;

use evc_runtime::{
    ConsumerDescriptor, ConsumerMode, Cursors, CutoverGateDescriptor, EventDescriptor,
    ExecutorClassDescriptor, HandlerKind, LagThresholdDescriptor, MissedSlots, Observe, Operate,
    PgStore, Registry, ScheduleDescriptor, SqliteStore, Store, SubscriptionDescriptor,
    VersionDescriptor,
};

use crate::support::{FIXED_200MS, NOTE_SCHEMA, REFERENCE_POLICY, TestResult};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A store under test: [`Store`] (which begins the caller's transactions and answers the read
/// methods) and [`Operate`], its name for messages, and what a replay test arranges first.
pub trait Conformance: Store + Operate + Observe + Cursors {
    /// Which store, for messages.
    const NAME: &'static str;

    /// Makes `test.note` 1.0.0 replayable to `consumer` (under `^1`). PostgreSQL checks
    /// replays against the registry its database deploys, so the consumer is listed in the
    /// mirror as a deployed registry migration would list it; SQLite checks against the
    /// static registry and needs nothing.
    fn deploy_replayable(
        &self,
        consumer: &str,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
}

impl Conformance for PgStore {
    const NAME: &'static str = "postgres";

    async fn deploy_replayable(&self, consumer: &str) -> Result<(), BoxError> {
        crate::support::deploy(self.pool(), consumer, "^1").await
    }
}

impl Conformance for SqliteStore {
    const NAME: &'static str = "sqlite";

    async fn deploy_replayable(&self, _consumer: &str) -> Result<(), BoxError> {
        Ok(())
    }
}

/// Runs `check` on a [`PgStore`] of `registry` over a fresh database (skipped with a message
/// when PostgreSQL is unreachable, except under `CI=true`).
pub async fn with_postgres<F, Fut>(registry: Registry, check: F) -> TestResult
where
    F: FnOnce(PgStore) -> Fut + Send + 'static,
    Fut: Future<Output = TestResult> + Send + 'static,
{
    crate::support::with_database(move |pool| async move {
        let store = PgStore::new(pool, registry)?;
        check(store).await
    })
    .await
}

/// Runs `check` on a [`SqliteStore`] of `registry` over a fresh file in a temporary directory
/// (removed afterwards).
pub async fn with_sqlite<F, Fut>(registry: Registry, check: F) -> TestResult
where
    F: FnOnce(SqliteStore) -> Fut + Send + 'static,
    Fut: Future<Output = TestResult> + Send + 'static,
{
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("outbox.db");
    let store = SqliteStore::open(path.to_string_lossy(), registry).await?;
    let result = check(store.clone()).await;
    store.close().await;
    result
}

/// Waits until `probe` answers `Some`, polling every few milliseconds, for at most
/// [`crate::support::HANG`] (a bound on a hang, not a timing assertion). `None` if it never did.
pub async fn eventually<T, F, Fut>(mut probe: F) -> Result<Option<T>, BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, BoxError>>,
{
    let deadline = tokio::time::Instant::now() + crate::support::HANG;
    loop {
        if let Some(found) = probe().await? {
            return Ok(Some(found));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The consumer that orders per key.
pub const ORDERED: &str = "k.ordered";
/// A live consumer without per-key ordering; the only one `test.ping` fans out to.
pub const PLAIN: &str = "k.plain";
/// A consumer in shadow mode (gets deliveries; its leases are shadowed).
pub const SHADOW: &str = "k.shadow";
/// A consumer whose contract mode is `off` (gets no deliveries).
pub const OFF: &str = "k.off";

const DIGEST: &str = "00000000000000000000000000000000000000000000000000000000000000c0";
const PING_SCHEMA: &str = r#"{"type":"object"}"#;

const NOTE_1: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: "test.note",
    requirement: "^1",
    versions: &["1.0.0"],
}];

const NOTE_AND_PING: &[SubscriptionDescriptor] = &[
    SubscriptionDescriptor {
        event: "test.note",
        requirement: "^1",
        versions: &["1.0.0"],
    },
    SubscriptionDescriptor {
        event: "test.ping",
        requirement: "^1",
        versions: &["1.0.0"],
    },
];

const fn consumer(
    name: &'static str,
    mode: ConsumerMode,
    per_key_ordering: bool,
    subscriptions: &'static [SubscriptionDescriptor],
) -> ConsumerDescriptor {
    ConsumerDescriptor {
        name,
        handler: HandlerKind::Leased,
        mode,
        per_key_ordering,
        retry_policy: "fixed.200ms",
        heartbeat_threshold_ms: 60_000,
        handler_timeout_ms: None,
        executor_class: None,
        subscriptions,
    }
}

/// `test.note` 1.0.0 (producer class `notes`, order key `note_id`, open schema with a free-form
/// `meta` object) fans out to `k.ordered` (per key, transactional), `k.plain` (leased) and
/// `k.shadow` (shadow mode, transactional, no per-key ordering: it can run held batches),
/// not to `k.off` (off); `test.ping` 1.0.0 (producer class `pinger`) to `k.plain` only. Every
/// consumer retries on [`FIXED_200MS`] (4 attempts).
pub static CONFORMANCE_REGISTRY: Registry = Registry {
    project: "runtime_conformance_tests",
    digest: DIGEST,
    events: &[
        EventDescriptor {
            name: "test.note",
            description: "A note.",
            producer_class: "notes",
            order_key: &["note_id"],
            deprecated: false,
            max_payload_bytes: 512,
            versions: &[VersionDescriptor {
                version: "1.0.0",
                major: 1,
                schema: NOTE_SCHEMA,
                schema_digest: DIGEST,
            }],
        },
        EventDescriptor {
            name: "test.ping",
            description: "A ping.",
            producer_class: "pinger",
            order_key: &[],
            deprecated: false,
            max_payload_bytes: 4096,
            versions: &[VersionDescriptor {
                version: "1.0.0",
                major: 1,
                schema: PING_SCHEMA,
                schema_digest: DIGEST,
            }],
        },
    ],
    // Sorted by name, as the registry's lookups expect.
    consumers: &[
        consumer(OFF, ConsumerMode::Off, false, NOTE_1),
        ConsumerDescriptor {
            handler: HandlerKind::Transactional,
            ..consumer(ORDERED, ConsumerMode::Live, true, NOTE_1)
        },
        consumer(PLAIN, ConsumerMode::Live, false, NOTE_AND_PING),
        ConsumerDescriptor {
            handler: HandlerKind::Transactional,
            ..consumer(SHADOW, ConsumerMode::Shadow, false, NOTE_1)
        },
    ],
    retry_policies: &[FIXED_200MS],
    executor_classes: &[],
    schedules: &[],
    lag_thresholds: &[],
    cutover_gates: &[],
    inventory_rules: &[],
    evidence_recording: None,
    retention: evc_runtime::RetentionDescriptor::KEEP,
    payload_policy: REFERENCE_POLICY,
    require_tenant_scope: false,
    dispatcher: evc_runtime::DispatcherDescriptor::FORMAT_DEFAULTS,
};

/// The executor class `notification.email` (namespace `notify`, owner `team-notify`).
const NOTIFICATION_EMAIL: ExecutorClassDescriptor = ExecutorClassDescriptor {
    name: "notification.email",
    mutating: true,
    idempotency_namespace: "notify",
    heartbeat_owner: "team-notify",
    active: true,
};

/// The executor class `sql.audit` (namespace `audit`, owner `team-platform`).
const SQL_AUDIT: ExecutorClassDescriptor = ExecutorClassDescriptor {
    name: "sql.audit",
    mutating: true,
    idempotency_namespace: "audit",
    heartbeat_owner: "team-platform",
    active: true,
};

/// How long a worker of `k.plain` may go without a heartbeat in [`CLASSED_REGISTRY`]: short,
/// so that one falls silent while a test waits.
pub const CLASSED_PLAIN_THRESHOLD: Duration = Duration::from_secs(1);

/// [`CONFORMANCE_REGISTRY`] with executor classes: `k.plain` (heartbeat threshold
/// [`CLASSED_PLAIN_THRESHOLD`]) and `k.shadow` run on `notification.email` (owner
/// `team-notify`), `k.ordered` on `sql.audit` (owner `team-platform`), `k.off` on none; the
/// retired `notification.sms` has no consumer.
pub static CLASSED_REGISTRY: Registry = Registry {
    consumers: &[
        consumer(OFF, ConsumerMode::Off, false, NOTE_1),
        ConsumerDescriptor {
            handler: HandlerKind::Transactional,
            executor_class: Some("sql.audit"),
            ..consumer(ORDERED, ConsumerMode::Live, true, NOTE_1)
        },
        ConsumerDescriptor {
            heartbeat_threshold_ms: CLASSED_PLAIN_THRESHOLD.as_millis() as u64,
            executor_class: Some("notification.email"),
            ..consumer(PLAIN, ConsumerMode::Live, false, NOTE_AND_PING)
        },
        ConsumerDescriptor {
            handler: HandlerKind::Transactional,
            executor_class: Some("notification.email"),
            ..consumer(SHADOW, ConsumerMode::Shadow, false, NOTE_1)
        },
    ],
    executor_classes: &[
        NOTIFICATION_EMAIL,
        ExecutorClassDescriptor {
            name: "notification.sms",
            mutating: true,
            idempotency_namespace: "notify",
            heartbeat_owner: "team-notify",
            active: false,
        },
        SQL_AUDIT,
    ],
    ..CONFORMANCE_REGISTRY
};

/// A live consumer of `test.note` on `notification.push` in [`NAMESPACED_REGISTRY`].
pub const PUSH: &str = "k.push";
/// A live consumer of `test.note` on `sql.audit` in [`NAMESPACED_REGISTRY`].
pub const AUDIT: &str = "k.audit";

/// [`CONFORMANCE_REGISTRY`] with executor classes whose consumers share idempotency
/// namespaces: `k.plain` (`notification.email`), `k.push` and `k.shadow` (shadow mode, both
/// `notification.push`) in `notify`; `k.audit` (`sql.audit`) in `audit`; `k.ordered` and
/// `k.off` on none.
pub static NAMESPACED_REGISTRY: Registry = Registry {
    consumers: &[
        ConsumerDescriptor {
            executor_class: Some("sql.audit"),
            ..consumer(AUDIT, ConsumerMode::Live, false, NOTE_1)
        },
        consumer(OFF, ConsumerMode::Off, false, NOTE_1),
        ConsumerDescriptor {
            handler: HandlerKind::Transactional,
            ..consumer(ORDERED, ConsumerMode::Live, true, NOTE_1)
        },
        ConsumerDescriptor {
            executor_class: Some("notification.email"),
            ..consumer(PLAIN, ConsumerMode::Live, false, NOTE_AND_PING)
        },
        ConsumerDescriptor {
            executor_class: Some("notification.push"),
            ..consumer(PUSH, ConsumerMode::Live, false, NOTE_1)
        },
        ConsumerDescriptor {
            handler: HandlerKind::Transactional,
            executor_class: Some("notification.push"),
            ..consumer(SHADOW, ConsumerMode::Shadow, false, NOTE_1)
        },
    ],
    executor_classes: &[
        NOTIFICATION_EMAIL,
        ExecutorClassDescriptor {
            name: "notification.push",
            mutating: true,
            idempotency_namespace: "notify",
            heartbeat_owner: "team-notify",
            active: true,
        },
        SQL_AUDIT,
    ],
    ..CONFORMANCE_REGISTRY
};

/// A tick event's schema: the schedule's name and the slot, nothing else.
const TICK_SCHEMA: &str = r#"{"additionalProperties":false,"properties":{"schedule":{"type":"string"},"slot":{"format":"date-time","type":"string"}},"required":["schedule","slot"],"type":"object"}"#;

/// A tick event `name` (producer class `scheduler`, ordered by schedule; payload `schedule`
/// and `slot`).
pub const fn tick_event(name: &'static str) -> EventDescriptor {
    EventDescriptor {
        name,
        description: "A tick.",
        producer_class: "scheduler",
        order_key: &["schedule"],
        deprecated: false,
        max_payload_bytes: 512,
        versions: &[VersionDescriptor {
            version: "1.0.0",
            major: 1,
            schema: TICK_SCHEMA,
            schema_digest: DIGEST,
        }],
    }
}

/// The hourly tick, which `k.ticks` handles.
const HOURLY_TICK: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: "cron.tick.hourly",
    requirement: "^1",
    versions: &["1.0.0"],
}];

/// A consumer of the hourly ticks in [`SCHEDULED_REGISTRY`].
pub const TICKS: &str = "k.ticks";

/// [`CONFORMANCE_REGISTRY`] with two schedules: `hourly` (`0 * * * *`, missed slots caught up,
/// at most 3) ticks `cron.tick.hourly`, which `k.ticks` handles; `daily` (`0 3 * * *`, missed
/// slots skipped) ticks `cron.tick.daily`, which no consumer handles.
pub static SCHEDULED_REGISTRY: Registry = Registry {
    events: &[
        tick_event("cron.tick.daily"),
        tick_event("cron.tick.hourly"),
        CONFORMANCE_REGISTRY.events[0],
        CONFORMANCE_REGISTRY.events[1],
    ],
    consumers: &[consumer(TICKS, ConsumerMode::Live, false, HOURLY_TICK)],
    schedules: &[
        ScheduleDescriptor {
            name: "daily",
            cron: "0 3 * * *",
            event: "cron.tick.daily",
            missed: MissedSlots::Skip,
            catch_up_limit: 100,
            tenant_scope: None,
        },
        ScheduleDescriptor {
            name: "hourly",
            cron: "0 * * * *",
            event: "cron.tick.hourly",
            missed: MissedSlots::CatchUp,
            catch_up_limit: 3,
            tenant_scope: None,
        },
    ],
    ..CONFORMANCE_REGISTRY
};

/// `event_lag.breach`'s schema: every field the lag watch fills.
const BREACH_SCHEMA: &str = r#"{"additionalProperties":false,"properties":{"breach_id":{"minimum":1,"type":"integer"},"breached_at":{"format":"date-time","type":"string"},"consumer_name":{"type":"string"},"lag_ms":{"minimum":0,"type":"integer"},"oldest_event_id":{"format":"uuid","type":"string"},"producer_class":{"type":"string"},"threshold_ms":{"minimum":1,"type":"integer"}},"required":["breach_id","producer_class","consumer_name","threshold_ms","lag_ms","breached_at"],"type":"object"}"#;

/// The breaches, which `k.alerts` handles.
const BREACHES: &[SubscriptionDescriptor] = &[SubscriptionDescriptor {
    event: "event_lag.breach",
    requirement: "^1",
    versions: &["1.0.0"],
}];

/// A consumer of `event_lag.breach` in [`LAGGING_REGISTRY`].
pub const ALERTS: &str = "k.alerts";

/// An hour.
pub const HOUR_MS: u64 = 3_600_000;

/// [`CONFORMANCE_REGISTRY`] with retention: settled `test.note` events stay a day (`test.ping`
/// keeps its events); attempts, reconciliations and rejects an hour; idempotency records a day
/// past their consumers' longest event retention, so `k.ordered`'s and `k.shadow`'s go two
/// days after they were written, and `k.plain`'s (it also receives `test.ping`) stay.
pub static RETAINED_REGISTRY: Registry = Registry {
    retention: evc_runtime::RetentionDescriptor {
        events: &[evc_runtime::EventRetention {
            event_type: "test.note",
            ms: 24 * HOUR_MS,
        }],
        attempts_ms: Some(HOUR_MS),
        reconciliations_ms: Some(HOUR_MS),
        rejects_ms: Some(HOUR_MS),
        effects_ms: Some(24 * HOUR_MS),
    },
    ..CONFORMANCE_REGISTRY
};

/// [`CONFORMANCE_REGISTRY`] recording usage evidence: one snapshot per second, each kept
/// three seconds, over a day's window, every signal listed once seen.
pub static RECORDING_REGISTRY: Registry = Registry {
    evidence_recording: Some(evc_runtime::EvidenceRecordingDescriptor {
        every_ms: 1_000,
        keep_ms: 3_000,
        window_ms: 24 * HOUR_MS,
        correlation_ms: 60_000,
        min_count: 1,
    }),
    ..CONFORMANCE_REGISTRY
};

/// `test.note` 2.0.0 of [`INVENTORY_REGISTRY`]: closed, `text` at most 20 characters,
/// `channel` required with a default.
pub const NOTE_V2_CLOSED: &str = r#"{"additionalProperties":false,"properties":{"channel":{"default":"email","type":"string"},"note_id":{"format":"uuid","type":"string"},"text":{"maxLength":20,"type":"string"}},"required":["note_id","channel"],"type":"object"}"#;

/// [`CONFORMANCE_REGISTRY`] where `test.note` also has a 2.0.0 ([`NOTE_V2_CLOSED`]), which
/// `k.off` (off, so it has no delivery of any note) subscribes to alone (`^2`), and whose
/// inventory rules expire events older than an hour and conform what they can; and
/// [`EXPIRING`].
pub static INVENTORY_REGISTRY: Registry = Registry {
    events: &[
        EventDescriptor {
            versions: &[
                CONFORMANCE_REGISTRY.events[0].versions[0],
                VersionDescriptor {
                    version: "2.0.0",
                    major: 2,
                    schema: NOTE_V2_CLOSED,
                    schema_digest: DIGEST,
                },
            ],
            ..CONFORMANCE_REGISTRY.events[0]
        },
        CONFORMANCE_REGISTRY.events[1],
    ],
    consumers: &[
        consumer(EXPIRING, ConsumerMode::Off, false, NOTE_1),
        consumer(
            OFF,
            ConsumerMode::Off,
            false,
            &[SubscriptionDescriptor {
                event: "test.note",
                requirement: "^2",
                versions: &["2.0.0"],
            }],
        ),
        CONFORMANCE_REGISTRY.consumers[1],
        CONFORMANCE_REGISTRY.consumers[2],
        CONFORMANCE_REGISTRY.consumers[3],
    ],
    inventory_rules: &[
        evc_runtime::InventoryRulesDescriptor {
            consumer: EXPIRING,
            max_age_ms: Some(1),
            repair: evc_runtime::InventoryRepair::None,
        },
        evc_runtime::InventoryRulesDescriptor {
            consumer: OFF,
            max_age_ms: Some(HOUR_MS),
            repair: evc_runtime::InventoryRepair::Conform,
        },
    ],
    ..CONFORMANCE_REGISTRY
};

/// An off consumer of `test.note@^1` in [`INVENTORY_REGISTRY`] whose inventory expires every
/// event older than a millisecond.
pub const EXPIRING: &str = "k.expiring";

/// [`CONFORMANCE_REGISTRY`] where `k.shadow` goes live only through a cut-over gate: two
/// compared deliveries spanning at least a second, no unexplained difference.
pub static GATED_REGISTRY: Registry = Registry {
    cutover_gates: &[CutoverGateDescriptor {
        consumer: SHADOW,
        min_reconciled: 2,
        min_span_ms: 1_000,
        max_unexplained: 0,
    }],
    ..CONFORMANCE_REGISTRY
};

/// [`CONFORMANCE_REGISTRY`] where `k.plain` lags behind the `notes` producer class (its
/// `test.note` deliveries) after a millisecond, and `k.alerts` handles the `event_lag.breach`
/// events that appends. `test.ping` (class `pinger`) has no threshold.
pub static LAGGING_REGISTRY: Registry = Registry {
    events: &[
        EventDescriptor {
            name: "event_lag.breach",
            description: "A lag breach.",
            producer_class: "dispatcher",
            order_key: &["consumer_name"],
            deprecated: false,
            max_payload_bytes: 1024,
            versions: &[VersionDescriptor {
                version: "1.0.0",
                major: 1,
                schema: BREACH_SCHEMA,
                schema_digest: DIGEST,
            }],
        },
        CONFORMANCE_REGISTRY.events[0],
        CONFORMANCE_REGISTRY.events[1],
    ],
    consumers: &[
        consumer(ALERTS, ConsumerMode::Live, false, BREACHES),
        consumer(PLAIN, ConsumerMode::Live, false, NOTE_AND_PING),
    ],
    lag_thresholds: &[LagThresholdDescriptor {
        consumer: PLAIN,
        producer_class: "notes",
        threshold_ms: 1,
    }],
    ..CONFORMANCE_REGISTRY
};

/// A tick schema that requires a field the scheduler does not fill: every tick is refused.
const REFUSING_TICK_SCHEMA: &str = r#"{"properties":{"region":{"type":"string"},"schedule":{"type":"string"},"slot":{"type":"string"}},"required":["region"],"type":"object"}"#;

/// [`SCHEDULED_REGISTRY`] whose `cron.tick.daily` refuses every tick (its schema requires a
/// `region`), as a registry built by hand or changed under a running build may.
pub static REFUSED_TICK_REGISTRY: Registry = Registry {
    events: &[
        EventDescriptor {
            versions: &[VersionDescriptor {
                version: "1.0.0",
                major: 1,
                schema: REFUSING_TICK_SCHEMA,
                schema_digest: DIGEST,
            }],
            ..tick_event("cron.tick.daily")
        },
        tick_event("cron.tick.hourly"),
        CONFORMANCE_REGISTRY.events[0],
        CONFORMANCE_REGISTRY.events[1],
    ],
    ..SCHEDULED_REGISTRY
};
