//! What the relay tests share: an outbox per test on each store (a fresh PostgreSQL database
//! with the generated migrations, or a fresh SQLite file), events appended through the
//! reference contracts' producers, and a JetStream stream of its own per test on the NATS
//! server at `EVC_NATS_URL` (default `127.0.0.1:4222`), deleted afterwards; one small stream,
//! `EVC_RELAY_TEST_KEEPER`, stays on the server (see `keep_account_store`).
//!
//! When PostgreSQL or NATS cannot be reached a test says so and skips, except under
//! `CI=true`, where that fails.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_nats::jetstream::{self, Context};
use evc::uuid::Uuid;
use evc::{
    AppendOptions, Cursors, FeedEvent, FeedPosition, Observe, PgStore, SqliteStore, Store,
    TraceContext,
};
use evc_generated::payloads::{IuBornV1, IuBornV1GovernanceState};
use evc_generated::producers::emit_iu_born_v1;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};

/// Each test body named, on a fresh PostgreSQL database and a fresh SQLite file: a module
/// `postgres` and a module `sqlite` of tests calling `crate::<name>(store)`.
// The benchmark shares this module and runs no test bodies.
#[allow(unused_macros)]
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> $crate::support::TestResult {
                    $crate::support::with_postgres(|store: evc::PgStore| $crate::$name(store)).await
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> $crate::support::TestResult {
                    $crate::support::with_sqlite(|store: evc::SqliteStore| $crate::$name(store)).await
                }
            )*
        }
    };
}

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type TestResult = Result<(), BoxError>;

/// Whether the tests run under `CI=true`, where a missing service fails them.
fn ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value.eq_ignore_ascii_case("true"))
}

/// A stream of its own on the test's NATS server: its name, its subject prefix, and the
/// JetStream context.
pub struct TestStream {
    pub jetstream: Context,
    pub name: String,
    pub prefix: String,
}

impl TestStream {
    /// Every message in the stream, in stream order.
    pub async fn messages(
        &self,
    ) -> Result<Vec<async_nats::jetstream::message::StreamMessage>, BoxError> {
        let mut stream = self.jetstream.get_stream(&self.name).await?;
        let last = stream.info().await?.state.last_sequence;
        let mut messages = Vec::new();
        for sequence in 1..=last {
            messages.push(stream.get_raw_message(sequence).await?);
        }
        Ok(messages)
    }
}

/// Runs `check` with a fresh stream taking `<prefix>.>`, remembering message ids for 10
/// minutes, with `limit` messages at most (refusing more) when given; deleted afterwards.
pub async fn with_stream<F, Fut>(limit: Option<i64>, check: F) -> TestResult
where
    F: FnOnce(TestStream) -> Fut,
    Fut: Future<Output = TestResult>,
{
    let url = std::env::var("EVC_NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".to_owned());
    let client = match tokio::time::timeout(Duration::from_secs(5), async_nats::connect(&url)).await
    {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => return unreachable_nats(&url, &error.to_string()),
        Err(_) => return unreachable_nats(&url, "no answer in 5 s"),
    };
    let jetstream = jetstream::new(client);
    let id = Uuid::now_v7().simple().to_string();
    let name = format!("EVC_RELAY_TEST_{id}");
    let prefix = format!("evctest{id}");
    let mut config = jetstream::stream::Config {
        name: name.clone(),
        subjects: vec![format!("{prefix}.>")],
        duplicate_window: Duration::from_secs(600),
        ..Default::default()
    };
    if let Some(limit) = limit {
        config.max_messages = limit;
        config.discard = jetstream::stream::DiscardPolicy::New;
    }
    keep_account_store(&jetstream).await?;
    jetstream.create_stream(config).await?;
    let result = check(TestStream {
        jetstream: jetstream.clone(),
        name: name.clone(),
        prefix,
    })
    .await;
    jetstream.delete_stream(&name).await?;
    result
}

/// Makes sure one stream outlives every test's own. nats-server 2.9 removes the account's
/// store directory when its last stream is deleted, and a stream another test creates at that
/// moment fails (JetStream error 10049); while this stream stays, the directory does too.
async fn keep_account_store(jetstream: &Context) -> TestResult {
    jetstream
        .get_or_create_stream(jetstream::stream::Config {
            name: "EVC_RELAY_TEST_KEEPER".to_owned(),
            subjects: vec!["evctestkeeper.unused".to_owned()],
            max_messages: 1,
            ..Default::default()
        })
        .await?;
    Ok(())
}

fn unreachable_nats(url: &str, error: &str) -> TestResult {
    assert!(!ci(), "CI=true and NATS at {url} is unreachable: {error}");
    eprintln!("skipped: NATS at {url} is unreachable ({error}); set EVC_NATS_URL");
    Ok(())
}

/// Runs `check` on a [`PgStore`] of the reference registry over a fresh database with the
/// generated migrations, dropped afterwards.
pub async fn with_postgres<F, Fut>(check: F) -> TestResult
where
    F: FnOnce(PgStore) -> Fut + Send + 'static,
    Fut: Future<Output = TestResult> + Send + 'static,
{
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://root@localhost/test".to_owned());
    let mut admin = match PgConnection::connect(&url).await {
        Ok(connection) => connection,
        Err(error) => {
            assert!(
                !ci(),
                "CI=true and PostgreSQL at {url} is unreachable: {error}"
            );
            eprintln!("skipped: PostgreSQL at {url} is unreachable ({error}); set DATABASE_URL");
            return Ok(());
        }
    };
    let database = format!("evc_relay_{}", Uuid::now_v7().simple());
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await?;
    let options = PgConnectOptions::from_str(&url)?.database(&database);
    // Its own task, so a failed assertion still drops the database.
    let outcome = tokio::spawn(async move {
        let pool = PgPoolOptions::new()
            .max_connections(6)
            .connect_with(options)
            .await?;
        let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
        Migrator::new(migrations.as_path())
            .await?
            .run(&pool)
            .await?;
        let store = PgStore::start(pool.clone(), evc_generated::REGISTRY).await?;
        let result = check(store).await;
        pool.close().await;
        result
    })
    .await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    admin.close().await?;
    match outcome {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(error.into()),
    }
}

