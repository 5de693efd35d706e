//! Consumers on JetStream, against the NATS server and each store: the same handlers a
//! dispatcher runs take their deliveries from the generated durable consumers; retries come
//! back after the policy's delay, a permanent failure is dead-lettered in the store, each key
//! is handled in feed order, and a redelivery of everything runs no effect twice.

#[macro_use]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evc::uuid::Uuid;
use evc::{
    BoxFuture, Cursors, DeliveryStatus, Dispatcher, DispatcherConfig, DynHandler, FailureClass,
    HandlerContext, HandlerError, HandlerKind, Jitter, RetryDecision, RetryKind, RetryPolicy,
    Store, Unclaimed,
};
use evc_codegen::ContractSet;
use evc_codegen::emit::{Layout, jetstream};
use evc_relay::{ConsumeConfig, Consuming, Definitions, Transport, apply, consume, serve};
use support::{TestResult, TestStream, feed, with_stream};

/// An unordered, transactional consumer of `iu.born` v1 in the reference contracts.
const AUDIT: &str = "audit";
/// A `per_key`, leased one.
const RENDER: &str = "worker.render.mout_view";
/// A sweep interval longer than any test: JetStream alone brings the work.
const NO_SWEEP: Duration = Duration::from_secs(3_600);
const KEYS: usize = 4;
const ROUNDS: u64 = 5;

on_both_stores!(
    handlers_run_from_jetstream_once_per_event_in_key_order,
    claims_by_event_id_say_where_each_delivery_stands,
    a_consumer_moves_between_outbox_and_jetstream_by_configuration,
    deliveries_the_broker_never_brings_are_swept_from_the_store,
);

/// The reference contracts' definitions with two partitions, on `stream`.
fn definitions(stream: &TestStream) -> Result<Definitions, support::BoxError> {
    let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    let mut set = ContractSet::load(contracts)?.contracts;
    set.project.relay.partitions = 2;
    let rendered = jetstream::render(&set, &Layout::default())?;
    Ok(Definitions::parse(&rendered.contents)?
        .with_stream(&stream.name)?
        .with_subject_prefix(&stream.prefix)?)
}

/// Retries after 100 ms, five attempts in all: a test's pace, not the contracts'.
fn quick_retries() -> RetryPolicy {
    RetryPolicy {
        name: "test.quick".to_owned(),
        kind: RetryKind::FixedDelay,
        base_delay_ms: 100,
        max_delay_ms: None,
        max_attempts: 5,
        jitter: Jitter::None,
        retry_on: vec![FailureClass::Transient],
    }
}

/// What the handlers saw: per event, how many runs succeeded; per key, the events handled,
/// in order.
#[derive(Default)]
struct Seen {
    audited: Mutex<HashMap<String, u32>>,
    rendered: Mutex<BTreeMap<String, Vec<String>>>,
}

/// The `axis_count` a test event carries: its round.
fn round_of(context: &HandlerContext<'_, impl Store>) -> u64 {
    context.payload()["axis_count"].as_u64().unwrap_or(0)
}

/// Writes its effect row in the handler's transaction (once per event); fails round 1 on the
/// first attempt (transient), and round 3 of the event `doomed` for good.
struct Audit {
    seen: Arc<Seen>,
    doomed: Arc<Mutex<Option<String>>>,
}

impl<S: Store> DynHandler<S> for Audit {
    fn handle<'a>(
        &'a self,
        mut context: HandlerContext<'a, S>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let id = context.delivery().event_id.clone();
            if self.doomed.lock().expect("not poisoned").as_deref() == Some(id.as_str()) {
                return Err(HandlerError::permanent("doomed"));
            }
            if round_of(&context) == 1 && context.delivery().attempt == 1 {
                return Err(HandlerError::transient("first_try"));
            }
            let lease = context.lease().clone();
            let store = context.store;
            let tx = context
                .transaction()
                .ok_or_else(|| HandlerError::permanent("not_transactional"))?;
            let first = store
                .record_effect(tx, &lease, &id, "-")
                .await
                .map_err(|_| HandlerError::transient("fenced"))?;
            if first {
                *self
                    .seen
                    .audited
                    .lock()
                    .expect("not poisoned")
                    .entry(id)
                    .or_default() += 1;
            }
            Ok(())
        })
    }
}

/// Notes each key's events in the order it handles them; fails round 2 on the first attempt.
struct Render {
    seen: Arc<Seen>,
}

