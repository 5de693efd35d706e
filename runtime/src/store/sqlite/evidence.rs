//! Usage evidence on SQLite ([`crate::store::evidence`]): the same four aggregate reads as
//! PostgreSQL's, over one window of the store's clock, and the snapshots the dispatcher
//! records of them (`evc_evidence_snapshots`, migration 0019). A recording round writes in a
//! `BEGIN IMMEDIATE` transaction, the store's one writer, which is also the recording's lock.

use sqlx::SqliteConnection;

use super::{SqliteStore, epoch_now, sql};
use crate::registry::Registry;
use crate::store::DispatchError;
use crate::store::evidence::{
    self, Counted, EvidenceQuery, EvidenceReport, EvidenceRound, EvidenceSnapshot,
    MAX_EVIDENCE_SNAPSHOTS, MAX_SIGNAL_ROWS,
};

impl SqliteStore {
    /// [`crate::Observe::evidence`] on SQLite; refused on a handle of one tenant.
    pub(super) async fn read_evidence(
        &self,
        query: &EvidenceQuery,
    ) -> Result<EvidenceReport, DispatchError> {
        if let Some(tenant) = self.tenant() {
            return Err(DispatchError::TenantScoped(
                "usage evidence",
                tenant.to_owned(),
            ));
        }
        let mut connection = self.pool().acquire().await?;
        count(&mut connection, self.registry(), query, epoch_now()).await
    }

    /// [`crate::Store::record_evidence`] on SQLite. The report is counted in a read
    /// transaction (a snapshot of the file, beside the writers), and only the insert and the
    /// removal take the one writer: counting under it would hold every append and claim back
    /// for as long as the window's aggregates take.
    pub(super) async fn run_evidence_recording(&self) -> Result<EvidenceRound, DispatchError> {
        let Some(recording) = self.registry().evidence_recording else {
            return Ok(EvidenceRound::default());
        };
        if let Some(tenant) = self.tenant() {
            return Err(DispatchError::TenantScoped(
                "an evidence recording",
                tenant.to_owned(),
            ));
        }
        let now = epoch_now();
        let slot = evidence::slot_ms(now, recording.every_ms);
        let cutoff = evidence::keep_after_ms(now, recording.keep_ms);
        let (recorded, stale): (bool, bool) = sqlx::query_as(sql::EVIDENCE_SNAPSHOT_STATE)
            .bind(slot)
            .bind(cutoff)
            .fetch_one(self.pool())
            .await?;
        let mut round = EvidenceRound {
            leader: true,
            ..EvidenceRound::default()
        };
        if recorded && !stale {
            return Ok(round);
        }
        let report =
            if recorded {
                None
            } else {
                let mut reading = self.pool().begin().await?;
                let report = count(&mut reading, self.registry(), &recording.query(), now).await?;
                reading.rollback().await?;
                Some(serde_json::to_string(&report).map_err(|error| {
                    DispatchError::Database(sqlx::Error::Encode(Box::new(error)))
                })?)
            };
        let mut transaction = self.begin().await?;
        if let Some(report) = report {
            // Another process may have recorded the slot meanwhile: its snapshot stays.
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
            .bind(cutoff)
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

    /// [`crate::Observe::evidence_snapshots`] on SQLite: none on a handle of one tenant.
    pub(super) async fn read_evidence_snapshots(
        &self,
        limit: u32,
    ) -> Result<Vec<EvidenceSnapshot>, DispatchError> {
        if self.tenant().is_some() {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, f64, String)> = sqlx::query_as(sql::READ_EVIDENCE_SNAPSHOTS)
            .bind(i64::from(limit.min(MAX_EVIDENCE_SNAPSHOTS)))
            .fetch_all(self.pool())
            .await?;
        Ok(evidence::snapshots(rows))
    }
}

/// The report of `query` over the window that ends `now` (epoch seconds), read on
/// `connection`.
async fn count(
    connection: &mut SqliteConnection,
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
