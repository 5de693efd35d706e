//! The claim and ack statements' plans when a batch is a large share of the backlog: each
//! claimed delivery is updated (or deleted, at its ack) by its row address, and each row and
//! event found by one probe of its key, so a claim or an ack reads the rows it handles.
//! Planned as joins, a claim of 200 or more rows hashed a sequential scan of every delivery row
//! (dead versions included) and of every event, and an ack scanned every delivery row for the
//! leased ones, on every batch (docs/design.md, "Claim statements").

use std::time::Duration;

use evc_runtime::{ClaimRequest, PgStore, Store};
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};

use crate::support::{self, DISPATCH_REGISTRY, TestResult};

/// The tables whose rows a claim, an ack or a lookup should reach by index.
const SCANNED: &[&str] = &["evc_deliveries", "evc_events", "evc_acked_batches"];

/// The rows of the tables `$1` (`text[]`) that sequential scans read, as `view` (one of
/// PostgreSQL's `pg_stat_*user_tables` views) counts them.
fn sequential_reads_in(view: &str) -> AssertSqlSafe<String> {
    AssertSqlSafe(format!(
        "SELECT coalesce(sum(seq_tup_read), 0)::int8 FROM {view} WHERE relname = ANY($1)"
    ))
}

/// Rows of `evc_deliveries`, `evc_events` and `evc_acked_batches` that sequential scans of
/// `connection`'s transaction read so far.
async fn sequential_reads(connection: &mut PgConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sequential_reads_in("pg_stat_xact_user_tables"))
        .bind(SCANNED)
        .fetch_one(connection)
        .await
}

/// Index scans of `evc_deliveries` in `connection`'s transaction so far: an ack that finds its
/// rows at their claim's addresses starts none, one that probes the primary key starts one per
/// entry.
async fn delivery_index_scans(connection: &mut PgConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT coalesce(sum(idx_scan), 0)::int8 FROM pg_stat_xact_user_tables \
         WHERE relname = 'evc_deliveries'",
    )
    .fetch_one(connection)
    .await
}

// Ten times the batch: the hash join set in at 200 rows of 20,000 on this machine's
// PostgreSQL 15; at 500 of 5,000 the plan does not depend on a fine cost margin.
const EVENTS: u64 = 5_000;
const BATCH: u32 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_claim_and_its_ack_read_their_rows_not_the_tables() -> TestResult {
    support::with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), DISPATCH_REGISTRY)?;
        support::append_notes(&store, EVENTS, EVENTS).await?;
        claims_and_acks_read_their_rows(&pool, &store).await
    })
    .await
}

/// The same statements where row-level security applies: a login scoped to the consumers by
/// their dispatcher roles (docs/runtime.md, "A dispatcher role per consumer"), whose every
/// update and delete of a delivery carries the scope's policies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_claim_and_its_ack_read_their_rows_under_a_consumer_scope() -> TestResult {
    crate::roles::with_logins(|admin, logins| async move {
        for consumer in ["d.unordered", "d.leased"] {
            support::deploy(&admin, consumer, "^1").await?;
            logins
                .grant_scoped(&admin, &format!("evc_dispatcher_{consumer}"))
                .await?;
        }
        support::append_notes(
            &PgStore::new(admin.clone(), DISPATCH_REGISTRY)?,
            EVENTS,
            EVENTS,
        )
        .await?;
        let scoped = PgStore::new(
            logins
                .scoped_pool(&admin, evc_runtime::Role::Dispatcher)
                .await?,
            DISPATCH_REGISTRY,
        )?;
        let under: bool = sqlx::query_scalar("SELECT row_security_active('evc_deliveries')")
            .fetch_one(scoped.pool())
            .await?;
        assert!(
            under,
            "row-level security does not apply to the scoped login"
        );
        claims_and_acks_read_their_rows(&admin, &scoped).await
    })
    .await
}

/// Claims [`BATCH`] of [`EVENTS`] due deliveries through `store` (leased, per key, held), six
/// times each, and acks them in the claim's transaction, rolled back: none of the statements
/// reads rows by a sequential scan, and the ack reads its rows at their addresses.
async fn claims_and_acks_read_their_rows(admin: &PgPool, store: &PgStore) -> TestResult {
    // As autovacuum does once a table has grown: the planner then knows the backlog.
    sqlx::query("ANALYZE evc_deliveries").execute(admin).await?;
    sqlx::query("ANALYZE evc_events").execute(admin).await?;
    let lease = Duration::from_secs(30);
    for (what, request) in [
        (
            "leased batch",
            ClaimRequest::leased("d.unordered", "w", BATCH, lease),
        ),
        (
            "per key",
            ClaimRequest::leased("d.leased", "w", BATCH, lease).per_key(true),
        ),
        // Locked in the transaction, acked in it (the held ack).
        ("held batch", ClaimRequest::held("d.unordered", "w", BATCH)),
    ] {
        // Six times: PostgreSQL keeps a prepared statement's generic plan from the sixth
        // execution on, and that is the plan a dispatcher runs all day.
        for _ in 0..6 {
            let mut tx = store.begin().await?;
            let before = sequential_reads(&mut tx).await?;
            let claimed = store.claim(&mut tx, &request).await?;
            let read = sequential_reads(&mut tx).await? - before;
            assert_eq!(claimed.len(), BATCH as usize, "{what}");
            assert_eq!(
                read, 0,
                "{what}: a claim of {BATCH} read {read} rows by sequential scans"
            );
            // And their ack, one statement for the batch.
            let leases: Vec<_> = claimed.iter().map(|c| &c.lease).collect();
            let before = sequential_reads(&mut tx).await?;
            let probes_before = delivery_index_scans(&mut tx).await?;
            let acked = store.ack(&mut tx, &leases).await?;
            let read = sequential_reads(&mut tx).await? - before;
            let probes = delivery_index_scans(&mut tx).await? - probes_before;
            tx.rollback().await?;
            assert_eq!(acked.acked, BATCH as usize, "{what}: {acked:?}");
            assert_eq!(
                read, 0,
                "{what}: an ack of {BATCH} read {read} rows by sequential scans"
            );
            // Every row is where its claim left it: the ack reads it there.
            assert_eq!(
                probes, 0,
                "{what}: an ack of {BATCH} probed the deliveries' indexes {probes} times"
            );
        }
    }
    Ok(())
}