impl<S: Store> DynHandler<S> for Render {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a, S>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            if round_of(&context) == 2 && context.delivery().attempt == 1 {
                return Err(HandlerError::transient("first_try"));
            }
            self.seen
                .rendered
                .lock()
                .expect("not poisoned")
                .entry(context.claimed.order_key.clone())
                .or_default()
                .push(context.delivery().event_id.clone());
            Ok(())
        })
    }
}

/// A dispatcher of both consumers with quick retries, `seen` shared across runs.
fn both_consumers<S: Store>(
    store: &S,
    seen: &Arc<Seen>,
    doomed: &Arc<Mutex<Option<String>>>,
) -> Dispatcher<S> {
    let config = DispatcherConfig::from_registry(store.registry())
        .owner("js-test")
        .poll_interval(Duration::from_millis(20));
    Dispatcher::new(store.clone(), config)
        .consumer_with_policy(
            AUDIT,
            HandlerKind::Transactional,
            false,
            quick_retries(),
            Audit {
                seen: Arc::clone(seen),
                doomed: Arc::clone(doomed),
            },
        )
        .consumer_with_policy(
            RENDER,
            HandlerKind::Leased,
            true,
            quick_retries(),
            Render {
                seen: Arc::clone(seen),
            },
        )
}

/// Both consumers on JetStream.
async fn run_consumers<S: Store>(
    store: &S,
    stream: &TestStream,
    definitions: &Definitions,
    seen: &Arc<Seen>,
    doomed: &Arc<Mutex<Option<String>>>,
    sweep_every: Duration,
) -> Result<Consuming, support::BoxError> {
    let mut config = ConsumeConfig::default();
    config.sweep_every = sweep_every;
    let dispatcher = both_consumers(store, seen, doomed);
    Ok(consume(dispatcher, &stream.jetstream, definitions, config).await?)
}

/// Waits (up to two minutes) until `consumer` has `acked` acked attempts and `dead` dead
/// deliveries in the store.
async fn settled<S: Store>(store: &S, consumer: &str, acked: u64, dead: u64) -> TestResult {
    for _ in 0..1_200 {
        let done = store.count_attempts(consumer, "acked").await?;
        let dead_now = store
            .count_deliveries(consumer, &[DeliveryStatus::Dead])
            .await?;
        if done == acked && dead_now == dead {
            return Ok(());
        }
        assert!(done <= acked, "{consumer}: {done} acked, more than {acked}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{consumer} never settled {acked} acked and {dead} dead").into())
}

/// Waits (up to two minutes) until durable consumer `durable` has nothing pending or in flight.
async fn drained(stream: &TestStream, durable: &str) -> TestResult {
    let handle = stream.jetstream.get_stream(&stream.name).await?;
    for _ in 0..1_200 {
        let mut consumer: async_nats::jetstream::consumer::PullConsumer =
            handle.get_consumer(durable).await?;
        let info = consumer.info().await?;
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("durable {durable} never drained").into())
}

