//! The realtime gateway on both stores: a client receives the events of its topic that its
//! token lets it read (topic, tenant, the partition value it names, the topic's filter), each
//! once and in order, with the trace id; resumes from `Last-Event-ID` without a gap or a
//! repeat; is sent a summary for a burst it fell behind on and dropped when too far behind;
//! and is pinged while idle. Every stream is read from a real server on loopback.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use evc::uuid::Uuid;
use evc::{AppendOptions, PgStore, SqliteStore, Store, TraceContext};
use evc_generated::payloads::{IuBornV1, IuBornV1GovernanceState};
use evc_generated::producers::emit_iu_born_v1;
use evc_serve::{GatewayConfig, Outbox, Tokens, Topic, TopicKey};
use reqwest::StatusCode;
use serde_json::json;

use support::{BoxError, Server, SseMessage, SseStream, TRACE, TestResult};

const ADA: &str = "ada-reads-every-topic-0123456789";
const TINA: &str = "tina-reads-tenant-acme-0123456789";
const UMA: &str = "uma-reads-units-only-0123456789";

fn tokens() -> Tokens {
    Tokens::parse(&format!(
        "reader ada {ADA}\nreader tina {TINA} tenant=acme\nreader uma {UMA} topics=units\n"
    ))
    .expect("valid tokens")
}

/// `units`: every `iu.born`, one stream per unit; `drafts`: the units born as drafts;
/// `everything`: the same events, unpartitioned.
fn topics() -> Vec<Topic> {
    let born: BTreeSet<String> = ["iu.born".to_owned()].into();
    vec![
        Topic {
            name: "units".to_owned(),
            description: "The life of each unit.".to_owned(),
            event_types: born.clone(),
            key: Some("payload.iu_unit_id".parse::<TopicKey>().expect("key")),
            filter: BTreeMap::new(),
        },
        Topic {
            name: "drafts".to_owned(),
            description: "Units born as drafts.".to_owned(),
            event_types: born.clone(),
            key: None,
            filter: [("governance_state".to_owned(), vec![json!("draft")])].into(),
        },
        Topic {
            name: "everything".to_owned(),
            description: "Every unit's birth.".to_owned(),
            event_types: born,
            key: Some("envelope.trace_id".parse::<TopicKey>().expect("key")),
            filter: BTreeMap::new(),
        },
    ]
}

/// Appends one `iu.born` per `(unit, state, tenant)` in one transaction, under [`TRACE`];
/// their event ids, in order.
async fn born<S: Store>(
    store: &S,
    units: &[(Uuid, IuBornV1GovernanceState, Option<&str>)],
) -> Result<Vec<String>, BoxError> {
    let trace = TraceContext::new(TRACE, "00f067aa0ba902b7", 1)?;
    let mut tx = store.begin().await?;
    let mut ids = Vec::new();
    for (unit, state, tenant) in units {
        let options = match tenant {
            Some(tenant) => AppendOptions::new().tenant_scope(*tenant),
            None => AppendOptions::new(),
        };
        let mut publisher = store.publisher(&mut tx, options);
        let payload = IuBornV1::new(*unit, Uuid::now_v7(), *state, evc::chrono::Utc::now());
        let receipt = emit_iu_born_v1(&mut publisher, &trace, &payload).await?;
        ids.push(receipt.event_id.to_string());
    }
    tx.commit().await?;
    Ok(ids)
}

async fn open(
    server: &Server,
    path: &str,
    token: &str,
    last_event_id: Option<&str>,
) -> Result<SseStream, BoxError> {
    SseStream::open(server, path, Some(token), last_event_id)
        .await?
        .map_err(|(status, problem)| format!("{path}: {status} {problem}").into())
}

/// The event ids of the next `count` messages, each checked to be an `event`.
async fn next_events(stream: &mut SseStream, count: usize) -> Result<Vec<SseMessage>, BoxError> {
    let mut messages = Vec::new();
    for _ in 0..count {
        let message = stream.next().await?.ok_or("the stream ended")?;
        assert_eq!(message.event, "event", "{message:?}");
        messages.push(message);
    }
    Ok(messages)
}

fn event_ids(messages: &[SseMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m.json()["event_id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> TestResult {
                    support::with_postgres(|store: PgStore| async move {
                        let outbox = Outbox::Postgres(Box::new(evc_serve::PgStores::single(store.clone())));
                        super::$name(store, outbox).await
                    })
                    .await
                }
            )*
        }
        mod sqlite {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> TestResult {
                    support::with_sqlite(|store: SqliteStore| async move {
                        let outbox = Outbox::Sqlite(store.clone());
                        super::$name(store, outbox).await
                    })
                    .await
                }
            )*
        }
    };
}

on_both_stores!(
    a_client_receives_only_what_its_topic_key_and_token_let_it_read,
    a_client_resumes_from_its_last_event_id_without_a_gap_or_a_repeat,
    a_burst_collapses_into_a_summary_and_a_client_too_far_behind_is_dropped,
);

