//! The trace timeline finds a trace's events through the trace index (`trace_id, seq`), also
//! where row-level security applies: under a policy PostgreSQL searches an index only with a
//! condition that applies no non-leakproof function to the table's columns, and `trace_id =
//! $1` (`text = text`) applies none. An index keyed by a non-leakproof expression of the trace
//! id (`hashtextextended`, say) would not be searched there, and every tenant's timeline would
//! read every event (docs/design.md, "The trace index keeps the trace id"). The same holds for
//! the acked attempts of those events, found in `evc_acked_batches` by bucket and consumer.

use std::error::Error;

use evc_runtime::{
    AppendOptions, Console, NewEvent, Operate, OutgoingEvent, PgStore, Role, Store, TenantScope,
    TimelineEntry, TraceContext,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use uuid::Uuid;

use crate::claim_plans::{flushed_sequential_reads, flushed_sequential_reads_of};
use crate::roles::with_logins;
use crate::support::{self, DISPATCH_REGISTRY, TestResult};
use crate::tenants::TENANT_REGISTRY;

/// The trace looked up; every other event has a trace of its own.
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
/// The events of other traces around the trace's three.
const OTHERS: u64 = 5_000;
/// Acked attempts of earlier events, in buckets of their own.
const HISTORY: i64 = 100_000;

type BoxError = Box<dyn Error + Send + Sync>;

/// Where tenants are not required (no policy applies), the timeline of the tables' owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_timeline_reads_its_events_through_the_trace_index() -> TestResult {
    support::with_database(|pool| async move {
        let single = one_connection((*pool.connect_options()).clone()).await?;
        let store = PgStore::new(single.clone(), DISPATCH_REGISTRY)?;
        let wanted = append_traced(&store, None).await?;
        ack_each(&pool, None).await?;
        analyze(&pool).await?;
        reads_through_the_index(&single, wanted, || store.timeline(TRACE)).await
    })
    .await
}

/// With tenants required, a tenant's reader (a login that is neither a superuser nor exempt
/// from row-level security, so the forced policies apply) finds its tenant's events of the
/// trace through the index too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_trace_timeline_reads_through_the_trace_index() -> TestResult {
    with_logins(|admin, logins| async move {
        sqlx::query("UPDATE evc_settings SET require_tenant_scope = true")
            .execute(&admin)
            .await?;
        let acme = TenantScope::only("acme")?;
        // One connection, made to report its counts before the timeline's are read.
        let producer_pool =
            one_connection(logins.options_for(&admin, Role::Producer, Some(acme.clone()))).await?;
        let producer = PgStore::new(producer_pool.clone(), TENANT_REGISTRY)?;
        let wanted = append_traced(&producer, Some("acme")).await?;
        ack_each(&admin, Some("acme")).await?;
        analyze(&admin).await?;
        flushed_sequential_reads(&producer_pool).await?;
        let reader = one_connection(logins.options_for(&admin, Role::Reader, Some(acme))).await?;
        let under: bool = sqlx::query_scalar("SELECT row_security_active('evc_events')")
            .fetch_one(&reader)
            .await?;
        assert!(under, "row-level security does not apply to the reader");
        let console = Console::connect(reader.clone()).await?;
        reads_through_the_index(&reader, wanted, || console.timeline(TRACE)).await?;

        // The inventory of the consumer every event was acked by finds each event's acked
        // attempt through the same index: no candidate, and no batch row read sequentially.
        // (Its deliveries go as the acks would have removed them.)
        sqlx::query("DELETE FROM evc_deliveries WHERE consumer = 'd.unordered'")
            .execute(&admin)
            .await?;
        let operator = one_connection(logins.options_for(
            &admin,
            Role::Operator,
            Some(TenantScope::only("acme")?),
        ))
        .await?;
        let store = PgStore::new(operator.clone(), TENANT_REGISTRY)?;
        let batches = ["evc_acked_batches"];
        let before = flushed_sequential_reads_of(&operator, &batches).await?;
        let report = store
            .inventory("d.unordered", std::time::SystemTime::now(), 100)
            .await?;
        assert!(report.items.is_empty(), "{:?}", report.items);
        assert_eq!(
            flushed_sequential_reads_of(&operator, &batches).await? - before,
            0
        );
        Ok(())
    })
    .await
}

/// A pool of one connection with `options`: the statistics it flushes are its own.
async fn one_connection(options: PgConnectOptions) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
}

