//! The generated migrations against a real PostgreSQL: they apply with `sqlx::migrate`, apply
//! again as no-ops, run raw a second time without effect, and leave exactly the registry of
//! `contracts/` in the database.
//!
//! The server comes from `DATABASE_URL` (default `postgres://root@localhost/test`); the test
//! creates its own database there and drops it at the end. When the server cannot be reached the
//! test is skipped with a message, except under `CI=true`, where that is a failure.

use std::collections::BTreeMap;
use std::path::Path;

use evc_codegen::ContractSet;
use evc_codegen::emit::{Layout, MIGRATION_NOTICE, manifest, sql};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Row};

use crate::support::{TestResult, with_empty_database};

#[tokio::test]
async fn generated_migrations_apply_idempotently_to_postgres() -> TestResult {
    with_empty_database(check).await
}

#[tokio::test]
async fn the_runtime_step_keeps_every_existing_row() -> TestResult {
    with_empty_database(runtime_step_keeps_rows).await
}

#[tokio::test]
async fn the_eighth_step_scopes_replay_keys_per_consumer() -> TestResult {
    with_empty_database(replay_keys_per_consumer).await
}

/// Whether `name` is a later runtime step (the only files that may drop what an earlier one
/// created).
fn is_runtime_step(name: &str) -> bool {
    [
        sql::RUNTIME_V2_SUFFIX,
        sql::RUNTIME_V3_SUFFIX,
        sql::RUNTIME_V4_SUFFIX,
        sql::RUNTIME_V5_SUFFIX,
        sql::RUNTIME_V6_SUFFIX,
        sql::RUNTIME_V7_SUFFIX,
        sql::RUNTIME_V8_SUFFIX,
        sql::RUNTIME_V9_SUFFIX,
        sql::RUNTIME_V10_SUFFIX,
        sql::RUNTIME_V11_SUFFIX,
        sql::RUNTIME_V12_SUFFIX,
        sql::RUNTIME_V13_SUFFIX,
        sql::RUNTIME_V14_SUFFIX,
        sql::RUNTIME_V15_SUFFIX,
        sql::RUNTIME_V16_SUFFIX,
        sql::RUNTIME_V17_SUFFIX,
        sql::RUNTIME_V18_SUFFIX,
        sql::RUNTIME_V19_SUFFIX,
        sql::RUNTIME_V20_SUFFIX,
        sql::RUNTIME_V21_SUFFIX,
        sql::RUNTIME_V22_SUFFIX,
        sql::RUNTIME_V23_SUFFIX,
        sql::RUNTIME_V24_SUFFIX,
        sql::RUNTIME_V25_SUFFIX,
        sql::RUNTIME_V26_SUFFIX,
        sql::RUNTIME_V27_SUFFIX,
        sql::RUNTIME_V28_SUFFIX,
        sql::RUNTIME_V29_SUFFIX,
        sql::RUNTIME_V30_SUFFIX,
        sql::RUNTIME_V31_SUFFIX,
        sql::RUNTIME_V32_SUFFIX,
    ]
    .iter()
    .any(|suffix| name.ends_with(suffix))
}

/// A pool of one connection to the database of `options`, with the repository contracts'
/// migrations applied except the settings file (it needs the seventh step's table and writes
/// no outbox row) and those whose name `held_back` takes: those are returned, in order.
async fn apply_all_but(
    options: PgConnectOptions,
    held_back: impl Fn(&str) -> bool,
) -> Result<(PgPool, Vec<evc_codegen::emit::Artifact>), Box<dyn std::error::Error + Send + Sync>> {
    let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    let set = ContractSet::load(&contracts)?.contracts;
    let (held, earlier): (Vec<_>, Vec<_>) = sql::render(&set, &Layout::default())?
        .into_iter()
        .filter(|artifact| !file_name(&artifact.path).contains("_evc_settings_"))
        .partition(|artifact| held_back(&file_name(&artifact.path)));
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await?;
    for artifact in earlier {
        sqlx::raw_sql(AssertSqlSafe(artifact.contents))
            .execute(&pool)
            .await?;
    }
    Ok((pool, held))
}

