//! Produce-to-handler latency at 1,000 events/s, through JetStream next to outbox dispatch, on
//! each store: four producer tasks append `iu.born` events on a fixed schedule, one per
//! transaction (the time taken just before the commit), and one unordered leased consumer's
//! handler records when it first saw each. Outbox: a dispatcher claims them (listening for
//! appends). JetStream: the relay publishes them (polling the feed at its default interval)
//! and the same handler runs from the consumer's durable consumer (`evc_relay::consume`).
//! Each run on a fresh store and stream. Prints p50, p99 and max in ms.
//!
//! ```sh
//! cargo bench -p evc-relay --bench latency
//! EVC_BENCH_SECONDS=1 EVC_BENCH_STORES=sqlite cargo bench -p evc-relay --bench latency
//! ```
//!
//! Environment: `DATABASE_URL`, `EVC_NATS_URL`, `EVC_BENCH_SECONDS` (producing time per run,
//! default 3), `EVC_BENCH_STORES` (`sqlite`, `postgres`; default both). A store or NATS that
//! cannot be reached is skipped with a message.

#![allow(missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evc::uuid::Uuid;
use evc::{
    AppendOptions, BoxFuture, Cursors, Dispatcher, DispatcherConfig, DynHandler, FailureClass,
    HandlerContext, HandlerError, HandlerKind, Jitter, PgStore, RetryKind, RetryPolicy,
    SqliteStore, Store, TraceContext,
};
use evc_codegen::ContractSet;
use evc_codegen::emit::{Layout, jetstream};
use evc_generated::payloads::{IuBornV1, IuBornV1GovernanceState};
use evc_generated::producers::emit_iu_born_v1;
use evc_relay::{ConsumeConfig, Definitions, Relay, RelayConfig, apply, consume};
use support::{BoxError, TestStream, with_stream};

/// An unordered consumer of `iu.born` v1 in the reference contracts.
const CONSUMER: &str = "audit";
const RATE: u64 = 1_000;
const PRODUCERS: usize = 4;

#[derive(Clone, Copy, PartialEq)]
enum Transport {
    Outbox,
    JetStream,
}

fn main() -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let stores = std::env::var("EVC_BENCH_STORES").unwrap_or_else(|_| "sqlite,postgres".to_owned());
    let seconds: f64 = std::env::var("EVC_BENCH_SECONDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(3.0);
    println!("produce-to-handler latency at {RATE} events/s for {seconds} s, one leased consumer");
    println!("| store | transport | produced events/s | p50 ms | p99 ms | max ms |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    runtime.block_on(async {
        for transport in [Transport::Outbox, Transport::JetStream] {
            if stores.contains("sqlite") {
                support::with_sqlite(move |store: SqliteStore| {
                    run("SQLite", store, transport, seconds)
                })
                .await?;
            }
            if stores.contains("postgres") {
                support::with_postgres(move |store: PgStore| {
                    run("PostgreSQL", store, transport, seconds)
                })
                .await?;
            }
        }
        Ok::<_, BoxError>(())
    })
}

/// When each event was committed and first seen by the handler, by event number.
#[derive(Default)]
struct Times {
    sent: Vec<Option<Instant>>,
    seen: Vec<Option<Instant>>,
}

/// Records when it first saw each event (its number is the payload's `axis_count`).
struct Recorder(Arc<Mutex<Times>>);

impl<S: Store> DynHandler<S> for Recorder {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a, S>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        let now = Instant::now();
        let number = context.payload()["axis_count"].as_u64();
        Box::pin(async move {
            let number = number.ok_or_else(|| HandlerError::permanent("no_event_number"))?;
            let mut times = self.0.lock().expect("not poisoned");
            if let Some(slot) = times.seen.get_mut(number as usize) {
                slot.get_or_insert(now);
            }
            Ok(())
        })
    }
}

