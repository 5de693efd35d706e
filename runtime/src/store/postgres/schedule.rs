//! Scheduler rounds on PostgreSQL (`evc_schedules`, the twenty-third runtime step): one
//! process at a time, under a transaction-level advisory lock; see [`crate::store::schedule`].

use std::collections::HashMap;
use std::time::SystemTime;

use sqlx::Row;
use sqlx::postgres::{PgPool, PgRow};

use super::{PgStore, sql};
use crate::store::DispatchError;
use crate::store::schedule::{self, Advance, ScheduleRound, ScheduleState, Stored};

impl PgStore {
    /// [`Store::tick_schedules`] on PostgreSQL.
    pub(super) async fn run_schedules(
        &self,
        at: Option<SystemTime>,
    ) -> Result<ScheduleRound, DispatchError> {
        let schedules = self.registry().schedules;
        if schedules.is_empty() {
            return Ok(ScheduleRound::default());
        }
        // A tick spans tenants like a schedule does; a session of one tenant could not see
        // another tenant's tick of the same slot.
        if let Some(tenant) = super::operations::session_tenant(self.pool()).await? {
            return Err(DispatchError::TenantScoped("a schedule", tenant));
        }
        let mut transaction = self.pool().begin().await?;
        sqlx::query(sql::READ_COMMITTED)
            .execute(&mut *transaction)
            .await?;
        let locked: bool = sqlx::query_scalar(sql::TRY_SCHEDULER_LOCK)
            .fetch_one(&mut *transaction)
            .await?;
        if !locked {
            return Ok(ScheduleRound::default());
        }
        let now = match at {
            Some(at) => schedule::utc(at),
            None => {
                let seconds: f64 = sqlx::query_scalar(sql::CLOCK)
                    .fetch_one(&mut *transaction)
                    .await?;
                schedule::from_epoch(seconds)
            }
        };
        let names: Vec<&str> = schedules.iter().map(|s| s.name).collect();
        let mut stored: HashMap<String, Stored> = HashMap::new();
        for row in sqlx::query(sql::SCHEDULE_POSITIONS)
            .bind(&names)
            .fetch_all(&mut *transaction)
            .await?
        {
            let name: String = row.try_get("schedule")?;
            let since: f64 = row.try_get("since")?;
            let last_slot: Option<f64> = row.try_get("last_slot")?;
            let (cron, event): (String, String) =
                (row.try_get("cron")?, row.try_get("event_type")?);
            if let Some(schedule) = schedules.iter().find(|s| s.name == name)
                && (cron != schedule.cron || event != schedule.event)
            {
                sqlx::query(sql::RESTATE_SCHEDULE)
                    .bind(schedule.name)
                    .bind(schedule.cron)
                    .bind(schedule.event)
                    .execute(&mut *transaction)
                    .await?;
            }
            stored.insert(
                name,
                Stored {
                    since: schedule::from_epoch(since),
                    last_slot: last_slot.map(schedule::from_epoch),
                },
            );
        }
        let advances = schedule::run(
            self,
            &mut *transaction,
            |name| stored.get(name).copied(),
            now,
        )
        .await?;
        let at = now.timestamp() as f64;
        for advance in &advances {
            match advance {
                Advance::Start(schedule) => {
                    sqlx::query(sql::START_SCHEDULE)
                        .bind(schedule.name)
                        .bind(schedule.cron)
                        .bind(schedule.event)
                        .bind(at)
                        .execute(&mut *transaction)
                        .await?;
                }
                Advance::Moved {
                    schedule,
                    last_slot,
                    ticks,
                    skipped,
                } => {
                    sqlx::query(sql::MOVE_SCHEDULE)
                        .bind(schedule.name)
                        .bind(schedule.cron)
                        .bind(schedule.event)
                        .bind(last_slot.timestamp() as f64)
                        .bind(i64::from(*ticks))
                        .bind(i64::try_from(*skipped).unwrap_or(i64::MAX))
                        .bind(at)
                        .execute(&mut *transaction)
                        .await?;
                }
            }
        }
        transaction.commit().await?;
        Ok(schedule::round(&advances))
    }

    /// [`Store::schedule_states`] on PostgreSQL.
    pub(super) async fn read_schedules(&self) -> Result<Vec<ScheduleState>, DispatchError> {
        Ok(states(self.pool()).await?)
    }
}

/// Every schedule's row, by name.
pub(super) async fn states(pool: &PgPool) -> Result<Vec<ScheduleState>, sqlx::Error> {
    sqlx::query(sql::SCHEDULE_STATES)
        .fetch_all(pool)
        .await?
        .iter()
        .map(state)
        .collect()
}

fn state(row: &PgRow) -> Result<ScheduleState, sqlx::Error> {
    Ok(ScheduleState {
        name: row.try_get("schedule")?,
        cron: row.try_get("cron")?,
        event: row.try_get("event_type")?,
        since: row.try_get("since")?,
        last_slot: row.try_get("last_slot")?,
        ticks: row.try_get("ticks")?,
        skipped: row.try_get("skipped")?,
        ticked_at: row.try_get("ticked_at")?,
    })
}
