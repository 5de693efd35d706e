//! `/api/v1/evidence` on both stores: the same signals the store reports, for any reader, and
//! a bad window refused; `/api/v1/evidence/snapshots`: what a dispatcher's round recorded.
//! Every answer is checked against the OpenAPI document.

mod support;

use std::time::Duration;

use evc::{EvidenceQuery, Observe, PgStore, SqliteStore, Store};
use evc_serve::Outbox;
use reqwest::StatusCode;

use support::{Client, READER, Server, TestResult};

const EVIDENCE: &str = "/api/v1/evidence";
const SNAPSHOTS: &str = "/api/v1/evidence/snapshots";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_serves_the_evidence() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        let outbox = Outbox::Postgres(Box::new(evc_serve::PgStores::single(store.clone())));
        evidence_over_http(outbox, store).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_serves_the_evidence() -> TestResult {
    support::with_sqlite(|store: SqliteStore| async move {
        evidence_over_http(Outbox::Sqlite(store.clone()), store).await
    })
    .await
}

async fn evidence_over_http<S: Store + Observe>(outbox: Outbox, store: S) -> TestResult {
    support::seed(&store).await?;
    let server = Server::start(outbox).await?;
    let reader = Client::new(&server, Some(READER)).await?;

    let path = format!("{EVIDENCE}?window_s=3600&correlation_s=60&min_count=1");
    let (status, view) = reader.get(&server, EVIDENCE, &path).await?;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(
        (view["window_s"].as_f64(), view["min_count"].as_u64()),
        (Some(3600.0), Some(1))
    );
    // The store's own report of the same window lists the same pairs.
    let report = store
        .evidence(&EvidenceQuery::over(Duration::from_secs(3_600)).min_count(1))
        .await?;
    let pairs: Vec<(String, String, u64)> = view["co_triggered"]
        .as_array()
        .ok_or("no co_triggered")?
        .iter()
        .map(|pair| {
            (
                pair["first"].as_str().unwrap_or_default().to_owned(),
                pair["second"].as_str().unwrap_or_default().to_owned(),
                pair["count"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    let expected: Vec<(String, String, u64)> = report
        .co_triggered
        .iter()
        .map(|pair| (pair.first.clone(), pair.second.clone(), pair.traces))
        .collect();
    assert!(
        !expected.is_empty(),
        "the seed appends several event types in one trace"
    );
    assert_eq!(pairs, expected);

    for bad in [
        "window_s=0",
        "correlation_s=0",
        "min_count=0",
        "window_s=many",
    ] {
        let (status, _) = reader
            .get(&server, EVIDENCE, &format!("{EVIDENCE}?{bad}"))
            .await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }

    // The reference contracts record evidence daily: none yet, then the round's snapshot.
    let (status, view) = reader.get(&server, SNAPSHOTS, SNAPSHOTS).await?;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["snapshots"], serde_json::json!([]));
    let round = store.record_evidence().await?;
    let slot = round.recorded.ok_or("the round recorded nothing")?;
    let (status, view) = reader
        .get(&server, SNAPSHOTS, &format!("{SNAPSHOTS}?limit=5"))
        .await?;
    assert_eq!(status, StatusCode::OK, "{view}");
    let snapshots = view["snapshots"].as_array().ok_or("no snapshots")?;
    assert_eq!(snapshots.len(), 1, "{view}");
    assert_eq!(snapshots[0]["slot"].as_f64(), Some(slot));
    let recording = store
        .registry()
        .evidence_recording
        .ok_or("the reference contracts record evidence")?;
    assert_eq!(
        snapshots[0]["report"]["window_s"].as_f64(),
        Some(Duration::from_millis(recording.window_ms).as_secs_f64())
    );
    // The signals the store reports for the recording's query, as recorded.
    let expected = store.evidence(&recording.query()).await?;
    assert_eq!(
        snapshots[0]["report"]["min_count"].as_u64(),
        Some(u64::from(recording.min_count))
    );
    for (signal, count) in [
        ("co_triggered", expected.co_triggered.len()),
        ("failing_together", expected.failing_together.len()),
        ("chronic", expected.chronic.len()),
        ("escalations", expected.escalations.len()),
    ] {
        assert_eq!(
            snapshots[0]["report"][signal].as_array().map(Vec::len),
            Some(count),
            "{signal}: {view}"
        );
    }
    for bad in ["limit=0", "limit=1001", "limit=some"] {
        let (status, _) = reader
            .get(&server, SNAPSHOTS, &format!("{SNAPSHOTS}?{bad}"))
            .await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
    Ok(())
}
