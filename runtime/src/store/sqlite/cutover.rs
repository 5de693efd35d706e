//! The cut-over gate on SQLite (`evc_legacy_outcomes`, `evc_cutover_explanations`: migration
//! 0016); see [`crate::store::cutover`]. A move to `live` is judged inside the write
//! transaction that makes it, which no other writer shares.

use sqlx::Row;
use sqlx::sqlite::SqliteConnection;
use uuid::Uuid;

use super::{SqliteStore, epoch_now, parse_uuid, sql};
use crate::registry::ConsumerMode;
use crate::store::cutover::{self, CutoverReport, CutoverTerms, GateProgress, ShadowRun};
use crate::store::ops::{StateChange, check_change};
use crate::store::{DispatchError, Intent};

impl SqliteStore {
    /// [`crate::Store::record_legacy_outcome`] on SQLite.
    pub(super) async fn write_legacy_outcome(
        &self,
        connection: &mut SqliteConnection,
        consumer: &str,
        event_id: Uuid,
        outcome: &[Intent],
    ) -> Result<bool, DispatchError> {
        let descriptor = cutover::legacy_consumer(self.registry(), consumer, outcome)?;
        let event: Option<(String, String)> = sqlx::query_as(sql::EVENT_TYPE_OF)
            .bind(event_id.to_string())
            .bind(self.tenant())
            .fetch_optional(&mut *connection)
            .await?;
        let outcome = cutover::legacy_row(descriptor, event_id, event, outcome)?;
        let written = sqlx::query(sql::RECORD_LEGACY_OUTCOME)
            .bind(consumer)
            .bind(event_id.to_string())
            .bind(outcome)
            .bind(epoch_now())
            .execute(&mut *connection)
            .await?;
        Ok(written.rows_affected() == 1)
    }

    /// The progress of each of the registry's gates, for the status report; none on a handle
    /// of one tenant (the gate is every tenant's).
    pub(super) async fn gate_progress(&self) -> Result<Vec<GateProgress>, DispatchError> {
        let mut progress = Vec::new();
        if self.tenant().is_some() {
            return Ok(progress);
        }
        for gate in self.registry().cutover_gates {
            let counts = sqlx::query_as(sql::GATE_PROGRESS)
                .bind(gate.consumer)
                .bind(cutover::count_cap(gate.into()))
                .fetch_one(self.pool())
                .await?;
            progress.push(cutover::progress(gate.consumer, gate.into(), counts));
        }
        Ok(progress)
    }

    /// [`DispatchError::TenantScoped`] on a handle of one tenant.
    fn every_tenant(&self) -> Result<(), DispatchError> {
        match self.tenant() {
            Some(tenant) => Err(DispatchError::TenantScoped(
                "the cut-over gate",
                tenant.to_owned(),
            )),
            None => Ok(()),
        }
    }

    /// Whether a move of `consumer` from `current` to `live` is judged by the gate, read on
    /// `connection` ([`cutover::gated`]).
    pub(super) async fn gated_on(
        connection: &mut SqliteConnection,
        consumer: &str,
        current: ConsumerMode,
        declared: ConsumerMode,
    ) -> Result<bool, DispatchError> {
        let last: Option<String> = sqlx::query_scalar(sql::LAST_ACTIVE_MODE)
            .bind(consumer)
            .fetch_optional(&mut *connection)
            .await?;
        let last = last.as_deref().and_then(ConsumerMode::parse);
        Ok(cutover::gated(current, last, declared))
    }

    /// `consumer`'s report against `terms`, read on `connection` (optionally of `event` only).
    pub(super) async fn report_on(
        &self,
        connection: &mut SqliteConnection,
        consumer: &str,
        terms: Option<CutoverTerms>,
        event: Option<Uuid>,
    ) -> Result<CutoverReport, DispatchError> {
        let since: Option<f64> = sqlx::query_scalar(sql::SHADOW_SINCE)
            .bind(consumer)
            .fetch_one(&mut *connection)
            .await?;
        let rows = sqlx::query(sql::SHADOW_RUNS)
            .bind(consumer)
            .bind(event.map(|event| event.to_string()))
            .fetch_all(&mut *connection)
            .await?;
        let mut runs = Vec::with_capacity(rows.len());
        for row in &rows {
            let intended: String = row.try_get("intended")?;
            let legacy: Option<String> = row.try_get("legacy")?;
            runs.push(ShadowRun::of_row(
                parse_uuid(&row.try_get::<String, _>("event_id")?)?,
                &intended,
                legacy.as_deref(),
                row.try_get("explained")?,
                row.try_get("recorded_at")?,
            )?);
        }
        Ok(cutover::report(consumer, terms, since, &runs))
    }

    /// [`crate::Operate::cutover_report`] on SQLite; refused on a handle of one tenant (the
    /// gate, like a mode, is every tenant's).
    pub(super) async fn read_cutover(
        &self,
        consumer: &str,
    ) -> Result<CutoverReport, DispatchError> {
        let terms = cutover::terms_of(self.registry(), consumer)?;
        self.every_tenant()?;
        let mut connection = self.pool().acquire().await?;
        self.report_on(&mut connection, consumer, terms, None).await
    }

    /// [`crate::Operate::explain_difference`] on SQLite: written only when the event's shadow
    /// run and legacy outcome differ, in the write transaction that checks it.
    pub(super) async fn write_explanation(
        &self,
        consumer: &str,
        event_id: Uuid,
        change: &StateChange,
    ) -> Result<CutoverReport, DispatchError> {
        let terms = cutover::terms_of(self.registry(), consumer)?;
        check_change(change)?;
        self.every_tenant()?;
        let mut transaction = self.begin().await?;
        let run = self
            .report_on(&mut transaction, consumer, None, Some(event_id))
            .await?;
        if let Some(refusal) = cutover::unexplainable(consumer, event_id, &run) {
            return Err(DispatchError::InvalidChange(refusal));
        }
        sqlx::query(sql::EXPLAIN_DIFFERENCE)
            .bind(consumer)
            .bind(event_id.to_string())
            .bind(change.by.trim_matches(' '))
            .bind(&change.reason)
            .bind(epoch_now())
            .bind(self.tenant())
            .execute(&mut *transaction)
            .await?;
        let report = self
            .report_on(&mut transaction, consumer, terms, None)
            .await?;
        transaction.commit().await?;
        tracing::info!(consumer, %event_id, "cut-over difference explained");
        Ok(report)
    }
}
