//! Usage evidence on SQLite ([`crate::store::evidence`]): the same four aggregate reads as
//! PostgreSQL's, over one window of the store's clock.

use super::{SqliteStore, epoch_now, sql};
use crate::store::DispatchError;
use crate::store::evidence::{self, Counted, EvidenceQuery, EvidenceReport, MAX_SIGNAL_ROWS};

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
        let slot = query.slot_s();
        let since = epoch_now() - query.window.as_secs_f64();
        let min = i64::from(query.min_count);
        let rows = i64::from(MAX_SIGNAL_ROWS);
        let pool = self.pool();
        let counted = Counted {
            since,
            co_triggered: sqlx::query_as(sql::CO_TRIGGERED)
                .bind(since)
                .bind(min)
                .bind(rows)
                .fetch_all(pool)
                .await?,
            failing_together: sqlx::query_as(sql::FAILING_TOGETHER)
                .bind(since)
                .bind(slot)
                .bind(min)
                .bind(rows)
                .fetch_all(pool)
                .await?,
            chronic: sqlx::query_as(sql::CHRONIC_PAIRS)
                .bind(since)
                .bind(min)
                .bind(rows)
                .fetch_all(pool)
                .await?,
            escalations: sqlx::query_as(sql::ESCALATIONS)
                .bind(since)
                .fetch_all(pool)
                .await?,
        };
        Ok(evidence::report(self.registry(), query, counted))
    }
}
