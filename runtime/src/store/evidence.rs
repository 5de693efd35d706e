//! Usage evidence (docs/runtime.md, "Usage evidence"): what the ledger alone says about how
//! events and consumers behave together over a window, the same on every store. Each store
//! counts with its own SQL; the signals, their thresholds and the grouping by step kind are
//! here.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::registry::Registry;

/// The most rows each signal lists, strongest first.
pub const MAX_SIGNAL_ROWS: u32 = 50;

/// What an evidence report reads ([`crate::Observe::evidence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EvidenceQuery {
    /// How far back the ledger is read.
    pub window: Duration,
    /// How close in time two consumers' failures must be to count as failing together: both
    /// fail within one slot of this length.
    pub correlation: Duration,
    /// The fewest occurrences a signal needs to be listed.
    pub min_count: u32,
}

impl Default for EvidenceQuery {
    /// A week, one-minute slots, at least twice.
    fn default() -> Self {
        Self {
            window: Duration::from_secs(7 * 86_400),
            correlation: Duration::from_secs(60),
            min_count: 2,
        }
    }
}

impl EvidenceQuery {
    /// `window`, with the default slot and threshold.
    pub fn over(window: Duration) -> Self {
        Self {
            window,
            ..Self::default()
        }
    }

    /// With slots of `correlation` (at least a millisecond).
    pub fn correlation(mut self, correlation: Duration) -> Self {
        self.correlation = correlation.max(Duration::from_millis(1));
        self
    }

    /// Listing signals seen at least `min_count` times (at least once).
    pub fn min_count(mut self, min_count: u32) -> Self {
        self.min_count = min_count.max(1);
        self
    }

    /// The slot of `failing_together`, in seconds.
    pub(crate) fn slot_s(&self) -> f64 {
        self.correlation.as_secs_f64().max(0.001)
    }
}

/// The signals of one window ([`crate::Observe::evidence`]). Times are epoch seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct EvidenceReport {
    /// The start of the window read.
    pub since: f64,
    /// Its length, in seconds.
    pub window_s: f64,
    /// The slot of `failing_together`, in seconds.
    pub correlation_s: f64,
    /// The fewest occurrences a listed signal has.
    pub min_count: u32,
    /// Pairs of event types appended in one trace.
    pub co_triggered: Vec<CoTriggered>,
    /// Pairs of consumers whose attempts failed in one slot.
    pub failing_together: Vec<FailingTogether>,
    /// (producer class, consumer) pairs with repeated dead letters or lag breaches.
    pub chronic: Vec<ChronicPair>,
    /// Escalations (deliveries dead-lettered or quarantined: handed to a person) by the step
    /// kind of the consumer's executor class.
    pub escalations: Vec<Escalations>,
}

/// Two event types appended in one trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CoTriggered {
    /// The first event type, by name.
    pub first: String,
    /// The second.
    pub second: String,
    /// Traces holding both.
    pub traces: u64,
}

/// Two consumers whose attempts failed in one slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FailingTogether {
    /// The first consumer, by name.
    pub first: String,
    /// The second.
    pub second: String,
    /// Slots in which both had a failed attempt.
    pub slots: u64,
}

/// A consumer's trouble with the events of one producer class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ChronicPair {
    /// The producer class of the events.
    pub producer_class: String,
    /// The consumer.
    pub consumer: String,
    /// Its deliveries of those events dead-lettered or quarantined.
    pub dead_letters: u64,
    /// Lag breaches of the pair opened.
    pub lag_breaches: u64,
}

/// Escalations of one step kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Escalations {
    /// The kind of the consumers' executor class (`ai` of `ai.review`), or `unclassified`
    /// for consumers without a class.
    pub step_kind: String,
    /// Deliveries dead-lettered or quarantined.
    pub escalations: u64,
    /// The consumers escalating, by name, with their counts.
    pub consumers: BTreeMap<String, u64>,
}

/// Rows of a pair signal: two names and a count.
pub(crate) type PairRows = Vec<(String, String, i64)>;

/// The counts each store read, since `since` (epoch seconds), as a report.
pub(crate) struct Counted {
    pub since: f64,
    pub co_triggered: PairRows,
    pub failing_together: PairRows,
    /// (producer class, consumer, dead letters, lag breaches).
    pub chronic: Vec<(String, String, i64, i64)>,
    /// (consumer, deliveries dead-lettered or quarantined).
    pub escalations: Vec<(String, i64)>,
}