/// A database on the first runtime step with events, deliveries and attempts in it: the later
/// steps leave every row as it was (the third adds columns, at their defaults; the eleventh
/// gives each delivery its event's tenant).
async fn runtime_step_keeps_rows(options: PgConnectOptions) -> TestResult {
    // The registry rows last, after every step: they fill the later steps' mirror tables.
    let (pool, steps) = apply_all_but(options, |name| {
        is_runtime_step(name) || name.contains("_evc_registry_")
    })
    .await?;
    assert_eq!(steps.len(), 32);
    sqlx::raw_sql(
        "INSERT INTO evc_events (event_id, event_type, schema_version, order_key, producer_class, \
             idempotency_key, trace_id, parent_span_id, trace_flags, payload, payload_bytes, \
             tenant_scope) \
         SELECT ('01890a5d-ac96-774b-bcce-' || lpad(g::text, 12, '0'))::uuid, 'iu.born', '1.0.0', \
             'iu-' || g % 7, 'dot', CASE WHEN g % 2 = 0 THEN 'key-' || g END, \
             '4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7', '01', \
             jsonb_build_object('n', g), 8, CASE WHEN g % 3 = 0 THEN 'acme' END \
         FROM generate_series(1, 50) AS g; \
         INSERT INTO evc_deliveries (event_id, consumer, event_seq, order_key) \
         SELECT event_id, c, seq, order_key FROM evc_events, (VALUES ('a'), ('b')) AS v (c); \
         INSERT INTO evc_delivery_attempts (event_id, consumer, attempt, owner, fencing_token, \
             started_at, finished_at, outcome, duration_ms) \
         SELECT event_id, consumer, 1, 'w', 1, now(), now(), 'acked', 0 FROM evc_deliveries; \
         INSERT INTO evc_consumer_effects (consumer, effect_key, event_id, outcome_digest, \
             fencing_token) \
         SELECT 'a', 'fx-' || right(event_id::text, 12)::int, event_id, 'd', 1 FROM evc_events \
         WHERE right(event_id::text, 12)::int <= 10",
    )
    .execute(&pool)
    .await?;
    let before = table_digests(&pool).await?;

    for step in &steps {
        sqlx::raw_sql(AssertSqlSafe(step.contents.clone()))
            .execute(&pool)
            .await?;
        assert_eq!(
            table_digests(&pool).await?,
            before,
            "rows changed by {}",
            file_name(&step.path)
        );
        // Again: a no-op.
        sqlx::raw_sql(AssertSqlSafe(step.contents.clone()))
            .execute(&pool)
            .await?;
        assert_eq!(table_digests(&pool).await?, before);
    }
    let first_generation: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM evc_deliveries WHERE generation = 0 AND replay_id IS NULL \
             AND discard_id IS NULL",
    )
    .fetch_one(&pool)
    .await?;
    assert_eq!(first_generation, 100);
    // The eleventh step gave each delivery its event's tenant.
    let tenants: Vec<(Option<String>, i64)> = sqlx::query_as(
        "SELECT d.tenant_scope, count(*) FROM evc_deliveries d \
         JOIN evc_events e ON e.event_id = d.event_id \
         WHERE d.tenant_scope IS NOT DISTINCT FROM e.tenant_scope \
         GROUP BY d.tenant_scope ORDER BY d.tenant_scope",
    )
    .fetch_all(&pool)
    .await?;
    assert_eq!(tenants, [(Some("acme".to_owned()), 32), (None, 68)]);
    // The fifteenth step gave each effect its event's tenant (events 3, 6 and 9 are acme's).
    let effects: Vec<(Option<String>, i64)> = sqlx::query_as(
        "SELECT f.tenant_scope, count(*) FROM evc_consumer_effects f \
         JOIN evc_events e ON e.event_id = f.event_id \
         WHERE f.tenant_scope IS NOT DISTINCT FROM e.tenant_scope \
         GROUP BY f.tenant_scope ORDER BY f.tenant_scope",
    )
    .fetch_all(&pool)
    .await?;
    assert_eq!(effects, [(Some("acme".to_owned()), 3), (None, 7)]);
    // An old effect key is taken within its tenant only.
    let record = |key: &'static str, tenant: Option<&'static str>| {
        sqlx::query(
            "INSERT INTO evc_consumer_effects (consumer, effect_key, event_id, outcome_digest, \
                 tenant_scope) \
             VALUES ('a', $1, '01890a5d-ac96-774b-bcce-000000000001', 'd', $2)",
        )
        .bind(key)
        .bind(tenant)
        .execute(&pool)
    };
    assert!(record("fx-3", Some("acme")).await.is_err());
    assert!(record("fx-4", None).await.is_err());
    record("fx-3", None).await?;
    record("fx-4", Some("acme")).await?;

    // The sixteenth step: a replay's or discard's key is taken within its consumer and tenant
    // scope only (no tenant and an empty setting are one scope). The two-person triggers are
    // set aside in this transaction: the unique indexes are what is checked.
    let mut tx = pool.begin().await?;
    sqlx::raw_sql(
        "ALTER TABLE evc_replays DISABLE TRIGGER evc_replays_two_person; \
         ALTER TABLE evc_discards DISABLE TRIGGER evc_discards_two_person",
    )
    .execute(&mut *tx)
    .await?;
    for (table, statement) in [
        (
            "evc_replays",
            "INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, \
                 idempotency_key, deliveries, tenant_scope) \
             VALUES ('audit', 'd', 'fixed', 'CHG-1', 'k-1', 1, $1)",
        ),
        (
            "evc_discards",
            "INSERT INTO evc_discards (consumer, plan_digest, reason, approval_ref, \
                 idempotency_key, deliveries, items, tenant_scope) \
             VALUES ('audit', 'd', 'poison', 'INC-1', 'd-1', 1, '[]', $1)",
        ),
    ] {
        for (tenant, taken) in [
            (Some("acme"), false),
            (Some("bolt"), false),
            (None, false),
            (Some("acme"), true),
            (Some(""), true),
            (Some("*"), true),
        ] {
            let mut attempt = sqlx::Acquire::begin(&mut *tx).await?;
            let inserted = sqlx::query(AssertSqlSafe(statement))
                .bind(tenant)
                .execute(&mut *attempt)
                .await;
            assert_eq!(inserted.is_err(), taken, "{table} {tenant:?}: {inserted:?}");
            if inserted.is_ok() {
                attempt.commit().await?;
            }
        }
    }
    tx.rollback().await?;

    // The old rows' keys still hold under the new unique index.
    let taken = sqlx::raw_sql(
        "INSERT INTO evc_events (event_id, event_type, schema_version, order_key, producer_class, \
             idempotency_key, payload, payload_bytes) \
         VALUES ('01890a5d-ac96-774b-bcce-999999999999', 'iu.born', '1.0.0', 'k', 'dot', \
             'key-2', '{}', 2)",
    )
    .execute(&pool)
    .await;
    assert!(
        taken.is_err(),
        "an idempotency key of an old row was accepted again"
    );
    pool.close().await;
    Ok(())
}

