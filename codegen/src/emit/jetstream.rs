//! `jetstream.json`: the NATS JetStream stream and consumers of `evc relay` (docs/relay.md).
//!
//! The `stream` and every entry of `consumers` are in the JetStream API's own JSON form (the
//! form `nats stream add --config` reads; durations in nanoseconds), so `evc relay --apply` and
//! the NATS tools read the same file. `relay` holds what the relay itself needs: the subject
//! prefix, the partition count and its cursor lease.
//!
//! Subjects are `<prefix>.<partition>.<event type>.v<major>`, the partition a hash of the
//! event's order key. It comes before the event type, whose token count varies, so that one
//! pattern (`evc.3.>`) takes a whole partition. A `per_key` consumer gets one JetStream
//! consumer per partition, each with one message in flight, so events of one key arrive in
//! order while partitions run side by side; an unordered consumer gets one consumer taking
//! every partition.
//!
//! A consumer's `ack_wait` is the dispatcher lease: how long a message is held before it is
//! delivered again, renewed by progress acknowledgements as the dispatcher renews its lease.
//! `max_deliver` is the retry policy's attempts within the dispatcher ceiling. The policy's
//! delays are not JetStream's `backoff`, which the server also makes each delivery's
//! acknowledgement deadline; they travel in the consumer's metadata, for the consumer to
//! apply as the delay of its negative acknowledgement.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Artifact, EmitError, GENERATED_NOTICE, Layout};
use crate::duration;
use crate::model::{ConsumerMode, ContractSet, Ordering, RetryKind, RetryPolicy};

/// The file's name inside the generated crate's directory.
pub const FILE_NAME: &str = "jetstream.json";

/// Renders `<crate_dir>/jetstream.json`.
///
/// # Errors
/// [`EmitError::Serialize`] if the document does not serialize (a bug).
pub fn render(set: &ContractSet, layout: &Layout) -> Result<Artifact, EmitError> {
    let relay = &set.project.relay;
    let document = json!({
        "$comment": GENERATED_NOTICE,
        "project": set.project.name,
        "relay": {
            "subject_prefix": relay.subject_prefix,
            "partitions": relay.partitions,
            "lease": nanos(relay.lease),
        },
        "stream": {
            "name": relay.stream,
            "description": format!("Events of {} relayed from its outbox by evc relay", set.project.name),
            "subjects": [format!("{}.>", relay.subject_prefix)],
            "retention": "limits",
            "max_consumers": -1,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 0,
            "discard": "old",
            "storage": "file",
            "num_replicas": 1,
            "duplicate_window": nanos(relay.duplicate_window),
        },
        "consumers": consumers(set),
    });
    let mut contents =
        serde_json::to_string_pretty(&document).map_err(|error| EmitError::Serialize {
            document: FILE_NAME,
            message: error.to_string(),
        })?;
    contents.push('\n');
    Ok(Artifact {
        path: layout.crate_dir.join(FILE_NAME),
        contents,
    })
}