/// The report of `counted` for `query` over `registry`'s consumers.
pub(crate) fn report(
    registry: &Registry,
    query: &EvidenceQuery,
    counted: Counted,
) -> EvidenceReport {
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    EvidenceReport {
        since: counted.since,
        window_s: query.window.as_secs_f64(),
        correlation_s: query.correlation.as_secs_f64(),
        min_count: query.min_count,
        co_triggered: counted
            .co_triggered
            .into_iter()
            .map(|(first, second, n)| CoTriggered {
                first,
                second,
                traces: count(n),
            })
            .collect(),
        failing_together: counted
            .failing_together
            .into_iter()
            .map(|(first, second, n)| FailingTogether {
                first,
                second,
                slots: count(n),
            })
            .collect(),
        chronic: counted
            .chronic
            .into_iter()
            .map(|(producer_class, consumer, dead, breaches)| ChronicPair {
                producer_class,
                consumer,
                dead_letters: count(dead),
                lag_breaches: count(breaches),
            })
            .collect(),
        escalations: escalations(
            registry,
            counted
                .escalations
                .into_iter()
                .map(|(consumer, n)| (consumer, count(n)))
                .collect(),
            query.min_count,
        ),
    }
}

/// The step kind of `consumer`: its executor class's kind, the class reference's first part.
fn step_kind(registry: &Registry, consumer: &str) -> String {
    registry.class_of(consumer).map_or_else(
        || "unclassified".to_owned(),
        |class| {
            class
                .name
                .split_once('.')
                .map_or(class.name, |(kind, _)| kind)
                .to_owned()
        },
    )
}

/// The escalations of `per_consumer` (consumer, count) grouped by step kind, those with at
/// least `min_count`, most first.
pub(crate) fn escalations(
    registry: &Registry,
    per_consumer: Vec<(String, u64)>,
    min_count: u32,
) -> Vec<Escalations> {
    let mut kinds: BTreeMap<String, Escalations> = BTreeMap::new();
    for (consumer, count) in per_consumer {
        let kind = step_kind(registry, &consumer);
        let entry = kinds.entry(kind.clone()).or_insert_with(|| Escalations {
            step_kind: kind,
            escalations: 0,
            consumers: BTreeMap::new(),
        });
        entry.escalations += count;
        *entry.consumers.entry(consumer).or_insert(0) += count;
    }
    let mut listed: Vec<Escalations> = kinds
        .into_values()
        .filter(|kind| kind.escalations >= u64::from(min_count))
        .collect();
    listed.sort_by(|a, b| {
        b.escalations
            .cmp(&a.escalations)
            .then_with(|| a.step_kind.cmp(&b.step_kind))
    });
    listed.truncate(MAX_SIGNAL_ROWS as usize);
    listed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{
        ConsumerDescriptor, ConsumerMode, DispatcherDescriptor, ExecutorClassDescriptor,
        HandlerKind, PayloadPolicyDescriptor, RetentionDescriptor,
    };

    const fn consumer(name: &'static str, class: Option<&'static str>) -> ConsumerDescriptor {
        ConsumerDescriptor {
            name,
            handler: HandlerKind::Leased,
            mode: ConsumerMode::Live,
            per_key_ordering: false,
            retry_policy: "p",
            heartbeat_threshold_ms: 60_000,
            handler_timeout_ms: None,
            executor_class: class,
            subscriptions: &[],
        }
    }

    const fn class(name: &'static str) -> ExecutorClassDescriptor {
        ExecutorClassDescriptor {
            name,
            mutating: true,
            idempotency_namespace: name,
            heartbeat_owner: "team",
            active: true,
        }
    }

    static REGISTRY: Registry = Registry {
        project: "t",
        digest: "",
        events: &[],
        consumers: &[
            consumer("a.review", Some("ai.review")),
            consumer("a.summary", Some("ai.summary")),
            consumer("plain", None),
            consumer("sql.load", Some("sql.load")),
        ],
        retry_policies: &[],
        executor_classes: &[class("ai.review"), class("ai.summary"), class("sql.load")],
        schedules: &[],
        lag_thresholds: &[],
        cutover_gates: &[],
        inventory_rules: &[],
        retention: RetentionDescriptor::KEEP,
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
    fn escalations_group_by_the_kind_of_the_consumers_class() {
        let per_consumer = vec![
            ("a.review".to_owned(), 2),
            ("a.summary".to_owned(), 1),
            ("plain".to_owned(), 2),
            ("sql.load".to_owned(), 1),
        ];
        let listed = escalations(&REGISTRY, per_consumer, 2);
        let kinds: Vec<(&str, u64)> = listed
            .iter()
            .map(|kind| (kind.step_kind.as_str(), kind.escalations))
            .collect();
        // `sql` escalated once: under the threshold of two.
        assert_eq!(kinds, [("ai", 3), ("unclassified", 2)]);
        assert_eq!(
            listed[0].consumers,
            BTreeMap::from([("a.review".to_owned(), 2), ("a.summary".to_owned(), 1)])
        );
    }

    #[test]
    fn the_query_keeps_its_slot_and_threshold_usable() {
        let query = EvidenceQuery::over(Duration::from_secs(3_600))
            .correlation(Duration::ZERO)
            .min_count(0);
        assert_eq!(query.correlation, Duration::from_millis(1));
        assert_eq!(query.min_count, 1);
        assert_eq!(query.slot_s(), 0.001);
    }
}
