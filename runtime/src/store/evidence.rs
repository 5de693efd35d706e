//! Usage evidence (docs/runtime.md, "Usage evidence"): what the ledger alone says about how
//! events and consumers behave together over a window, the same on every store. Each store
//! counts with its own SQL; the signals, their thresholds and the grouping by step kind are
//! here.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::registry::{EvidenceRecordingDescriptor, Registry};

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// The most snapshots one read lists.
pub const MAX_EVIDENCE_SNAPSHOTS: u32 = 1_000;

/// A report the dispatcher recorded ([`crate::Store::record_evidence`],
/// [`crate::Observe::evidence_snapshots`]). Times are epoch seconds of the store's clock.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct EvidenceSnapshot {
    /// The start of the slot the snapshot stands for (one snapshot per slot).
    pub slot: f64,
    /// When it was recorded.
    pub recorded_at: f64,
    /// The signals, each with the window and counts it was read with.
    pub report: EvidenceReport,
}

/// What one recording round did ([`crate::Store::record_evidence`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct EvidenceRound {
    /// Whether this round held the store's recording lock (`false`: another process ran it,
    /// or the registry records no evidence).
    pub leader: bool,
    /// The slot recorded, epoch seconds; `None`: its snapshot existed already.
    pub recorded: Option<f64>,
    /// Snapshots removed: their slot started longer ago than the registry keeps them.
    pub removed: u64,
}

/// The slot of `every_ms` holding `now` (epoch seconds), in epoch milliseconds.
pub(in crate::store) fn slot_ms(now: f64, every_ms: u64) -> i64 {
    let every = i64::try_from(every_ms.max(1)).unwrap_or(i64::MAX);
    #[allow(clippy::cast_possible_truncation)]
    let now_ms = (now * 1000.0).floor() as i64;
    now_ms.div_euclid(every) * every
}

/// The slots (epoch milliseconds) older than this are removed at `now` (epoch seconds).
pub(in crate::store) fn keep_after_ms(now: f64, keep_ms: u64) -> i64 {
    #[allow(clippy::cast_possible_truncation)]
    let now_ms = (now * 1000.0).floor() as i64;
    now_ms.saturating_sub(i64::try_from(keep_ms).unwrap_or(i64::MAX))
}

/// The snapshots of stored rows, skipping (with a warning naming the slot) a row whose report
/// this build cannot read, so that one row written by another release does not hide the rest.
pub(in crate::store) fn snapshots(rows: Vec<(i64, f64, String)>) -> Vec<EvidenceSnapshot> {
    rows.into_iter()
        .filter_map(|row| {
            let slot_ms = row.0;
            snapshot(row)
                .inspect_err(|error| {
                    tracing::warn!(slot_ms, %error, "an evidence snapshot is skipped");
                })
                .ok()
        })
        .collect()
}

/// A stored snapshot's columns (slot in epoch milliseconds, recorded at in epoch seconds, the
/// report as JSON text) as a snapshot.
pub(in crate::store) fn snapshot(
    (slot_ms, recorded_at, report): (i64, f64, String),
) -> Result<EvidenceSnapshot, sqlx::Error> {
    let report = serde_json::from_str(&report).map_err(|error| {
        sqlx::Error::Decode(format!("an evidence snapshot is not a report: {error}").into())
    })?;
    #[allow(clippy::cast_precision_loss)]
    let slot = slot_ms as f64 / 1000.0;
    Ok(EvidenceSnapshot {
        slot,
        recorded_at,
        report,
    })
}

/// The evidence recording as JSON (the settings row, SQLite's recorded document); `null` for
/// none.
pub(in crate::store) fn recording_value(recording: Option<EvidenceRecordingDescriptor>) -> Value {
    recording.map_or(Value::Null, |r| {
        serde_json::json!({
            "every_ms": r.every_ms,
            "keep_ms": r.keep_ms,
            "window_ms": r.window_ms,
            "correlation_ms": r.correlation_ms,
            "min_count": r.min_count,
        })
    })
}

/// The evidence recording of [`recording_value`]'s JSON.
///
/// # Errors
/// What is wrong with it (never its content).
pub(in crate::store) fn recording_of(
    value: Value,
) -> Result<Option<EvidenceRecordingDescriptor>, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Recording {
        every_ms: u64,
        keep_ms: u64,
        window_ms: u64,
        correlation_ms: u64,
        min_count: u32,
    }
    if value.is_null() {
        return Ok(None);
    }
    let r: Recording = serde_json::from_value(value)
        .map_err(|_| "the evidence recording is not a recording".to_owned())?;
    if r.every_ms == 0 || r.keep_ms == 0 || r.window_ms == 0 {
        return Err("the evidence recording has a zero period".to_owned());
    }
    // Kept shorter than a slot, a snapshot would be removed by the round that records it.
    if r.keep_ms < r.every_ms {
        return Err("the evidence recording keeps snapshots for less than a slot".to_owned());
    }
    Ok(Some(EvidenceRecordingDescriptor {
        every_ms: r.every_ms,
        keep_ms: r.keep_ms,
        window_ms: r.window_ms,
        correlation_ms: r.correlation_ms,
        min_count: r.min_count,
    }))
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
        evidence_recording: None,
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
    fn a_slot_starts_on_a_multiple_of_its_length() {
        assert_eq!(slot_ms(3_600.5, 60_000), 3_600_000);
        assert_eq!(slot_ms(3_659.999, 60_000), 3_600_000);
        assert_eq!(slot_ms(3_660.0, 60_000), 3_660_000);
        assert_eq!(keep_after_ms(100.0, 40_000), 60_000);
    }

    #[test]
    fn a_recording_reads_back_as_written_and_refuses_a_zero_period() {
        let recording = EvidenceRecordingDescriptor {
            every_ms: 3_600_000,
            keep_ms: 86_400_000,
            window_ms: 604_800_000,
            correlation_ms: 60_000,
            min_count: 3,
        };
        let value = recording_value(Some(recording));
        assert_eq!(recording_of(value.clone()), Ok(Some(recording)));
        assert_eq!(recording_of(recording_value(None)), Ok(None));
        let mut zero = value.clone();
        zero["keep_ms"] = 0.into();
        assert!(recording_of(zero).is_err());
        let mut short = value;
        short["keep_ms"] = 60_000.into();
        assert!(recording_of(short).is_err());
        assert!(recording_of(serde_json::json!({"every_ms": 1})).is_err());
    }

    #[test]
    fn a_snapshot_reads_back_its_report() {
        let report = EvidenceReport {
            since: 10.0,
            window_s: 60.0,
            correlation_s: 1.0,
            min_count: 2,
            co_triggered: vec![CoTriggered {
                first: "a.b".to_owned(),
                second: "c.d".to_owned(),
                traces: 4,
            }],
            failing_together: Vec::new(),
            chronic: Vec::new(),
            escalations: escalations(&REGISTRY, vec![("plain".to_owned(), 2)], 1),
        };
        let text = serde_json::to_string(&report).expect("JSON");
        let read = snapshot((70_000, 71.5, text)).expect("a report");
        assert_eq!(read.slot, 70.0);
        assert_eq!(read.recorded_at, 71.5);
        assert_eq!(read.report, report);
        assert!(snapshot((0, 0.0, "[]".to_owned())).is_err());
        let listed = snapshots(vec![
            (0, 0.0, "{}".to_owned()),
            (70_000, 71.5, serde_json::to_string(&report).expect("JSON")),
        ]);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].slot, 70.0);
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
