//! A consumer's cut-over gate over HTTP on both stores: operators read the report, the legacy
//! path records its outcomes, differences are explained, and a move to `live` the gate refuses
//! answers 409 with the reasons and changes nothing. Every answer is checked against the
//! OpenAPI document.

mod support;

use evc::{PgStore, SqliteStore, Store};
use evc_generated::payloads::{CronTickReviewSweepV1, CronTickReviewSweepV1Schedule};
use evc_generated::producers::emit_cron_tick_review_sweep_v1;
use evc_serve::Outbox;
use reqwest::StatusCode;
use serde_json::json;

use support::{BoxError, Client, OPERATOR, READER, Server, TestResult};

/// The reference consumer with a gate (30 compared deliveries over 3 days).
const GATED: &str = "worker.ai.review_suggest";
const REPORT: &str = "/api/v1/consumers/{name}/cutover";
const EXPLAIN: &str = "/api/v1/consumers/{name}/explanations";
const LEGACY: &str = "/api/v1/consumers/{name}/legacy-outcomes";
const MODE: &str = "/api/v1/consumers/{name}/mode";

fn at(template: &str) -> String {
    template.replace("{name}", GATED)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_serves_the_cutover_gate() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        let outbox = Outbox::Postgres(Box::new(evc_serve::PgStores::single(store.clone())));
        gate_over_http(outbox, store).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_serves_the_cutover_gate() -> TestResult {
    support::with_sqlite(|store: SqliteStore| async move {
        gate_over_http(Outbox::Sqlite(store.clone()), store).await
    })
    .await
}

/// Appends a `cron.tick.review_sweep` (an event the gated consumer receives); its id.
async fn tick<S: Store>(store: &S) -> Result<String, BoxError> {
    let trace = evc::TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)?;
    let payload = CronTickReviewSweepV1::new(
        CronTickReviewSweepV1Schedule::ReviewSweep,
        evc::chrono::Utc::now(),
    );
    let mut tx = store.begin().await?;
    let receipt = {
        let mut publisher = store.publisher(&mut tx, evc::AppendOptions::new());
        emit_cron_tick_review_sweep_v1(&mut publisher, &trace, &payload).await?
    };
    tx.commit().await?;
    Ok(receipt.event_id.to_string())
}

async fn gate_over_http<S: Store + evc::Operate>(outbox: Outbox, store: S) -> TestResult {
    let seeded = support::seed(&store).await?;
    let event = tick(&store).await?;
    let server = Server::start(outbox).await?;
    let reader = Client::new(&server, Some(READER)).await?;
    let bob = Client::new(&server, Some(OPERATOR)).await?;

    // Everyone sees the gate and the progress toward it in counts.
    let one = "/api/v1/consumers/{name}";
    let (status, consumer) = reader.get(&server, one, &at(one)).await?;
    assert_eq!(status, StatusCode::OK, "{consumer}");
    assert_eq!(consumer["cutover_gate"]["min_reconciled"], 30, "{consumer}");
    assert_eq!(consumer["cutover_gate"]["compared"], 0, "{consumer}");
    let (_, other) = reader
        .get(&server, one, &one.replace("{name}", support::CONSUMER))
        .await?;
    assert_eq!(other["cutover_gate"], serde_json::Value::Null, "{other}");

    // Operators only: the report counts what the shadow handler intended.
    let (status, _) = reader.get(&server, REPORT, &at(REPORT)).await?;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, report) = bob.get(&server, REPORT, &at(REPORT)).await?;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["gate"]["min_reconciled"], 30);
    assert_eq!(report["gate"]["min_span_ms"], 259_200_000_u64);
    assert_eq!(report["passed"], false);
    assert_eq!(report["shortfalls"].as_array().map(Vec::len), Some(2));

    // The legacy path records what it did, once per event, for events the consumer receives.
    let outcome = json!({
        "event_id": event,
        "effects": [{ "effect_key": "suggestion:1", "outcome_digest": "ab" }],
    });
    let (status, recorded) = bob.post(&server, LEGACY, &at(LEGACY), &outcome).await?;
    assert_eq!(
        (status, &recorded["recorded"]),
        (StatusCode::OK, &json!(true))
    );
    let (_, again) = bob.post(&server, LEGACY, &at(LEGACY), &outcome).await?;
    assert_eq!(again["recorded"], false);
    for body in [
        json!({ "event_id": seeded.acked.to_string(), "effects": [] }),
        json!({ "event_id": "not a uuid", "effects": [] }),
        json!({ "event_id": event, "effects": [{ "effect_key": " ", "outcome_digest": "ab" }] }),
    ] {
        let (status, problem) = bob.post(&server, LEGACY, &at(LEGACY), &body).await?;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {problem}"
        );
    }

    // No shadow run of the event: nothing to explain.
    let why = json!({ "event_id": event, "reason": "the model found more" });
    let (status, problem) = bob.post(&server, EXPLAIN, &at(EXPLAIN), &why).await?;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");

    // The gate refuses the move, says why, and the mode stays.
    let live = json!({ "mode": "live", "reason": "cut over" });
    let (status, problem) = bob.post(&server, MODE, &at(MODE), &live).await?;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("may not go live yet"), "{detail}");
    assert!(
        detail.contains("0 of the 30 compared deliveries"),
        "{detail}"
    );
    let changes = "/api/v1/consumers/{name}/changes";
    let (_, listed) = reader.get(&server, changes, &at(changes)).await?;
    assert_eq!(listed, json!([]), "a refused move records nothing");
    assert_eq!(
        evc::Operate::consumer_state(&store, GATED).await?.mode,
        evc::ConsumerMode::Shadow
    );
    Ok(())
}