/// A database on the seventh step with a replay (and its item) and a discard: the eighth step
/// gives the replay its consumer, from its items, and lets another consumer take the same keys
/// while the same consumer cannot.
async fn replay_keys_per_consumer(options: PgConnectOptions) -> TestResult {
    let (pool, held) = apply_all_but(options, |name| {
        name.ends_with(sql::RUNTIME_V8_SUFFIX)
            || name.ends_with(sql::RUNTIME_V9_SUFFIX)
            || name.ends_with(sql::RUNTIME_V10_SUFFIX)
            || name.ends_with(sql::RUNTIME_V11_SUFFIX)
            || name.ends_with(sql::RUNTIME_V12_SUFFIX)
            || name.ends_with(sql::RUNTIME_V13_SUFFIX)
            || name.ends_with(sql::RUNTIME_V16_SUFFIX)
            || name.ends_with(sql::RUNTIME_V17_SUFFIX)
            || name.ends_with(sql::RUNTIME_V21_SUFFIX)
            || name.ends_with(sql::RUNTIME_V25_SUFFIX)
            || name.ends_with(sql::RUNTIME_V28_SUFFIX)
            || name.ends_with(sql::RUNTIME_V29_SUFFIX)
            || name.ends_with(sql::RUNTIME_V31_SUFFIX)
    })
    .await?;
    assert_eq!(held.len(), 13);
    let eighth = &held[..1];
    sqlx::raw_sql(
        "INSERT INTO evc_replays (id, plan_digest, reason, approval_ref, idempotency_key, \
             deliveries) OVERRIDING SYSTEM VALUE VALUES (7, 'd', 'fixed', 'CHG-1', 'k-1', 1); \
         INSERT INTO evc_replay_items (replay_id, event_id, consumer, generation, replayed_from, \
             schema_version) \
         VALUES (7, '01890a5d-ac96-774b-bcce-b302099a8057', 'audit', 0, 'dead', '1.0.0'); \
         INSERT INTO evc_discards (consumer, plan_digest, reason, approval_ref, idempotency_key, \
             deliveries, items) VALUES ('audit', 'd', 'poison', 'INC-1', 'd-1', 1, '[]')",
    )
    .execute(&pool)
    .await?;
    for _ in 0..2 {
        // Twice: the second run is a no-op.
        sqlx::raw_sql(AssertSqlSafe(eighth[0].contents.clone()))
            .execute(&pool)
            .await?;
    }
    let consumer: Option<String> =
        sqlx::query_scalar("SELECT consumer FROM evc_replays WHERE id = 7")
            .fetch_one(&pool)
            .await?;
    assert_eq!(consumer.as_deref(), Some("audit"));
    for (table, statement) in [
        (
            "evc_replays",
            "INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, \
                 idempotency_key, deliveries) VALUES ($1, 'd', 'fixed', 'CHG-1', 'k-1', 1)",
        ),
        (
            "evc_discards",
            "INSERT INTO evc_discards (consumer, plan_digest, reason, approval_ref, \
                 idempotency_key, deliveries, items) VALUES ($1, 'd', 'poison', 'INC-1', 'd-1', \
                 1, '[]')",
        ),
    ] {
        let insert = |consumer: &'static str| {
            sqlx::query(AssertSqlSafe(statement))
                .bind(consumer)
                .execute(&pool)
        };
        assert!(insert("other").await.is_ok(), "{table}: another consumer");
        assert!(insert("audit").await.is_err(), "{table}: the same consumer");
    }
    // A replay without its consumer (a process of an earlier release) is refused.
    assert!(
        sqlx::query(
            "INSERT INTO evc_replays (plan_digest, reason, approval_ref, idempotency_key, \
                 deliveries) VALUES ('d', 'fixed', 'CHG-1', 'k-2', 1)"
        )
        .execute(&pool)
        .await
        .is_err()
    );
    // Still append-only.
    assert!(
        sqlx::query("UPDATE evc_replays SET reason = 'rewritten' WHERE id = 7")
            .execute(&pool)
            .await
            .is_err()
    );
    pool.close().await;
    Ok(())
}

#[tokio::test]
async fn the_ninth_step_records_plans_and_needs_a_second_person() -> TestResult {
    with_empty_database(two_person_rule).await
}

