//! The cut-over gate on PostgreSQL (`evc_legacy_outcomes`, `evc_cutover_explanations`: the
//! twenty-fifth step); see [`crate::store::cutover`].

use sqlx::Row;
use sqlx::postgres::{PgConnection, PgPool};
use uuid::Uuid;

use super::{PgStore, deployed, operations, sql};
use crate::registry::ConsumerMode;
use crate::store::cutover::{self, CutoverReport, CutoverTerms, GateProgress, ShadowRun};
use crate::store::ops::{StateChange, check_change};
use crate::store::{DispatchError, Intent};

impl PgStore {
    /// [`crate::Store::record_legacy_outcome`] on PostgreSQL.
    pub(super) async fn write_legacy_outcome(
        &self,
        connection: &mut PgConnection,
        consumer: &str,
        event_id: Uuid,
        outcome: &[Intent],
    ) -> Result<bool, DispatchError> {
        let descriptor = cutover::legacy_consumer(self.registry(), consumer, outcome)?;
        let event: Option<(String, String)> = sqlx::query_as(sql::EVENT_TYPE_OF)
            .bind(event_id)
            .fetch_optional(&mut *connection)
            .await?;
        let outcome = cutover::legacy_row(descriptor, event_id, event, outcome)?;
        let written = sqlx::query(sql::RECORD_LEGACY_OUTCOME)
            .bind(consumer)
            .bind(event_id)
            .bind(outcome)
            .execute(&mut *connection)
            .await?;
        Ok(written.rows_affected() == 1)
    }
}

/// [`DispatchError::TenantScoped`] when the sessions of `pool` work for one tenant: they see
/// neither the mode changes that open the window nor the other tenants' runs.
async fn every_tenant(pool: &PgPool) -> Result<(), DispatchError> {
    match operations::session_tenant(pool).await? {
        Some(tenant) => Err(DispatchError::TenantScoped("the cut-over gate", tenant)),
        None => Ok(()),
    }
}

/// Whether a move of `consumer` from `current` to `live` is judged by the gate, read on
/// `connection` ([`cutover::gated`]).
pub(crate) async fn gated_on(
    connection: &mut PgConnection,
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

/// The progress of each of `gates` (consumer and gate) for the status report; none in a
/// database before the twenty-fifth step, nor in a session of one tenant (which sees neither
/// the window's mode changes nor the other tenants' runs; the gate is every tenant's).
pub(crate) async fn progress_of(
    pool: &PgPool,
    gates: &[(&str, CutoverTerms)],
) -> Result<Vec<GateProgress>, DispatchError> {
    if gates.is_empty()
        || operations::session_tenant(pool).await?.is_some()
        || !sqlx::query_scalar::<_, bool>(sql::HAS_CUTOVER)
            .fetch_one(pool)
            .await?
    {
        return Ok(Vec::new());
    }
    let mut progress = Vec::with_capacity(gates.len());
    for (consumer, gate) in gates {
        let counts = sqlx::query_as(sql::GATE_PROGRESS)
            .bind(consumer)
            .bind(cutover::count_cap(*gate))
            .fetch_one(pool)
            .await?;
        progress.push(cutover::progress(consumer, *gate, counts));
    }
    Ok(progress)
}

/// Every deployed gate, by consumer, owned (a console lists them without leaking a registry).
pub(crate) async fn deployed_gate_list(
    pool: &PgPool,
) -> Result<Vec<(String, CutoverTerms)>, DispatchError> {
    #[derive(serde::Deserialize)]
    struct Gate {
        consumer: String,
        #[serde(flatten)]
        terms: CutoverTerms,
    }
    let gates: Vec<Gate> = deployed::settings_column(
        pool,
        sql::HAS_CUTOVER,
        sql::DEPLOYED_GATES,
        "cutover_gates",
        |value| {
            serde_json::from_value(value)
                .map_err(|_| "the cut-over gates are not a list of gates".to_owned())
        },
    )
    .await?
    .unwrap_or_default();
    let mut gates: Vec<(String, CutoverTerms)> =
        gates.into_iter().map(|g| (g.consumer, g.terms)).collect();
    gates.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(gates)
}

/// `consumer`'s report against `terms`, read on `connection` (optionally of `event` only).
pub(crate) async fn report_on(
    connection: &mut PgConnection,
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
        .bind(event)
        .fetch_all(&mut *connection)
        .await?;
    let mut runs = Vec::with_capacity(rows.len());
    for row in &rows {
        let intended: String = row.try_get("intended")?;
        let legacy: Option<String> = row.try_get("legacy")?;
        runs.push(ShadowRun::of_row(
            row.try_get("event_id")?,
            &intended,
            legacy.as_deref(),
            row.try_get("explained")?,
            row.try_get("recorded_at")?,
        )?);
    }
    Ok(cutover::report(consumer, terms, since, &runs))
}

/// [`crate::Operate::cutover_report`] over `pool`; refused in a session of one tenant (the
/// gate, like a mode, is every tenant's).
pub(crate) async fn report_of(
    pool: &PgPool,
    consumer: &str,
    terms: Option<CutoverTerms>,
) -> Result<CutoverReport, DispatchError> {
    every_tenant(pool).await?;
    let mut connection = pool.acquire().await?;
    report_on(&mut connection, consumer, terms, None).await
}

/// [`crate::Operate::explain_difference`] over `pool`: the explanation is written only when
/// the event's shadow run and legacy outcome differ, in the transaction that checks it.
pub(crate) async fn explain(
    pool: &PgPool,
    consumer: &str,
    event_id: Uuid,
    change: &StateChange,
    terms: Option<CutoverTerms>,
) -> Result<CutoverReport, DispatchError> {
    check_change(change)?;
    every_tenant(pool).await?;
    let mut transaction = pool.begin().await?;
    let run = report_on(&mut transaction, consumer, None, Some(event_id)).await?;
    if let Some(refusal) = cutover::unexplainable(consumer, event_id, &run) {
        return Err(DispatchError::InvalidChange(refusal));
    }
    sqlx::query(sql::EXPLAIN_DIFFERENCE)
        .bind(consumer)
        .bind(event_id)
        .bind(change.by.trim_matches(' '))
        .bind(&change.reason)
        .execute(&mut *transaction)
        .await?;
    let report = report_on(&mut transaction, consumer, terms, None).await?;
    transaction.commit().await?;
    tracing::info!(consumer, %event_id, "cut-over difference explained");
    Ok(report)
}