async fn run<S>(
    name: &'static str,
    store: S,
    transport: Transport,
    seconds: f64,
) -> support::TestResult
where
    S: Cursors + Store + Clone + Send + Sync + 'static,
{
    with_stream(None, move |stream| async move {
        let events = (RATE as f64 * seconds).round() as usize;
        let times = Arc::new(Mutex::new(Times {
            sent: vec![None; events],
            seen: vec![None; events],
        }));
        let config = DispatcherConfig::default().owner(format!("bench-{}", std::process::id()));
        let policy = RetryPolicy {
            name: "bench".to_owned(),
            kind: RetryKind::FixedDelay,
            base_delay_ms: 1_000,
            max_delay_ms: None,
            max_attempts: 3,
            jitter: Jitter::None,
            retry_on: vec![FailureClass::Transient],
        };
        let dispatcher = Dispatcher::new(store.clone(), config).consumer_with_policy(
            CONSUMER,
            HandlerKind::Leased,
            false,
            policy,
            Recorder(Arc::clone(&times)),
        );
        let (stop_relay, relay_stopped) = tokio::sync::oneshot::channel::<()>();
        let (outbox, jetstream, relay) = match transport {
            Transport::Outbox => (Some(dispatcher.start()), None, None),
            Transport::JetStream => {
                let definitions = definitions(&stream)?;
                apply(&stream.jetstream, &definitions, |_| {}).await?;
                let config = RelayConfig::new("bench", "bench").settings(&definitions.relay);
                let relay = Relay::new(store.clone(), stream.jetstream.clone(), config);
                let relay = tokio::spawn(relay.run(async move {
                    let _ = relay_stopped.await;
                }));
                let consuming = consume(
                    dispatcher,
                    &stream.jetstream,
                    &definitions,
                    ConsumeConfig::default(),
                )
                .await?;
                (None, Some(consuming), Some(relay))
            }
        };
        // Let the workers or pulls start and go idle, as a running service's would be.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let produced_in = produce(&store, &times, events).await?;

        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let missing = {
                let times = times.lock().expect("not poisoned");
                times.seen.iter().filter(|seen| seen.is_none()).count()
            };
            if missing == 0 {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!("{missing} events never reached the handler").into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if let Some(outbox) = outbox {
            outbox.shutdown().await;
        }
        if let Some(jetstream) = jetstream {
            jetstream.shutdown().await;
        }
        let _ = stop_relay.send(());
        if let Some(relay) = relay {
            relay.await??;
        }

        let mut latencies: Vec<f64> = {
            let times = times.lock().expect("not poisoned");
            times
                .sent
                .iter()
                .zip(&times.seen)
                .filter_map(|(sent, seen)| {
                    Some(seen.as_ref()?.saturating_duration_since(*sent.as_ref()?))
                })
                .map(|latency| latency.as_secs_f64() * 1_000.0)
                .collect()
        };
        latencies.sort_by(f64::total_cmp);
        let at = |q: f64| {
            latencies[((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1]
        };
        println!(
            "| {name} | {} | {:.0} | {:.1} | {:.1} | {:.1} |",
            match transport {
                Transport::Outbox => "outbox dispatch",
                Transport::JetStream => "relay + JetStream",
            },
            events as f64 / produced_in.as_secs_f64(),
            at(0.50),
            at(0.99),
            at(1.0)
        );
        Ok(())
    })
    .await
}

/// The reference contracts' definitions on `stream`.
fn definitions(stream: &TestStream) -> Result<Definitions, BoxError> {
    let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    let set = ContractSet::load(contracts)?.contracts;
    let rendered = jetstream::render(&set, &Layout::default())?;
    Ok(Definitions::parse(&rendered.contents)?
        .with_stream(&stream.name)?
        .with_subject_prefix(&stream.prefix)?)
}

/// Appends `events` events at [`RATE`] on a fixed schedule from [`PRODUCERS`] tasks, one per
/// transaction, noting each one's time just before its commit; returns how long it took.
async fn produce<S: Store>(
    store: &S,
    times: &Arc<Mutex<Times>>,
    events: usize,
) -> Result<Duration, BoxError> {
    let started = tokio::time::Instant::now();
    let interval = Duration::from_secs(1) / RATE as u32;
    let mut producers = tokio::task::JoinSet::new();
    for producer in 0..PRODUCERS {
        let (store, times) = (store.clone(), Arc::clone(times));
        producers.spawn(async move {
            let trace =
                TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)?;
            for n in (producer..events).step_by(PRODUCERS) {
                tokio::time::sleep_until(started + interval * n as u32).await;
                let born = IuBornV1::new(
                    Uuid::now_v7(),
                    Uuid::now_v7(),
                    IuBornV1GovernanceState::Draft,
                    evc::chrono::Utc::now(),
                )
                .with_axis_count(n as u64);
                let mut tx = store.begin().await?;
                {
                    let mut publisher = store.publisher(&mut tx, AppendOptions::new());
                    emit_iu_born_v1(&mut publisher, &trace, &born).await?;
                }
                times.lock().expect("not poisoned").sent[n] = Some(Instant::now());
                tx.commit().await?;
            }
            Ok::<_, BoxError>(())
        });
    }
    while let Some(done) = producers.join_next().await {
        done??;
    }
    Ok(started.elapsed())
}
