//! The PostgreSQL append path against a real server: one event and one delivery per subscribed
//! consumer in the caller's transaction, a notification after commit (for the consumers whose
//! doorbell a sleeping worker holds) and none after rollback, every reject class typed and
//! audited without its payload, idempotency keys and batches.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use evc_runtime::NOTIFY_CHANNEL;
use evc_runtime::{
    AppendError, AppendOptions, CredentialKind, CredentialShape, DeliveryStatus, DigestKey,
    NewEvent, Observe, OutgoingEvent, PgStore, Publish, Rejection, Store,
};
use evc_runtime::{MAX_PAYLOAD_DEPTH, canonical_json, sha256_hex};
use serde_json::json;
use sqlx::Connection;
use sqlx::postgres::{PgListener, PgPool};
use support::{TestResult, count_all_deliveries, event, note, with_database};

const NOTE_ID: &str = "01890a5d-ac96-774b-bcce-b302099a8057";

/// The deployment's digest key of these tests.
fn digest_key() -> DigestKey {
    DigestKey::new("test-digest-key-0123456789abcdef-0123456789abcdef").expect("long enough")
}

fn store(pool: &PgPool) -> PgStore {
    store_with(pool, Some(digest_key()))
}

/// The store of the test registry, its policy from the registry, with `key` as digest key.
fn store_with(pool: &PgPool, key: Option<DigestKey>) -> PgStore {
    let mut builder = PgStore::builder(pool.clone(), support::TEST_REGISTRY);
    if let Some(key) = key {
        builder = builder.digest_key(key);
    }
    builder.build().expect("test schemas compile")
}

async fn listener(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(NOTIFY_CHANNEL).await?;
    Ok(listener)
}

/// The doorbells of `consumers`, as sleeping dispatcher workers hold them: on a pool of their
/// own, so they leave the test's four connections free.
async fn doorbells(
    pool: &PgPool,
    consumers: &[&str],
) -> Result<Vec<evc_runtime::Doorbell>, Box<dyn std::error::Error + Send + Sync>> {
    let options = (*pool.connect_options()).clone();
    let own = sqlx::postgres::PgPoolOptions::new()
        .max_connections(u32::try_from(consumers.len())?.max(1))
        .connect_with(options)
        .await?;
    let store = store(&own);
    let mut held = Vec::new();
    for consumer in consumers {
        let doorbell = store
            .hold_doorbell(consumer, Duration::from_secs(2))
            .await?
            .ok_or("doorbell taken")?;
        held.push(doorbell);
    }
    Ok(held)
}

/// Notification payloads, sorted: the next `expected` (waited for up to [`support::HANG`]) and
/// any that follow within `quiet` of the last.
async fn notifications(listener: &mut PgListener, expected: usize, quiet: Duration) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + support::HANG;
    let mut payloads = Vec::new();
    loop {
        let wait = if payloads.len() < expected {
            deadline.saturating_duration_since(tokio::time::Instant::now())
        } else {
            quiet
        };
        let Ok(Ok(notification)) = tokio::time::timeout(wait, listener.recv()).await else {
            break;
        };
        assert_eq!(notification.channel(), NOTIFY_CHANNEL);
        payloads.push(notification.payload().to_owned());
    }
    payloads.sort();
    payloads
}

