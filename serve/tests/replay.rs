//! Replays over HTTP on both stores, by two people: each role does only its job (a reader
//! cannot plan, an operator cannot apply, an approver cannot propose), the proposer cannot
//! approve under another token, and the approved replay brings the dead letter back. Every
//! answer is checked against the OpenAPI document.

mod support;

use evc::{PgStore, SqliteStore};
use evc_serve::Outbox;
use reqwest::StatusCode;
use serde_json::{Value, json};

use support::{
    APPROVER, BOB_APPROVER, CONSUMER, Client, OPERATOR, READER, Seeded, Server, TestResult, seed,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replays_need_two_people_with_their_roles() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        let seeded = seed(&store).await?;
        two_people_replay(
            Outbox::Postgres(Box::new(evc_serve::PgStores::single(store))),
            seeded,
        )
        .await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_replays_need_two_people_with_their_roles() -> TestResult {
    support::with_sqlite(|store: SqliteStore| async move {
        let seeded = seed(&store).await?;
        two_people_replay(Outbox::Sqlite(store), seeded).await
    })
    .await
}

const PLAN: &str = "/api/v1/consumers/{name}/replays/plan";
const PROPOSE: &str = "/api/v1/consumers/{name}/replays/propose";
const APPLY: &str = "/api/v1/consumers/{name}/replays/apply";

fn at(template: &str) -> String {
    template.replace("{name}", CONSUMER)
}

async fn two_people_replay(outbox: Outbox, seeded: Seeded) -> TestResult {
    let server = Server::start(outbox).await?;
    let reader = Client::new(&server, Some(READER)).await?;
    let bob = Client::new(&server, Some(OPERATOR)).await?;
    let bob_approving = Client::new(&server, Some(BOB_APPROVER)).await?;
    let eve = Client::new(&server, Some(APPROVER)).await?;
    let everything = json!({});

    // A reader reads; planning is an operator's job.
    let (status, problem) = reader.post(&server, PLAN, &at(PLAN), &everything).await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");

    let (status, plan) = bob.post(&server, PLAN, &at(PLAN), &everything).await?;
    assert_eq!(status, StatusCode::OK, "{plan}");
    let digest = plan["digest"].as_str().ok_or("a digest")?.to_owned();
    assert_eq!(plan["deliveries"][0]["event_id"], seeded.dead.to_string());
    assert_eq!(plan["deliveries"].as_array().map(Vec::len), Some(1));

    // Fields the API does not know are refused, not ignored.
    let (status, _) = bob
        .post(&server, PLAN, &at(PLAN), &json!({ "event_idz": [] }))
        .await?;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = bob
        .post(&server, PLAN, &at(PLAN), &json!({ "event_ids": ["nope"] }))
        .await?;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // The approver reads the plan an apply would take.
    let (status, checked) = eve.post(&server, PLAN, &at(PLAN), &everything).await?;
    assert_eq!(status, StatusCode::OK, "{checked}");
    assert_eq!(checked["digest"], digest.as_str());
    let (status, _) = bob
        .post(&server, PLAN, &at(PLAN), &json!({ "limit": "ten" }))
        .await?;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // Proposing is an operator's job.
    let (status, _) = eve
        .post(&server, PROPOSE, &at(PROPOSE), &everything)
        .await?;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, proposed) = bob
        .post(&server, PROPOSE, &at(PROPOSE), &everything)
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{proposed}");
    assert_eq!(proposed["planned_by"], "bob");
    assert_eq!(proposed["plan"]["digest"], digest.as_str());

    let approval = |key: &str| -> Value {
        json!({
            "digest": digest,
            "reason": "the mailbox accepts mail again",
            "approval_ref": "CHG-7",
            "idempotency_key": key,
        })
    };
    // Applying is an approver's job, and the proposer is not a second person under any token.
    let (status, _) = bob
        .post(&server, APPLY, &at(APPLY), &approval("k-1"))
        .await?;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, problem) = bob_approving
        .post(&server, APPLY, &at(APPLY), &approval("k-1"))
        .await?;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("two-person")),
        "{problem}"
    );
    let (status, problem) = eve
        .post(&server, APPLY, &at(APPLY), &json!({ "digest": digest, "reason": "", "approval_ref": "CHG-7", "idempotency_key": "k-1" }))
        .await?;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");

    let (status, applied) = eve
        .post(&server, APPLY, &at(APPLY), &approval("k-1"))
        .await?;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied["deliveries"], 1);
    assert_eq!(applied["repeated"], false);
    let (status, again) = eve
        .post(&server, APPLY, &at(APPLY), &approval("k-1"))
        .await?;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["repeated"], true);
    assert_eq!(again["replay_id"], applied["replay_id"]);

    // The dead letter is gone and its next generation waits for the consumer.
    let dead_path = format!("/api/v1/consumers/{CONSUMER}/dead-letters");
    let (_, dead) = reader
        .get(&server, "/api/v1/consumers/{name}/dead-letters", &dead_path)
        .await?;
    assert_eq!(dead.as_array().map(Vec::len), Some(0), "{dead}");
    let (_, consumer) = reader
        .get(
            &server,
            "/api/v1/consumers/{name}",
            &format!("/api/v1/consumers/{CONSUMER}"),
        )
        .await?;
    assert_eq!(consumer["pending"], 1, "{consumer}");
    assert_eq!(consumer["dead"], 0, "{consumer}");
    Ok(())
}
