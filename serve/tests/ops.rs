//! `/healthz`, `/readyz` and `/metrics` on both stores: ready while the store answers with the
//! registry the server was opened on, not ready once it stops answering (the process stays
//! healthy), and metrics that count what the outbox holds.

mod support;

use evc::{PgStore, SqliteStore};
use evc_serve::Outbox;
use reqwest::StatusCode;

use support::{CONSUMER, Client, READER, Server, TestResult, seed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_probes_and_metrics_follow_the_store() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        seed(&store).await?;
        let pool = store.pool().clone();
        probes_follow_the_store(
            Outbox::Postgres(Box::new(evc_serve::PgStores::single(store))),
            async move { pool.close().await },
        )
        .await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_probes_and_metrics_follow_the_store() -> TestResult {
    support::with_sqlite(|store: SqliteStore| async move {
        seed(&store).await?;
        let pool = store.pool().clone();
        probes_follow_the_store(Outbox::Sqlite(store), async move { pool.close().await }).await
    })
    .await
}

async fn probes_follow_the_store(
    outbox: Outbox,
    stop_store: impl Future<Output = ()>,
) -> TestResult {
    let digest = outbox.registry().digest;
    let server = Server::start(outbox).await?;
    let http = reqwest::Client::new();

    let ready = http.get(server.url("/readyz")).send().await?;
    assert_eq!(ready.status(), StatusCode::OK);
    assert!(ready.text().await?.contains(digest));

    let metrics = http.get(server.url("/metrics")).send().await?;
    assert_eq!(metrics.status(), StatusCode::OK);
    assert!(
        metrics
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/openmetrics-text"))
    );
    let text = metrics.text().await?;
    let dead = format!("evc_deliveries{{consumer=\"{CONSUMER}\",status=\"dead\"}} 1");
    assert!(text.contains(&dead), "{dead} in:\n{text}");
    // The seed's handler acked one delivery and dead-lettered the other.
    for outcome in ["acked", "dead"] {
        let line = format!("evc_attempts_total{{consumer=\"{CONSUMER}\",outcome=\"{outcome}\"}} 1");
        assert!(text.contains(&line), "{line} in:\n{text}");
    }
    assert!(text.trim_end().ends_with("# EOF"), "{text}");

    let reader = Client::new(&server, Some(READER)).await?;
    let (status, parity) = reader
        .get(&server, "/api/v1/registry", "/api/v1/registry")
        .await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(parity["digest"], digest);
    assert_eq!(parity["in_parity"], true, "{parity}");

    stop_store.await;
    let ready = http.get(server.url("/readyz")).send().await?;
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    let health = http.get(server.url("/healthz")).send().await?;
    assert_eq!(health.status(), StatusCode::OK);
    let metrics = http.get(server.url("/metrics")).send().await?;
    assert_eq!(metrics.status(), StatusCode::SERVICE_UNAVAILABLE);
    Ok(())
}

/// A server whose registry is not the one its database holds (another deployment migrated the
/// database since): the API lists the difference and the server is not ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_registry_drift_is_listed() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        const OTHER: &str = "0000000000000000000000000000000000000000000000000000000000000000";
        let server = Server::start(support::drifted(&store, OTHER)?).await?;
        let reader = Client::new(&server, Some(READER)).await?;
        let (status, parity) = reader
            .get(&server, "/api/v1/registry", "/api/v1/registry")
            .await?;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(parity["digest"], OTHER);
        assert_eq!(parity["in_parity"], false, "{parity}");
        let differences = parity["differences"].as_array().ok_or("a list")?;
        assert!(
            differences
                .iter()
                .any(|line| line.as_str().is_some_and(|l| l.contains(OTHER))),
            "{parity}"
        );
        let ready = reqwest::get(server.url("/readyz")).await?;
        assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
        Ok(())
    })
    .await
}