#[tokio::test]
async fn append_writes_one_event_and_a_delivery_per_subscriber_then_notifies_on_commit()
-> TestResult {
    with_database(|pool| async move {
        let store = store(&pool);
        let mut listener = listener(&pool).await?;
        let _asleep = doorbells(&pool, &["c.live", "c.shadow"]).await?;
        let mut tx = pool.begin().await?;
        let mut publisher = store.publisher(&mut tx).with_options(
            AppendOptions::new()
                .tenant_scope("tenant-a")
                .correlation_id("corr-1")
                .causation_id("cause-1"),
        );
        let receipt = publisher
            .publish(event("test.note", "1.0.0", note(NOTE_ID)))
            .await?;
        assert!(receipt.created);
        assert_eq!(receipt.deliveries, 2);
        assert_eq!(receipt.event_id.get_version_num(), 7, "UUID v7");
        // Nothing is announced before commit.
        assert_eq!(
            notifications(&mut listener, 0, Duration::from_millis(200)).await,
            Vec::<String>::new()
        );
        tx.commit().await?;
        assert_eq!(
            notifications(&mut listener, 2, Duration::from_millis(500)).await,
            ["c.live", "c.shadow"]
        );

        // The only event stored, with its envelope.
        assert_eq!(store.count_events(&[]).await?, 1);
        let stored = store
            .event(receipt.event_id)
            .await?
            .ok_or("event not stored")?;
        assert_eq!(stored.seq, receipt.seq);
        assert_eq!(stored.event_type, "test.note");
        assert_eq!(stored.schema_version, "1.0.0");
        assert_eq!(stored.order_key, NOTE_ID);
        assert_eq!(stored.tenant_scope.as_deref(), Some("tenant-a"));
        assert_eq!(stored.producer_class, "notes");
        assert_eq!(stored.idempotency_key, None);
        assert_eq!(stored.trace_id.as_deref(), Some(support::TRACE_ID));
        assert_eq!(stored.correlation_id.as_deref(), Some("corr-1"));
        assert_eq!(stored.causation_id.as_deref(), Some("cause-1"));
        assert_eq!(
            stored.payload_bytes,
            u64::try_from(canonical_json(&note(NOTE_ID)).len())?
        );

        // A delivery per subscribed consumer, pending and never claimed.
        let mut consumers = Vec::new();
        for consumer in store.registry().consumers {
            if let Some(delivery) = store.delivery(receipt.event_id, consumer.name).await? {
                assert_eq!(
                    delivery.status,
                    DeliveryStatus::Pending,
                    "{}",
                    consumer.name
                );
                assert_eq!(delivery.attempts, 0, "{}", consumer.name);
                consumers.push(consumer.name);
            }
        }
        assert_eq!(consumers, ["c.live", "c.shadow"], "c.off is off");
        assert_eq!(store.rejects(10).await?, []);
        // Claimed, each delivery reads back the payload and the whole trace context (parent
        // span, flags); it carries its event's seq, and the order key only for the consumer
        // that orders per key.
        for consumer in consumers {
            let claimed = support::claim(
                &store,
                consumer,
                "reader",
                10,
                Duration::from_secs(30),
                false,
            )
            .await?;
            assert_eq!(claimed.len(), 1, "{consumer}");
            assert_eq!(claimed[0].payload, note(NOTE_ID), "{consumer}");
            assert_eq!(claimed[0].trace, Some(support::trace()), "{consumer}");
            let leases = store.leases(consumer).await?;
            let held: Vec<_> = leases
                .iter()
                .map(|l| (l.event_id, l.event_seq, l.order_key.as_deref()))
                .collect();
            let ordered = consumer == "c.live";
            assert_eq!(
                held,
                [(receipt.event_id, receipt.seq, ordered.then_some(NOTE_ID))],
                "{consumer}"
            );
        }

        // An event without order-key fields orders by the aggregate key, else by itself.
        let mut connection = pool.acquire().await?;
        let ping = event("test.ping", "1.0.0", json!({}));
        let keyed = store
            .append(
                &mut connection,
                ping.clone(),
                AppendOptions::new().aggregate_key("agg-1"),
            )
            .await?;
        let alone = store
            .append(&mut connection, ping, AppendOptions::new())
            .await?;
        for (receipt, expected) in [
            (keyed, "agg-1".to_owned()),
            (alone, alone.event_id.to_string()),
        ] {
            let key = store.event(receipt.event_id).await?.map(|e| e.order_key);
            assert_eq!(key, Some(expected));
            assert_eq!(receipt.deliveries, 1);
        }
        assert!(alone.seq > keyed.seq && keyed.seq > receipt.seq);
        Ok(())
    })
    .await
}

/// Appends `n` committed notes, each in its own transaction.
async fn append_committed(store: &PgStore, pool: &PgPool, n: usize) -> TestResult {
    for _ in 0..n {
        let mut tx = pool.begin().await?;
        store
            .publisher(&mut tx)
            .publish(event("test.note", "1.0.0", note(NOTE_ID)))
            .await?;
        tx.commit().await?;
    }
    Ok(())
}

