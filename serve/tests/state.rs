//! A consumer's operator state over HTTP on both stores: only operators change it, every change
//! needs a reason, and each one is recorded with the caller's name and that reason, newest
//! first. Every answer is checked against the OpenAPI document.

mod support;

use evc::{PgStore, SqliteStore};
use evc_serve::Outbox;
use reqwest::StatusCode;
use serde_json::json;

use support::{APPROVER, CONSUMER, Client, OPERATOR, READER, Server, TestResult};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_records_who_changed_a_consumer_and_why() -> TestResult {
    support::with_postgres(|store: PgStore| async move {
        changes_are_recorded(Outbox::Postgres(Box::new(evc_serve::PgStores::single(
            store,
        ))))
        .await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_records_who_changed_a_consumer_and_why() -> TestResult {
    support::with_sqlite(|store: SqliteStore| async move {
        changes_are_recorded(Outbox::Sqlite(store)).await
    })
    .await
}

const PAUSE: &str = "/api/v1/consumers/{name}/pause";
const RESUME: &str = "/api/v1/consumers/{name}/resume";
const MODE: &str = "/api/v1/consumers/{name}/mode";
const CHANGES: &str = "/api/v1/consumers/{name}/changes";
const CONSUMER_PATH: &str = "/api/v1/consumers/{name}";

fn at(template: &str) -> String {
    template.replace("{name}", CONSUMER)
}

async fn changes_are_recorded(outbox: Outbox) -> TestResult {
    let server = Server::start(outbox).await?;
    let reader = Client::new(&server, Some(READER)).await?;
    let bob = Client::new(&server, Some(OPERATOR)).await?;
    let eve = Client::new(&server, Some(APPROVER)).await?;
    let why = json!({ "reason": "the mail relay is down" });

    for caller in [&reader, &eve] {
        let (status, _) = caller.post(&server, PAUSE, &at(PAUSE), &why).await?;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    for body in [
        json!({}),
        json!({ "reason": "  " }),
        json!({ "reason": "x", "why": 1 }),
    ] {
        let (status, problem) = bob.post(&server, PAUSE, &at(PAUSE), &body).await?;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {problem}"
        );
    }
    let (_, listed) = reader.get(&server, CHANGES, &at(CHANGES)).await?;
    assert_eq!(listed, json!([]), "refused changes record nothing");

    let (status, paused) = bob.post(&server, PAUSE, &at(PAUSE), &why).await?;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(paused["paused"], true);
    let (status, shadow) = bob
        .post(
            &server,
            MODE,
            &at(MODE),
            &json!({ "mode": "shadow", "reason": "try the new template" }),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{shadow}");
    assert_eq!(shadow["mode"], "shadow");
    let (_, consumer) = reader
        .get(&server, CONSUMER_PATH, &at(CONSUMER_PATH))
        .await?;
    assert_eq!(
        (&consumer["paused"], &consumer["mode"]),
        (&json!(true), &json!("shadow"))
    );
    let (status, resumed) = bob
        .post(
            &server,
            RESUME,
            &at(RESUME),
            &json!({ "reason": "relay back" }),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert_eq!(resumed["paused"], false);
    assert_eq!(resumed["mode"], "shadow");

    let (status, listed) = reader.get(&server, CHANGES, &at(CHANGES)).await?;
    assert_eq!(status, StatusCode::OK);
    let seen: Vec<(String, String, String)> = listed
        .as_array()
        .ok_or("a list")?
        .iter()
        .map(|c| {
            (
                c["change"].as_str().unwrap_or_default().to_owned(),
                c["by"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("resume", "relay back"),
        ("mode", "try the new template"),
        ("pause", "the mail relay is down"),
    ]
    .map(|(change, reason)| (change.to_owned(), "bob".to_owned(), reason.to_owned()));
    assert_eq!(seen, expected);
    assert_eq!(listed[1]["mode"], "shadow");

    let (status, _) = bob
        .post(&server, PAUSE, "/api/v1/consumers/no.such/pause", &why)
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    Ok(())
}
