//! Scheduler rounds on SQLite (`evc_schedules`, migration 0014): the round's `BEGIN
//! IMMEDIATE` transaction is the store's one writer, so it is also the scheduler's lock; see
//! [`crate::store::schedule`].

use std::collections::HashMap;
use std::time::SystemTime;

use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::{SqliteStore, sql};
use crate::store::DispatchError;
use crate::store::schedule::{self, Advance, ScheduleRound, ScheduleState, Stored};

impl SqliteStore {
    /// [`crate::Store::tick_schedules`] on SQLite.
    pub(super) async fn run_schedules(
        &self,
        at: Option<SystemTime>,
    ) -> Result<ScheduleRound, DispatchError> {
        let schedules = self.registry().schedules;
        if schedules.is_empty() {
            return Ok(ScheduleRound::default());
        }
        // A tick spans tenants like a schedule does.
        if let Some(tenant) = self.tenant() {
            return Err(DispatchError::TenantScoped("a schedule", tenant.to_owned()));
        }
        let mut transaction = self.begin().await?;
        // Read once the one writer is ours (see the lag watch).
        let now = schedule::utc(at.unwrap_or_else(SystemTime::now));
        let mut stored = HashMap::new();
        for schedule in schedules {
            let row = sqlx::query(sql::SCHEDULE_POSITION)
                .bind(schedule.name)
                .fetch_optional(&mut *transaction)
                .await?;
            if let Some(row) = row {
                let (cron, event): (String, String) =
                    (row.try_get("cron")?, row.try_get("event_type")?);
                if cron != schedule.cron || event != schedule.event {
                    sqlx::query(sql::RESTATE_SCHEDULE)
                        .bind(schedule.name)
                        .bind(schedule.cron)
                        .bind(schedule.event)
                        .execute(&mut *transaction)
                        .await?;
                }
                let since: f64 = row.try_get("since")?;
                let last_slot: Option<f64> = row.try_get("last_slot")?;
                stored.insert(
                    schedule.name,
                    Stored {
                        since: schedule::from_epoch(since),
                        last_slot: last_slot.map(schedule::from_epoch),
                    },
                );
            }
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

    /// [`crate::Store::schedule_states`] on SQLite.
    pub(in crate::store) async fn read_schedules(
        &self,
    ) -> Result<Vec<ScheduleState>, DispatchError> {
        let rows = sqlx::query(sql::SCHEDULE_STATES)
            .fetch_all(self.pool())
            .await?;
        Ok(rows.iter().map(state).collect::<Result<_, sqlx::Error>>()?)
    }
}

fn state(row: &SqliteRow) -> Result<ScheduleState, sqlx::Error> {
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