/// Four keys, five rounds of `iu.born` each, relayed and run from JetStream by a transactional
/// unordered consumer and a leased per-key one; then the unordered consumer's durable is
/// recreated, so the broker delivers every message again.
async fn handlers_run_from_jetstream_once_per_event_in_key_order<S>(store: S) -> TestResult
where
    S: Cursors + Store + Clone + Send + Sync + 'static,
{
    with_stream(None, |stream| async move {
        let definitions = definitions(&stream)?;
        apply(&stream.jetstream, &definitions, |_| {}).await?;
        let keys: Vec<Uuid> = (0..KEYS).map(|_| Uuid::now_v7()).collect();
        support::append_rounds(&store, &keys, ROUNDS).await?;
        let total = KEYS * ROUNDS as usize;
        let events = support::feed_of(&store, total).await?;
        // Round 3 of the first key fails for good.
        let doomed_event = events
            .iter()
            .filter(|e| e.order_key == keys[0].to_string())
            .nth(3)
            .map(|e| e.event_id.to_string());
        let doomed = Arc::new(Mutex::new(doomed_event.clone()));
        let seen = Arc::new(Seen::default());

        support::relay_until(&store, &stream, &definitions.relay, total as u64).await?;
        let consuming =
            run_consumers(&store, &stream, &definitions, &seen, &doomed, NO_SWEEP).await?;
        settled(&store, AUDIT, total as u64 - 1, 1).await?;
        settled(&store, RENDER, total as u64, 0).await?;
        let stats = consuming.shutdown().await;
        assert_eq!(stats.dead, 1, "{stats:?}");
        // Round 1 (audit) and round 2 (render) failed once per key.
        assert_eq!(stats.retried, 2 * KEYS as u64, "{stats:?}");

        // The dead letter appended a `job.dead_lettered` event, relayed by nobody here.
        let events: Vec<_> = feed(&store)
            .await?
            .into_iter()
            .filter(|e| e.event_type == "iu.born")
            .collect();
        assert_eq!(events.len(), total);
        let doomed_event = doomed_event.unwrap_or_default();
        {
            let audited = seen.audited.lock().expect("not poisoned");
            for event in &events {
                let id = event.event_id.to_string();
                let expected = u32::from(id != doomed_event);
                assert_eq!(audited.get(&id).copied().unwrap_or(0), expected, "{id}");
            }
        }
        let dead = store
            .deliveries(Uuid::parse_str(&doomed_event)?, AUDIT)
            .await?;
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].status, DeliveryStatus::Dead);
        assert_eq!(dead[0].last_error_code.as_deref(), Some("doomed"));
        {
            let rendered = seen.rendered.lock().expect("not poisoned");
            for key in &keys {
                let key = key.to_string();
                let expected: Vec<String> = events
                    .iter()
                    .filter(|e| e.order_key == key)
                    .map(|e| e.event_id.to_string())
                    .collect();
                assert_eq!(
                    rendered.get(&key),
                    Some(&expected),
                    "key {key} in feed order"
                );
            }
        }

        // The broker delivers everything again: nothing runs twice, the dead letter stays.
        let acked_before = store.count_attempts(AUDIT, "acked").await?;
        let handle = stream.jetstream.get_stream(&stream.name).await?;
        handle.delete_consumer(AUDIT).await?;
        apply(&stream.jetstream, &definitions, |_| {}).await?;
        let consuming =
            run_consumers(&store, &stream, &definitions, &seen, &doomed, NO_SWEEP).await?;
        drained(&stream, AUDIT).await?;
        let stats = consuming.shutdown().await;
        assert_eq!(stats.claimed, 0, "{stats:?}");
        assert_eq!(store.count_attempts(AUDIT, "acked").await?, acked_before);
        let audited = seen.audited.lock().expect("not poisoned");
        assert!(audited.values().all(|runs| *runs == 1), "{audited:?}");
        assert_eq!(audited.len(), total - 1);
        Ok(())
    })
    .await
}

/// A claim by event id leases what is due and says where the rest stand: settled (acked, or
/// never addressed to the consumer), ended (dead) or waiting (leased elsewhere, with the time
/// its lease has left).
async fn claims_by_event_id_say_where_each_delivery_stands<S>(store: S) -> TestResult
where
    S: Cursors + Store + Clone + Send + Sync + 'static,
{
    support::append(&store, 3).await?;
    let events = support::feed_of(&store, 3).await?;
    let ids: Vec<Uuid> = events.iter().map(|e| e.event_id).collect();
    let lease = Duration::from_secs(60);
    let mut connection = store.pool().acquire().await?;
    let first = store
        .claim_events(&mut *connection, AUDIT, "w1", &ids[..2], lease)
        .await?;
    assert_eq!(first.claimed.len(), 2);
    assert!(first.unclaimed.is_empty());
    // The first acked, the second dead, the third untouched; an unknown event.
    store
        .ack(&mut *connection, &[&first.claimed[0].lease])
        .await?;
    store
        .fail(
            &first.claimed[1].lease,
            FailureClass::Permanent,
            "broken",
            RetryDecision::Dead,
        )
        .await?;
    let stranger = Uuid::now_v7();
    let again = store
        .claim_events(
            &mut *connection,
            AUDIT,
            "w2",
            &[ids[0], ids[1], ids[2], stranger],
            lease,
        )
        .await?;
    assert_eq!(again.claimed.len(), 1);
    assert_eq!(again.claimed[0].lease.event_id, ids[2]);
    assert_eq!(again.claimed[0].lease.attempt, 1);
    let stands: HashMap<Uuid, Unclaimed> = again.unclaimed.into_iter().collect();
    assert_eq!(stands.get(&ids[0]), Some(&Unclaimed::Settled));
    assert_eq!(stands.get(&ids[1]), Some(&Unclaimed::Ended));
    assert_eq!(stands.get(&stranger), Some(&Unclaimed::Settled));
    // Leased by `w2` now: another claim waits for the rest of its lease.
    let third = store
        .claim_events(&mut *connection, AUDIT, "w3", &[ids[2]], lease)
        .await?;
    assert!(third.claimed.is_empty());
    match third.unclaimed.as_slice() {
        [(id, Unclaimed::Waiting(wait))] => {
            assert_eq!(*id, ids[2]);
            assert!(!wait.is_zero() && *wait <= lease, "{wait:?}");
        }
        other => panic!("expected the third to wait, got {other:?}"),
    }
    Ok(())
}

