//! The ledger tables against a real server, written by hand as an application bug or a
//! non-owner role would write them: `UPDATE`, `DELETE` and `TRUNCATE` are refused on every
//! append-only table, a hand-set `evc.purge` setting opens nothing, a payload over the hard cap
//! is refused by the database itself, and the retention purge removes old settled rows (never a
//! delivery still open) and writes its audit row.

use crate::support;

use std::time::{Duration, SystemTime};

use crate::support::{TestResult, append_notes, count, dispatch_store, with_database};
use evc_runtime::{PgStore, PurgeError, Store};
use sqlx::postgres::PgPool;
use sqlx::{AssertSqlSafe, Connection};

/// Every append-only table and a `WHERE` that names its rows (for `UPDATE` and `DELETE`).
const LEDGERS: &[(&str, &str)] = &[
    ("evc_events", "order_key = order_key"),
    ("evc_delivery_attempts", "outcome = outcome"),
    ("evc_acked_batches", "owner = owner"),
    ("evc_validation_rejects", "reason_code = reason_code"),
    ("evc_replays", "reason = reason"),
    ("evc_replay_items", "consumer = consumer"),
    ("evc_reconciliations", "consumer = consumer"),
    ("evc_consumer_effects", "consumer = consumer"),
    ("evc_purges", "reason = reason"),
    ("evc_discards", "reason = reason"),
    ("evc_plans", "planned_by = planned_by"),
];