/// Claims from stretches of `event_seq`, as a dispatcher's claim cursor hands them out, batch
/// after batch on one connection, leased and held, for a consumer with a third of the
/// deliveries and for one with a hundredth: PostgreSQL keeps each claim statement's generic
/// plan from the sixth execution on. Where a custom plan sees the consumer or the stretch's
/// bounds, it is estimated cheaper than the generic plan, and every claim is planned anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_from_stretches_keep_their_generic_plan() -> TestResult {
    support::with_database(|pool| async move {
        const STRETCH: i64 = 110;
        const ROUNDS: i64 = 10;
        // Enough backlog that the generic plan's default share of it for the range (about
        // 0.4%) is more than a batch: below that the generic plan is cheaper anyway.
        const BACKLOG: u64 = 60_000;
        // `d.leased` keeps one delivery in this many: a hundredth of the table.
        const SPARSE: i64 = 50;
        let store = PgStore::new(pool.clone(), DISPATCH_REGISTRY)?;
        support::append_notes(&store, BACKLOG, BACKLOG).await?;
        sqlx::query(
            "DELETE FROM evc_deliveries WHERE consumer = 'd.leased' AND event_seq % $1 <> 0",
        )
        .bind(SPARSE)
        .execute(&pool)
        .await?;
        sqlx::query("ANALYZE evc_deliveries").execute(&pool).await?;
        let lease = Duration::from_secs(30);
        // `d.unordered` has a delivery at every `event_seq`, `d.leased` at every multiple of
        // `SPARSE`; a claim of 100 takes those of its stretch, at most 100.
        for (consumer, every) in [("d.unordered", 1), ("d.leased", SPARSE)] {
            // A connection of its own: the plan counts are per prepared statement.
            let single = PgPoolOptions::new()
                .max_connections(1)
                .connect_with((*pool.connect_options()).clone())
                .await?;
            let store = PgStore::new(single.clone(), DISPATCH_REGISTRY)?;
            for held in [false, true] {
                for round in 0..ROUNDS {
                    let request = if held {
                        ClaimRequest::held(consumer, "w", 100)
                    } else {
                        ClaimRequest::leased(consumer, "w", 100, lease)
                    };
                    let after = round * STRETCH;
                    let request = request.after_seq(after).until_seq(after + STRETCH);
                    let mut tx = store.begin().await?;
                    let claimed = store.claim(&mut tx, &request).await?;
                    tx.rollback().await?;
                    let what = format!("{consumer}, held {held}, round {round}");
                    let in_stretch = ((after + STRETCH) / every - after / every).min(100);
                    assert_eq!(claimed.len() as i64, in_stretch, "{what}");
                    assert!(
                        claimed
                            .iter()
                            .all(|c| c.event_seq > after && c.event_seq <= after + STRETCH),
                        "{what}: a claim left its stretch"
                    );
                }
            }
            let plans: Vec<(String, i64, i64)> = sqlx::query_as(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements \
                 WHERE statement LIKE 'WITH every_tenant AS%'",
            )
            .fetch_all(&single)
            .await?;
            let mut kinds: Vec<&str> = Vec::new();
            for (statement, generic, custom) in &plans {
                let kind = if statement.contains("UPDATE evc_deliveries") {
                    "leased"
                } else {
                    "held"
                };
                kinds.push(kind);
                assert_eq!(
                    (*generic, *custom),
                    (ROUNDS - 5, 5),
                    "{consumer}, {kind} claim: generic and custom plans of {ROUNDS} executions"
                );
            }
            kinds.sort_unstable();
            assert_eq!(
                kinds,
                ["held", "leased"],
                "{consumer}: the claim statements prepared"
            );
            single.close().await;
        }
        Ok(())
    })
    .await
}

