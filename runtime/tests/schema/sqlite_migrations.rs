//! The embedded SQLite store's schema steps on a file that already holds data, as a store of an
//! earlier release left it. The fourth step rebuilds `evc_replays` so that idempotency keys are
//! scoped per consumer: every replay keeps its row, id and items, the id sequence goes on, and
//! the table stays append-only. The fifth records proposed plans and refuses a replay without
//! one, or approved by its proposer (the two-person rule), leaving earlier replays as they
//! were. The sixth refuses a second apply of one plan. The twelfth rebuilds `evc_replays`
//! again so that a key is unique per consumer and tenant scope, keeping rows, ids and triggers.

use std::str::FromStr;

use evc_runtime::SqliteStore;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use crate::support::TestResult;

/// The steps a file of the previous release has, with the names and SQL the store applies.
const EARLIER_STEPS: [(i64, &str, &str); 3] = [
    (
        1,
        "evc_runtime",
        include_str!("../../migrations/sqlite/0001_evc_runtime.sql"),
    ),
    (
        2,
        "evc_replays",
        include_str!("../../migrations/sqlite/0002_evc_replays.sql"),
    ),
    (
        3,
        "evc_registry_document",
        include_str!("../../migrations/sqlite/0003_evc_registry_document.sql"),
    ),
];

async fn pool_of(path: &std::path::Path) -> Result<SqlitePool, sqlx::Error> {
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
        .create_if_missing(true)
        .foreign_keys(true);
    SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
}

