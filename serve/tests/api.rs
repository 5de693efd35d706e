//! `/api/v1` against the OpenAPI document the server publishes, on both stores: every response
//! (successes and problems alike) is validated against the schema the document gives its
//! operation and status, and says what the seeded outbox holds. Callers without a known token
//! are refused before any handler runs.

mod support;

use evc::{PgStore, SqliteStore};
use evc_serve::Outbox;
use reqwest::StatusCode;
use serde_json::Value;

use support::{
    APPROVER, CONSUMER, Client, OPERATOR, READER, Seeded, Server, TRACE, TestResult, seed,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_answers_as_its_openapi_document_says() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        let seeded = seed(&store).await?;
        tick_past_schedules(&store).await?;
        answers_as_documented(
            Outbox::Postgres(Box::new(evc_serve::PgStores::single(store))),
            seeded,
        )
        .await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_answers_as_its_openapi_document_says() -> TestResult {
    support::with_sqlite(|store: SqliteStore| async move {
        let seeded = seed(&store).await?;
        tick_past_schedules(&store).await?;
        answers_as_documented(Outbox::Sqlite(store), seeded).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_callers_without_a_known_token() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        refuses_unknown_callers(Outbox::Postgres(Box::new(evc_serve::PgStores::single(
            store,
        ))))
        .await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refuses_callers_without_a_known_token() -> TestResult {
    support::with_sqlite(|store: SqliteStore| async move {
        refuses_unknown_callers(Outbox::Sqlite(store)).await
    })
    .await
}

/// `text` (RFC 3339) as a clock reading.
fn clock(text: &str) -> Result<std::time::SystemTime, Box<dyn std::error::Error + Send + Sync>> {
    let seconds = u64::try_from(evc::chrono::DateTime::parse_from_rfc3339(text)?.timestamp())?;
    Ok(std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds))
}

/// Two scheduler rounds in the past: the reference schedules start on 2026-11-01 at 01:00 and
/// are ticked at 04:00 (`nightly_rollup` catches up 03:00, `review_sweep` ticks 04:00 and skips
/// the eleven quarters before), and no round after.
async fn tick_past_schedules<S: evc::Store>(
    store: &S,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    store
        .tick_schedules(Some(clock("2026-11-01T01:00:00Z")?))
        .await?;
    let round = store
        .tick_schedules(Some(clock("2026-11-01T04:00:00Z")?))
        .await?;
    assert_eq!((round.ticks, round.skipped), (2, 11));
    Ok(())
}

async fn answers_as_documented(outbox: Outbox, seeded: Seeded) -> TestResult {
    let server = Server::start(outbox).await?;
    let client = Client::new(&server, Some(READER)).await?;
    assert_eq!(client.document["openapi"], "3.1.0");
    // The check below can fail: a dead letter without its fields breaks the document.
    let broken = serde_json::json!([{ "event_id": 7 }]);
    assert!(
        client
            .conforms(
                "get",
                "/api/v1/consumers/{name}/dead-letters",
                StatusCode::OK,
                "application/json",
                &broken
            )
            .is_err()
    );

    let (status, types) = client
        .get(&server, "/api/v1/event-types", "/api/v1/event-types")
        .await?;
    assert_eq!(status, StatusCode::OK);
    let born = types
        .as_array()
        .and_then(|types| types.iter().find(|t| t["name"] == "iu.born"))
        .ok_or("iu.born is listed")?;
    assert!(
        born["consumers"]
            .as_array()
            .is_some_and(|c| c.iter().any(|s| s["consumer"] == CONSUMER)),
        "{born}"
    );

    let (status, detail) = client
        .get(
            &server,
            "/api/v1/event-types/{name}",
            "/api/v1/event-types/iu.born",
        )
        .await?;
    assert_eq!(status, StatusCode::OK);
    assert!(
        detail["compat"].is_null(),
        "no contracts, no mode: {detail}"
    );
    let first = &detail["versions"][0];
    assert_eq!(first["version"], "1.0.0");
    assert_eq!(first["schema"]["type"], "object", "{first}");
    assert!(
        first["accepted_by"]
            .as_array()
            .is_some_and(|c| c.iter().any(|name| name == CONSUMER))
    );
    let (status, _) = client
        .get(
            &server,
            "/api/v1/event-types/{name}",
            "/api/v1/event-types/no.such",
        )
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, schedules) = client
        .get(&server, "/api/v1/schedules", "/api/v1/schedules")
        .await?;
    assert_eq!(status, StatusCode::OK);
    let stands: Vec<(&str, &str, i64, i64, &str, &str, bool)> = schedules
        .as_array()
        .ok_or("a list")?
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default(),
                s["missed"].as_str().unwrap_or_default(),
                s["ticks"].as_i64().unwrap_or(-1),
                s["skipped"].as_i64().unwrap_or(-1),
                s["last_slot"].as_str().unwrap_or_default(),
                s["next_slot"].as_str().unwrap_or_default(),
                s["overdue_s"].as_f64().is_some_and(|late| late > 0.0),
            )
        })
        .collect();
    assert_eq!(
        stands,
        [
            (
                "nightly_rollup",
                "catch_up",
                1,
                0,
                "2026-11-01T03:00:00Z",
                "2026-11-02T03:00:00Z",
                true
            ),
            (
                "review_sweep",
                "skip",
                1,
                11,
                "2026-11-01T04:00:00Z",
                "2026-11-01T04:15:00Z",
                true
            ),
        ],
        "{schedules}"
    );

    // Nothing of the seeded outbox has waited for minutes: no breach.
    let (status, breaches) = client
        .get(&server, "/api/v1/lag-breaches", "/api/v1/lag-breaches")
        .await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(breaches, serde_json::json!([]));
    let (status, _) = client
        .get(
            &server,
            "/api/v1/lag-breaches",
            "/api/v1/lag-breaches?limit=0",
        )
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, consumers) = client
        .get(&server, "/api/v1/consumers", "/api/v1/consumers")
        .await?;
    assert_eq!(status, StatusCode::OK);
    let listed = consumers.as_array().ok_or("a list")?;
    assert_eq!(listed.len(), evc_generated::REGISTRY.consumers.len());
    // The other consumers of iu.born have not run: both events wait for them.
    let waiting: Vec<&Value> = listed
        .iter()
        .filter(|c| c["name"] != CONSUMER && c["pending"] == 2)
        .collect();
    assert!(!waiting.is_empty(), "{consumers}");

    let path = format!("/api/v1/consumers/{CONSUMER}");
    let (status, consumer) = client
        .get(&server, "/api/v1/consumers/{name}", &path)
        .await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(consumer["dead"], 1, "{consumer}");
    assert_eq!(consumer["pending"], 0, "{consumer}");
    assert_eq!(consumer["mode"], "live");
    assert!(
        consumer["attempt_latency"]["samples"]
            .as_i64()
            .is_some_and(|n| n >= 2),
        "{consumer}"
    );
    let (status, _) = client
        .get(
            &server,
            "/api/v1/consumers/{name}",
            &format!("{path}?window_s=0"),
        )
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = client
        .get(
            &server,
            "/api/v1/consumers/{name}",
            "/api/v1/consumers/no.such",
        )
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Parameters that do not parse are problems too, as the document says.
    for query in ["window_s=abc", "window_s=-1", "window_s=99999999999"] {
        let (status, problem) = client
            .get(
                &server,
                "/api/v1/consumers/{name}",
                &format!("{path}?{query}"),
            )
            .await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {problem}");
    }

    let dead_path = format!("/api/v1/consumers/{CONSUMER}/dead-letters");
    let (status, dead) = client
        .get(&server, "/api/v1/consumers/{name}/dead-letters", &dead_path)
        .await?;
    assert_eq!(status, StatusCode::OK);
    let dead = dead.as_array().ok_or("a list")?;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["event_id"], seeded.dead.to_string());
    assert_eq!(dead[0]["last_error_code"], "mailbox_rejected");
    assert_eq!(dead[0]["version_supported"], true);
    assert!(dead[0].get("payload").is_none());
    let (status, _) = client
        .get(
            &server,
            "/api/v1/consumers/{name}/dead-letters",
            &format!("{dead_path}?limit=0"),
        )
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, timeline) = client
        .get(
            &server,
            "/api/v1/timeline/{trace_id}",
            &format!("/api/v1/timeline/{TRACE}"),
        )
        .await?;
    assert_eq!(status, StatusCode::OK);
    let entries = timeline.as_array().ok_or("a list")?;
    for kind in ["event", "delivery", "attempt"] {
        assert!(
            entries.iter().any(|e| e["kind"] == kind),
            "{kind}: {timeline}"
        );
    }
    for id in [seeded.acked, seeded.dead] {
        assert!(entries.iter().any(|e| e["event_id"] == id.to_string()));
    }
    let (status, _) = client
        .get(
            &server,
            "/api/v1/timeline/{trace_id}",
            "/api/v1/timeline/not-a-trace",
        )
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // The dead event, at each consumer of its type: dead here after one attempt, pending at
    // the others, which have not run.
    const EVENT: &str = "/api/v1/events/{event_id}";
    let (status, event) = client
        .get(&server, EVENT, &format!("/api/v1/events/{}", seeded.dead))
        .await?;
    assert_eq!(status, StatusCode::OK, "{event}");
    assert_eq!(event["event_type"], "iu.born");
    assert_eq!(event["trace_id"], TRACE);
    assert!(event.get("payload").is_none());
    let deliveries = event["deliveries"].as_array().ok_or("a list")?;
    let accepting = born["consumers"]
        .as_array()
        .ok_or("a list")?
        .iter()
        .filter(|s| {
            s["versions"]
                .as_array()
                .is_some_and(|v| v.iter().any(|v| v == "1.0.0"))
        })
        .count();
    assert!(accepting > 1);
    assert_eq!(deliveries.len(), accepting);
    for delivery in deliveries {
        if delivery["consumer"] == CONSUMER {
            assert_eq!(delivery["generations"][0]["status"], "dead", "{delivery}");
            assert_eq!(delivery["attempts"].as_array().map(Vec::len), Some(1));
            assert_eq!(delivery["attempts"][0]["error_code"], "mailbox_rejected");
        } else {
            assert_eq!(
                delivery["generations"][0]["status"], "pending",
                "{delivery}"
            );
            assert_eq!(delivery["attempts"], serde_json::json!([]));
        }
    }
    let (status, _) = client.get(&server, EVENT, "/api/v1/events/nope").await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let unknown = "/api/v1/events/01890a5d-ac96-774b-bcce-000000000000";
    let (status, _) = client.get(&server, EVENT, unknown).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A path no route takes is a problem document as well.
    let response = reqwest::Client::new()
        .get(server.url("/api/v1/no-such-route"))
        .bearer_auth(READER)
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );
    let response = reqwest::Client::new()
        .delete(server.url("/api/v1/event-types"))
        .bearer_auth(READER)
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let problem: Value = response.json().await?;
    assert_eq!(problem["status"], 405);

    // A payload is for the roles whose job needs it, redacted by the payload policy (the
    // seeded payloads hold nothing it names: they come back whole).
    const PAYLOAD: &str = "/api/v1/events/{event_id}/payload";
    let path = format!("/api/v1/events/{}/payload", seeded.dead);
    let (status, _) = client.get(&server, PAYLOAD, &path).await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "a reader reads no payloads");
    for token in [OPERATOR, APPROVER] {
        let caller = Client::new(&server, Some(token)).await?;
        let (status, shown) = caller.get(&server, PAYLOAD, &path).await?;
        assert_eq!(status, StatusCode::OK, "{shown}");
        assert_eq!(shown["event_id"], seeded.dead.to_string());
        assert!(shown["payload"]["iu_unit_id"].is_string(), "{shown}");
        assert_eq!(shown["payload"]["governance_state"], "draft");
    }
    let operator = Client::new(&server, Some(OPERATOR)).await?;
    let (status, _) = operator
        .get(
            &server,
            PAYLOAD,
            &format!("/api/v1/events/{}/payload", evc::uuid::Uuid::nil()),
        )
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = operator
        .get(&server, PAYLOAD, "/api/v1/events/not-a-uuid/payload")
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    Ok(())
}

async fn refuses_unknown_callers(outbox: Outbox) -> TestResult {
    let server = Server::start(outbox).await?;
    let http = reqwest::Client::new();
    let anonymous = Client::new(&server, None).await?;
    let stranger = Client::new(&server, Some("not-a-token-anyone-holds-0123")).await?;
    for client in [&anonymous, &stranger] {
        let (status, problem) = client
            .get(&server, "/api/v1/event-types", "/api/v1/event-types")
            .await?;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(problem["status"], 401);
    }
    // Another scheme with a known token is no bearer token.
    let basic = http
        .get(server.url("/api/v1/consumers"))
        .header("Authorization", format!("Basic {READER}"))
        .send()
        .await?;
    assert_eq!(basic.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        basic
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer")
    );
    // The probes and the document need no token.
    for path in ["/healthz", "/readyz", "/metrics", "/api/v1/openapi.json"] {
        let response = http.get(server.url(path)).send().await?;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    Ok(())
}
