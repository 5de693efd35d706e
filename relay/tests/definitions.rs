//! The stream and consumers `evc generate` defines, applied to the NATS server and used: the
//! relay publishes to subjects those consumers take, a `per_key` consumer's partitions
//! between them receive every event once with each key's events in one partition, in feed
//! order, and `apply` reports and sets back drift.

#[macro_use]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use evc::uuid::Uuid;
use evc::{Cursors, Store};
use evc_codegen::ContractSet;
use evc_codegen::emit::{Layout, jetstream};
use evc_relay::{Definitions, Drift, apply, partition};
use futures_util::StreamExt;
use support::{TestResult, TestStream, feed, with_stream};

const PARTITIONS: u32 = 3;
/// A `per_key` consumer of `iu.born` v1 in the reference contracts.
const ORDERED: &str = "worker.render.mout_view";
/// An unordered one.
const UNORDERED: &str = "audit";

/// The reference contracts' definitions with `PARTITIONS` partitions, on `stream`.
fn definitions(stream: &TestStream) -> Result<Definitions, support::BoxError> {
    let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    let mut set = ContractSet::load(contracts)?.contracts;
    set.project.relay.partitions = PARTITIONS;
    let rendered = jetstream::render(&set, &Layout::default())?;
    Ok(Definitions::parse(&rendered.contents)?
        .with_stream(&stream.name)?
        .with_subject_prefix(&stream.prefix)?)
}

on_both_stores!(generated_consumers_take_every_event_once_and_each_key_in_order);

/// The definitions `evc generate` wrote agree with the runtime that reads the same contracts:
/// every live or shadow consumer is there (per partition when ordered), takes no more
/// deliveries than the dispatcher would attempt, and carries the delays the runtime's retry
/// policy computes (two implementations of one formula, checked against each other).
#[test]
fn the_generated_definitions_agree_with_the_runtime_registry() -> TestResult {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/jetstream.json");
    let definitions = Definitions::read(&path)?;
    let registry = &evc_generated::REGISTRY;
    let partitions = definitions.relay.partitions;
    let mut expected = BTreeSet::new();
    for consumer in registry.consumers {
        if consumer.mode == evc::ConsumerMode::Off {
            continue;
        }
        let durable = consumer.name.replace('.', "-");
        if consumer.per_key_ordering {
            expected.extend((0..partitions).map(|p| format!("{durable}--p{p}")));
        } else {
            expected.insert(durable);
        }
    }
    let found: BTreeSet<String> = definitions
        .consumers
        .iter()
        .filter_map(|c| c.durable_name.clone())
        .collect();
    assert_eq!(found, expected);
    for jetstream in &definitions.consumers {
        let name = &jetstream.metadata["evc_consumer"];
        let consumer = registry
            .consumer(name)
            .ok_or("a consumer of the registry")?;
        let descriptor = registry
            .retry_policies
            .iter()
            .find(|p| p.name == consumer.retry_policy)
            .ok_or("its retry policy")?;
        let policy = evc::RetryPolicy::from_descriptor(descriptor)?.within(&registry.dispatcher);
        let attempts = if descriptor.kind == "no_retry" {
            1
        } else {
            policy.max_attempts
        };
        assert_eq!(jetstream.max_deliver, i64::from(attempts), "{name}");
        let delays: Vec<String> = (1..attempts)
            .map(|n| {
                let ms = policy.nominal_delay_ms(n);
                evc_codegen::duration::format(Duration::from_millis(ms))
            })
            .collect();
        assert_eq!(
            jetstream.metadata["evc_retry_delays"],
            delays.join(" "),
            "{name}"
        );
        assert_eq!(
            jetstream.ack_wait,
            Duration::from_millis(registry.dispatcher.lease_ms),
            "{name}"
        );
    }
    Ok(())
}