/// A database on the eighth step with a replay and a discard: the ninth step keeps them as they
/// are, and from then on the database takes an apply only with a recorded plan of its kind,
/// consumer and digest, approved by someone other than its planner; from the thirteenth step
/// on, only once per plan.
async fn two_person_rule(options: PgConnectOptions) -> TestResult {
    let (pool, held) = apply_all_but(options, |name| {
        name.ends_with(sql::RUNTIME_V9_SUFFIX)
            || name.ends_with(sql::RUNTIME_V10_SUFFIX)
            || name.ends_with(sql::RUNTIME_V11_SUFFIX)
            || name.ends_with(sql::RUNTIME_V12_SUFFIX)
            || name.ends_with(sql::RUNTIME_V13_SUFFIX)
            || name.ends_with(sql::RUNTIME_V16_SUFFIX)
            || name.ends_with(sql::RUNTIME_V17_SUFFIX)
            || name.ends_with(sql::RUNTIME_V21_SUFFIX)
            || name.ends_with(sql::RUNTIME_V25_SUFFIX)
            || name.ends_with(sql::RUNTIME_V28_SUFFIX)
            || name.ends_with(sql::RUNTIME_V29_SUFFIX)
            || name.ends_with(sql::RUNTIME_V31_SUFFIX)
    })
    .await?;
    assert_eq!(held.len(), 12);
    let ninth = &held[..1];
    sqlx::raw_sql(
        "INSERT INTO evc_replays (id, consumer, plan_digest, reason, approval_ref, \
             idempotency_key, deliveries) OVERRIDING SYSTEM VALUE \
             VALUES (1007, 'audit', 'd', 'fixed', 'CHG-1', 'k-1', 1); \
         INSERT INTO evc_discards (consumer, plan_digest, reason, approval_ref, idempotency_key, \
             deliveries, items) VALUES ('audit', 'd', 'poison', 'INC-1', 'd-1', 1, '[]')",
    )
    .execute(&pool)
    .await?;
    for _ in 0..2 {
        // Twice: the second run is a no-op.
        sqlx::raw_sql(AssertSqlSafe(ninth[0].contents.clone()))
            .execute(&pool)
            .await?;
    }
    let old: (Option<i64>, Option<String>, Option<String>) =
        sqlx::query_as("SELECT plan_id, approved_by, db_role FROM evc_replays WHERE id = 1007")
            .fetch_one(&pool)
            .await?;
    assert_eq!(old, (None, None, None), "an earlier replay was rewritten");

    let plan = |kind: &'static str, digest: &'static str, by: &'static str| {
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO evc_plans (kind, consumer, plan_digest, deliveries, planned_by) \
             VALUES ($1, 'audit', $2, 1, $3) RETURNING id",
        )
        .bind(kind)
        .bind(digest)
        .bind(by)
        .fetch_one(&pool)
    };
    let replay = |plan_id: Option<i64>, key: &'static str, by: Option<&'static str>| {
        sqlx::query(
            "INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, \
                 idempotency_key, deliveries, plan_id, approved_by) \
             VALUES ('audit', 'd2', 'fixed', 'CHG-2', $1, 1, $2, $3)",
        )
        .bind(key)
        .bind(plan_id)
        .bind(by)
        .execute(&pool)
    };
    let alice = plan("replay", "d2", "alice").await?;
    // A process of an earlier release names no plan and no approver.
    assert!(replay(None, "k-2", None).await.is_err(), "no plan");
    assert!(
        replay(Some(alice), "k-2", None).await.is_err(),
        "no approver"
    );
    assert!(
        replay(Some(alice), "k-2", Some(" ALICE")).await.is_err(),
        "the planner approved her own plan"
    );
    let discard_plan = plan("discard", "d2", "alice").await?;
    assert!(
        replay(Some(discard_plan), "k-2", Some("bob"))
            .await
            .is_err(),
        "a discard's plan applied as a replay"
    );
    let other_digest = plan("replay", "d3", "alice").await?;
    assert!(
        replay(Some(other_digest), "k-2", Some("bob"))
            .await
            .is_err(),
        "a plan of another digest"
    );
    replay(Some(alice), "k-2", Some("bob")).await?;
    // The recorded roles are the session's, whatever an insert names.
    let forged: String = sqlx::query_scalar(
        "INSERT INTO evc_plans (kind, consumer, plan_digest, deliveries, planned_by, db_role) \
         VALUES ('replay', 'audit', 'd4', 1, 'alice', 'someone_else') RETURNING db_role",
    )
    .fetch_one(&pool)
    .await?;
    let forged_replay: String = sqlx::query_scalar(
        "INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, idempotency_key, \
             deliveries, plan_id, approved_by, db_role) \
         SELECT 'audit', 'd4', 'fixed', 'CHG-4', 'k-4', 1, id, 'bob', 'someone_else' \
         FROM evc_plans WHERE plan_digest = 'd4' RETURNING db_role",
    )
    .fetch_one(&pool)
    .await?;
    let recorded: (Option<String>, Option<String>) = sqlx::query_as(
        "SELECT approved_by, db_role FROM evc_replays WHERE idempotency_key = 'k-2'",
    )
    .fetch_one(&pool)
    .await?;
    let role: String = sqlx::query_scalar("SELECT session_user::text")
        .fetch_one(&pool)
        .await?;
    assert_eq!((&forged, &forged_replay), (&role, &role));
    assert_eq!(recorded, (Some("bob".to_owned()), Some(role)));

    let discard = |plan_id: i64, by: &'static str| {
        sqlx::query(
            "INSERT INTO evc_discards (consumer, plan_digest, reason, approval_ref, \
                 idempotency_key, deliveries, items, plan_id, approved_by) \
             VALUES ('audit', 'd2', 'poison', 'INC-2', 'd-2', 1, '[]', $1, $2)",
        )
        .bind(plan_id)
        .bind(by)
        .execute(&pool)
    };
    assert!(
        discard(alice, "bob").await.is_err(),
        "a replay's plan discarded"
    );
    assert!(
        discard(discard_plan, "alice").await.is_err(),
        "her own discard"
    );
    discard(discard_plan, "bob").await?;

    // Before the thirteenth step a login that may insert replays takes an applied plan again
    // under a new key: an approval of one decision reused for another, with no one proposing.
    replay(Some(alice), "k-5", Some("bob")).await?;

    // From the thirteenth step on, a plan is applied once, whatever the idempotency key. The
    // step applies beside the pair that already shares a plan, and runs again as a no-op.
    let thirteenth = &held[4..5];
    assert!(file_name(&thirteenth[0].path).ends_with(sql::RUNTIME_V13_SUFFIX));
    for step in held[1..].iter().chain(thirteenth) {
        sqlx::raw_sql(AssertSqlSafe(step.contents.clone()))
            .execute(&pool)
            .await?;
    }
    let refused = replay(Some(alice), "k-6", Some("bob")).await;
    assert_eq!(
        refused
            .as_ref()
            .err()
            .and_then(|e| e.as_database_error()?.constraint()),
        Some("evc_replays_plan_once"),
        "a replay's plan applied twice: {refused:?}"
    );
    // The unique index refuses what the trigger cannot see (an insert not committed yet, a
    // row of another tenant's scope): here, with the trigger off.
    let bob = plan("replay", "d2", "bob").await?;
    replay(Some(bob), "k-7", Some("carol")).await?;
    let mut tx = pool.begin().await?;
    sqlx::raw_sql("ALTER TABLE evc_replays DISABLE TRIGGER evc_replays_two_person")
        .execute(&mut *tx)
        .await?;
    let unchecked = sqlx::query(
        "INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, \
             idempotency_key, deliveries, plan_id, approved_by) \
         VALUES ('audit', 'd2', 'fixed', 'CHG-8', 'k-8', 1, $1, 'carol')",
    )
    .bind(bob)
    .execute(&mut *tx)
    .await;
    assert_eq!(
        unchecked
            .as_ref()
            .err()
            .and_then(|e| e.as_database_error()?.code())
            .as_deref(),
        Some("23505"),
        "{unchecked:?}"
    );
    tx.rollback().await?;
    let again = |plan_id: i64| {
        sqlx::query(
            "INSERT INTO evc_discards (consumer, plan_digest, reason, approval_ref, \
                 idempotency_key, deliveries, items, plan_id, approved_by) \
             VALUES ('audit', 'd2', 'poison', 'INC-3', 'd-3', 1, '[]', $1, 'bob')",
        )
        .bind(plan_id)
        .execute(&pool)
    };
    assert!(
        again(discard_plan).await.is_err(),
        "a discard's plan applied twice"
    );
    let carol = plan("replay", "d2", "carol").await?;
    replay(Some(carol), "k-9", Some("bob")).await?;
    again(plan("discard", "d2", "carol").await?).await?;
    // Plans are append-only.
    assert!(
        sqlx::query("UPDATE evc_plans SET planned_by = 'bob' WHERE id = $1")
            .bind(alice)
            .execute(&pool)
            .await
            .is_err()
    );
    pool.close().await;
    Ok(())
}

