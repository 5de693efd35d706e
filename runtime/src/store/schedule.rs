//! Scheduled producers (`schedules.yaml`, docs/runtime.md, "Schedules"): which slots of a
//! schedule are due, and the tick event each slot appends. Both stores run a scheduler round
//! ([`crate::Store::tick_schedules`]) the same way: in one write transaction, under the store's
//! lock (PostgreSQL: a transaction-level advisory lock that only one process holds at a time;
//! SQLite: its one writer), they read where each schedule stands, append the due ticks through
//! the checked append path and move the schedule on. A tick's idempotency key names its
//! schedule and slot, so a slot is appended once even by two rounds that both found it due;
//! a round that dies before its commit appends nothing, and the next round finds the slot
//! still due.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde_json::{Map, Value};

use crate::registry::{MissedSlots, ScheduleDescriptor};
use crate::store::lifecycle::{self, Lifecycle};
use crate::store::{Connection, DispatchError, Store};

/// The most missed slots a round counts as skipped for one schedule: a schedule of every
/// second left alone for a year has thirty million, and the count is a report, not a ledger.
pub const MAX_COUNTED_SKIPS: u64 = 100_000;

/// A schedule as a store keeps it ([`crate::Store::schedule_states`]). Times are epoch
/// seconds.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ScheduleState {
    /// The schedule.
    pub name: String,
    /// Its cron expression when a round last moved it.
    pub cron: String,
    /// The tick event type it appends.
    pub event: String,
    /// When a round first saw it: no slot before this is ticked.
    pub since: f64,
    /// The newest slot ticked or skipped (`None`: none yet).
    pub last_slot: Option<f64>,
    /// Ticks appended, by every process.
    pub ticks: i64,
    /// Missed slots skipped (counted up to [`MAX_COUNTED_SKIPS`] a round).
    pub skipped: i64,
    /// When a round last ticked or skipped a slot of it.
    pub ticked_at: Option<f64>,
}

/// What one scheduler round did ([`crate::Store::tick_schedules`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleRound {
    /// Whether this round held the store's scheduler lock (`false`: another process ran
    /// the round, nothing was done).
    pub leader: bool,
    /// Ticks appended.
    pub ticks: u32,
    /// Missed slots skipped.
    pub skipped: u64,
}

/// A schedule's position as a round read it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::store) struct Stored {
    /// When it was first seen.
    pub(in crate::store) since: DateTime<Utc>,
    /// The newest slot ticked or skipped.
    pub(in crate::store) last_slot: Option<DateTime<Utc>>,
}

/// How a round moves one schedule on: what the store writes after appending its ticks.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::store) enum Advance {
    /// Seen for the first time: its row starts at `now`, nothing is due yet.
    Start(&'static ScheduleDescriptor),
    /// Slots passed: `last_slot` is the newest, `ticks` were appended, `skipped` left out.
    Moved {
        /// The schedule.
        schedule: &'static ScheduleDescriptor,
        /// The newest slot handled.
        last_slot: DateTime<Utc>,
        /// Ticks appended.
        ticks: u32,
        /// Slots skipped.
        skipped: u64,
    },
}

/// The slots of a schedule due at a round's time ([`due`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    /// Slots to tick, oldest first.
    pub(crate) slots: Vec<DateTime<Utc>>,
    /// Slots passed and left out (counted up to [`MAX_COUNTED_SKIPS`]).
    pub(crate) skipped: u64,
}

/// Parses a cron expression as schedules read it: five fields (minute first) or six (second
/// first), in UTC.
///
/// # Errors
/// croner's, naming what it could not read.
pub(crate) fn parse_cron(expression: &str) -> Result<Cron, croner::errors::CronError> {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(expression)
}

/// The slots of `cron` after `after` and at or before `now`, as `missed` and `limit` keep them:
/// every one of them but the `limit` newest skipped ([`MissedSlots::CatchUp`]), or all but
/// the newest ([`MissedSlots::Skip`]). A clock that went back (`now` before `after`) has none
/// due.
pub(crate) fn due(
    cron: &Cron,
    after: DateTime<Utc>,
    now: DateTime<Utc>,
    missed: MissedSlots,
    limit: u32,
) -> Due {
    let keep = match missed {
        // `evc check` allows at most 10,000; a hand-written registry gets no more.
        MissedSlots::CatchUp => limit.clamp(1, 10_000) as usize,
        MissedSlots::Skip => 1,
    };
    // Backwards from `now`: what is kept is the newest slots, and walking forwards from a
    // long-past `after` would step through every slot in between.
    let mut newest_first = Vec::new();
    let mut skipped = 0_u64;
    for slot in cron.iter_from(now, croner::Direction::Backward) {
        if slot <= after {
            break;
        }
        if newest_first.len() < keep {
            newest_first.push(slot);
        } else {
            skipped += 1;
            if skipped >= MAX_COUNTED_SKIPS {
                break;
            }
        }
    }
    newest_first.reverse();
    Due {
        slots: newest_first,
        skipped,
    }
}