/// Applies the generated definitions: the stream the test made is set back to them, every
/// consumer is created; a second apply finds everything in sync; a consumer changed on the
/// broker is reported and set back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_reports_and_sets_back_the_generated_definitions() -> TestResult {
    with_stream(None, |stream| async move {
        let definitions = definitions(&stream)?;
        let first = apply(&stream.jetstream, &definitions, |_| {}).await?;
        assert_eq!(first.len(), 1 + definitions.consumers.len());
        assert_eq!(first[0].what, format!("stream {}", stream.name));
        // The test's stream remembers ids for 10 minutes; the contracts say 2.
        assert!(
            matches!(&first[0].drift, Drift::Updated(d) if d.iter().any(|d| d.starts_with("duplicate_window"))),
            "{first:?}"
        );
        assert!(first[1..].iter().all(|a| a.drift == Drift::Created), "{first:?}");
        let names: BTreeSet<&str> = first[1..].iter().map(|a| a.what.as_str()).collect();
        for p in 0..PARTITIONS {
            assert!(names.contains(format!("consumer worker-render-mout_view--p{p}").as_str()), "{names:?}");
        }
        assert!(names.contains("consumer audit"), "{names:?}");

        let again = apply(&stream.jetstream, &definitions, |_| {}).await?;
        assert!(again.iter().all(|a| a.drift == Drift::InSync), "{again:?}");

        // An operator raises one consumer's deliveries by hand.
        let handle = stream.jetstream.get_stream(&stream.name).await?;
        // As this server holds them (one filter, no metadata, before NATS 2.10).
        let version = stream.jetstream.client().server_info().version;
        let definitions = definitions.for_server(&version);
        let mut changed = definitions.consumers[0].clone();
        changed.max_deliver += 7;
        handle.update_consumer(changed).await?;
        let drifted = apply(&stream.jetstream, &definitions, |_| {}).await?;
        let name = definitions.consumers[0].durable_name.clone().unwrap_or_default();
        for applied in &drifted {
            if applied.what == format!("consumer {name}") {
                assert!(
                    matches!(&applied.drift, Drift::Updated(d) if d.len() == 1 && d[0].starts_with("max_deliver")),
                    "{applied:?}"
                );
            } else {
                assert_eq!(applied.drift, Drift::InSync, "{applied:?}");
            }
        }
        let info = handle.consumer_info(&name).await?;
        assert_eq!(info.config.max_deliver, definitions.consumers[0].max_deliver);
        Ok(())
    })
    .await
}

/// Events of four keys, relayed under the generated definitions, reach the ordered
/// consumer's partitions with every event once, each key in one partition and in feed order;
/// the unordered consumer takes every event once.
async fn generated_consumers_take_every_event_once_and_each_key_in_order<S>(store: S) -> TestResult
where
    S: Cursors + Store + Clone + Send + Sync + 'static,
{
    with_stream(None, |stream| async move {
        let definitions = definitions(&stream)?;
        apply(&stream.jetstream, &definitions, |_| {}).await?;
        let keys: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
        support::append_rounds(&store, &keys, 5).await?;
        support::relay_until(&store, &stream, &definitions.relay, 20).await?;

        let events = feed(&store).await?;
        let handle = stream.jetstream.get_stream(&stream.name).await?;
        let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut partition_of: BTreeMap<String, u32> = BTreeMap::new();
        for p in 0..PARTITIONS {
            let name = format!("{}--p{p}", ORDERED.replace('.', "-"));
            let consumer: PullConsumer = handle.get_consumer(&name).await?;
            for (subject, key, id) in drain(&consumer).await? {
                assert!(
                    subject.starts_with(&format!("{}.{p}.", stream.prefix)),
                    "{subject} in partition {p}"
                );
                assert_eq!(partition(&key, PARTITIONS), p, "{key}");
                assert_eq!(
                    *partition_of.entry(key.clone()).or_insert(p),
                    p,
                    "{key} in one partition"
                );
                by_key.entry(key).or_default().push(id);
            }
        }
        for key in &keys {
            let key = key.to_string();
            let expected: Vec<String> = events
                .iter()
                .filter(|event| event.order_key == key)
                .map(|event| event.event_id.to_string())
                .collect();
            assert_eq!(expected.len(), 5);
            assert_eq!(
                by_key.get(&key),
                Some(&expected),
                "key {key}: once each, in feed order"
            );
        }
        let unordered: PullConsumer = handle.get_consumer(UNORDERED).await?;
        let mut all: Vec<String> = drain(&unordered)
            .await?
            .into_iter()
            .map(|(_, _, id)| id)
            .collect();
        all.sort();
        let mut expected: Vec<String> = events.iter().map(|e| e.event_id.to_string()).collect();
        expected.sort();
        assert_eq!(all, expected);
        Ok(())
    })
    .await
}

/// Every message `consumer` holds, acknowledged one by one (a `per_key` consumer has one in
/// flight): `(subject, order key, event id)` in delivery order.
async fn drain(
    consumer: &PullConsumer,
) -> Result<Vec<(String, String, String)>, support::BoxError> {
    let mut taken = Vec::new();
    // Bounded: a consumer that never drains fails the test instead of hanging it.
    for _ in 0..600 {
        let mut batch = consumer
            .fetch()
            .max_messages(10)
            .expires(Duration::from_secs(1))
            .messages()
            .await?;
        let mut got = 0;
        while let Some(message) = batch.next().await {
            let message = message?;
            let header = |name: &str| {
                message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .map(|v| v.as_str().to_owned())
                    .unwrap_or_default()
            };
            taken.push((
                message.subject.to_string(),
                header("Evc-Order-Key"),
                header("Evc-Event-Id"),
            ));
            message.double_ack().await?;
            got += 1;
        }
        if got == 0 {
            let mut consumer = consumer.clone();
            let info = consumer.info().await?;
            if info.num_pending == 0 && info.num_ack_pending == 0 {
                return Ok(taken);
            }
        }
    }
    Err(format!("consumer kept messages after {} taken", taken.len()).into())
}