/// One digest of every row of each outbox table, in key order, over the first step's columns
/// (the third and sixth steps' columns, at their defaults, are checked on their own).
async fn table_digests(pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    let mut digests = Vec::new();
    // Columns later steps add (at their defaults, or copied from the row's event) are left out.
    for (table, key, added) in [
        ("evc_events", "seq", " - 'writer_xid'"),
        ("evc_deliveries", "event_id, consumer", " - 'tenant_scope'"),
        ("evc_delivery_attempts", "id", ""),
        (
            "evc_consumer_effects",
            "consumer, effect_key",
            " - 'tenant_scope' - 'idempotency_namespace'",
        ),
    ] {
        let digest: String = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT md5(coalesce(string_agg( \
                (to_jsonb(t) - 'generation' - 'replay_id' - 'discard_id'{added})::text, \
                '|' ORDER BY {key}), '')) FROM {table} AS t"
        )))
        .fetch_one(pool)
        .await?;
        digests.push(digest);
    }
    Ok(digests)
}

async fn check(options: PgConnectOptions) -> TestResult {
    let contracts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    let set = ContractSet::load(&contracts)?.contracts;
    let digest = manifest::registry_digest(&set)?;

    // The files and their names.
    let artifacts = sql::render(&set, &Layout::default())?;
    let names: Vec<String> = artifacts
        .iter()
        .map(|artifact| file_name(&artifact.path))
        .collect();
    assert_eq!(
        names,
        [
            "0001_evc_runtime.sql".to_owned(),
            "0002_evc_runtime_v2.sql".to_owned(),
            "0003_evc_runtime_v3.sql".to_owned(),
            "0004_evc_runtime_v4.sql".to_owned(),
            "0005_evc_runtime_v5.sql".to_owned(),
            "0006_evc_runtime_v6.sql".to_owned(),
            "0007_evc_runtime_v7.sql".to_owned(),
            "0008_evc_runtime_v8.sql".to_owned(),
            "0009_evc_runtime_v9.sql".to_owned(),
            "0010_evc_runtime_v10.sql".to_owned(),
            "0011_evc_runtime_v11.sql".to_owned(),
            "0012_evc_runtime_v12.sql".to_owned(),
            "0013_evc_runtime_v13.sql".to_owned(),
            "0014_evc_runtime_v14.sql".to_owned(),
            "0015_evc_runtime_v15.sql".to_owned(),
            "0016_evc_runtime_v16.sql".to_owned(),
            "0017_evc_runtime_v17.sql".to_owned(),
            "0018_evc_runtime_v18.sql".to_owned(),
            "0019_evc_runtime_v19.sql".to_owned(),
            "0020_evc_runtime_v20.sql".to_owned(),
            "0021_evc_runtime_v21.sql".to_owned(),
            "0022_evc_runtime_v22.sql".to_owned(),
            "0023_evc_runtime_v23.sql".to_owned(),
            "0024_evc_runtime_v24.sql".to_owned(),
            "0025_evc_runtime_v25.sql".to_owned(),
            "0026_evc_runtime_v26.sql".to_owned(),
            "0027_evc_runtime_v27.sql".to_owned(),
            "0028_evc_runtime_v28.sql".to_owned(),
            "0029_evc_runtime_v29.sql".to_owned(),
            "0030_evc_runtime_v30.sql".to_owned(),
            "0031_evc_runtime_v31.sql".to_owned(),
            "0032_evc_runtime_v32.sql".to_owned(),
            format!("0033_evc_registry_{}.sql", &digest[..12]),
            format!(
                "0034_evc_settings_{}.sql",
                &sql::settings_digest(&set)?[..12]
            ),
        ]
    );
    for artifact in &artifacts {
        assert_eq!(
            artifact.contents.lines().next(),
            Some(format!("-- {MIGRATION_NOTICE}").as_str())
        );
        let name = file_name(&artifact.path);
        let runtime_step = is_runtime_step(&name);
        for line in statements_run(&artifact.contents) {
            let upper = line.to_ascii_uppercase();
            let statement = upper.trim_start();
            // `BEFORE UPDATE OR DELETE` and `BEFORE TRUNCATE` name trigger events, not removals.
            assert!(
                !upper.contains("DELETE FROM")
                    && !statement.starts_with("DELETE ")
                    && !statement.starts_with("TRUNCATE ")
                    && !upper.contains("DROP TABLE")
                    && !upper.contains("DROP COLUMN"),
                "migrations never remove data: {line}"
            );
            // Only a runtime step replaces an index or a constraint of an earlier step.
            assert!(
                runtime_step || !upper.contains("DROP "),
                "only a runtime step drops: {line}"
            );
        }
    }
    // Regenerating with the files checked in renders the same names and bytes.
    let layout = Layout {
        existing_migrations: names.clone(),
        ..Layout::default()
    };
    assert_eq!(sql::render(&set, &layout)?, artifacts);

    let dir = tempfile::tempdir()?;
    for artifact in &artifacts {
        std::fs::write(
            dir.path().join(file_name(&artifact.path)),
            &artifact.contents,
        )?;
    }

    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await?;

    // sqlx applies both files once; a second run finds nothing to do.
    let migrator = Migrator::new(dir.path()).await?;
    assert_eq!(migrator.iter().count(), artifacts.len());
    migrator.run(&pool).await?;
    let applied = applied_migrations(&pool).await?;
    assert_eq!(applied, i64::try_from(artifacts.len())?);
    Migrator::new(dir.path()).await?.run(&pool).await?;
    assert_eq!(applied_migrations(&pool).await?, applied);

    // Every file run raw a second time succeeds and rewrites no row.
    let before = row_versions(&pool).await?;
    for artifact in &artifacts {
        sqlx::raw_sql(AssertSqlSafe(artifact.contents.clone()))
            .execute(&pool)
            .await?;
    }
    assert_eq!(row_versions(&pool).await?, before);
    assert_eq!(applied_migrations(&pool).await?, applied);

    // The registry rows are the model's.
    let subscriptions: usize = set
        .consumers
        .values()
        .map(|consumer| consumer.subscriptions.len())
        .sum();
    assert_eq!(set.events.len(), 33);
    assert_eq!(set.version_count(), 45);
    assert_eq!(set.consumers.len(), 7);
    assert_eq!(set.retry_policies.len(), 4);
    assert_eq!(count(&pool, "evc_event_types").await?, 33);
    assert_eq!(count(&pool, "evc_event_versions").await?, 45);
    assert_eq!(count(&pool, "evc_consumers").await?, 7);
    assert_eq!(count(&pool, "evc_retry_policies").await?, 4);
    assert_eq!(
        count(&pool, "evc_subscriptions").await?,
        i64::try_from(subscriptions)?
    );
    assert_eq!(count(&pool, "evc_registry_state").await?, 1);
    let stored: String = sqlx::query_scalar("SELECT digest FROM evc_registry_state")
        .fetch_one(&pool)
        .await?;
    assert_eq!(stored, digest);

    // The settings row is the project's.
    let settings = sqlx::query(
        "SELECT settings_digest, denied_keys, hard_max_bytes, batch_size, lease_ms, \
             heartbeat_ms, max_attempts, backoff_ceiling_ms, handler_timeouts::text AS timeouts \
         FROM evc_settings",
    )
    .fetch_one(&pool)
    .await?;
    let project = &set.project;
    assert_eq!(
        settings.try_get::<String, _>("settings_digest")?,
        sql::settings_digest(&set)?
    );
    assert_eq!(
        settings.try_get::<Vec<String>, _>("denied_keys")?,
        project.payload_policy.denied_keys
    );
    assert_eq!(
        settings.try_get::<i64, _>("hard_max_bytes")?,
        i64::from(project.payload_policy.hard_max_bytes)
    );
    assert_eq!(
        settings.try_get::<i64, _>("batch_size")?,
        i64::from(project.dispatcher.batch_size)
    );
    assert_eq!(settings.try_get::<i64, _>("lease_ms")?, 30_000);
    assert_eq!(settings.try_get::<i64, _>("heartbeat_ms")?, 10_000);
    assert_eq!(settings.try_get::<i64, _>("max_attempts")?, 12);
    assert_eq!(settings.try_get::<i64, _>("backoff_ceiling_ms")?, 900_000);
    assert_eq!(settings.try_get::<String, _>("timeouts")?, "{}");

    // Text and schemas survive quoting exactly.
    let rows = sqlx::query(
        "SELECT event_type, version, schema::text AS schema, schema_digest \
         FROM evc_event_versions ORDER BY event_type, major, minor, patch",
    )
    .fetch_all(&pool)
    .await?;
    let mut expected = Vec::new();
    for (name, event) in &set.events {
        for version in &event.versions {
            expected.push((name.clone(), version.version.to_string(), &*version.schema));
        }
    }
    assert_eq!(rows.len(), expected.len());
    for (row, (name, version, schema)) in rows.iter().zip(&expected) {
        assert_eq!(&row.try_get::<String, _>("event_type")?, name);
        assert_eq!(&row.try_get::<String, _>("version")?, version);
        let stored: serde_json::Value = serde_json::from_str(&row.try_get::<String, _>("schema")?)?;
        assert_eq!(&stored, *schema, "schema of {name} {version}");
        assert_eq!(
            row.try_get::<String, _>("schema_digest")?,
            evc_codegen::digest::json_digest(schema)
        );
    }
    let descriptions: BTreeMap<String, String> = sqlx::query_as(
        "SELECT name, description FROM evc_event_types \
         UNION ALL SELECT name, description FROM evc_consumers",
    )
    .fetch_all(&pool)
    .await?
    .into_iter()
    .collect();
    for (name, event) in &set.events {
        assert_eq!(descriptions.get(name), Some(&event.description));
    }
    for (name, consumer) in &set.consumers {
        assert_eq!(descriptions.get(name), Some(&consumer.description));
    }

    runtime_constraints(&pool).await?;
    fenced_lookups_use_the_primary_key(&pool).await?;

    // Autovacuum passes over the deliveries run unthrottled (the thirty-second step); the
    // insert-only tables keep the server's settings.
    let options: Vec<(String, Option<Vec<String>>)> = sqlx::query_as(
        "SELECT relname::text, reloptions FROM pg_class \
         WHERE oid IN ('evc_deliveries'::regclass, 'evc_events'::regclass, \
             'evc_acked_batches'::regclass, 'evc_delivery_attempts'::regclass) \
         ORDER BY relname",
    )
    .fetch_all(&pool)
    .await?;
    assert_eq!(
        options,
        [
            ("evc_acked_batches".to_owned(), None),
            (
                "evc_deliveries".to_owned(),
                Some(vec!["autovacuum_vacuum_cost_delay=0".to_owned()])
            ),
            ("evc_delivery_attempts".to_owned(), None),
            ("evc_events".to_owned(), None),
        ]
    );
    pool.close().await;
    Ok(())
}

