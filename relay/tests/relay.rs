//! The relay against the machine's NATS JetStream server, on both stores: every event once, in
//! feed order, with its envelope; a relay that published but never moved its cursor; two
//! relays racing for one cursor; relays stopped at any moment; a stream refusing messages.

#[macro_use]
mod support;

use std::time::Duration;

use evc::Cursors;
use evc_relay::{Relay, RelayConfig, RelayStats, headers, message, subject};
use support::{
    TestResult, TestStream, append, caught_up, event_ids, feed, feed_of, message_ids, with_stream,
};
use tokio::sync::oneshot;

on_both_stores!(
    relays_every_event_once_in_feed_order_with_its_envelope,
    a_relay_that_published_without_moving_its_cursor_repeats_nothing,
    two_relays_racing_publish_each_event_once_in_order,
    relays_stopped_at_any_moment_lose_and_repeat_nothing,
    a_refused_publish_stalls_the_relay_and_loses_nothing,
);

const CURSOR: &str = "jetstream";

fn config(stream: &TestStream, owner: &str) -> RelayConfig {
    RelayConfig::new(CURSOR, owner)
        .subject_prefix(stream.prefix.clone())
        .batch(10)
        .poll(Duration::from_millis(10))
}

/// A running relay and the way to stop it.
struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<RelayStats, evc_relay::RelayError>>,
}

fn start<S: Cursors + Send + Sync + 'static>(
    store: S,
    stream: &TestStream,
    config: RelayConfig,
) -> Running {
    let (stop, stopped) = oneshot::channel::<()>();
    let relay = Relay::new(store, stream.jetstream.clone(), config);
    let task = tokio::spawn(relay.run(async move {
        let _ = stopped.await;
    }));
    Running { stop, task }
}

impl Running {
    async fn stop(self) -> Result<RelayStats, support::BoxError> {
        let _ = self.stop.send(());
        Ok(self.task.await??)
    }
}

async fn relays_every_event_once_in_feed_order_with_its_envelope<S>(store: S) -> TestResult
where
    S: Cursors + Clone + Send + Sync + 'static,
{
    with_stream(None, |stream| async move {
        for n in [7, 11, 7] {
            append(&store, n).await?;
        }
        let relay = start(store.clone(), &stream, config(&stream, "r1"));
        caught_up(&store, &stream, CURSOR, 25).await?;
        let stats = relay.stop().await?;
        assert_eq!((stats.published, stats.duplicates, stats.takes), (25, 0, 1));
        // A relay that stops lets its cursor go: another takes it at once, where it was.
        let next = store
            .take_cursor(CURSOR, "r2", Duration::from_secs(30))
            .await?
            .ok_or("the stopped relay released the cursor")?;
        assert_eq!(next.position, store.feed_head().await?);

        let events = feed(&store).await?;
        let messages = stream.messages().await?;
        assert_eq!(
            message_ids(&messages),
            event_ids(&events),
            "feed order, each once"
        );
        for (event, message) in events.iter().zip(&messages) {
            assert_eq!(message.subject.as_str(), subject(&stream.prefix, 1, event));
            assert_eq!(
                message.subject.as_str(),
                format!("{}.0.iu.born.v1", stream.prefix)
            );
            let body: serde_json::Value = serde_json::from_slice(&message.payload)?;
            assert_eq!(body, event.payload, "the payload is the body");
            let expected = headers(event, evc_relay::HeaderStyle::Evc);
            for name in [
                "Evc-Event-Id",
                "Evc-Event-Type",
                "Evc-Schema-Version",
                "Evc-Trace-Id",
                "Evc-Feed-Position",
            ] {
                assert_eq!(
                    message.headers.get(name).map(|v| v.as_str()),
                    expected.get(name).map(|v| v.as_str()),
                    "{name}"
                );
            }
            assert_eq!(
                message
                    .headers
                    .get("Evc-Feed-Position")
                    .map(|v| v.as_str().to_owned()),
                Some(event.position.to_string())
            );
        }
        Ok(())
    })
    .await
}

/// A relay that died after its publishes were acknowledged and before its cursor moved: the
/// next relay sends the same events again from the stored cursor, and the broker keeps one of
/// each.
async fn a_relay_that_published_without_moving_its_cursor_repeats_nothing<S>(store: S) -> TestResult
where
    S: Cursors + Clone + Send + Sync + 'static,
{
    with_stream(None, |stream| async move {
        append(&store, 12).await?;
        let events = feed_of(&store, 12).await?;
        // What the dead relay published: the first 8, as a relay publishes them.
        for event in &events[..8] {
            let ack = stream
                .jetstream
                .send_publish(
                    subject(&stream.prefix, 1, event),
                    message(event, evc_relay::HeaderStyle::Evc)?,
                )
                .await?;
            assert!(!ack.await?.duplicate);
        }
        let relay = start(store.clone(), &stream, config(&stream, "r2"));
        caught_up(&store, &stream, CURSOR, 12).await?;
        let stats = relay.stop().await?;
        assert_eq!((stats.published, stats.duplicates), (4, 8));
        assert_eq!(message_ids(&stream.messages().await?), event_ids(&events));
        Ok(())
    })
    .await
}

