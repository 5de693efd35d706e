//! Relay throughput: events per second from the outbox to JetStream acknowledgements, with
//! deduplication on (every message carries `Nats-Msg-Id`; the stream remembers ids for 10
//! minutes), on each store, against a baseline measured in the same run: the same messages
//! published straight to a stream of their own, in the same batches, with no store in the way
//! (what the broker and the client allow). The ratio says what bounds the relay: near 1, the
//! broker; well below, the store's feed reads and cursor moves.
//!
//! ```sh
//! cargo bench -p evc-relay --bench relay
//! EVC_BENCH_EVENTS=20000 EVC_BENCH_STORES=sqlite cargo bench -p evc-relay --bench relay
//! ```
//!
//! Environment: `DATABASE_URL` (default `postgres://root@localhost/test`), `EVC_NATS_URL`
//! (default `127.0.0.1:4222`), `EVC_BENCH_EVENTS` (default 100,000), `EVC_BENCH_BATCH`
//! (events per relay round and per baseline batch, default 1,000), `EVC_BENCH_STORES`
//! (`sqlite`, `postgres`; default both). A store or NATS that cannot be reached is skipped
//! with a message.

#![allow(missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use evc::uuid::Uuid;
use evc::{Cursors, FeedEvent, NewEvent, OutgoingEvent, PgStore, SqliteStore, Store, TraceContext};
use evc_relay::{HeaderStyle, Relay, RelayConfig, message, subject};
use support::{BoxError, TestStream, caught_up, feed_of, with_stream};

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let stores = std::env::var("EVC_BENCH_STORES").unwrap_or_else(|_| "sqlite,postgres".to_owned());
    println!(
        "relay throughput: {} events, batches of {}, deduplication on",
        setting("EVC_BENCH_EVENTS", 100_000),
        setting("EVC_BENCH_BATCH", 1_000)
    );
    println!("| store | baseline (publish only) events/s | relay events/s | relay / baseline |");
    println!("| --- | ---: | ---: | ---: |");
    runtime.block_on(async {
        if stores.contains("sqlite") {
            support::with_sqlite(|store: SqliteStore| run("sqlite", store)).await?;
        }
        if stores.contains("postgres") {
            support::with_postgres(|store: PgStore| run("postgres", store)).await?;
        }
        Ok::<_, BoxError>(())
    })
}

async fn run<S>(name: &'static str, store: S) -> Result<(), BoxError>
where
    S: Cursors + Clone + Send + Sync + 'static,
{
    let events = setting("EVC_BENCH_EVENTS", 100_000);
    let batch = setting("EVC_BENCH_BATCH", 1_000);
    append(&store, events).await?;
    let all = feed_of(&store, events).await?;
    let baseline =
        timed_on_a_stream(|stream| async move { publish(&stream, &all, batch).await }).await?;
    let relayed = timed_on_a_stream(|stream| {
        let store = store.clone();
        async move {
            let config = RelayConfig::new("bench", "bench")
                .subject_prefix(stream.prefix.clone())
                .batch(u32::try_from(batch).unwrap_or(u32::MAX))
                .poll(Duration::from_millis(1));
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let relay = Relay::new(store.clone(), stream.jetstream.clone(), config);
            let started = Instant::now();
            let task = tokio::spawn(relay.run(async move {
                let _ = stopped.await;
            }));
            caught_up(&store, &stream, "bench", events as u64).await?;
            let elapsed = started.elapsed();
            let _ = stop.send(());
            let stats = task.await??;
            assert_eq!(stats.published, events as u64, "{stats:?}");
            Ok(elapsed)
        }
    })
    .await?;
    let rate = |elapsed: Duration| events as f64 / elapsed.as_secs_f64();
    println!(
        "| {name} | {:.0} | {:.0} | {:.2}x |",
        rate(baseline),
        rate(relayed),
        rate(relayed) / rate(baseline)
    );
    Ok(())
}

/// Runs `timed` on a fresh stream; the time it measured.
async fn timed_on_a_stream<F, Fut>(timed: F) -> Result<Duration, BoxError>
where
    F: FnOnce(TestStream) -> Fut,
    Fut: std::future::Future<Output = Result<Duration, BoxError>>,
{
    let mut elapsed = Duration::ZERO;
    let measured = &mut elapsed;
    with_stream(None, |stream| async move {
        *measured = timed(stream).await?;
        Ok(())
    })
    .await?;
    Ok(elapsed)
}

/// Publishes `events` as the relay would, `batch` at a time, waiting for each batch's acks.
async fn publish(
    stream: &TestStream,
    events: &[FeedEvent],
    batch: usize,
) -> Result<Duration, BoxError> {
    let started = Instant::now();
    for chunk in events.chunks(batch.max(1)) {
        let mut acks = Vec::with_capacity(chunk.len());
        for event in chunk {
            acks.push(
                stream
                    .jetstream
                    .send_publish(
                        subject(&stream.prefix, 1, event),
                        message(event, HeaderStyle::Evc)?,
                    )
                    .await?,
            );
        }
        for ack in acks {
            ack.await?;
        }
    }
    Ok(started.elapsed())
}

/// Appends `n` iu.born events, 1,000 per transaction (not timed).
async fn append<S: Store>(store: &S, n: usize) -> Result<(), BoxError> {
    let trace = TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)?;
    let mut left = n;
    while left > 0 {
        let take = left.min(1_000);
        let events = (0..take)
            .map(|_| {
                let payload = serde_json::json!({
                    "born_at": "2026-01-01T00:00:00Z",
                    "governance_state": "draft",
                    "iu_unit_id": Uuid::now_v7().to_string(),
                    "iu_version_id": Uuid::now_v7().to_string(),
                });
                let key = evc::order_key_part(&payload["iu_unit_id"]);
                Ok(OutgoingEvent::new("iu.born", "1.0.0", Some(key), &trace, &payload)?.into())
            })
            .collect::<Result<Vec<NewEvent>, BoxError>>()?;
        let mut tx = store.begin().await?;
        store.append_batch(&mut tx, events).await?;
        tx.commit().await?;
        left -= take;
    }
    Ok(())
}