/// Runs `check` on a [`SqliteStore`] of the reference registry over a fresh file.
pub async fn with_sqlite<F, Fut>(check: F) -> TestResult
where
    F: FnOnce(SqliteStore) -> Fut + Send + 'static,
    Fut: Future<Output = TestResult> + Send + 'static,
{
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(
        dir.path().join("outbox.db").to_string_lossy(),
        evc_generated::REGISTRY,
    )
    .await?;
    let result = check(store.clone()).await;
    store.close().await;
    result
}

/// Appends `n` `iu.born` events in one transaction and commits.
pub async fn append<S: Store>(store: &S, n: usize) -> TestResult {
    let trace = TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)?;
    let mut tx = store.begin().await?;
    {
        let mut publisher = store.publisher(&mut tx, AppendOptions::new());
        for _ in 0..n {
            let born = IuBornV1::new(
                Uuid::now_v7(),
                Uuid::now_v7(),
                IuBornV1GovernanceState::Draft,
                evc::chrono::Utc::now(),
            );
            emit_iu_born_v1(&mut publisher, &trace, &born).await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Appends `rounds` rounds of one `iu.born` event per key of `keys`, a transaction per round,
/// each event's `axis_count` its round.
pub async fn append_rounds<S: Store>(store: &S, keys: &[Uuid], rounds: u64) -> TestResult {
    let trace = TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)?;
    for round in 0..rounds {
        let mut tx = store.begin().await?;
        {
            let mut publisher = store.publisher(&mut tx, AppendOptions::new());
            for key in keys {
                let born = IuBornV1::new(
                    *key,
                    Uuid::now_v7(),
                    IuBornV1GovernanceState::Draft,
                    evc::chrono::Utc::now(),
                )
                .with_axis_count(round);
                emit_iu_born_v1(&mut publisher, &trace, &born).await?;
            }
        }
        tx.commit().await?;
    }
    Ok(())
}

/// The whole feed, in feed order.
pub async fn feed<S: Observe>(store: &S) -> Result<Vec<FeedEvent>, BoxError> {
    let mut events = Vec::new();
    let mut after = FeedPosition::default();
    loop {
        let page = store.feed(after, 500).await?;
        let Some(last) = page.last() else {
            return Ok(events);
        };
        after = last.position;
        events.extend(page);
    }
}

/// The whole feed once it holds `expected` events: on PostgreSQL the feed holds back events
/// while an older write transaction anywhere in the cluster is open.
pub async fn feed_of<S: Observe>(store: &S, expected: usize) -> Result<Vec<FeedEvent>, BoxError> {
    for _ in 0..1_200 {
        let events = feed(store).await?;
        if events.len() >= expected {
            return Ok(events);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("the feed never held {expected} events").into())
}

/// Waits (up to two minutes) until `stream` holds `expected` messages and cursor `name` stands
/// at the feed's head. Both, because on PostgreSQL the head lags while any write transaction in
/// the cluster is open (another test's, say): a cursor at a lagging head is not done. Once the
/// stream holds every event the relay has seen them all, and the head never moves back.
pub async fn caught_up<S: Cursors>(
    store: &S,
    stream: &TestStream,
    name: &str,
    expected: u64,
) -> TestResult {
    for _ in 0..12_000 {
        let mut handle = stream.jetstream.get_stream(&stream.name).await?;
        if handle.info().await?.state.messages == expected {
            let head = store.feed_head().await?;
            if store
                .cursor(name)
                .await?
                .is_some_and(|c| c.position == head)
            {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(
        format!("cursor {name} never published {expected} events and reached the feed's head")
            .into(),
    )
}

/// Runs a relay of cursor `jetstream` under `settings` until `stream` holds `expected`
/// messages and the cursor reached the feed's head ([`caught_up`]), then stops it.
pub async fn relay_until<S>(
    store: &S,
    stream: &TestStream,
    settings: &evc_relay::RelaySettings,
    expected: u64,
) -> TestResult
where
    S: Cursors + Clone + Send + Sync + 'static,
{
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = evc_relay::RelayConfig::new("jetstream", "r1")
        .settings(settings)
        .poll(Duration::from_millis(10));
    let relay = evc_relay::Relay::new(store.clone(), stream.jetstream.clone(), config);
    let relay = tokio::spawn(relay.run(async move {
        let _ = stopped.await;
    }));
    caught_up(store, stream, "jetstream", expected).await?;
    let _ = stop.send(());
    relay.await??;
    Ok(())
}

/// The `Nats-Msg-Id` of each message, in stream order.
pub fn message_ids(messages: &[async_nats::jetstream::message::StreamMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|m| {
            m.headers
                .get("Nats-Msg-Id")
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default()
        })
        .collect()
}

/// The event ids of `events`, as strings.
pub fn event_ids(events: &[FeedEvent]) -> Vec<String> {
    events.iter().map(|e| e.event_id.to_string()).collect()
}
