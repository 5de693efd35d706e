//! Discards over HTTP, by two people, on PostgreSQL: each role does only its job, the proposer
//! cannot approve under another token, and the approved discard settles the dead letter for
//! good. A SQLite outbox has no discard and says so. Every answer is checked against the
//! OpenAPI document.

mod support;

use evc::{PgStore, SqliteStore};
use evc_serve::Outbox;
use reqwest::StatusCode;
use serde_json::json;

use support::{
    APPROVER, BOB_APPROVER, CONSUMER, Client, OPERATOR, READER, Server, TestResult, seed,
};

const PLAN: &str = "/api/v1/consumers/{name}/discards/plan";
const PROPOSE: &str = "/api/v1/consumers/{name}/discards/propose";
const APPLY: &str = "/api/v1/consumers/{name}/discards/apply";
const DEAD: &str = "/api/v1/consumers/{name}/dead-letters";

fn at(template: &str) -> String {
    template.replace("{name}", CONSUMER)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_discards_need_two_people_with_their_roles() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        let seeded = seed(&store).await?;
        let server = Server::start(Outbox::Postgres(Box::new(evc_serve::PgStores::single(
            store,
        ))))
        .await?;
        let reader = Client::new(&server, Some(READER)).await?;
        let bob = Client::new(&server, Some(OPERATOR)).await?;
        let bob_approving = Client::new(&server, Some(BOB_APPROVER)).await?;
        let eve = Client::new(&server, Some(APPROVER)).await?;
        let everything = json!({});

        let (status, _) = reader.post(&server, PLAN, &at(PLAN), &everything).await?;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, plan) = eve.post(&server, PLAN, &at(PLAN), &everything).await?;
        assert_eq!(status, StatusCode::OK, "{plan}");
        assert_eq!(plan["deliveries"][0]["event_id"], seeded.dead.to_string());
        let (status, _) = eve
            .post(&server, PROPOSE, &at(PROPOSE), &everything)
            .await?;
        assert_eq!(
            status,
            StatusCode::FORBIDDEN,
            "an approver proposes nothing"
        );

        let (status, proposed) = bob
            .post(&server, PROPOSE, &at(PROPOSE), &everything)
            .await?;
        assert_eq!(status, StatusCode::CREATED, "{proposed}");
        assert_eq!(proposed["planned_by"], "bob");
        let approval = json!({
            "digest": proposed["plan"]["digest"],
            "reason": "the mailbox is gone for good",
            "approval_ref": "INC-9",
            "idempotency_key": "discard-1",
        });
        let (status, _) = bob.post(&server, APPLY, &at(APPLY), &approval).await?;
        assert_eq!(status, StatusCode::FORBIDDEN, "an operator applies nothing");
        let (status, refused) = bob_approving
            .post(&server, APPLY, &at(APPLY), &approval)
            .await?;
        assert_eq!(status, StatusCode::CONFLICT, "bob proposed it: {refused}");

        let (status, applied) = eve.post(&server, APPLY, &at(APPLY), &approval).await?;
        assert_eq!(status, StatusCode::OK, "{applied}");
        assert_eq!(
            (
                applied["deliveries"].as_u64(),
                applied["repeated"].as_bool()
            ),
            (Some(1), Some(false))
        );
        let (status, again) = eve.post(&server, APPLY, &at(APPLY), &approval).await?;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(again["repeated"], true);
        assert_eq!(again["discard_id"], applied["discard_id"]);

        let (status, dead) = reader.get(&server, DEAD, &at(DEAD)).await?;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            dead.as_array().map(Vec::len),
            Some(0),
            "settled for good: {dead}"
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_has_no_discard_and_says_so() -> TestResult {
    support::with_sqlite(|store: SqliteStore| async move {
        seed(&store).await?;
        let server = Server::start(Outbox::Sqlite(store)).await?;
        let bob = Client::new(&server, Some(OPERATOR)).await?;
        let (status, problem) = bob.post(&server, PLAN, &at(PLAN), &json!({})).await?;
        assert_eq!(status, StatusCode::CONFLICT);
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains("SQLite outbox has no discard")),
            "{problem}"
        );
        Ok(())
    })
    .await
}