#[tokio::test]
async fn the_replay_keys_step_keeps_every_replay_and_scopes_keys_per_consumer() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("outbox.db");
    {
        let pool = pool_of(&path).await?;
        let steps = EARLIER_STEPS
            .into_iter()
            .map(|(version, name, sql)| {
                Migration::new(
                    version,
                    name.into(),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect();
        Migrator::with_migrations(steps).run(&pool).await?;
        sqlx::query(
            "INSERT INTO evc_replays (id, consumer, plan_digest, reason, approval_ref, \
             idempotency_key, deliveries, applied_at) \
             VALUES (7, 'k.plain', 'digest', 'fixed', 'CHG-1', 'k-1', 1, 1.5)",
        )
        .execute(&pool)
        .await?;
        sqlx::query(
            "INSERT INTO evc_replay_items (replay_id, event_id, consumer, generation, \
             replayed_from, schema_version) \
             VALUES (7, '01890a5d-ac96-774b-bcce-b302099a8057', 'k.plain', 0, 'dead', '1.0.0')",
        )
        .execute(&pool)
        .await?;
        // An effect of an acme event and one of an event without a tenant, recorded before
        // effect keys were scoped per tenant.
        sqlx::raw_sql(
            "INSERT INTO evc_events (event_id, event_type, schema_version, order_key,              tenant_scope, producer_class, produced_at, payload, payload_bytes) VALUES              ('01890a5d-ac96-774b-bcce-000000000001', 'iu.born', '1.0.0', 'k', 'acme', 'dot',               1.0, '{}', 2),              ('01890a5d-ac96-774b-bcce-000000000002', 'iu.born', '1.0.0', 'k', NULL, 'dot',               1.0, '{}', 2);              INSERT INTO evc_consumer_effects (consumer, effect_key, event_id, outcome_digest,              fencing_token, created_at) VALUES              ('k.plain', 'invoice-7', '01890a5d-ac96-774b-bcce-000000000001', 'd', 1, 1.5),              ('k.plain', 'invoice-8', '01890a5d-ac96-774b-bcce-000000000002', 'd', 1, 1.5)",
        )
        .execute(&pool)
        .await?;
        pool.close().await;
    }

    let location = path.display().to_string();
    assert_eq!(
        SqliteStore::apply_schema(&location).await?,
        [
            (4, "evc_replay_keys"),
            (5, "evc_plans"),
            (6, "evc_plan_once"),
            (7, "evc_tenant_idempotency_keys"),
            (8, "evc_tenant_effect_keys"),
            (9, "evc_state_changes"),
            (10, "evc_relay_cursors"),
            (11, "evc_relay_progress"),
            (12, "evc_tenant_scopes"),
            (13, "evc_effect_namespaces"),
            (14, "evc_schedules"),
            (15, "evc_lag_breaches"),
            (16, "evc_cutover"),
            (17, "evc_purges"),
            (18, "evc_inventories"),
            (19, "evc_evidence_snapshots")
        ]
    );
    assert!(SqliteStore::apply_schema(&location).await?.is_empty());

    let pool = pool_of(&path).await?;
    let kept: Vec<(i64, String, String, String, i64)> = sqlx::query_as(
        "SELECT id, consumer, idempotency_key, reason, deliveries FROM evc_replays ORDER BY id",
    )
    .fetch_all(&pool)
    .await?;
    assert_eq!(
        kept,
        [(7, "k.plain".into(), "k-1".into(), "fixed".into(), 1)]
    );
    let items: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM evc_replay_items i JOIN evc_replays r ON r.id = i.replay_id",
    )
    .fetch_one(&pool)
    .await?;
    assert_eq!(items, 1);
    // Each effect kept, with its event's tenant; its key is taken in that tenant only.
    let effects: Vec<(String, Option<String>, f64)> = sqlx::query_as(
        "SELECT effect_key, tenant_scope, created_at FROM evc_consumer_effects          ORDER BY effect_key",
    )
    .fetch_all(&pool)
    .await?;
    assert_eq!(
        effects,
        [
            ("invoice-7".into(), Some("acme".into()), 1.5),
            ("invoice-8".into(), None, 1.5)
        ]
    );
    let record = |key: &'static str, tenant: Option<&'static str>| {
        sqlx::query(
            "INSERT INTO evc_consumer_effects (consumer, effect_key, event_id, outcome_digest,              fencing_token, created_at, tenant_scope)              VALUES ('k.plain', ?1, '01890a5d-ac96-774b-bcce-000000000003', 'd', 1, 2.0, ?2)",
        )
        .bind(key)
        .bind(tenant)
        .execute(&pool)
    };
    assert!(record("invoice-7", Some("acme")).await.is_err());
    assert!(record("invoice-8", None).await.is_err());
    record("invoice-7", Some("bolt")).await?;
    record("invoice-7", None).await?;
    let dangling: Vec<(String,)> = sqlx::query_as("PRAGMA foreign_key_check")
        .fetch_all(&pool)
        .await?;
    assert!(dangling.is_empty(), "{dangling:?}");

    // The earlier replay has no plan and no approver; it is not rewritten.
    let earlier: (Option<i64>, Option<String>) =
        sqlx::query_as("SELECT plan_id, approved_by FROM evc_replays WHERE id = 7")
            .fetch_one(&pool)
            .await?;
    assert_eq!(earlier, (None, None));

    // A plan proposed by alice for each consumer.
    for consumer in ["k.plain", "k.ordered"] {
        sqlx::query(
            "INSERT INTO evc_plans (kind, consumer, plan_digest, deliveries, planned_by, \
             planned_at) VALUES ('replay', ?1, 'digest', 1, 'alice', 2.0)",
        )
        .bind(consumer)
        .execute(&pool)
        .await?;
    }
    let insert = |consumer: &'static str, plan: Option<i64>, by: Option<&'static str>| {
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, \
             idempotency_key, deliveries, applied_at, plan_id, approved_by) \
             VALUES (?1, 'digest', 'fixed', 'CHG-1', 'k-1', 1, 2.5, ?2, ?3) RETURNING id",
        )
        .bind(consumer)
        .bind(plan)
        .bind(by)
        .fetch_one(&pool)
    };
    // The two-person rule: no plan, no approver, the proposer herself, or another
    // consumer's plan are refused.
    assert!(insert("k.ordered", None, Some("bob")).await.is_err());
    assert!(insert("k.ordered", Some(2), None).await.is_err());
    assert!(insert("k.ordered", Some(2), Some(" ALICE")).await.is_err());
    assert!(insert("k.ordered", Some(1), Some("bob")).await.is_err());
    // The same key for another consumer is another replay, after the last id; for the same
    // consumer it is refused.
    assert_eq!(insert("k.ordered", Some(2), Some("bob")).await?, 8);
    assert!(insert("k.plain", Some(1), Some("bob")).await.is_err());
    // A plan is applied once (the sixth step): not again under another key.
    let reapply = |plan: i64| {
        sqlx::query(
            "INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, \
             idempotency_key, deliveries, applied_at, plan_id, approved_by) \
             VALUES ('k.ordered', 'digest', 'fixed', 'CHG-2', 'k-2', 1, 3.0, ?1, 'bob')",
        )
        .bind(plan)
        .execute(&pool)
    };
    assert!(reapply(2).await.is_err(), "a plan applied twice");
    sqlx::query(
        "INSERT INTO evc_plans (kind, consumer, plan_digest, deliveries, planned_by, \
         planned_at) VALUES ('replay', 'k.ordered', 'digest', 1, 'carol', 3.0)",
    )
    .execute(&pool)
    .await?;
    reapply(3).await?;
    // A replay key is unique per consumer and scope (the twelfth step): acme's `k-1` for
    // k.plain is its own replay beside the one of every tenant's scope, once.
    let tenant_replay = |plan: i64| {
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, \
             idempotency_key, deliveries, applied_at, plan_id, approved_by, tenant_scope) \
             VALUES ('k.plain', 'digest', 'fixed', 'CHG-3', 'k-1', 1, 4.0, ?1, 'bob', 'acme') \
             RETURNING id",
        )
        .bind(plan)
        .fetch_one(&pool)
    };
    assert_eq!(tenant_replay(1).await?, 10);
    // A fresh plan, so that only the key's index can refuse it.
    let plan: i64 = sqlx::query_scalar(
        "INSERT INTO evc_plans (kind, consumer, plan_digest, deliveries, planned_by, \
         planned_at, tenant_scope) VALUES ('replay', 'k.plain', 'digest', 1, 'alice', 4.0, \
         'acme') RETURNING id",
    )
    .fetch_one(&pool)
    .await?;
    let again = tenant_replay(plan).await;
    assert!(
        again
            .as_ref()
            .is_err_and(|error| error.to_string().contains("evc_replays_tenant_key_idx")),
        "a key reused in its scope: {again:?}"
    );
    // Plans are append-only.
    assert!(
        sqlx::query("UPDATE evc_plans SET planned_by = 'bob'")
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