#[tokio::test]
async fn appends_notify_only_consumers_whose_doorbell_is_held() -> TestResult {
    with_database(|pool| async move {
        let store = store(&pool);
        let mut listener = listener(&pool).await?;
        let short = Duration::from_millis(200);

        // Nobody asleep: committed appends send nothing.
        append_committed(&store, &pool, 2).await?;
        assert_eq!(
            notifications(&mut listener, 0, Duration::from_millis(500)).await,
            Vec::<String>::new()
        );

        // One consumer's doorbell held: only it is notified (once per transaction).
        let live = store
            .hold_doorbell("c.live", short)
            .await?
            .ok_or("c.live taken")?;
        assert_eq!(live.consumer(), "c.live");
        assert!(
            store.hold_doorbell("c.live", short).await?.is_none(),
            "a doorbell is exclusive"
        );
        append_committed(&store, &pool, 1).await?;
        assert_eq!(
            notifications(&mut listener, 1, Duration::from_millis(500)).await,
            ["c.live"]
        );

        // An append in flight keeps the doorbell from being taken until it commits, so a
        // worker cannot go to sleep past an event its last claim could not see.
        let mut tx = pool.begin().await?;
        store
            .publisher(&mut tx)
            .publish(event("test.note", "1.0.0", note(NOTE_ID)))
            .await?;
        assert!(store.hold_doorbell("c.shadow", short).await?.is_none());
        tx.commit().await?;
        // (It rang c.live, whose doorbell is held.)
        assert_eq!(
            notifications(&mut listener, 1, Duration::from_millis(500)).await,
            ["c.live"]
        );
        let shadow = store
            .hold_doorbell("c.shadow", short)
            .await?
            .ok_or("c.shadow taken")?;

        // Released, or dropped (its connection closes), a doorbell can be taken again.
        live.release().await?;
        drop(shadow);
        let _again = doorbells(&pool, &["c.live", "c.shadow"]).await?;
        append_committed(&store, &pool, 1).await?;
        assert_eq!(
            notifications(&mut listener, 2, Duration::from_millis(500)).await,
            ["c.live", "c.shadow"]
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn rollback_leaves_no_event_delivery_or_notification() -> TestResult {
    with_database(|pool| async move {
        let store = store(&pool);
        let mut listener = listener(&pool).await?;
        let _asleep = doorbells(&pool, &["c.live", "c.shadow"]).await?;

        let mut tx = pool.begin().await?;
        sqlx::query("CREATE TABLE caller_rows (id int)")
            .execute(&mut *tx)
            .await?;
        let receipt = store
            .publisher(&mut tx)
            .publish(event("test.note", "1.0.0", note(NOTE_ID)))
            .await?;
        assert!(receipt.created);
        tx.rollback().await?;
        assert_eq!(
            notifications(&mut listener, 0, Duration::from_millis(300)).await,
            Vec::<String>::new()
        );
        assert_eq!(store.count_events(&[]).await?, 0);
        assert_eq!(count_all_deliveries(&store).await?, 0);

        // The same append committed is announced.
        append_committed(&store, &pool, 1).await?;
        assert_eq!(
            notifications(&mut listener, 2, Duration::from_millis(500)).await,
            ["c.live", "c.shadow"]
        );
        assert_eq!(store.count_events(&[]).await?, 1);
        assert_eq!(count_all_deliveries(&store).await?, 2);
        Ok(())
    })
    .await
}

/// One refused append: the event, the expected reason code, the text the error must not show.
struct Case {
    name: &'static str,
    event: OutgoingEvent,
    reason: &'static str,
    secret: Option<&'static str>,
    check: fn(&Rejection) -> bool,
}

const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.\
                   dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
const PEM: &str =
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----";

fn with_text(text: &str) -> serde_json::Value {
    json!({"note_id": NOTE_ID, "text": text})
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "unregistered type",
            event: event("test.unknown", "1.0.0", note(NOTE_ID)),
            reason: "unregistered_type",
            secret: None,
            check: |r| matches!(r, Rejection::UnregisteredType { event_type } if event_type == "test.unknown"),
        },
        Case {
            name: "unregistered version",
            event: event("test.note", "1.1.0", note(NOTE_ID)),
            reason: "unregistered_version",
            secret: None,
            check: |r| matches!(r, Rejection::UnregisteredVersion { version, .. } if version == "1.1.0"),
        },
        Case {
            name: "missing required field",
            event: event("test.note", "1.0.0", json!({"text": "hunter2-in-text"})),
            reason: "schema_violation",
            secret: Some("hunter2"),
            check: |r| {
                matches!(r, Rejection::SchemaViolation { pointer, keyword, .. }
                    if pointer.is_empty() && keyword == "required")
            },
        },
        Case {
            name: "bad uuid format",
            event: event(
                "test.note",
                "1.0.0",
                json!({"note_id": "hunter2-not-a-uuid"}),
            ),
            reason: "schema_violation",
            secret: Some("hunter2"),
            check: |r| {
                matches!(r, Rejection::SchemaViolation { pointer, keyword, .. }
                    if pointer == "/note_id" && keyword == "format")
            },
        },
        Case {
            name: "below minimum",
            event: event(
                "test.note",
                "1.0.0",
                json!({"note_id": NOTE_ID, "count": -73519}),
            ),
            reason: "schema_violation",
            secret: Some("73519"),
            check: |r| {
                matches!(r, Rejection::SchemaViolation { pointer, keyword, .. }
                    if pointer == "/count" && keyword == "minimum")
            },
        },
        Case {
            name: "nested deny-listed key",
            event: event(
                "test.note",
                "1.0.0",
                json!({"note_id": NOTE_ID, "meta": {"parts": [{"bodyText": "hunter2 body"}]}}),
            ),
            reason: "forbidden_key",
            secret: Some("hunter2"),
            check: |r| {
                matches!(r, Rejection::ForbiddenKey { pointer, entry, .. }
                    if pointer == "/meta/parts/0/bodyText" && entry == "body_text")
            },
        },
        Case {
            name: "credential-shaped key",
            event: event(
                "test.note",
                "1.0.0",
                json!({"note_id": NOTE_ID, "meta": {"db_password": "hunter2"}}),
            ),
            reason: "credential_key",
            secret: Some("hunter2"),
            check: |r| {
                matches!(r, Rejection::CredentialShaped { pointer, what: CredentialKind::Key(name), .. }
                    if pointer == "/meta/db_password" && name == "password")
            },
        },
        Case {
            name: "JWT value",
            event: event("test.note", "1.0.0", with_text(&format!("token: {JWT}"))),
            reason: "credential_value",
            secret: Some("dozjgNryP4J3jVmNHl0w5N"),
            check: |r| {
                matches!(r, Rejection::CredentialShaped { pointer, what: CredentialKind::Value(CredentialShape::Jwt), .. }
                    if pointer == "/text")
            },
        },
        Case {
            name: "PEM value",
            event: event(
                "test.note",
                "1.0.0",
                json!({"note_id": NOTE_ID, "meta": {"k": [PEM]}}),
            ),
            reason: "credential_value",
            secret: Some("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
            check: |r| {
                matches!(r, Rejection::CredentialShaped { pointer, what: CredentialKind::Value(CredentialShape::PemBlock), .. }
                    if pointer == "/meta/k/0")
            },
        },
        Case {
            name: "bearer value",
            event: event(
                "test.note",
                "1.0.0",
                with_text("Authorization: Bearer 9f8e7d6c5b4a39281706"),
            ),
            reason: "credential_value",
            secret: Some("9f8e7d6c5b4a39281706"),
            check: |r| {
                matches!(
                    r,
                    Rejection::CredentialShaped {
                        what: CredentialKind::Value(CredentialShape::BearerToken),
                        ..
                    }
                )
            },
        },
        Case {
            name: "postgres connection string",
            event: event(
                "test.note",
                "1.0.0",
                with_text("postgres://app:hunter2@db.internal:5432/prod"),
            ),
            reason: "credential_value",
            secret: Some("hunter2"),
            check: |r| {
                matches!(
                    r,
                    Rejection::CredentialShaped {
                        what: CredentialKind::Value(CredentialShape::ConnectionString),
                        ..
                    }
                )
            },
        },
        Case {
            name: "amqp connection string",
            event: event(
                "test.note",
                "1.0.0",
                with_text("amqp://guest:hunter2@rabbit/vhost"),
            ),
            reason: "credential_value",
            secret: Some("hunter2"),
            check: |r| {
                matches!(
                    r,
                    Rejection::CredentialShaped {
                        what: CredentialKind::Value(CredentialShape::ConnectionString),
                        ..
                    }
                )
            },
        },
        Case {
            name: "redis connection string",
            event: event(
                "test.note",
                "1.0.0",
                with_text("redis://:hunter2@cache:6379/0"),
            ),
            reason: "credential_value",
            secret: Some("hunter2"),
            check: |r| {
                matches!(
                    r,
                    Rejection::CredentialShaped {
                        what: CredentialKind::Value(CredentialShape::ConnectionString),
                        ..
                    }
                )
            },
        },
        Case {
            name: "AWS access key id, unicode-escaped in the JSON text",
            event: event(
                "test.note",
                "1.0.0",
                serde_json::from_str(&format!(
                    r#"{{"note_id": "{NOTE_ID}", "text": "\u0041KIAIOSFODNN7EXAMPLE"}}"#
                ))
                .expect("valid JSON"),
            ),
            reason: "credential_value",
            secret: Some("IOSFODNN7EXAMPLE"),
            check: |r| {
                matches!(r, Rejection::CredentialShaped { pointer, what: CredentialKind::Value(CredentialShape::AwsAccessKeyId), .. }
                    if pointer == "/text")
            },
        },
        Case {
            name: "GitHub token in an array at depth",
            event: event(
                "test.note",
                "1.0.0",
                json!({"note_id": NOTE_ID, "meta": {"a": {"b": [0, {"c": ["ghp_16C7e42F292c6912E7710c838347Ae178B4a"]}]}}}),
            ),
            reason: "credential_value",
            secret: Some("16C7e42F292c6912E7710c838347Ae178B4a"),
            check: |r| {
                matches!(r, Rejection::CredentialShaped { pointer, what: CredentialKind::Value(CredentialShape::GitHubToken), .. }
                    if pointer == "/meta/a/b/1/c/0")
            },
        },
        Case {
            name: "Slack token as an object key",
            event: event(
                "test.note",
                "1.0.0",
                json!({"note_id": NOTE_ID, "meta": {"xoxb-2620512345-4212345678901-AbCdEfGhIjKl": 1}}),
            ),
            reason: "credential_value",
            secret: Some("2620512345-4212345678901"),
            check: |r| {
                matches!(r, Rejection::CredentialShaped { pointer, what: CredentialKind::Value(CredentialShape::SlackToken), .. }
                    if pointer == "/meta/*")
            },
        },
        Case {
            name: "basic credentials",
            event: event(
                "test.note",
                "1.0.0",
                with_text("Authorization: Basic aHVudGVyOmh1bnRlcjI="),
            ),
            reason: "credential_value",
            secret: Some("aHVudGVyOmh1bnRlcjI"),
            check: |r| {
                matches!(
                    r,
                    Rejection::CredentialShaped {
                        what: CredentialKind::Value(CredentialShape::BasicAuth),
                        ..
                    }
                )
            },
        },
        Case {
            name: "lower-case PEM header",
            event: event(
                "test.note",
                "1.0.0",
                with_text("-----begin private key-----\nMIIEvQhunter2"),
            ),
            reason: "credential_value",
            secret: Some("hunter2"),
            check: |r| {
                matches!(
                    r,
                    Rejection::CredentialShaped {
                        what: CredentialKind::Value(CredentialShape::PemBlock),
                        ..
                    }
                )
            },
        },
        Case {
            name: "apikey key without separators",
            event: event(
                "test.note",
                "1.0.0",
                json!({"note_id": NOTE_ID, "meta": {"APIKEY": "hunter2"}}),
            ),
            reason: "credential_key",
            secret: Some("hunter2"),
            check: |r| {
                matches!(r, Rejection::CredentialShaped { pointer, what: CredentialKind::Key(name), .. }
                    if pointer == "/meta/APIKEY" && name == "api_key")
            },
        },
        Case {
            name: "credential as a name/value pair",
            event: event(
                "test.note",
                "1.0.0",
                json!({"note_id": NOTE_ID, "meta": {"env": [{"name": "DB_PWD", "value": "hunter2"}]}}),
            ),
            reason: "credential_key",
            secret: Some("hunter2"),
            check: |r| {
                matches!(r, Rejection::CredentialShaped { pointer, what: CredentialKind::Key(name), .. }
                    if pointer == "/meta/env/0/value" && name == "pwd")
            },
        },
        Case {
            name: "oversize",
            event: event("test.note", "1.0.0", with_text(&"hunter2 ".repeat(80))),
            reason: "oversize",
            secret: Some("hunter2"),
            check: |r| matches!(r, Rejection::Oversize { bytes, cap: 512, .. } if *bytes > 512),
        },
        Case {
            name: "oversize beats a schema violation and a credential",
            event: event(
                "test.note",
                "1.0.0",
                json!({"count": -1, "text": format!("{JWT} {}", "hunter2 ".repeat(80))}),
            ),
            reason: "oversize",
            secret: Some("hunter2"),
            check: |r| matches!(r, Rejection::Oversize { bytes, cap: 512, .. } if *bytes > 512),
        },
    ]
}

#[tokio::test]
async fn every_reject_class_returns_its_error_and_leaves_only_a_reject_row() -> TestResult {
    with_database(|pool| async move {
        let store = store(&pool);
        let mut listener = listener(&pool).await?;
        let cases = cases();
        for (index, case) in cases.iter().enumerate() {
            let name = case.name;
            let mut tx = pool.begin().await?;
            let error = store
                .publisher(&mut tx)
                .publish(case.event.clone())
                .await
                .expect_err(name);
            let AppendError::Rejected(rejection) = &error else {
                panic!("{name}: not a rejection: {error}");
            };
            assert!((case.check)(rejection), "{name}: {rejection:?}");
            assert_eq!(rejection.reason_code(), case.reason, "{name}");
            if let Some(secret) = case.secret {
                for text in [error.to_string(), format!("{error:?}")] {
                    assert!(
                        !text.contains(secret),
                        "{name}: error shows {secret}: {text}"
                    );
                }
            }
            // The caller rolls back; the audit row stays.
            tx.rollback().await?;

            let rows = store.rejects(1_000).await?;
            assert_eq!(rows.len(), index + 1, "{name}: one reject row per refusal");
            let row = &rows[index];
            assert_eq!(row.event_type, case.event.event_type);
            assert_eq!(row.version.as_deref(), Some(case.event.version));
            assert_eq!(row.reason_code, case.reason);
            // The keyed digest of the canonical payload; a payload refused for its size is
            // never serialized, so it has none.
            let digest = if case.reason == "oversize" {
                String::new()
            } else {
                digest_key().digest_hex(canonical_json(&case.event.payload).as_bytes())
            };
            assert_eq!(row.payload_digest, digest, "{name}");
            assert_eq!(store.count_events(&[]).await?, 0, "{name}");
            assert_eq!(count_all_deliveries(&store).await?, 0, "{name}");
        }
        // No reject table column can hold the payload.
        let columns: Vec<String> = sqlx::query_scalar(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_name = 'evc_validation_rejects' ORDER BY ordinal_position",
        )
        .fetch_all(&pool)
        .await?;
        assert!(!columns.iter().any(|c| c == "payload"));
        assert_eq!(
            notifications(&mut listener, 0, Duration::from_millis(300)).await,
            Vec::<String>::new()
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn repeated_idempotency_key_returns_the_first_event_and_writes_nothing() -> TestResult {
    with_database(|pool| async move {
        let store = store(&pool);
        let mut tx = pool.begin().await?;
        let first = store
            .publisher(&mut tx)
            .with_options(AppendOptions::new().idempotency_key("key-1"))
            .publish(event("test.note", "1.0.0", note(NOTE_ID)))
            .await?;
        tx.commit().await?;
        assert!(first.created);

        let mut tx = pool.begin().await?;
        let mut publisher = store.publisher(&mut tx);
        publisher.idempotency_key("key-1");
        let again = publisher
            .publish(event("test.note", "1.0.0", note(NOTE_ID)))
            .await?;
        assert_eq!(again.event_id, first.event_id);
        assert_eq!(again.seq, first.seq);
        assert!(!again.created);
        assert_eq!(again.deliveries, 0);
        // The key applied to one event only: the next publish is a new event.
        let next = publisher
            .publish(event("test.note", "1.0.0", note(NOTE_ID)))
            .await?;
        assert!(next.created);
        assert_ne!(next.event_id, first.event_id);
        // Keys are unique per producer class: `pinger` may use the same key.
        publisher.idempotency_key("key-1");
        let other_class = publisher
            .publish(event("test.ping", "1.0.0", json!({})))
            .await?;
        assert!(other_class.created);
        tx.commit().await?;

        assert_eq!(store.count_events(&[]).await?, 3);
        assert_eq!(count_all_deliveries(&store).await?, 2 + 2 + 1);

        // The same in a batch, the repeated key inside the batch too.
        let mut tx = pool.begin().await?;
        let keyed = |key: &str| {
            NewEvent::new(
                event("test.note", "1.0.0", note(NOTE_ID)),
                AppendOptions::new().idempotency_key(key),
            )
        };
        let receipts = store
            .append_batch(
                &mut tx,
                vec![keyed("key-1"), keyed("key-2"), keyed("key-2")],
            )
            .await?;
        tx.commit().await?;
        assert_eq!(receipts[0].event_id, first.event_id);
        assert!(!receipts[0].created);
        assert!(receipts[1].created);
        assert_eq!(receipts[2].event_id, receipts[1].event_id);
        assert!(!receipts[2].created);
        assert_eq!(store.count_events(&[]).await?, 4);
        assert_eq!(count_all_deliveries(&store).await?, 2 + 2 + 1 + 2);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn batch_append_writes_every_event_and_delivery_in_order() -> TestResult {
    // Without idempotency keys the batch goes through COPY; with them, through INSERT.
    batch_append_in_order(false).await
}

#[tokio::test]
async fn batch_append_with_idempotency_keys_writes_every_event_and_delivery_in_order() -> TestResult
{
    batch_append_in_order(true).await
}

async fn batch_append_in_order(keyed: bool) -> TestResult {
    with_database(move |pool| async move {
        let store = store(&pool);
        let mut listener = listener(&pool).await?;
        let events: Vec<NewEvent> = (0..1_000)
            .map(|i| {
                let mut options = AppendOptions::new();
                if keyed && i % 2 == 0 {
                    options = options.idempotency_key(format!("key-{i}"));
                }
                if i % 4 == 0 {
                    NewEvent::new(event("test.ping", "1.0.0", json!({"i": i})), options)
                } else {
                    // A backslash, a tab and a newline in the payload survive COPY escaping.
                    let id = format!("01890a5d-ac96-774b-bcce-{i:012x}");
                    let mut payload = note(&id);
                    payload["text"] = json!(format!("line\\{i}\tcol\nnext"));
                    NewEvent::new(
                        event("test.note", "1.0.0", payload),
                        options.tenant_scope("tenant-b"),
                    )
                }
            })
            .collect();
        let payloads: Vec<serde_json::Value> =
            events.iter().map(|e| e.event.payload.clone()).collect();
        let mut tx = pool.begin().await?;
        let receipts = store.append_batch(&mut tx, events).await?;
        assert_eq!(
            notifications(&mut listener, 0, Duration::from_millis(200)).await,
            Vec::<String>::new()
        );
        tx.commit().await?;
        assert_eq!(receipts.len(), 1_000);
        assert!(receipts.iter().all(|r| r.created));
        assert!(
            receipts.windows(2).all(|w| w[0].seq < w[1].seq),
            "seq follows the batch order"
        );
        let ids: BTreeSet<_> = receipts.iter().map(|r| r.event_id).collect();
        assert_eq!(ids.len(), 1_000);
        assert_eq!(store.count_events(&[]).await?, 1_000);
        assert_eq!(count_all_deliveries(&store).await?, 250 + 750 * 2);
        let delivered: u32 = receipts.iter().map(|r| r.deliveries).sum();
        assert_eq!(delivered, 250 + 750 * 2);
        // Receipts name the rows written (the only 1,000 events), in the batch order.
        let mut stored = std::collections::HashMap::new();
        let mut keys = 0;
        for receipt in &receipts {
            let event = store
                .event(receipt.event_id)
                .await?
                .ok_or("receipted event not stored")?;
            assert_eq!(event.seq, receipt.seq);
            keys += usize::from(event.idempotency_key.is_some());
            stored.insert(receipt.event_id, event);
        }
        assert_eq!(keys, if keyed { 500 } else { 0 });
        // Claimed, every delivery reads back its event's payload exactly (the backslash, tab
        // and newline of the notes' text survive), carries its event's seq, and the order key
        // only for the consumer that orders per key (c.live).
        let position: std::collections::HashMap<uuid::Uuid, usize> = receipts
            .iter()
            .enumerate()
            .map(|(i, r)| (r.event_id, i))
            .collect();
        let mut texts = 0;
        for (consumer, deliveries) in [("c.live", 1_000), ("c.shadow", 750)] {
            let claimed = support::claim(
                &store,
                consumer,
                "reader",
                2_000,
                Duration::from_secs(60),
                false,
            )
            .await?;
            assert_eq!(claimed.len(), deliveries, "{consumer}");
            for delivery in &claimed {
                let i = position[&delivery.lease.event_id];
                assert_eq!(delivery.payload, payloads[i], "{consumer} event {i}");
                if delivery.payload["text"] == json!(format!("line\\{i}\tcol\nnext")) {
                    texts += 1;
                }
            }
            let leases = store.leases(consumer).await?;
            assert_eq!(leases.len(), deliveries, "{consumer}");
            for lease in &leases {
                let event = &stored[&lease.event_id];
                let key = (consumer == "c.live").then(|| event.order_key.clone());
                assert_eq!((lease.event_seq, &lease.order_key), (event.seq, &key));
            }
        }
        assert_eq!(texts, 750 * 2, "payload text round-trips exactly");
        // One notification per consumer that got deliveries.
        assert_eq!(
            notifications(&mut listener, 2, Duration::from_millis(500)).await,
            ["c.live", "c.shadow"]
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn batch_with_one_refused_event_writes_only_its_reject_row() -> TestResult {
    with_database(|pool| async move {
        let store = store(&pool);
        let mut events: Vec<NewEvent> = (0..100)
            .map(|_| NewEvent::from(event("test.note", "1.0.0", note(NOTE_ID))))
            .collect();
        events[57] = NewEvent::from(event("test.note", "1.0.0", with_text(JWT)));
        let digest = digest_key().digest_hex(canonical_json(&events[57].event.payload).as_bytes());
        let mut connection = pool.acquire().await?;
        let mut tx = connection.begin().await?;
        let error = store
            .append_batch(&mut tx, events)
            .await
            .expect_err("refused");
        tx.rollback().await?;
        assert!(
            matches!(
                &error,
                AppendError::BatchRejected {
                    index: 57,
                    rejected: 1,
                    rejection: Rejection::CredentialShaped { .. }
                }
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("event 57"));
        assert!(!format!("{error} {error:?}").contains("dozjgNryP4J3jVmNHl0w5N"));
        assert_eq!(store.count_events(&[]).await?, 0);
        assert_eq!(count_all_deliveries(&store).await?, 0);
        let rows: Vec<(String, String)> = store
            .rejects(1_000)
            .await?
            .into_iter()
            .map(|r| (r.reason_code, r.payload_digest))
            .collect();
        assert_eq!(rows, [("credential_value".to_owned(), digest)]);
        Ok(())
    })
    .await
}

/// `{"a": [[...[1]...]]}`, `levels` arrays and objects deep.
fn nested(levels: usize) -> serde_json::Value {
    let mut value = json!(1);
    for _ in 1..levels {
        value = json!([value]);
    }
    json!({ "a": value })
}

#[tokio::test]
async fn a_payload_deeper_than_serde_json_reads_is_refused_and_the_deepest_allowed_is_claimed()
-> TestResult {
    with_database(|pool| async move {
        let store = store(&pool);
        let mut connection = pool.acquire().await?;
        // One level more than the dispatcher can parse back: a delivery that no claim could
        // ever read (the claim fails, the lease expires, the claim fails again).
        let error = store
            .append(
                &mut connection,
                event("test.ping", "1.0.0", nested(MAX_PAYLOAD_DEPTH + 1)),
                AppendOptions::new(),
            )
            .await
            .expect_err("refused");
        assert_eq!(
            error.rejection().map(Rejection::reason_code),
            Some("too_deep"),
            "{error}"
        );
        assert_eq!(store.count_events(&[]).await?, 0);

        let deepest = nested(MAX_PAYLOAD_DEPTH);
        store
            .append(
                &mut connection,
                event("test.ping", "1.0.0", deepest.clone()),
                AppendOptions::new(),
            )
            .await?;
        let claimed = support::claim(
            &store,
            "c.live",
            "owner-1",
            10,
            Duration::from_secs(30),
            true,
        )
        .await?;
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].payload, deepest);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_reject_digest_does_not_give_a_low_entropy_payload_away() -> TestResult {
    with_database(|pool| async move {
        let pin = || event("test.note", "9.0.0", json!({"pin": "1234"}));
        let other_key =
            DigestKey::new("another-deployment-key-0123456789abcdef").expect("long enough");
        // The same key in two stores (two processes of one deployment), another key, no key.
        let stores = [
            store(&pool),
            store(&pool),
            store_with(&pool, Some(other_key.clone())),
            store_with(&pool, None),
        ];
        let mut connection = pool.acquire().await?;
        for store in &stores {
            store
                .append(&mut connection, pin(), AppendOptions::new())
                .await
                .expect_err("unregistered version");
        }
        let digests: Vec<String> = stores[0]
            .rejects(1_000)
            .await?
            .into_iter()
            .map(|r| r.payload_digest)
            .collect();
        assert_eq!(digests.len(), stores.len(), "one reject row per refusal");
        let canonical = canonical_json(&pin().payload);
        assert_eq!(digests[0], digest_key().digest_hex(canonical.as_bytes()));
        assert_ne!(
            digests[0],
            sha256_hex(canonical.as_bytes()),
            "not the bare SHA-256"
        );
        assert_eq!(digests[1], digests[0], "one key, comparable digests");
        assert_eq!(digests[2], other_key.digest_hex(canonical.as_bytes()));
        assert_ne!(digests[2], digests[0], "another key, another digest");
        assert_eq!(digests[3], "", "no key, no digest");
        // Whoever reads the reject table tries every four-digit PIN, digested as a bare
        // SHA-256 of the canonical payload would be.
        for digest in &digests {
            let recovered = (0..10_000).map(|n| format!("{n:04}")).find(|pin| {
                sha256_hex(canonical_json(&json!({ "pin": pin })).as_bytes()) == *digest
            });
            assert_eq!(
                recovered, None,
                "the reject row's digest gives the PIN away"
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_credential_in_an_envelope_field_is_refused() -> TestResult {
    with_database(|pool| async move {
        let store = store(&pool);
        let options = [
            AppendOptions::new().correlation_id(format!("Bearer {JWT}")),
            AppendOptions::new().causation_id(JWT),
            AppendOptions::new().idempotency_key("ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
            AppendOptions::new().tenant_scope("postgres://app:hunter2@db/prod"),
            AppendOptions::new().aggregate_key("AKIAIOSFODNN7EXAMPLE"),
        ];
        let mut connection = pool.acquire().await?;
        for (index, options) in options.into_iter().enumerate() {
            let error = store
                .append(
                    &mut connection,
                    event("test.note", "1.0.0", note(NOTE_ID)),
                    options,
                )
                .await
                .expect_err("refused");
            let text = format!("{error} {error:?}");
            for secret in [
                "dozjgNryP4J3jVmNHl0w5N",
                "16C7e42F292c6912",
                "hunter2",
                "IOSFODNN7",
            ] {
                assert!(
                    !text.contains(secret),
                    "{index}: error shows {secret}: {text}"
                );
            }
            assert_eq!(
                error.rejection().map(Rejection::reason_code),
                Some("credential_envelope"),
                "{index}: {error}"
            );
        }
        // In a batch too.
        let mut events: Vec<NewEvent> = (0..3)
            .map(|_| NewEvent::from(event("test.note", "1.0.0", note(NOTE_ID))))
            .collect();
        events[1].options = AppendOptions::new().correlation_id(JWT);
        let error = store
            .append_batch(&mut connection, events)
            .await
            .expect_err("refused");
        assert!(
            matches!(
                &error,
                AppendError::BatchRejected {
                    index: 1,
                    rejected: 1,
                    rejection: Rejection::CredentialInEnvelope { field, .. }
                } if field == "correlation_id"
            ),
            "{error:?}"
        );
        assert!(!format!("{error} {error:?}").contains("dozjgNryP4J3jVmNHl0w5N"));
        assert_eq!(store.count_events(&[]).await?, 0);
        assert_eq!(store.rejects(1_000).await?.len(), 6);
        Ok(())
    })
    .await
}

/// `PgStore::copy_rows_out` reads back what a batch append wrote, and `copy_rows_in` loads
/// exactly those rows into another database, where the store reads them as its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copied_rows_load_into_another_database_unchanged() -> TestResult {
    with_database(|source| async move {
        let store = evc_runtime::PgStore::new(source, support::DISPATCH_REGISTRY)?;
        support::append_notes(&store, 40, 8).await?;
        let rows = store.copy_rows_out().await?;
        assert!(!rows.is_empty());
        with_database(move |target| async move {
            let copied = evc_runtime::PgStore::new(target.clone(), support::DISPATCH_REGISTRY)?;
            let mut tx = target.begin().await?;
            evc_runtime::PgStore::copy_rows_in(&mut tx, &rows).await?;
            tx.commit().await?;
            assert_eq!(copied.copy_rows_out().await?, rows);
            assert_eq!(copied.count_deliveries("d.unordered", &[]).await?, 40);
            Ok(())
        })
        .await
    })
    .await
}