async fn a_client_receives_only_what_its_topic_key_and_token_let_it_read<S: Store>(
    store: S,
    outbox: Outbox,
) -> TestResult {
    let server = Server::with(outbox, tokens(), GatewayConfig::new(topics())).await?;
    let (u1, u2) = (Uuid::now_v7(), Uuid::now_v7());
    let units = |unit: Uuid| format!("/api/v1/topics/units/stream?key={unit}");

    // Who may not subscribe, and to what.
    let refused = [
        (
            "/api/v1/topics/units/stream",
            None,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "/api/v1/topics/drafts/stream",
            Some(UMA),
            StatusCode::FORBIDDEN,
        ),
        (
            "/api/v1/topics/nothing/stream",
            Some(ADA),
            StatusCode::NOT_FOUND,
        ),
        (
            "/api/v1/topics/drafts/stream?key=x",
            Some(ADA),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (path, token, expected) in refused {
        let answer = SseStream::open(&server, path, token, None).await?;
        let (status, problem) = answer.err().ok_or(format!("{path} was streamed"))?;
        assert_eq!(status, expected, "{path}: {problem}");
        assert_eq!(problem["status"], expected.as_u16());
    }
    // A token bound to a tenant reads the gateway and nothing else.
    let response = reqwest::Client::new()
        .get(server.url("/api/v1/consumers"))
        .bearer_auth(TINA)
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let listed: serde_json::Value = reqwest::Client::new()
        .get(server.url("/api/v1/topics"))
        .bearer_auth(UMA)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    assert_eq!(listed[0]["name"], "units");
    assert_eq!(listed[0]["key"], "payload.iu_unit_id");

    let mut ada_u1 = open(&server, &units(u1), ADA, None).await?;
    let mut tina_units = open(&server, "/api/v1/topics/units/stream", TINA, None).await?;
    let mut ada_drafts = open(&server, "/api/v1/topics/drafts/stream", ADA, None).await?;

    use IuBornV1GovernanceState::{Draft, Frozen};
    let ids = born(
        &store,
        &[
            (u1, Draft, None),
            (u2, Frozen, Some("acme")),
            (u1, Frozen, Some("acme")),
        ],
    )
    .await?;
    // Then one event every stream above may read: whatever precedes it in a stream is all
    // that stream was sent.
    let last = born(&store, &[(u1, Draft, Some("acme"))]).await?;

    let got = next_events(&mut ada_u1, 3).await?;
    assert_eq!(
        event_ids(&got),
        [ids[0].clone(), ids[2].clone(), last[0].clone()]
    );
    for message in &got {
        let data = message.json();
        assert_eq!(data["topic"], "units");
        assert_eq!(data["key"], u1.to_string());
        assert_eq!(data["trace_id"], TRACE);
        assert_eq!(data["event_type"], "iu.born");
        assert!(data.get("payload").is_none() && !message.data.contains("governance_state"));
    }
    let ids_of = |messages: &[SseMessage]| -> Vec<Option<String>> {
        messages.iter().map(|m| m.id.clone()).collect()
    };
    let positions = ids_of(&got);
    let mut sorted = positions.clone();
    sorted.sort_by_key(|id| {
        id.as_deref()
            .and_then(|id| id.parse::<evc::FeedPosition>().ok())
    });
    assert_eq!(positions, sorted, "ids rise");

    let got = next_events(&mut tina_units, 3).await?;
    assert_eq!(
        event_ids(&got),
        [ids[1].clone(), ids[2].clone(), last[0].clone()]
    );
    assert!(got.iter().all(|m| m.json()["tenant_scope"] == "acme"));

    let got = next_events(&mut ada_drafts, 2).await?;
    assert_eq!(event_ids(&got), [ids[0].clone(), last[0].clone()]);

    // Stopping the server ends every stream.
    drop(server);
    for stream in [&mut ada_u1, &mut tina_units, &mut ada_drafts] {
        assert_eq!(stream.next().await?, None);
    }
    Ok(())
}

async fn a_client_resumes_from_its_last_event_id_without_a_gap_or_a_repeat<S: Store>(
    store: S,
    outbox: Outbox,
) -> TestResult {
    let server = Server::with(outbox, tokens(), GatewayConfig::new(topics())).await?;
    const EVERYTHING: &str = "/api/v1/topics/everything/stream";
    use IuBornV1GovernanceState::Draft;
    let unit = || (Uuid::now_v7(), Draft, None);

    // A witness stays connected: once it has an event, the gateway has read it, and a client
    // resuming from before it catches up from the store.
    let mut witness = open(&server, EVERYTHING, ADA, None).await?;
    let mut first = open(&server, EVERYTHING, ADA, None).await?;
    let early = born(&store, &[unit(), unit()]).await?;
    let got = next_events(&mut first, 2).await?;
    assert_eq!(event_ids(&got), early);
    drop(first);

    // Missed while away: three in one transaction, one in another.
    let mut missed = born(&store, &[unit(), unit(), unit()]).await?;
    missed.extend(born(&store, &[unit()]).await?);
    let witnessed = next_events(&mut witness, 6).await?;
    assert_eq!(
        event_ids(&witnessed),
        [early.clone(), missed.clone()].concat()
    );
    let last_seen = got[1].id.clone().ok_or("no id")?;
    let mut resumed = open(&server, EVERYTHING, ADA, Some(&last_seen)).await?;
    let later = born(&store, &[unit()]).await?;
    let got_back = next_events(&mut resumed, 5).await?;
    assert_eq!(
        event_ids(&got_back),
        [missed.clone(), later.clone()].concat()
    );

    // From the first id: the second, then the rest, each once.
    let first_seen = got[0].id.clone().ok_or("no id")?;
    let mut again = open(&server, EVERYTHING, ADA, Some(&first_seen)).await?;
    let got_again = next_events(&mut again, 6).await?;
    assert_eq!(
        event_ids(&got_again),
        [vec![early[1].clone()], missed, later].concat()
    );

    // Catching up applies the client's key and tenant as the live stream does.
    let (u1, u2) = (Uuid::now_v7(), Uuid::now_v7());
    let keyed = format!("/api/v1/topics/units/stream?key={u1}");
    let mut tina = open(&server, &keyed, TINA, None).await?;
    let seen = born(&store, &[(u1, Draft, Some("acme"))]).await?;
    let tina_got = next_events(&mut tina, 1).await?;
    assert_eq!(event_ids(&tina_got), seen);
    drop(tina);
    let away = born(
        &store,
        &[
            (u1, Draft, None),
            (u2, Draft, Some("acme")),
            (u1, Draft, Some("acme")),
        ],
    )
    .await?;
    // `later`, then what tina saw and missed.
    next_events(&mut witness, 5).await?;
    let tina_seen = tina_got[0].id.clone().ok_or("no id")?;
    let mut tina = open(&server, &keyed, TINA, Some(&tina_seen)).await?;
    let last = born(&store, &[(u1, Draft, Some("acme"))]).await?;
    let caught_up = next_events(&mut tina, 2).await?;
    assert_eq!(event_ids(&caught_up), [away[2].clone(), last[0].clone()]);

    // An id this stream never sent is refused.
    for bad in ["12", "x-1", "-1-2"] {
        let answer = SseStream::open(&server, EVERYTHING, Some(ADA), Some(bad)).await?;
        let (status, _) = answer.err().ok_or("a bad id was taken")?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
    Ok(())
}

async fn a_burst_collapses_into_a_summary_and_a_client_too_far_behind_is_dropped<S: Store>(
    store: S,
    outbox: Outbox,
) -> TestResult {
    let mut config = GatewayConfig::new(topics());
    config.buffer = 2;
    config.overflow = 5;
    config.ping_every = Duration::from_millis(100);
    let server = Server::with(outbox, tokens(), config).await?;
    const EVERYTHING: &str = "/api/v1/topics/everything/stream";
    use IuBornV1GovernanceState::Draft;
    let burst = |n: usize| {
        (0..n)
            .map(|_| (Uuid::now_v7(), Draft, None))
            .collect::<Vec<_>>()
    };

    let mut stream = open(&server, EVERYTHING, ADA, None).await?;
    // Idle, the stream is pinged.
    let ping = stream.next_any().await?.ok_or("the stream ended")?;
    assert_eq!((ping.event.as_str(), ping.data.as_str()), ("", "ping"));

    // One transaction of four arrives in one read of the feed: two fit, two are summed up.
    let ids = born(&store, &burst(4)).await?;
    let got = next_events(&mut stream, 2).await?;
    assert_eq!(event_ids(&got), ids[..2]);
    let summary = stream.next().await?.ok_or("the stream ended")?;
    assert_eq!(summary.event, "summary");
    assert_eq!(summary.json()["events"], 2);
    let summed_to = summary.id.clone().ok_or("no id")?;
    assert_eq!(summary.json()["last"], summed_to.as_str());

    // Caught up, the client is sent events again; then eight at once are too many.
    let one = born(&store, &burst(1)).await?;
    let after_one = next_events(&mut stream, 1).await?;
    assert_eq!(event_ids(&after_one), one);
    let resume_from = after_one[0].id.clone().ok_or("no id")?;
    let eight = born(&store, &burst(8)).await?;
    let overflow = stream.next().await?.ok_or("the stream ended")?;
    assert_eq!(overflow.event, "overflow", "{overflow:?}");
    assert_eq!(stream.next().await?, None, "dropped after the overflow");

    // Resuming from its last id, the client gets the eight from the store, each once.
    let mut resumed = open(&server, EVERYTHING, ADA, Some(&resume_from)).await?;
    assert_eq!(event_ids(&next_events(&mut resumed, 8).await?), eight);
    Ok(())
}