/// A fenced statement names its delivery by key and lease (`event_id = $1 AND consumer = $2 AND
/// fencing_token = $3 AND status = 'leased'`, docs/runtime.md, "Fencing"). With statistics that
/// see no leased row, its generic plan must still read the primary key, not the lease index
/// (which the fourth runtime step made partial on `lease_until IS NOT NULL` for this reason).
async fn fenced_lookups_use_the_primary_key(pool: &PgPool) -> TestResult {
    let mut connection = pool.acquire().await?;
    sqlx::raw_sql(
        "INSERT INTO evc_deliveries (event_id, consumer, event_seq) \
         SELECT ('01890a5d-ac96-774b-bcce-' || lpad(g::text, 12, '0'))::uuid, 'c', g \
         FROM generate_series(1, 2000) AS g; \
         ANALYZE evc_deliveries; \
         SET plan_cache_mode = force_generic_plan; \
         PREPARE fenced (uuid, text, int8) AS SELECT 1 FROM evc_deliveries \
         WHERE event_id = $1 AND consumer = $2 AND fencing_token = $3 AND status = 'leased'",
    )
    .execute(&mut *connection)
    .await?;
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN EXECUTE fenced ('01890a5d-ac96-774b-bcce-000000000001', 'c', 1)",
    )
    .fetch_all(&mut *connection)
    .await?;
    let plan = plan.join("\n");
    assert!(
        plan.contains("using evc_deliveries_generation_key"),
        "a fenced lookup not planned over the primary key:\n{plan}"
    );
    sqlx::raw_sql("DEALLOCATE fenced; RESET plan_cache_mode")
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// The runtime tables accept a well-formed event and delivery and refuse the malformed ones.
async fn runtime_constraints(pool: &PgPool) -> TestResult {
    const INSERT_EVENT: &str = "INSERT INTO evc_events (event_id, event_type, schema_version, \
        order_key, producer_class, idempotency_key, trace_id, parent_span_id, trace_flags, \
        payload, payload_bytes) \
        VALUES ($1::uuid, 'iu.born', '1.0.0', 'iu-1', 'dot', $2, $3, $4, '01', '{}'::jsonb, 2)";
    let event_id = "01890a5d-ac96-774b-bcce-b302099a8057";
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let span_id = "00f067aa0ba902b7";

    sqlx::query(INSERT_EVENT)
        .bind(event_id)
        .bind("key-1")
        .bind(trace_id)
        .bind(span_id)
        .execute(pool)
        .await?;
    let refused = [
        // Same producer class and idempotency key.
        (
            "01890a5d-ac96-774b-bcce-b302099a8058",
            "key-1",
            trace_id,
            span_id,
        ),
        // Upper-case trace id.
        (
            "01890a5d-ac96-774b-bcce-b302099a8059",
            "key-2",
            "4BF92F3577B34DA6A3CE929D0E0E4736",
            span_id,
        ),
        // All-zero span id.
        (
            "01890a5d-ac96-774b-bcce-b302099a805a",
            "key-3",
            trace_id,
            "0000000000000000",
        ),
    ];
    for (id, key, trace, span) in refused {
        let result = sqlx::query(INSERT_EVENT)
            .bind(id)
            .bind(key)
            .bind(trace)
            .bind(span)
            .execute(pool)
            .await;
        assert!(
            result.is_err(),
            "accepted event {id} ({key}, {trace}, {span})"
        );
    }
    assert!(
        sqlx::query("UPDATE evc_events SET order_key = 'iu-2'")
            .execute(pool)
            .await
            .is_err(),
        "events are append-only"
    );

    const INSERT_DELIVERY: &str = "INSERT INTO evc_deliveries \
        (event_id, consumer, event_seq, order_key, status) \
        SELECT event_id, $1, seq, order_key, $2 FROM evc_events WHERE event_id = $3::uuid";
    sqlx::query(INSERT_DELIVERY)
        .bind("audit")
        .bind("pending")
        .bind(event_id)
        .execute(pool)
        .await?;
    for (consumer, status) in [
        ("audit", "pending"),
        ("worker.a", "bogus"),
        ("worker.b", "leased"),
    ] {
        // A second delivery for the same pair; an unknown status; a lease without owner.
        let result = sqlx::query(INSERT_DELIVERY)
            .bind(consumer)
            .bind(status)
            .bind(event_id)
            .execute(pool)
            .await;
        assert!(result.is_err(), "accepted delivery ({consumer}, {status})");
    }

    // Everything else valid (consumer, a proposed plan, another approver): only the reason's
    // check refuses these.
    let plan: i64 = sqlx::query_scalar(
        "INSERT INTO evc_plans (kind, consumer, plan_digest, deliveries, planned_by) \
         VALUES ('replay', 'audit', 'd', 1, 'alice') RETURNING id",
    )
    .fetch_one(pool)
    .await?;
    for reason in ["", &"x".repeat(501)] {
        let result = sqlx::query(
            "INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, \
                 idempotency_key, plan_id, approved_by) \
             VALUES ('audit', 'd', $1, 'ticket-1', $2, $3, 'bob')",
        )
        .bind(reason)
        .bind(format!("replay-{}", reason.len()))
        .bind(plan)
        .execute(pool)
        .await;
        assert!(
            result.is_err(),
            "accepted a replay reason of {} chars",
            reason.len()
        );
    }
    Ok(())
}