/// Rows of `evc_deliveries`, `evc_events` and `evc_acked_batches` that sequential scans of the
/// whole database read so far, as reported: `pool`'s one session is made to report first; any
/// other session reports on its own schedule.
pub(crate) async fn flushed_sequential_reads(pool: &PgPool) -> Result<i64, sqlx::Error> {
    flushed_sequential_reads_of(pool, SCANNED).await
}

/// As [`flushed_sequential_reads`], of the `tables` named.
pub(crate) async fn flushed_sequential_reads_of(
    pool: &PgPool,
    tables: &[&str],
) -> Result<i64, sqlx::Error> {
    let mut connection = pool.acquire().await?;
    // A backend reports its counts when it goes idle, at most once a second unless forced:
    // forced here, for the statement before and this one.
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *connection)
        .await?;
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *connection)
        .await?;
    sqlx::query_scalar(sequential_reads_in("pg_stat_user_tables"))
        .bind(tables)
        .fetch_one(&mut *connection)
        .await
}

/// Lease-expiry recovery after a dispatcher holding many leases died: a thousand expired
/// leases go back to pending by their row addresses. Updated by a join with the locked rows
/// alone, PostgreSQL hashes a sequential scan of every delivery row on every call, and
/// recovery calls again while a whole limit comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovering_a_thousand_expired_leases_reads_their_rows_not_the_table() -> TestResult {
    support::with_database(|pool| async move {
        const EVENTS: u64 = 5_000;
        const EXPIRED: u32 = 1_000;
        let options = (*pool.connect_options()).clone();
        let single = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await?;
        let store = PgStore::new(single.clone(), DISPATCH_REGISTRY)?;
        support::append_notes(&store, EVENTS, EVENTS).await?;
        // Leases that end as they start (all expired when recovery runs), and more that run
        // on: with nearly half the deliveries leased (7,000 of 15,000: three consumers), the
        // statistics make PostgreSQL 15 plan the join alone as a hash join over a sequential
        // scan (with one in eight leased, not).
        for (consumer, batch, lease) in [
            ("d.unordered", EXPIRED, Duration::ZERO),
            ("d.unordered", 4_000, Duration::from_secs(300)),
            ("d.tx", 2_000, Duration::from_secs(300)),
        ] {
            let claimed = support::claim(&store, consumer, "w", batch, lease, false).await?;
            assert_eq!(claimed.len(), batch as usize, "{consumer}");
        }
        sqlx::query("ANALYZE evc_deliveries")
            .execute(&single)
            .await?;
        let before = flushed_sequential_reads(&single).await?;
        let recovered = store.recover_expired(EXPIRED).await?;
        let read = flushed_sequential_reads(&single).await? - before;
        assert_eq!(recovered, u64::from(EXPIRED));
        assert_eq!(
            read, 0,
            "recovering {EXPIRED} leases read {read} rows by sequential scans"
        );
        Ok(())
    })
    .await
}

/// The batch ack finds its rows before it deletes them. When another writer takes a lease
/// over in between (a reclaim: a new token and owner), the ack waits for that writer and then
/// must leave the row to its new holder: the entry is stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ack_that_waits_on_a_reclaim_leaves_the_new_lease() -> TestResult {
    support::with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), DISPATCH_REGISTRY)?;
        support::append_notes(&store, 2, 2).await?;
        let lease = Duration::from_secs(30);
        let claimed = support::claim(&store, "d.unordered", "w1", 2, lease, false).await?;
        assert_eq!(claimed.len(), 2);
        let taken = claimed[0].lease.event_id;

        let mut other = pool.begin().await?;
        sqlx::query(
            "UPDATE evc_deliveries SET fencing_token = fencing_token + 1, lease_owner = 'w2' \
             WHERE event_id = $1 AND consumer = 'd.unordered'",
        )
        .bind(taken)
        .execute(&mut *other)
        .await?;
        let leases: Vec<_> = claimed.iter().map(|c| c.lease.clone()).collect();
        let acking = tokio::spawn({
            let store = store.clone();
            async move {
                let mut connection = store.pool().acquire().await?;
                let leases: Vec<_> = leases.iter().collect();
                store.ack(&mut connection, &leases).await
            }
        });
        // Until the ack waits for the other writer's row lock (a bound on a hang, not a
        // timing assertion: the ack cannot finish before the commit below).
        let mut waited = false;
        let start = std::time::Instant::now();
        while start.elapsed() < crate::support::HANG {
            let waiting: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock')",
            )
            .fetch_one(&pool)
            .await?;
            if waiting {
                waited = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(waited, "the ack never waited for the reclaiming writer");
        other.commit().await?;
        let outcome = acking.await??;
        assert_eq!(outcome.acked, 1, "{outcome:?}");
        assert_eq!(
            outcome.stale.iter().map(|s| s.0).collect::<Vec<_>>(),
            [taken]
        );
        let owner: Option<String> = sqlx::query_scalar(
            "SELECT lease_owner FROM evc_deliveries WHERE event_id = $1 AND status = 'leased'",
        )
        .bind(taken)
        .fetch_optional(&pool)
        .await?;
        assert_eq!(
            owner.as_deref(),
            Some("w2"),
            "the new holder's lease was deleted"
        );
        Ok(())
    })
    .await
}