/// The same handlers, their transport chosen by configuration alone: first everything on
/// outbox dispatch, then the audit consumer on JetStream while the ordered one stays on the
/// outbox. Every event is audited once; the JetStream messages of events the outbox already
/// ran are acknowledged without running them again.
async fn a_consumer_moves_between_outbox_and_jetstream_by_configuration<S>(store: S) -> TestResult
where
    S: Cursors + Store + Clone + Send + Sync + 'static,
{
    with_stream(None, |stream| async move {
        let definitions = definitions(&stream)?;
        apply(&stream.jetstream, &definitions, |_| {}).await?;
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("jetstream.json");
        std::fs::write(&path, serde_json::to_string(&definitions)?)?;
        let seen = Arc::new(Seen::default());
        let doomed = Arc::new(Mutex::new(None));

        // On the outbox: the relay publishes too, but nobody reads the stream.
        let outbox = Transport::parse(Some("outbox"), None, None, None)?;
        support::append(&store, 6).await?;
        support::relay_until(&store, &stream, &definitions.relay, 6).await?;
        let serving = serve(both_consumers(&store, &seen, &doomed), &outbox).await?;
        settled(&store, AUDIT, 6, 0).await?;
        settled(&store, RENDER, 6, 0).await?;
        serving.shutdown().await;

        // The audit consumer moves to JetStream: its durable holds all twelve messages.
        let url = std::env::var("EVC_NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".to_owned());
        let split = Transport::parse(
            Some("jetstream"),
            Some(AUDIT),
            Some(url),
            Some(path.clone()),
        )?;
        support::append(&store, 6).await?;
        support::relay_until(&store, &stream, &definitions.relay, 12).await?;
        let serving = serve(both_consumers(&store, &seen, &doomed), &split).await?;
        settled(&store, AUDIT, 12, 0).await?;
        settled(&store, RENDER, 12, 0).await?;
        drained(&stream, AUDIT).await?;
        let stats = serving.shutdown().await;
        assert_eq!(
            stats.acked, 12,
            "six audited from JetStream, six rendered: {stats:?}"
        );

        {
            let audited = seen.audited.lock().expect("not poisoned");
            assert_eq!(audited.len(), 12);
            assert!(audited.values().all(|runs| *runs == 1), "{audited:?}");
        }
        // The ordered consumer never read its durable consumers.
        let handle = stream.jetstream.get_stream(&stream.name).await?;
        let mut taken = 0;
        for p in 0..2 {
            let name = format!("{}--p{p}", RENDER.replace('.', "-"));
            let mut consumer: async_nats::jetstream::consumer::PullConsumer =
                handle.get_consumer(&name).await?;
            taken += consumer.info().await?.delivered.consumer_sequence;
        }
        assert_eq!(taken, 0);
        Ok(())
    })
    .await
}

/// Events appended while no relay runs never reach the stream: the runners' sweep claims
/// them from the store, each once, and their handlers run as they would from a message.
async fn deliveries_the_broker_never_brings_are_swept_from_the_store<S>(store: S) -> TestResult
where
    S: Cursors + Store + Clone + Send + Sync + 'static,
{
    with_stream(None, |stream| async move {
        let definitions = definitions(&stream)?;
        apply(&stream.jetstream, &definitions, |_| {}).await?;
        support::append(&store, 5).await?;
        let seen = Arc::new(Seen::default());
        let doomed = Arc::new(Mutex::new(None));
        let consuming = run_consumers(
            &store,
            &stream,
            &definitions,
            &seen,
            &doomed,
            Duration::from_millis(200),
        )
        .await?;
        settled(&store, AUDIT, 5, 0).await?;
        settled(&store, RENDER, 5, 0).await?;
        let stats = consuming.shutdown().await;
        assert_eq!(stats.acked, 10, "{stats:?}");
        let audited = seen.audited.lock().expect("not poisoned");
        assert_eq!(audited.len(), 5);
        assert!(audited.values().all(|runs| *runs == 1), "{audited:?}");
        Ok(())
    })
    .await
}