/// One row in every append-only table, written as the runtime writes them.
async fn one_row_each(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(
        "INSERT INTO evc_events (event_id, event_type, schema_version, order_key, \
             producer_class, payload, payload_bytes) \
         VALUES ('01890a5d-ac96-774b-bcce-000000000001', 't', '1.0.0', 'k', 'p', '{}', 2); \
         INSERT INTO evc_delivery_attempts (event_id, consumer, attempt, owner, fencing_token, \
             started_at, finished_at, outcome, duration_ms) \
         VALUES ('01890a5d-ac96-774b-bcce-000000000001', 'c', 1, 'w', 1, now(), now(), \
             'acked', 0); \
         INSERT INTO evc_acked_batches (consumer, owner, seq_bucket, finished_at, event_ids, \
             generations, attempts, fencing_tokens, started_at) \
         VALUES ('c', 'w', 0, now(), '{01890a5d-ac96-774b-bcce-000000000001}', '{0}', '{1}', \
             '{1}', ARRAY[now()]); \
         INSERT INTO evc_validation_rejects (event_type, reason_code, payload_digest) \
         VALUES ('t', 'oversize', 'd'); \
         INSERT INTO evc_plans (kind, consumer, plan_digest, deliveries, planned_by) \
         VALUES ('replay', 'c', 'd', 1, 'alice'), ('discard', 'c', 'd', 1, 'alice'); \
         INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, idempotency_key, \
             plan_id, approved_by) \
         SELECT 'c', 'd', 'why', 'CHG-1', 'k-1', id, 'bob' FROM evc_plans WHERE kind = 'replay'; \
         INSERT INTO evc_replay_items (replay_id, event_id, consumer, generation, \
             replayed_from, schema_version) \
         SELECT id, '01890a5d-ac96-774b-bcce-000000000001', 'c', 0, 'dead', '1.0.0' \
         FROM evc_replays; \
         INSERT INTO evc_reconciliations (consumer, event_id, fencing_token, intended) \
         VALUES ('c', '01890a5d-ac96-774b-bcce-000000000001', 1, '[]'); \
         INSERT INTO evc_consumer_effects (consumer, effect_key, event_id, outcome_digest) \
         VALUES ('c', 'e', '01890a5d-ac96-774b-bcce-000000000001', 'd'); \
         INSERT INTO evc_discards (consumer, plan_digest, reason, approval_ref, \
             idempotency_key, deliveries, items, plan_id, approved_by) \
         SELECT 'c', 'd', 'poison', 'INC-1', 'd-1', 1, '[]', id, 'bob' FROM evc_plans \
         WHERE kind = 'discard'",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The error `statement` ends with, as text (`None`: it succeeded).
async fn refusal(pool: &PgPool, statement: String) -> Option<String> {
    sqlx::raw_sql(AssertSqlSafe(statement))
        .execute(pool)
        .await
        .err()
        .map(|error| error.to_string())
}

#[tokio::test]
async fn ledger_rows_cannot_be_updated_deleted_or_truncated() -> TestResult {
    with_database(|pool| async move {
        one_row_each(&pool).await?;
        // The purge audit table gets its row from a purge that finds nothing to remove.
        let store = PgStore::new(pool.clone(), support::TEST_REGISTRY)?;
        store
            .purge_events(SystemTime::UNIX_EPOCH, "retention", "ops@example")
            .await?;
        for (table, matching) in LEDGERS {
            let before = count(&pool, table).await?;
            assert!(before >= 1, "{table} has its rows");
            for statement in [
                format!("UPDATE {table} SET {matching} WHERE {matching}"),
                format!("DELETE FROM {table} WHERE {matching}"),
                // CASCADE: a foreign key alone (evc_replay_items on evc_replays) is no guard.
                format!("TRUNCATE {table} CASCADE"),
            ] {
                let refused = refusal(&pool, statement.clone()).await;
                let message = refused.unwrap_or_else(|| panic!("accepted: {statement}"));
                assert!(
                    message.contains(&format!("{table} is append-only")),
                    "{statement}: {message}"
                );
            }
            assert_eq!(count(&pool, table).await?, before, "{table} kept its row");
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_hand_set_purge_setting_opens_nothing() -> TestResult {
    with_database(|pool| async move {
        one_row_each(&pool).await?;
        let mut connection = pool.acquire().await?;
        // The setting the purge function uses, set by hand, in and out of a transaction.
        for value in ["on", "1", "true"] {
            let mut tx = connection.begin().await?;
            sqlx::query("SELECT set_config('evc.purge', $1, true)")
                .bind(value)
                .execute(&mut *tx)
                .await?;
            let deleted = sqlx::query("DELETE FROM evc_events")
                .execute(&mut *tx)
                .await;
            let message = deleted.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                message.contains("evc_events is append-only"),
                "evc.purge = {value}: {message:?}"
            );
            tx.rollback().await?;
        }
        // The id of an earlier purge's audit row, from another transaction, opens nothing
        // either.
        let store = PgStore::new(pool.clone(), support::TEST_REGISTRY)?;
        let purge = store
            .purge_events(SystemTime::UNIX_EPOCH, "retention", "ops@example")
            .await?;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "SET evc.purge = '{}'",
            purge.purge_id
        )))
        .execute(&mut *connection)
        .await?;
        let deleted = sqlx::query("DELETE FROM evc_delivery_attempts")
            .execute(&mut *connection)
            .await;
        assert!(
            deleted.is_err(),
            "a session-wide evc.purge deleted attempts"
        );
        assert_eq!(count(&pool, "evc_events").await?, 1);
        assert_eq!(count(&pool, "evc_delivery_attempts").await?, 1);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn the_database_refuses_a_payload_over_the_hard_cap() -> TestResult {
    with_database(|pool| async move {
        let cap = support::TEST_REGISTRY.payload_policy.hard_max_bytes as usize;
        let insert = "INSERT INTO evc_events (event_id, event_type, schema_version, order_key, \
                      producer_class, payload, payload_bytes) \
                      VALUES ($1::uuid, 't', '1.0.0', 'k', 'p', $2::jsonb, 2)";
        // `{"a":"xx…"}`: 8 bytes around the string. At the cap: accepted.
        let at_cap = format!(r#"{{"a":"{}"}}"#, "x".repeat(cap - 8));
        assert_eq!(at_cap.len(), cap);
        sqlx::query(insert)
            .bind("01890a5d-ac96-774b-bcce-000000000001")
            .bind(&at_cap)
            .execute(&pool)
            .await?;
        // One byte over, and a megabyte over, with a lying `payload_bytes`: refused, and the
        // refusal quotes nothing of the payload (a CHECK constraint's error carries the failing
        // row in its DETAIL, which reaches the client's error and the server's log).
        for (id, size) in [("02", cap + 1), ("03", 1 << 20)] {
            let marker = "payload-marker-";
            let text = marker.repeat(size / marker.len() + 1);
            let over = format!(r#"{{"a":"{}"}}"#, &text[..size - 8]);
            let result = sqlx::query(insert)
                .bind(format!("01890a5d-ac96-774b-bcce-0000000000{id}"))
                .bind(&over)
                .execute(&pool)
                .await;
            let error = result.expect_err("an oversize payload was stored");
            let code = error
                .as_database_error()
                .and_then(|e| e.code())
                .map(|c| c.into_owned());
            assert_eq!(code.as_deref(), Some("23514"), "a check violation: {error}");
            assert!(
                error.to_string().contains("evc_events_payload_cap"),
                "{error}"
            );
            let database = error
                .as_database_error()
                .and_then(|e| e.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
                .expect("a PostgreSQL error");
            for part in [
                Some(database.message()),
                database.detail(),
                database.hint(),
                database.r#where(),
            ] {
                assert!(
                    !part.unwrap_or("").contains(marker),
                    "the refusal quotes the payload: {}",
                    &part.unwrap_or("")[..200.min(part.unwrap_or("").len())]
                );
            }
            assert!(
                !format!("{error:?}").contains(marker),
                "Debug quotes the payload"
            );
        }
        assert_eq!(count(&pool, "evc_events").await?, 1);

        // Switched off (the outbox benchmark's run without it), the cap lets the payload in;
        // switched on again, it refuses the next one.
        let over = format!(r#"{{"a":"{}"}}"#, "x".repeat(cap - 7));
        let store = PgStore::new(pool.clone(), support::TEST_REGISTRY)?;
        store.set_payload_cap(false).await?;
        sqlx::query(insert)
            .bind("01890a5d-ac96-774b-bcce-000000000004")
            .bind(&over)
            .execute(&pool)
            .await?;
        store.set_payload_cap(true).await?;
        let refused = sqlx::query(insert)
            .bind("01890a5d-ac96-774b-bcce-000000000005")
            .bind(&over)
            .execute(&pool)
            .await;
        assert!(
            refused.is_err_and(|error| error.to_string().contains("evc_events_payload_cap")),
            "the cap is on again"
        );
        assert_eq!(count(&pool, "evc_events").await?, 2);
        Ok(())
    })
    .await
}

/// `COPY` (the batch append's path) writes a page of rows per WAL record only into a table
/// without a `BEFORE INSERT` row trigger, so the cap is an `AFTER INSERT` trigger: it still
/// refuses an oversize row inside a `COPY`, which then writes nothing, and one under a free
/// idempotency key; under a taken key, `ON CONFLICT DO NOTHING` skips it first.
#[tokio::test]
async fn the_cap_leaves_copy_its_batches_and_still_refuses_inside_one() -> TestResult {
    with_database(|pool| async move {
        // Row, before, insert: the bits of `tgtype` that make `COPY` insert row by row.
        let before_insert: Vec<String> = sqlx::query_scalar(
            "SELECT tgname::text FROM pg_trigger \
             WHERE tgrelid = 'evc_events'::regclass AND NOT tgisinternal AND tgtype & 7 = 7",
        )
        .fetch_all(&pool)
        .await?;
        assert!(
            before_insert.is_empty(),
            "BEFORE INSERT row triggers on evc_events: {before_insert:?}"
        );

        let cap = support::TEST_REGISTRY.payload_policy.hard_max_bytes as usize;
        let copy = "COPY evc_events (event_id, event_type, schema_version, order_key, \
                    producer_class, payload, payload_bytes) FROM STDIN";
        let row = |n: u32, payload: &str| {
            format!("01890a5d-ac96-774b-bcce-{n:012}\tt\t1.0.0\tk\tp\t{payload}\t2\n")
        };
        let mut connection = pool.acquire().await?;

        // Under the cap: copied.
        let mut rows = String::new();
        for n in 1..=3 {
            rows.push_str(&row(n, r#"{"a":"x"}"#));
        }
        let mut sink = connection.copy_in_raw(copy).await?;
        sink.send(rows.as_bytes()).await?;
        sink.finish().await?;
        assert_eq!(count(&pool, "evc_events").await?, 3);

        // One row over the cap among rows under it: the whole COPY is refused, and the
        // refusal quotes nothing of the payload.
        let marker = "payload-marker-";
        let text = marker.repeat(cap / marker.len() + 1);
        let mut rows = row(4, r#"{"a":"x"}"#);
        rows.push_str(&row(5, &format!(r#"{{"a":"{text}"}}"#)));
        rows.push_str(&row(6, r#"{"a":"x"}"#));
        let mut sink = connection.copy_in_raw(copy).await?;
        sink.send(rows.as_bytes()).await?;
        let error = sink
            .finish()
            .await
            .expect_err("an oversize payload was copied");
        let database = error
            .as_database_error()
            .and_then(|e| e.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
            .expect("a PostgreSQL error");
        assert_eq!(database.code(), "23514", "a check violation: {error}");
        assert!(
            database.message().contains("evc_events_payload_cap"),
            "{error}"
        );
        for part in [
            Some(database.message()),
            database.detail(),
            database.hint(),
            database.r#where(),
        ] {
            assert!(
                !part.unwrap_or("").contains(marker),
                "the refusal quotes the payload"
            );
        }
        assert!(
            !format!("{error:?}").contains(marker),
            "Debug quotes the payload"
        );
        assert_eq!(count(&pool, "evc_events").await?, 3);

        // An idempotent insert: an oversize row whose key is taken is skipped before the
        // trigger would run (stored neither way, the first row kept); under a free key it is
        // refused.
        let keyed = "INSERT INTO evc_events (event_id, event_type, schema_version, order_key, \
                     producer_class, idempotency_key, payload, payload_bytes) \
                     VALUES ($1::uuid, 't', '1.0.0', 'k', 'p', $2, $3::jsonb, 2) \
                     ON CONFLICT DO NOTHING";
        let oversize = format!(r#"{{"a":"{text}"}}"#);
        let first = sqlx::query(keyed)
            .bind("01890a5d-ac96-774b-bcce-000000000007")
            .bind("key-1")
            .bind(r#"{"a":"x"}"#)
            .execute(&pool)
            .await?;
        assert_eq!(first.rows_affected(), 1);
        let again = sqlx::query(keyed)
            .bind("01890a5d-ac96-774b-bcce-000000000008")
            .bind("key-1")
            .bind(&oversize)
            .execute(&pool)
            .await?;
        assert_eq!(again.rows_affected(), 0, "the taken key's row was skipped");
        let refused = sqlx::query(keyed)
            .bind("01890a5d-ac96-774b-bcce-000000000009")
            .bind("key-2")
            .bind(&oversize)
            .execute(&pool)
            .await;
        assert!(
            refused.is_err_and(|error| error.to_string().contains("evc_events_payload_cap")),
            "an oversize row under a free key is refused"
        );
        assert_eq!(count(&pool, "evc_events").await?, 4);
        let kept: String = sqlx::query_scalar(
            "SELECT payload::text FROM evc_events WHERE idempotency_key = 'key-1'",
        )
        .fetch_one(&pool)
        .await?;
        assert_eq!(kept, r#"{"a": "x"}"#);
        Ok(())
    })
    .await
}

const LEASE: Duration = Duration::from_secs(30);

/// The database's clock now, for a cutoff between two appends.
async fn database_now(pool: &PgPool) -> Result<SystemTime, sqlx::Error> {
    let seconds: f64 = sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
        .fetch_one(pool)
        .await?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs_f64(seconds))
}

/// `(event_id, consumer)` rows of `table` for the notes with `count` in `counts`.
async fn rows_of(pool: &PgPool, table: &str, counts: &[i64]) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM {table} t JOIN evc_events e ON e.event_id = t.event_id \
         WHERE (e.payload->>'count')::int8 = ANY($1)"
    )))
    .bind(counts)
    .fetch_one(pool)
    .await
}

/// The attempts recorded of the notes with `count` in `counts`: attempt rows, and acked
/// attempts in their batch rows.
async fn attempts_of(pool: &PgPool, counts: &[i64]) -> Result<i64, sqlx::Error> {
    let batched: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM evc_acked_batches b \
         CROSS JOIN LATERAL unnest(b.event_ids) AS u (event_id) \
         JOIN evc_events e ON e.event_id = u.event_id \
         WHERE (e.payload->>'count')::int8 = ANY($1)",
    )
    .bind(counts)
    .fetch_one(pool)
    .await?;
    Ok(rows_of(pool, "evc_delivery_attempts", counts).await? + batched)
}

/// Every attempt recorded: attempt rows, and acked attempts in their batch rows.
async fn all_attempts(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM evc_delivery_attempts) \
             + (SELECT coalesce(sum(cardinality(event_ids)), 0) FROM evc_acked_batches)::int8",
    )
    .fetch_one(pool)
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_removes_old_settled_rows_keeps_open_ones_and_is_audited() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        // Notes 0..3 on four keys, each delivered to d.leased, d.tx and d.unordered.
        append_notes(&store, 4, 4).await?;
        let mut open = None;
        for (consumer, per_key) in [("d.leased", true), ("d.tx", true), ("d.unordered", false)] {
            let claimed = support::claim(&store, consumer, "w/1", 10, LEASE, per_key).await?;
            assert_eq!(claimed.len(), 4, "{consumer}");
            for c in claimed {
                let count = c.payload["count"].as_i64();
                match (consumer, count) {
                    // Note 3 stays open (leased) for d.leased.
                    ("d.leased", Some(3)) => open = Some(c.lease),
                    // Note 0 dead-letters for d.unordered: settled, its row stays.
                    ("d.unordered", Some(0)) => {
                        store
                            .fail(
                                &c.lease,
                                evc_runtime::FailureClass::Permanent,
                                "boom",
                                evc_runtime::RetryDecision::Dead,
                            )
                            .await?;
                    }
                    _ => support::ack_current(&store, &c.lease).await?,
                }
            }
        }
        let open = open.expect("note 3 claimed by d.leased");
        let cutoff = database_now(&pool).await?;
        // A note after the cutoff, settled everywhere: too new to purge.
        support::append_numbered(&store, "test.note", 100..101, |_| "late").await?;
        for (consumer, per_key) in [("d.leased", true), ("d.tx", true), ("d.unordered", false)] {
            for c in support::claim(&store, consumer, "w/2", 10, LEASE, per_key).await? {
                support::ack_current(&store, &c.lease).await?;
            }
        }
        assert_eq!(count(&pool, "evc_events").await?, 5);
        let attempts_before = all_attempts(&pool).await?;

        // Refused before anything is read: no audit row, nothing deleted.
        let refused = store.purge_events(cutoff, " ", "ops@example").await;
        assert!(
            matches!(refused, Err(PurgeError::ReasonMissing)),
            "{refused:?}"
        );
        assert_eq!(count(&pool, "evc_purges").await?, 0);

        let purged = store
            .purge_events(cutoff, "retention: 30 days", "ops@example")
            .await?;
        // Notes 0, 1, 2: every delivery settled; note 3 is open, note 100 is newer.
        assert_eq!(purged.events, 3);
        assert_eq!(
            purged.deliveries, 1,
            "note 0's dead delivery for d.unordered"
        );
        assert_eq!(
            purged.attempts, 9,
            "three notes, three consumers, one attempt each"
        );
        assert_eq!(attempts_of(&pool, &[0, 1, 2]).await?, 0);
        assert_eq!(count(&pool, "evc_events").await?, 2);
        assert_eq!(rows_of(&pool, "evc_deliveries", &[3]).await?, 1);
        // Note 3's acks shared batch rows with notes 0 to 2: those rows were written anew
        // with note 3's attempts alone.
        assert_eq!(attempts_of(&pool, &[3]).await?, 2);
        assert_eq!(all_attempts(&pool).await?, attempts_before - 9);
        // The audit row.
        let (ledger, reason, actor, counts, at_cutoff): (String, String, String, String, bool) =
            sqlx::query_as(
                "SELECT ledger, reason, actor, counts::text, \
                     abs(extract(epoch FROM cutoff) - $2) < 0.001 \
                 FROM evc_purges WHERE id = $1",
            )
            .bind(purged.purge_id)
            .bind(cutoff.duration_since(SystemTime::UNIX_EPOCH)?.as_secs_f64())
            .fetch_one(&pool)
            .await?;
        assert_eq!(
            (ledger.as_str(), reason.as_str(), actor.as_str()),
            ("events", "retention: 30 days", "ops@example")
        );
        let counts: serde_json::Value = serde_json::from_str(&counts)?;
        assert_eq!(counts["evc_events"], 3);
        assert_eq!(counts["evc_delivery_attempts"], 9);
        assert_eq!(counts["evc_deliveries"], 1);
        assert!(at_cutoff);
        // The purge's opening ended with it.
        assert!(
            sqlx::query("DELETE FROM evc_events")
                .execute(&pool)
                .await
                .is_err()
        );

        // Once note 3's last delivery settles, a later cutoff takes it and note 100.
        support::ack_current(&store, &open).await?;
        let later = store
            .purge_events(
                database_now(&pool).await? + Duration::from_secs(3600),
                "retention",
                "ops@example",
            )
            .await?;
        assert_eq!((later.events, later.deliveries), (2, 0));
        assert_eq!(count(&pool, "evc_events").await?, 0);
        assert_eq!(all_attempts(&pool).await?, 0);
        assert_eq!(count(&pool, "evc_purges").await?, 2);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_reject_purge_is_audited() -> TestResult {
    with_database(|pool| async move {
        sqlx::raw_sql(
            "INSERT INTO evc_validation_rejects (event_type, reason_code, payload_digest) \
             VALUES ('t', 'oversize', 'd1'), ('t', 'denied_key', 'd2')",
        )
        .execute(&pool)
        .await?;
        let store = PgStore::new(pool.clone(), support::TEST_REGISTRY)?;
        let none = store
            .purge_rejects(SystemTime::UNIX_EPOCH, "retention", "ops@example")
            .await?;
        assert_eq!(none.rejects, 0);
        let purged = store
            .purge_rejects(
                database_now(&pool).await? + Duration::from_secs(3600),
                "retention",
                "ops@example",
            )
            .await?;
        assert_eq!(purged.rejects, 2);
        assert_eq!(count(&pool, "evc_validation_rejects").await?, 0);
        let counts: Vec<String> =
            sqlx::query_scalar("SELECT counts::text FROM evc_purges ORDER BY id")
                .fetch_all(&pool)
                .await?;
        assert_eq!(
            counts,
            [
                r#"{"evc_validation_rejects": 0}"#,
                r#"{"evc_validation_rejects": 2}"#
            ]
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_keeps_the_acked_attempts_it_does_not_expire_from_a_shared_batch_row() -> TestResult
{
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        // Notes 0..2 before the cutoff, note 100 after it, each acked by every consumer in one
        // ack per consumer: one batch row per consumer holds old and new notes together.
        let old = append_notes(&store, 3, 3).await?;
        let cutoff = database_now(&pool).await?;
        support::append_numbered(&store, "test.note", 100..101, |_| "late").await?;
        let consumers = [("d.leased", true), ("d.tx", true), ("d.unordered", false)];
        for (consumer, per_key) in consumers {
            let claimed = support::claim(&store, consumer, "w/1", 10, LEASE, per_key).await?;
            assert_eq!(claimed.len(), 4, "{consumer}");
            let leases: Vec<&evc_runtime::Lease> = claimed.iter().map(|c| &c.lease).collect();
            assert_eq!(support::ack(&store, &leases).await?.acked, 4, "{consumer}");
        }
        let rows: Vec<(i64, i32)> =
            sqlx::query_as("SELECT count(*), min(cardinality(event_ids)) FROM evc_acked_batches")
                .fetch_all(&pool)
                .await?;
        assert_eq!(rows, [(3, 4)], "one row of four attempts per consumer");
        let ids = |pool: PgPool| async move {
            sqlx::query_scalar::<_, i64>("SELECT id FROM evc_acked_batches ORDER BY id")
                .fetch_all(&pool)
                .await
        };
        let ids_before = ids(pool.clone()).await?;
        let late: uuid::Uuid = sqlx::query_scalar(
            "SELECT event_id FROM evc_events WHERE (payload->>'count')::int8 = 100",
        )
        .fetch_one(&pool)
        .await?;
        let mut kept = Vec::new();
        for (consumer, _) in consumers {
            kept.push(store.attempts(late, consumer).await?);
        }

        let purged = store
            .purge_events(cutoff, "retention", "ops@example")
            .await?;
        assert_eq!((purged.events, purged.attempts), (3, 9));
        // Read by the purged events' ids, not through `evc_events` (they are gone from it).
        let old_ids: Vec<uuid::Uuid> = old.iter().map(|receipt| receipt.event_id).collect();
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM evc_acked_batches b \
             CROSS JOIN LATERAL unnest(b.event_ids) AS u (event_id) \
             WHERE u.event_id = ANY($1)",
        )
        .bind(&old_ids)
        .fetch_one(&pool)
        .await?;
        assert_eq!(left, 0, "acked attempts of purged events");
        assert_eq!(all_attempts(&pool).await?, 3);
        assert_eq!(attempts_of(&pool, &[100]).await?, 3);
        // Each row was written anew under its id: readers take the newest rows by id.
        assert_eq!(ids(pool.clone()).await?, ids_before);
        for receipt in &old {
            for (consumer, _) in consumers {
                assert!(store.attempts(receipt.event_id, consumer).await?.is_empty());
            }
        }
        // Note 100's attempts are read back as they were written.
        for ((consumer, _), before) in consumers.iter().zip(&kept) {
            assert_eq!(before.len(), 1, "{consumer}");
            assert_eq!(&store.attempts(late, consumer).await?, before, "{consumer}");
        }
        Ok(())
    })
    .await
}