/// The lines of `sql` a migration runs: no comments, and no body of a `CREATE FUNCTION` (the
/// purge functions delete, but only when an operator calls them; `DO` blocks run, so they
/// stay).
fn statements_run(sql: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut in_function = false;
    let mut in_body = false;
    for line in sql.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("--") {
            continue;
        }
        if trimmed
            .to_ascii_uppercase()
            .starts_with("CREATE OR REPLACE FUNCTION")
        {
            in_function = true;
        }
        if in_function && line.contains("$$") {
            // `AS $$` opens the body, a line starting `$$` closes it.
            in_body = !trimmed.starts_with("$$");
            if !in_body {
                in_function = false;
            }
            continue;
        }
        if !in_body {
            lines.push(line);
        }
    }
    lines
}

async fn applied_migrations(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(pool)
        .await
}

async fn count(pool: &PgPool, table: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(pool)
        .await
}

/// The row versions (`xmin`) of every registry row: unchanged when nothing was rewritten.
async fn row_versions(pool: &PgPool) -> Result<Vec<Option<String>>, sqlx::Error> {
    let mut versions = Vec::new();
    for (table, key) in [
        ("evc_retry_policies", "name"),
        ("evc_event_types", "name"),
        ("evc_event_versions", "event_type, version"),
        ("evc_consumers", "name"),
        ("evc_subscriptions", "consumer, event_type"),
        ("evc_registry_state", "id"),
        ("evc_settings", "id"),
    ] {
        let sql = format!("SELECT string_agg(xmin::text, ',' ORDER BY {key}) FROM {table}");
        versions.push(
            sqlx::query_scalar(AssertSqlSafe(sql))
                .fetch_one(pool)
                .await?,
        );
    }
    Ok(versions)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}
