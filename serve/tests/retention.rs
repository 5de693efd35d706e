//! `/api/v1/retention` on both stores: the periods of the registry the server runs on and the
//! newest purges, as their audit rows record them. Every answer is checked against the OpenAPI
//! document.

mod support;

use std::time::{Duration, SystemTime};

use evc::{Operate, PgStore, SqliteStore, Store};
use evc_serve::Outbox;
use reqwest::StatusCode;

use support::{Client, READER, Server, TestResult};

const RETENTION: &str = "/api/v1/retention";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_serves_the_retention() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        let outbox = Outbox::Postgres(Box::new(evc_serve::PgStores::single(store.clone())));
        retention_over_http(outbox, store).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_serves_the_retention() -> TestResult {
    support::with_sqlite(|store: SqliteStore| async move {
        retention_over_http(Outbox::Sqlite(store.clone()), store).await
    })
    .await
}

async fn retention_over_http<S: Store + Operate>(outbox: Outbox, store: S) -> TestResult {
    support::seed(&store).await?;
    let server = Server::start(outbox).await?;
    let reader = Client::new(&server, Some(READER)).await?;

    // The reference contracts' periods; no purge yet.
    let (status, view) = reader.get(&server, RETENTION, RETENTION).await?;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["declared"], true);
    let day_ms = 86_400_000_u64;
    assert_eq!(view["events_ms"]["cron.tick.review_sweep"], 14 * day_ms);
    assert_eq!(view["events_ms"]["iu.born"], 400 * day_ms);
    assert_eq!(view["attempts_ms"], 90 * day_ms);
    assert_eq!(view["effects_ms"], 7 * day_ms);
    assert_eq!(view["purges"], serde_json::json!([]));

    // Two purges, the second finding nothing left: listed newest first, with their counts.
    // (The seeded events keep deliveries open, so the first removes their finished attempts.)
    let later = SystemTime::now() + Duration::from_secs(3_000 * 86_400);
    let first = store
        .purge_expired(later, "retention test", "ops@example.com", true)
        .await?;
    assert!(first.attempts > 0, "{first:?}");
    let second = store
        .purge_expired(later, "again", "ops@example.com", true)
        .await?;
    assert_eq!(second.total(), 0);
    let (status, view) = reader
        .get(&server, RETENTION, &format!("{RETENTION}?limit=1"))
        .await?;
    assert_eq!(status, StatusCode::OK, "{view}");
    let purges = view["purges"].as_array().ok_or("no purges")?;
    assert_eq!(purges.len(), 1, "{view}");
    assert_eq!(purges[0]["purge_id"], second.purge_id.ok_or("no id")?);
    assert_eq!(purges[0]["reason"], "again");
    let (_, view) = reader.get(&server, RETENTION, RETENTION).await?;
    let oldest = &view["purges"][1];
    assert_eq!(oldest["purge_id"], first.purge_id.ok_or("no id")?);
    assert_eq!(oldest["ledger"], "retention");
    assert_eq!(oldest["actor"], "ops@example.com");
    assert_eq!(oldest["rows"]["events"], first.events);
    assert_eq!(oldest["rows"]["attempts"], first.attempts);

    // A bad limit is the caller's error; no token, no answer.
    let (status, _) = reader
        .get(&server, RETENTION, &format!("{RETENTION}?limit=0"))
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let anonymous = Client::new(&server, None).await?;
    let (status, _) = anonymous.get(&server, RETENTION, RETENTION).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    Ok(())
}