/// The slot of `state`'s cron expression after its newest handled slot (or its start),
/// epoch seconds; `None` when there is none or the expression does not parse.
pub(in crate::store) fn next_slot(state: &ScheduleState) -> Option<f64> {
    let after = from_epoch(state.last_slot.unwrap_or(state.since));
    let cron = parse_cron(&state.cron).ok()?;
    cron.iter_after(after)
        .next()
        .map(|slot| slot.timestamp() as f64)
}

/// `time` as a UTC date-time, whole seconds (slots are whole seconds).
pub(in crate::store) fn utc(time: SystemTime) -> DateTime<Utc> {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    DateTime::from_timestamp(i64::try_from(since.as_secs()).unwrap_or(i64::MAX), 0)
        .unwrap_or_default()
}

/// Epoch seconds as a UTC date-time.
pub(in crate::store) fn from_epoch(seconds: f64) -> DateTime<Utc> {
    // Stored slots are whole seconds; the float carries them exactly.
    #[allow(clippy::cast_possible_truncation)]
    let whole = seconds.floor() as i64;
    DateTime::from_timestamp(whole, 0).unwrap_or_default()
}

/// A slot as its tick names it: RFC 3339, UTC, whole seconds (`2026-12-06T03:00:00Z`).
pub(crate) fn slot_text(slot: DateTime<Utc>) -> String {
    slot.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The idempotency key of `schedule`'s tick of `slot`: the same slot is the same event,
/// whichever process appends it.
pub(crate) fn tick_key(schedule: &str, slot: DateTime<Utc>) -> String {
    format!("evc.schedule:{schedule}:{}", slot_text(slot))
}

/// The tick of `schedule` for `slot`: `schedule` and `slot` in its payload (fields its
/// contract does not declare are dropped), in the schedule's tenant, in a trace of its own.
fn tick(schedule: &ScheduleDescriptor, slot: DateTime<Utc>) -> Lifecycle {
    let mut payload = Map::new();
    payload.insert("schedule".into(), Value::from(schedule.name));
    payload.insert("slot".into(), Value::from(slot_text(slot)));
    Lifecycle {
        payload,
        trace: None,
        causation_id: None,
        tenant_scope: schedule.tenant_scope.map(str::to_owned),
        idempotency_key: Some(tick_key(schedule.name, slot)),
    }
}

/// One round's work on `transaction`, which holds the store's scheduler lock: for each of the
/// registry's schedules, found in `stored` (by name) or not, the ticks due at `now` are
/// appended; returns how each schedule moves on, for the store to write in the same
/// transaction. A schedule whose cron expression does not parse (a registry `evc check` did
/// not pass) is logged and left alone.
///
/// # Errors
/// The database's; the transaction must then roll back.
pub(in crate::store) async fn run<S: Store>(
    store: &S,
    transaction: &mut Connection<S>,
    stored: impl Fn(&str) -> Option<Stored>,
    now: DateTime<Utc>,
) -> Result<Vec<Advance>, DispatchError> {
    let mut advances = Vec::new();
    for schedule in store.registry().schedules {
        let Some(position) = stored(schedule.name) else {
            advances.push(Advance::Start(schedule));
            continue;
        };
        let cron = match parse_cron(schedule.cron) {
            Ok(cron) => cron,
            Err(error) => {
                tracing::warn!(schedule = schedule.name, %error, "schedule not run: its cron expression does not parse");
                continue;
            }
        };
        let after = position.last_slot.unwrap_or(position.since);
        let due = due(&cron, after, now, schedule.missed, schedule.catch_up_limit);
        let Some(&last_slot) = due.slots.last() else {
            continue;
        };
        let Some(descriptor) = store.registry().event(schedule.event) else {
            tracing::warn!(
                schedule = schedule.name,
                event = schedule.event,
                "schedule not run: its tick event is not registered"
            );
            continue;
        };
        // A tick the contract refuses leaves its schedule where it was (its slot stays due and
        // the status report shows it overdue); the other schedules move on.
        let mut savepoint = sqlx::Connection::begin(&mut *transaction).await?;
        let mut refused = false;
        for &slot in &due.slots {
            if !lifecycle::emit_checked(store, &mut savepoint, descriptor, tick(schedule, slot))
                .await?
            {
                refused = true;
                break;
            }
        }
        if refused {
            savepoint.rollback().await?;
            tracing::warn!(
                schedule = schedule.name,
                "schedule not moved: its tick was refused"
            );
            continue;
        }
        savepoint.commit().await?;
        advances.push(Advance::Moved {
            schedule,
            last_slot,
            ticks: u32::try_from(due.slots.len()).unwrap_or(u32::MAX),
            skipped: due.skipped,
        });
    }
    Ok(advances)
}

/// What `advances` add up to, for a round that held the lock.
pub(in crate::store) fn round(advances: &[Advance]) -> ScheduleRound {
    let mut round = ScheduleRound {
        leader: true,
        ..ScheduleRound::default()
    };
    for advance in advances {
        if let Advance::Moved { ticks, skipped, .. } = advance {
            round.ticks += ticks;
            round.skipped += skipped;
        }
    }
    round
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .map(|time| time.with_timezone(&Utc))
            .unwrap_or_default()
    }

    fn hourly() -> Cron {
        parse_cron("0 * * * *").unwrap_or_else(|error| panic!("{error}"))
    }

    fn texts(due: &Due) -> Vec<String> {
        due.slots.iter().copied().map(slot_text).collect()
    }

    #[test]
    fn a_catch_up_ticks_every_missed_slot_oldest_first() {
        let due = due(
            &hourly(),
            at("2026-12-06T01:00:00Z"),
            at("2026-12-06T04:30:00Z"),
            MissedSlots::CatchUp,
            100,
        );
        assert_eq!(
            texts(&due),
            [
                "2026-12-06T02:00:00Z",
                "2026-12-06T03:00:00Z",
                "2026-12-06T04:00:00Z"
            ]
        );
        assert_eq!(due.skipped, 0);
    }

    #[test]
    fn a_catch_up_keeps_the_newest_slots_up_to_its_limit() {
        let due = due(
            &hourly(),
            at("2026-12-06T00:00:00Z"),
            at("2026-12-06T05:00:00Z"),
            MissedSlots::CatchUp,
            2,
        );
        assert_eq!(
            texts(&due),
            ["2026-12-06T04:00:00Z", "2026-12-06T05:00:00Z"]
        );
        assert_eq!(due.skipped, 3);
    }

    #[test]
    fn skip_ticks_only_the_newest_missed_slot() {
        let due = due(
            &hourly(),
            at("2026-12-06T00:00:00Z"),
            at("2026-12-06T05:59:59Z"),
            MissedSlots::Skip,
            100,
        );
        assert_eq!(texts(&due), ["2026-12-06T05:00:00Z"]);
        assert_eq!(due.skipped, 4);
    }

    #[test]
    fn the_slot_already_handled_and_a_clock_gone_back_are_not_due() {
        let after = at("2026-12-06T03:00:00Z");
        for now in [
            "2026-12-06T03:00:00Z",
            "2026-12-06T03:59:59Z",
            "2026-12-06T01:00:00Z",
        ] {
            let due = due(&hourly(), after, at(now), MissedSlots::CatchUp, 100);
            assert!(due.slots.is_empty() && due.skipped == 0, "{now}: {due:?}");
        }
    }

    #[test]
    fn skips_are_counted_up_to_a_bound() {
        let every_second = parse_cron("* * * * * *").unwrap_or_else(|error| panic!("{error}"));
        let due = due(
            &every_second,
            at("2025-12-06T00:00:00Z"),
            at("2026-12-06T00:00:00Z"),
            MissedSlots::Skip,
            1,
        );
        assert_eq!(texts(&due), ["2026-12-06T00:00:00Z"]);
        assert_eq!(due.skipped, MAX_COUNTED_SKIPS);
    }

    #[test]
    fn six_fields_read_seconds_first_and_five_minutes_first() {
        let seconds = parse_cron("*/15 * * * * *").unwrap_or_else(|error| panic!("{error}"));
        let due = due(
            &seconds,
            at("2026-12-06T00:00:00Z"),
            at("2026-12-06T00:00:45Z"),
            MissedSlots::CatchUp,
            10,
        );
        assert_eq!(due.slots.len(), 3);
        assert!(parse_cron("61 * * * *").is_err());
        assert!(parse_cron("every day").is_err());
    }

    #[test]
    fn a_tick_is_keyed_by_schedule_and_slot() {
        let slot = at("2026-12-06T03:00:00Z");
        assert_eq!(
            tick_key("nightly_digest", slot),
            "evc.schedule:nightly_digest:2026-12-06T03:00:00Z"
        );
        assert_ne!(tick_key("a", slot), tick_key("b", slot));
    }
}