/// Two relays with a short lease race for one cursor while events keep coming, and between
/// batches the cursor is taken from under its holder (as a second process configured with the
/// same owner would): the holder is fenced, and still the stream holds every event once, in
/// feed order.
async fn two_relays_racing_publish_each_event_once_in_order<S>(store: S) -> TestResult
where
    S: Cursors + Clone + Send + Sync + 'static,
{
    with_stream(None, |stream| async move {
        let racing = |owner: &str| {
            let mut config = config(&stream, owner).lease(Duration::from_millis(150));
            config.batch = 3;
            start(store.clone(), &stream, config)
        };
        let (a, b) = (racing("a"), racing("b"));
        for _ in 0..15 {
            append(&store, 4).await?;
            // Take the cursor under its holder's own name: a new token the holder does not
            // know, so its next move is refused.
            if let Some(holder) = store.cursor(CURSOR).await? {
                store
                    .take_cursor(CURSOR, &holder.owner, Duration::from_millis(150))
                    .await?;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        caught_up(&store, &stream, CURSOR, 60).await?;
        let (a, b) = (a.stop().await?, b.stop().await?);
        assert_eq!(a.published + b.published, 60, "{a:?} {b:?}");
        assert!(a.fenced + b.fenced >= 1, "{a:?} {b:?}");
        assert_eq!(
            message_ids(&stream.messages().await?),
            event_ids(&feed(&store).await?)
        );
        Ok(())
    })
    .await
}

/// Relays dropped at arbitrary moments (mid-publish, between the acknowledgements and the
/// cursor's move) while events keep coming, then one that runs to the end: nothing lost,
/// nothing stored twice, feed order kept.
async fn relays_stopped_at_any_moment_lose_and_repeat_nothing<S>(store: S) -> TestResult
where
    S: Cursors + Clone + Send + Sync + 'static,
{
    with_stream(None, |stream| async move {
        for round in 0..12_u64 {
            append(&store, 5).await?;
            let relay = Relay::new(
                store.clone(),
                stream.jetstream.clone(),
                config(&stream, "r1"),
            );
            // Dropped after 1 to 12 ms: wherever it was.
            let _ = tokio::time::timeout(
                Duration::from_millis(1 + round),
                relay.run(std::future::pending()),
            )
            .await;
        }
        let relay = start(store.clone(), &stream, config(&stream, "r1"));
        caught_up(&store, &stream, CURSOR, 60).await?;
        relay.stop().await?;
        let messages = stream.messages().await?;
        assert_eq!(message_ids(&messages), event_ids(&feed(&store).await?));
        assert_eq!(messages.len(), 60);
        Ok(())
    })
    .await
}

/// A stream that refuses messages (full, refusing new ones) stalls the relay: its cursor stays
/// before the first refused event and it tries again; once the limit is lifted it goes on, and
/// the stream holds every event once.
async fn a_refused_publish_stalls_the_relay_and_loses_nothing<S>(store: S) -> TestResult
where
    S: Cursors + Clone + Send + Sync + 'static,
{
    with_stream(Some(5), |stream| async move {
        append(&store, 9).await?;
        let events = feed_of(&store, 9).await?;
        let mut config = config(&stream, "r1");
        config.batch = 2;
        let relay = start(store.clone(), &stream, config);
        // The first two batches (4 events) go through; the third's second event is refused.
        let mut stalled = false;
        for _ in 0..600 {
            let cursor = store.cursor(CURSOR).await?;
            if cursor.is_some_and(|c| c.position == events[3].position)
                && stream.messages().await?.len() == 5
            {
                stalled = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(stalled, "the relay should stall after the fifth message");
        // The stalled relay records its failed rounds in the cursor, which the status report
        // shows as a problem (no payload in it).
        let mut failing = None;
        for _ in 0..600 {
            failing = store.cursor(CURSOR).await?.and_then(|c| c.failing);
            if failing.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let failing = failing.ok_or("the cursor reports failing")?;
        assert!(failing.contains("publish"), "{failing}");
        let report = store.status(Duration::from_secs(60)).await?;
        let problems: Vec<String> = report
            .problems(Duration::from_secs(60))
            .iter()
            .map(ToString::to_string)
            .filter(|p| p.starts_with("relay jetstream: "))
            .collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("events behind, failing: "),
            "{problems:?}"
        );
        assert!(!problems[0].contains("governance_state"), "{problems:?}");
        assert_eq!(
            store.cursor(CURSOR).await?.map(|c| c.position),
            Some(events[3].position),
            "the cursor never passes a refused event"
        );

        let mut info = stream.jetstream.get_stream(&stream.name).await?;
        let mut config = info.info().await?.config.clone();
        config.max_messages = -1;
        stream.jetstream.update_stream(&config).await?;
        caught_up(&store, &stream, CURSOR, 9).await?;
        let stats = relay.stop().await?;
        assert!(stats.failures >= 1, "{stats:?}");
        assert_eq!(message_ids(&stream.messages().await?), event_ids(&events));
        let cursor = store.cursor(CURSOR).await?.ok_or("stored")?;
        assert_eq!(
            (cursor.failing, cursor.published),
            (None, 9),
            "progress clears failing"
        );
        assert!(cursor.failed_rounds >= 1);
        Ok(())
    })
    .await
}

/// On SQLite a commit that appends wakes an idle relay: with an hour between polls, events
/// appended after the relay went idle still reach the stream (only the wake-up brings them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_an_append_wakes_an_idle_relay() -> TestResult {
    support::with_sqlite(|store: evc::SqliteStore| async move {
        with_stream(None, |stream| async move {
            let config = config(&stream, "r1").poll(Duration::from_secs(3_600));
            let relay = start(store.clone(), &stream, config);
            // Taken: the relay ran its first round, found nothing, and went idle.
            for _ in 0..1_200 {
                if store.cursor(CURSOR).await?.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            for round in 1..=3u64 {
                append(&store, 2).await?;
                caught_up(&store, &stream, CURSOR, 2 * round).await?;
            }
            let stats = relay.stop().await?;
            assert_eq!(stats.published, 6, "{stats:?}");
            Ok(())
        })
        .await
    })
    .await
}