/// As autovacuum does once a table has grown: the planner then knows the table is large.
async fn analyze(admin: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("ANALYZE evc_events").execute(admin).await?;
    sqlx::query("ANALYZE evc_deliveries").execute(admin).await?;
    sqlx::query("ANALYZE evc_acked_batches")
        .execute(admin)
        .await?;
    Ok(())
}

/// An acked attempt of every event, each in a batch row of its own, as single acks write them
/// (the densest the batch rows get: a bucket's worth of rows for each bucket), after the rows
/// of [`HISTORY`] acks of `tenant` in buckets of their own (a table grown as in a long-running
/// deployment, where the planner weighs a whole scan against the index).
async fn ack_each(admin: &PgPool, tenant: Option<&str>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO evc_acked_batches (consumer, owner, tenant_scope, seq_bucket, \
             finished_at, event_ids, generations, attempts, fencing_tokens, started_at) \
         SELECT 'd.unordered', 'w/0', $1, 1000 + n / 10, now(), ARRAY[gen_random_uuid()], \
             '{0}', '{1}', '{1}', ARRAY[now()] \
         FROM generate_series(1, $2) AS n",
    )
    .bind(tenant)
    .bind(HISTORY)
    .execute(admin)
    .await?;
    sqlx::query(
        "INSERT INTO evc_acked_batches (consumer, owner, tenant_scope, seq_bucket, \
             finished_at, event_ids, generations, attempts, fencing_tokens, started_at) \
         SELECT 'd.unordered', 'w/1', e.tenant_scope, e.seq / 256, now(), ARRAY[e.event_id], \
             '{0}', '{1}', '{1}', ARRAY[now()] \
         FROM evc_events e ORDER BY e.seq",
    )
    .execute(admin)
    .await?;
    Ok(())
}

/// Appends [`OTHERS`] notes, each in a trace of its own, with three of [`TRACE`] among them
/// (two in the middle, one last), in one batch (of `tenant`, when given); the three ids.
async fn append_traced(store: &PgStore, tenant: Option<&str>) -> Result<Vec<Uuid>, BoxError> {
    let note = |trace: &str, n: u64| -> Result<NewEvent, BoxError> {
        let context = TraceContext::new(trace, support::SPAN_ID, 1)?;
        let payload = support::note(&support::note_key(n));
        let order_key = Some(evc_runtime::order_key_part(&payload["note_id"]));
        let event = OutgoingEvent::new("test.note", "1.0.0", order_key, &context, &payload)?;
        let options = match tenant {
            Some(tenant) => AppendOptions::new().tenant_scope(tenant),
            None => AppendOptions::new(),
        };
        Ok(NewEvent::new(event, options))
    };
    let mut batch = (0..OTHERS)
        .map(|n| note(&format!("{:032x}", n + 1), n))
        .collect::<Result<Vec<_>, _>>()?;
    batch.splice(
        1_000..1_000,
        [note(TRACE, OTHERS)?, note(TRACE, OTHERS + 1)?],
    );
    batch.push(note(TRACE, OTHERS + 2)?);
    let mut tx = store.begin().await?;
    let receipts = store.append_batch(&mut tx, batch).await?;
    tx.commit().await?;
    Ok([1_000, 1_001, receipts.len() - 1]
        .iter()
        .map(|&i| receipts[i].event_id)
        .collect())
}

/// Runs `timeline` six times on `single` (from the sixth run on, PostgreSQL may keep a generic
/// plan): each returns the `wanted` events in order, each with its acked attempt, and reads no
/// row by a sequential scan.
async fn reads_through_the_index<F, Fut, E>(
    single: &PgPool,
    wanted: Vec<Uuid>,
    timeline: F,
) -> TestResult
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Vec<TimelineEntry>, E>>,
    E: Error + Send + Sync + 'static,
{
    for run in 1..=6 {
        let before = flushed_sequential_reads(single).await?;
        let entries = timeline().await?;
        let read = flushed_sequential_reads(single).await? - before;
        let events: Vec<Uuid> = entries
            .iter()
            .filter(|entry| entry.kind == "event")
            .map(|entry| entry.event_id)
            .collect();
        assert_eq!(events, wanted, "run {run}: the trace's events, in order");
        let acked: Vec<Uuid> = entries
            .iter()
            .filter(|entry| entry.kind == "attempt" && entry.detail == "acked")
            .map(|entry| entry.event_id)
            .collect();
        assert_eq!(acked, wanted, "run {run}: the trace's acked attempts");
        assert_eq!(
            read, 0,
            "run {run}: the timeline read {read} rows by sequential scans"
        );
    }
    Ok(())
}
