//! Usage evidence on PostgreSQL ([`crate::store::evidence`]): four aggregate reads of the
//! ledger (events, attempts, lag breaches) over one window of the database's clock, and the
//! snapshots the dispatcher records of them (`evc_evidence_snapshots`, the twenty-ninth step).

use sqlx::PgConnection;
use sqlx::postgres::PgPool;

use super::{PgStore, operations, sql};
use crate::registry::Registry;
use crate::store::DispatchError;
use crate::store::evidence::{
    self, Counted, EvidenceQuery, EvidenceReport, EvidenceRound, EvidenceSnapshot,
    MAX_EVIDENCE_SNAPSHOTS, MAX_SIGNAL_ROWS,
};

/// [`crate::Observe::evidence`] on PostgreSQL; refused in a session of one tenant.
pub(crate) async fn evidence(
    pool: &PgPool,
    registry: &Registry,
    query: &EvidenceQuery,
) -> Result<EvidenceReport, DispatchError> {
    if let Some(tenant) = operations::session_tenant(pool).await? {
        return Err(DispatchError::TenantScoped("usage evidence", tenant));
    }
    let mut connection = pool.acquire().await?;
    let now: f64 = sqlx::query_scalar(sql::CLOCK)
        .fetch_one(&mut *connection)
        .await?;
    count(&mut connection, registry, query, now).await
}

/// The report of `query` over the window that ends `now` (epoch seconds), read on
/// `connection`.
async fn count(
    connection: &mut PgConnection,
    registry: &Registry,
    query: &EvidenceQuery,
    now: f64,
) -> Result<EvidenceReport, DispatchError> {
    let slot = query.slot_s();
    let since = now - query.window.as_secs_f64();
    let min = i64::from(query.min_count);
    let rows = i64::from(MAX_SIGNAL_ROWS);
    let counted = Counted {
        since,
        co_triggered: sqlx::query_as(sql::CO_TRIGGERED)
            .bind(since)
            .bind(min)
            .bind(rows)
            .fetch_all(&mut *connection)
            .await?,
        failing_together: sqlx::query_as(sql::FAILING_TOGETHER)
            .bind(since)
            .bind(slot)
            .bind(min)
            .bind(rows)
            .fetch_all(&mut *connection)
            .await?,
        chronic: sqlx::query_as(sql::CHRONIC_PAIRS)
            .bind(since)
            .bind(min)
            .bind(rows)
            .fetch_all(&mut *connection)
            .await?,
        escalations: sqlx::query_as(sql::ESCALATIONS)
            .bind(since)
            .fetch_all(&mut *connection)
            .await?,
    };
    Ok(evidence::report(registry, query, counted))
}

impl PgStore {
    /// [`crate::Store::record_evidence`] on PostgreSQL: under a transaction-level advisory
    /// lock, on the database's clock.
    pub(super) async fn run_evidence_recording(&self) -> Result<EvidenceRound, DispatchError> {
        let Some(recording) = self.registry().evidence_recording else {
            return Ok(EvidenceRound::default());
        };
        if let Some(tenant) = operations::session_tenant(self.pool()).await? {
            return Err(DispatchError::TenantScoped("an evidence recording", tenant));
        }
        let mut transaction = self.pool().begin().await?;
        sqlx::query(sql::READ_COMMITTED)
            .execute(&mut *transaction)
            .await?;
        let locked: bool = sqlx::query_scalar(sql::TRY_EVIDENCE_LOCK)
            .fetch_one(&mut *transaction)
            .await?;
        if !locked {
            return Ok(EvidenceRound::default());
        }
        let now: f64 = sqlx::query_scalar(sql::CLOCK)
            .fetch_one(&mut *transaction)
            .await?;
        let slot = evidence::slot_ms(now, recording.every_ms);
        let mut round = EvidenceRound {
            leader: true,
            ..EvidenceRound::default()
        };
        let recorded: bool = sqlx::query_scalar(sql::HAS_EVIDENCE_SNAPSHOT)
            .bind(slot)
            .fetch_one(&mut *transaction)
            .await?;
        if !recorded {
            let report = count(&mut transaction, self.registry(), &recording.query(), now).await?;
            let report = serde_json::to_string(&report)
                .map_err(|error| DispatchError::Database(sqlx::Error::Encode(Box::new(error))))?;
            let inserted = sqlx::query(sql::RECORD_EVIDENCE_SNAPSHOT)
                .bind(slot)
                .bind(now)
                .bind(report)
                .execute(&mut *transaction)
                .await?;
            if inserted.rows_affected() == 1 {
                #[allow(clippy::cast_precision_loss)]
                let start = slot as f64 / 1000.0;
                round.recorded = Some(start);
            }
        }
        let removed = sqlx::query(sql::REMOVE_EVIDENCE_SNAPSHOTS)
            .bind(evidence::keep_after_ms(now, recording.keep_ms))
            .execute(&mut *transaction)
            .await?;
        round.removed = removed.rows_affected();
        transaction.commit().await?;
        if round.recorded.is_some() || round.removed > 0 {
            tracing::info!(
                slot = round.recorded,
                removed = round.removed,
                "usage evidence recorded"
            );
        }
        Ok(round)
    }
}

/// [`crate::Observe::evidence_snapshots`] on PostgreSQL: none in a database before the
/// twenty-ninth step, or in a session of one tenant (row-level security hides them there too).
pub(crate) async fn snapshots(
    pool: &PgPool,
    limit: u32,
) -> Result<Vec<EvidenceSnapshot>, DispatchError> {
    if operations::session_tenant(pool).await?.is_some() {
        return Ok(Vec::new());
    }
    let present: bool = sqlx::query_scalar(sql::HAS_EVIDENCE_SNAPSHOTS)
        .fetch_one(pool)
        .await?;
    if !present {
        return Ok(Vec::new());
    }
    let rows: Vec<(i64, f64, String)> = sqlx::query_as(sql::READ_EVIDENCE_SNAPSHOTS)
        .bind(i64::from(limit.min(MAX_EVIDENCE_SNAPSHOTS)))
        .fetch_all(pool)
        .await?;
    Ok(evidence::snapshots(rows))
}
