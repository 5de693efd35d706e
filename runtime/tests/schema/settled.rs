//! Settled deliveries on PostgreSQL (the twelfth step): a dead, quarantined, replayed or
//! discarded delivery leaves its status only through a replay or discard applied with its audit
//! row, and its row only through a retention purge. The dispatcher's and the approver's grants
//! let them update deliveries; here each tries, with hand-written SQL as a compromised process
//! would, to bring dead letters back or make them vanish without a plan or an audit row, and the
//! database refuses. The store's own replay then goes through.

use std::time::Duration;

use evc_runtime::{
    Console, FailureClass, PgStore, ReplayApproval, ReplaySelection, RetryDecision, Role, Store,
};
use sqlx::postgres::PgPool;

use crate::roles::{Logins, with_logins};
use crate::support::{self, DISPATCH_REGISTRY, TestResult};

const CONSUMER: &str = "d.unordered";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_delivery_moves_only_with_its_audit_row() -> TestResult {
    with_logins(|admin, logins| async move { moves(&admin, &logins).await }).await
}

/// Whether `statement` fails with the settled-delivery trigger's `restrict_violation`.
async fn refused(pool: &PgPool, statement: &'static str) -> bool {
    match sqlx::raw_sql(statement).execute(pool).await {
        Err(sqlx::Error::Database(error)) => error.code().as_deref() == Some("23001"),
        _ => false,
    }
}

async fn moves(admin: &PgPool, logins: &Logins) -> TestResult {
    support::deploy(admin, CONSUMER, "^1").await?;
    let producer = PgStore::new(
        logins.pool_for(admin, Role::Producer, None).await?,
        DISPATCH_REGISTRY,
    )?;
    support::append_notes(&producer, 3, 3).await?;
    let dispatcher_pool = logins.pool_for(admin, Role::Dispatcher, None).await?;
    let dispatcher = PgStore::new(dispatcher_pool.clone(), DISPATCH_REGISTRY)?;
    let lease = Duration::from_secs(30);
    let claimed = support::claim(&dispatcher, CONSUMER, "w/1", 2, lease, false).await?;
    assert_eq!(claimed.len(), 2);
    for claimed in &claimed {
        dispatcher
            .fail(
                &claimed.lease,
                FailureClass::Permanent,
                "boom",
                RetryDecision::Dead,
            )
            .await?;
    }

    // The dispatcher may update and delete deliveries, but not settled ones.
    assert!(
        refused(
            &dispatcher_pool,
            "UPDATE evc_deliveries SET status = 'pending' WHERE status = 'dead'"
        )
        .await
    );
    assert!(
        refused(
            &dispatcher_pool,
            "DELETE FROM evc_deliveries WHERE status = 'dead'"
        )
        .await
    );
    // Nor hide them under another consumer or generation, nor deliver them again as a new
    // generation, nor mark a pending one discarded.
    for statement in [
        "UPDATE evc_deliveries SET consumer = 'ghost' WHERE status = 'dead'",
        "UPDATE evc_deliveries SET generation = 7 WHERE status = 'dead'",
        "INSERT INTO evc_deliveries (event_id, consumer, generation, event_seq, status) \
         SELECT event_id, consumer, 1, event_seq, 'pending' FROM evc_deliveries \
         WHERE status = 'dead'",
        "UPDATE evc_deliveries SET status = 'discarded' \
         WHERE status = 'pending' AND consumer = 'd.unordered'",
    ] {
        assert!(refused(&dispatcher_pool, statement).await, "{statement}");
    }
    // The approver may set a status, but not without the replay or discard it belongs to.
    let approver_pool = logins.pool_for(admin, Role::Approver, None).await?;
    assert!(
        refused(
            &approver_pool,
            "UPDATE evc_deliveries SET status = 'replayed' WHERE status = 'dead'"
        )
        .await
    );
    assert!(
        refused(
            &approver_pool,
            "UPDATE evc_deliveries SET status = 'discarded' WHERE status = 'dead'"
        )
        .await
    );
    let reader = Console::connect(logins.pool_for(admin, Role::Reader, None).await?).await?;
    let all = ReplaySelection::consumer(CONSUMER);
    assert_eq!(reader.dead_letters(&all).await?.len(), 2);

    // The store's replay, proposed by one login and applied by another, goes through.
    let operator = Console::connect(logins.pool_for(admin, Role::Operator, None).await?).await?;
    let proposed = operator.propose_replay(&all, "alice").await?;
    let approval = ReplayApproval::new(
        &proposed.plan.digest,
        "fixed in 1.4.2",
        "CHG-7",
        "r-1",
        "bob",
    );
    let approver = Console::connect(approver_pool.clone()).await?;
    assert_eq!(approver.replay(&all, &approval).await?.deliveries, 2);
    assert!(reader.dead_letters(&all).await?.is_empty());
    // A replay's transaction is the one that wrote it, whatever the insert says.
    let mut tx = admin.begin().await?;
    sqlx::raw_sql(
        "INSERT INTO evc_plans (kind, consumer, plan_digest, deliveries, planned_by) \
         VALUES ('replay', 'd.unordered', 'd', 1, 'carol')",
    )
    .execute(&mut *tx)
    .await?;
    let (planted, current): (Option<i64>, i64) = sqlx::query_as(
        "WITH r AS (INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, \
             idempotency_key, deliveries, plan_id, approved_by, txid) \
         SELECT 'd.unordered', 'd', 'test', 'CHG-9', 'r-9', 1, max(id), 'dave', 42 \
         FROM evc_plans RETURNING txid) \
         SELECT (SELECT txid FROM r), txid_current()",
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.rollback().await?;
    assert_eq!(planted, Some(current));
    // And what it replayed stays replayed.
    assert!(
        refused(
            &dispatcher_pool,
            "UPDATE evc_deliveries SET status = 'dead' WHERE status = 'replayed'"
        )
        .await
    );
    Ok(())
}
