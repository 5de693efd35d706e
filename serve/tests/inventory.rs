//! `/api/v1/consumers/{name}/inventory` on both stores: the events a consumer never received,
//! classified by the rules of the registry the server runs on. Every answer is checked against
//! the OpenAPI document.

mod support;

use evc::{AppendOptions, OutgoingEvent, PgStore, Publish, SqliteStore, Store, TraceContext};
use evc_serve::Outbox;
use reqwest::StatusCode;

use support::{APPROVER, BOB_APPROVER, Client, OPERATOR, READER, Server, TestResult};

const TEMPLATE: &str = "/api/v1/consumers/{name}/inventory";
const PROPOSE: &str = "/api/v1/consumers/{name}/inventory/propose";
const APPLY: &str = "/api/v1/consumers/{name}/inventory/apply";

fn path_of(consumer: &str) -> String {
    format!("/api/v1/consumers/{consumer}/inventory")
}
const SHADOWED: &str = "worker.ai.review_suggest";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_serves_an_inventory() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        let outbox = Outbox::Postgres(Box::new(evc_serve::PgStores::single(store.clone())));
        inventory_over_http(outbox, store).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_serves_an_inventory() -> TestResult {
    support::with_sqlite(|store: SqliteStore| async move {
        inventory_over_http(Outbox::Sqlite(store.clone()), store).await
    })
    .await
}

/// An `iu.edited` 1.0.0 from an older producer: `worker.ai.review_suggest` subscribes to
/// `^1.1`, so it never received it; its rules (`repair: conform`) deliver it as 1.1.0, which
/// accepts the payload unchanged.
async fn inventory_over_http<S: Store>(outbox: Outbox, store: S) -> TestResult {
    support::seed(&store).await?;
    let payload = serde_json::json!({
        "iu_unit_id": "0190a5d4-0000-7000-8000-000000000001",
        "iu_version_id": "0190a5d4-0000-7000-8000-000000000002",
        "previous_version_id": "0190a5d4-0000-7000-8000-000000000003",
        "governance_state": "review",
        "edited_at": "2026-12-01T10:00:00Z",
    });
    let trace = TraceContext::new(support::TRACE, "00f067aa0ba902b7", 1)?;
    let event = OutgoingEvent::new(
        "iu.edited",
        "1.0.0",
        Some(evc::order_key_part(&payload["iu_unit_id"])),
        &trace,
        &payload,
    )?;
    let mut tx = store.begin().await?;
    let receipt = store
        .publisher(&mut tx, AppendOptions::new())
        .publish(event)
        .await?;
    tx.commit().await?;

    let server = Server::start(outbox).await?;
    let operator = Client::new(&server, Some(OPERATOR)).await?;
    let path = format!("/api/v1/consumers/{SHADOWED}/inventory");
    let (status, view) = operator.get(&server, TEMPLATE, &path).await?;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["consumer"], SHADOWED);
    assert_eq!(view["max_age_ms"], 30 * 86_400_000_u64);
    assert_eq!(view["repair"], "conform");
    assert_eq!(view["truncated"], false);
    assert_eq!(
        view["counts"],
        serde_json::json!({"safe": 0, "repair": 1, "quarantine": 0, "expire": 0})
    );
    let item = &view["items"][0];
    assert_eq!(item["event_id"], receipt.event_id.to_string());
    assert_eq!(item["class"], "repair");
    assert_eq!(item["reason"], "version_not_accepted");
    assert_eq!(item["target_version"], "1.1.0");
    let digest = evc::sha256_hex(evc::canonical_json(&payload).as_bytes());
    assert_eq!(item["payload_digest"], digest.as_str());
    assert_eq!(
        item["repaired_digest"],
        digest.as_str(),
        "unchanged by 1.1.0"
    );
    assert_eq!(view["items"].as_array().map(Vec::len), Some(1), "{view}");

    // Bob (operator) proposes it; bob cannot approve his own proposal, eve (approver) can.
    let propose = format!("/api/v1/consumers/{SHADOWED}/inventory/propose");
    let (status, proposed) = operator
        .post(&server, PROPOSE, &propose, &serde_json::json!({}))
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{proposed}");
    assert_eq!(proposed["planned_by"], "bob");
    let digest = proposed["inventory"]["digest"].clone();
    let body = serde_json::json!({
        "digest": digest,
        "reason": "backfill before going live",
        "approval_ref": "CHG-11",
        "idempotency_key": "inv-1",
    });
    let apply = format!("/api/v1/consumers/{SHADOWED}/inventory/apply");
    let bob = Client::new(&server, Some(BOB_APPROVER)).await?;
    let (status, refused) = bob.post(&server, APPLY, &apply, &body).await?;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    let eve = Client::new(&server, Some(APPROVER)).await?;
    let (status, applied) = eve.post(&server, APPLY, &apply, &body).await?;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied["delivered"], 1);
    assert_eq!(applied["counts"]["repair"], 1);
    assert_eq!(applied["repeated"], false);
    let (status, again) = eve.post(&server, APPLY, &apply, &body).await?;
    assert_eq!(
        (status, &again["repeated"]),
        (StatusCode::OK, &serde_json::json!(true))
    );
    let (_, view) = operator.get(&server, TEMPLATE, &path_of(SHADOWED)).await?;
    assert_eq!(view["items"], serde_json::json!([]), "{view}");
    let (status, _) = operator
        .post(&server, PROPOSE, &propose, &serde_json::json!({}))
        .await?;
    assert_eq!(status, StatusCode::CONFLICT, "nothing left to propose");

    // A consumer that received everything has nothing to classify.
    let path = format!("/api/v1/consumers/{}/inventory", support::CONSUMER);
    let (status, view) = operator.get(&server, TEMPLATE, &path).await?;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["items"], serde_json::json!([]));
    assert_eq!(view["repair"], "none");

    // Operators only; a limit out of range and an unknown consumer are the caller's errors.
    let reader = Client::new(&server, Some(READER)).await?;
    let (status, _) = reader.get(&server, TEMPLATE, &path).await?;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = operator
        .get(&server, TEMPLATE, &format!("{path}?limit=0"))
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = operator
        .get(&server, TEMPLATE, "/api/v1/consumers/nobody/inventory")
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    Ok(())
}