/// The JetStream consumers of every consumer that receives deliveries, in name order.
fn consumers(set: &ContractSet) -> Vec<Value> {
    let relay = &set.project.relay;
    let dispatcher = &set.project.dispatcher;
    let mut out = Vec::new();
    for consumer in set.consumers.values() {
        if consumer.mode == ConsumerMode::Off {
            continue;
        }
        let Some(policy) = set.retry_policies.get(&consumer.retry_policy) else {
            continue;
        };
        // `no_retry` ends at the first failure, whatever its attempts say.
        let attempts = if policy.kind == RetryKind::NoRetry {
            1
        } else {
            policy.max_attempts.min(dispatcher.max_attempts)
        };
        let delays = retry_delays(policy, attempts, dispatcher.backoff_ceiling);
        let subjects = subscribed_subjects(set, &consumer.subscriptions);
        // NATS names take no dots; contract names take no hyphens and no two dots in a row,
        // so `.` as `-` maps one to one, and `--p<k>` cannot be another consumer's name.
        let durable = consumer.name.replace('.', "-");
        let partitions: Vec<Option<u32>> = match consumer.ordering {
            Ordering::PerKey => (0..relay.partitions).map(Some).collect(),
            Ordering::None => vec![None],
        };
        for partition in partitions {
            let (name, filter, in_flight, partition_text) = match partition {
                Some(p) => (
                    format!("{durable}--p{p}"),
                    subjects
                        .iter()
                        .map(|s| format!("{}.{p}.{s}", relay.subject_prefix))
                        .collect::<Vec<_>>(),
                    1,
                    format!("{p} of {}", relay.partitions),
                ),
                None => (
                    durable.clone(),
                    subjects
                        .iter()
                        .map(|s| format!("{}.*.{s}", relay.subject_prefix))
                        .collect(),
                    i64::from(dispatcher.batch_size),
                    "all".to_owned(),
                ),
            };
            let mut entry = json!({
                "durable_name": name,
                "deliver_policy": "all",
                "ack_policy": "explicit",
                "ack_wait": nanos(dispatcher.lease),
                "max_deliver": attempts,
                "filter_subjects": filter,
                "replay_policy": "instant",
                "max_ack_pending": in_flight,
                "metadata": {
                    "evc_consumer": consumer.name,
                    "evc_partition": partition_text,
                    "evc_retry_delays": delays,
                    "evc_retry_policy": policy.name,
                },
            });
            // The server omits an empty description and refuses one over 4 KiB.
            let description = clipped(consumer.description.trim(), MAX_DESCRIPTION_BYTES);
            if let (false, Some(fields)) = (description.is_empty(), entry.as_object_mut()) {
                fields.insert("description".to_owned(), json!(description));
            }
            out.push(entry);
        }
    }
    out
}

/// The longest consumer description JetStream takes, in bytes.
const MAX_DESCRIPTION_BYTES: usize = 4096;

/// `text` cut to at most `max` bytes, at a character boundary.
fn clipped(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

/// `<event type>.v<major>` of every major version a subscription accepts, sorted.
fn subscribed_subjects(
    set: &ContractSet,
    subscriptions: &[crate::model::Subscription],
) -> Vec<String> {
    let mut subjects = BTreeSet::new();
    for subscription in subscriptions {
        let Some(event) = set.events.get(&subscription.event) else {
            continue;
        };
        for version in &event.versions {
            if subscription.requirement.matches(&version.version) {
                subjects.insert(format!("{}.v{}", event.name, version.version.major));
            }
        }
    }
    subjects.into_iter().collect()
}

/// The nominal delays after attempts 1 to `attempts - 1` (`1s 2s 4s`), capped by the policy
/// and by `ceiling`, before jitter, in whole milliseconds as the runtime's retry policy
/// computes them.
fn retry_delays(policy: &RetryPolicy, attempts: u32, ceiling: Duration) -> String {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let cap = ms(policy.max_delay.map_or(ceiling, |own| own.min(ceiling)));
    let base = ms(policy.base_delay);
    (1..attempts)
        .map(|attempt| {
            let delay = match policy.kind {
                RetryKind::FixedDelay => base,
                RetryKind::ExponentialBackoff => {
                    base.saturating_mul(1u64.checked_shl(attempt - 1).unwrap_or(u64::MAX))
                }
                RetryKind::Fibonacci => base.saturating_mul(fibonacci(attempt)),
                RetryKind::NoRetry => 0,
            };
            duration::format(Duration::from_millis(delay.min(cap)))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `F(n)` with `F(1) = F(2) = 1`, saturating.
fn fibonacci(n: u32) -> u64 {
    let (mut a, mut b) = (1u64, 1u64);
    for _ in 2..n {
        (a, b) = (b, a.saturating_add(b));
    }
    b
}

/// A duration as the JetStream API writes it: whole nanoseconds, at most what the server's
/// signed 64-bit durations hold.
fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}
