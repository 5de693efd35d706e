//! Usage evidence on PostgreSQL ([`crate::store::evidence`]): four aggregate reads of the
//! ledger (events, attempts, lag breaches) over one window of the database's clock.

use sqlx::postgres::PgPool;

use super::{operations, sql};
use crate::registry::Registry;
use crate::store::DispatchError;
use crate::store::evidence::{self, Counted, EvidenceQuery, EvidenceReport, MAX_SIGNAL_ROWS};

/// [`crate::Observe::evidence`] on PostgreSQL; refused in a session of one tenant.
pub(crate) async fn evidence(
    pool: &PgPool,
    registry: &Registry,
    query: &EvidenceQuery,
) -> Result<EvidenceReport, DispatchError> {
    if let Some(tenant) = operations::session_tenant(pool).await? {
        return Err(DispatchError::TenantScoped("usage evidence", tenant));
    }
    let now: f64 = sqlx::query_scalar(sql::CLOCK).fetch_one(pool).await?;
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
    Ok(evidence::report(registry, query, counted))
}
