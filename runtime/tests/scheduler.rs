//! Scheduled producers across processes, on PostgreSQL: three dispatcher processes run the
//! same schedule of every second, and each slot is ticked once between them, also when the
//! process running a round is killed in the middle of it.
//!
//! Child processes are this test binary itself, re-run with `--exact scheduler_child`: that
//! test does nothing unless [`DATABASE`] is set in its environment. Each child runs a
//! dispatcher (no consumers: ticks run no work of their own) whose scheduler rounds every 50 ms.
//! To catch a round mid-slot, the parent appends, in a transaction it keeps open, an event with
//! the idempotency key the tick of a coming slot will carry: the round that reaches that slot
//! blocks on the parent's row while it holds the scheduler lock, its earlier ticks appended
//! but not committed. The parent kills that process, rolls its own row back, and the others
//! take the slot over.

mod support;

#[path = "support/conformance.rs"]
mod conformance;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::Duration;

use evc_runtime::{
    AppendOptions, Dispatcher, DispatcherConfig, FeedPosition, MissedSlots, Observe, OutgoingEvent,
    PgStore, Registry, ScheduleDescriptor, Store,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use support::{HANG, TestResult};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The server URL (the parent's `DATABASE_URL` or the default).
const URL: &str = "EVC_SCHEDULER_URL";
/// The test database on that server; unset: not a child.
const DATABASE: &str = "EVC_SCHEDULER_DATABASE";
/// The child's name: its lease owner and its connections' `application_name`.
const NAME: &str = "EVC_SCHEDULER_NAME";

const DEFAULT_URL: &str = "postgres://root@localhost/test";

const TICK: &str = "cron.tick.every_second";

/// One schedule, every second, whose missed slots are caught up.
static SECONDLY_REGISTRY: Registry = Registry {
    events: &[conformance::tick_event(TICK)],
    consumers: &[],
    schedules: &[ScheduleDescriptor {
        name: "every_second",
        cron: "* * * * * *",
        event: TICK,
        missed: MissedSlots::CatchUp,
        catch_up_limit: 1_000,
        tenant_scope: None,
    }],
    ..support::DISPATCH_REGISTRY
};

// ---------------------------------------------------------------------------------------------
// The child side.
// ---------------------------------------------------------------------------------------------

/// Entry point of the child processes; a no-op in a normal test run.
#[test]
fn scheduler_child() {
    let Ok(database) = std::env::var(DATABASE) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(error) = runtime.block_on(child(&database)) {
        panic!("scheduler child failed: {error}");
    }
}

/// Runs a dispatcher with the scheduler until the parent kills the process.
async fn child(database: &str) -> TestResult {
    let name = std::env::var(NAME)?;
    let options = PgConnectOptions::from_str(&std::env::var(URL)?)?
        .database(database)
        .application_name(&name);
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await?;
    let store = PgStore::new(pool, SECONDLY_REGISTRY)?;
    let config = DispatcherConfig::default()
        .owner(name)
        .schedule_interval(Some(Duration::from_millis(50)));
    let _running = Dispatcher::new(store, config).start();
    loop {
        tokio::time::sleep(Duration::from_secs(3_600)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The parent side.
// ---------------------------------------------------------------------------------------------

/// A child process, killed when dropped (a failed assertion leaves no process behind).
struct Scheduler {
    name: String,
    process: Child,
}

impl Scheduler {
    fn spawn(pool: &PgPool, name: &str) -> Result<Self, BoxError> {
        let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
        let database = pool
            .connect_options()
            .get_database()
            .ok_or("the test pool names its database")?
            .to_owned();
        let process = Command::new(std::env::current_exe()?)
            .args([
                "--exact",
                "scheduler_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(URL, url)
            .env(DATABASE, database)
            .env(NAME, name)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        Ok(Self {
            name: name.to_owned(),
            process,
        })
    }

    fn kill(&mut self) -> Result<(), BoxError> {
        self.process.kill()?;
        self.process.wait()?;
        Ok(())
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The slots of the ticks in the feed, in feed order, once the feed shows as many as the outbox
/// holds (the feed holds back events behind any transaction still running on the server).
async fn ticked_slots(store: &PgStore) -> Result<Vec<String>, BoxError> {
    let appended = store.count_events(&[TICK]).await?;
    eventually("the feed shows every tick", || async {
        let mut slots = Vec::new();
        let mut after = FeedPosition::default();
        loop {
            let page = store.feed(after, 1_000).await?;
            let Some(last) = page.last() else {
                break;
            };
            after = last.position;
            for event in &page {
                let slot = event.payload["slot"]
                    .as_str()
                    .ok_or("a tick without a slot")?;
                slots.push(slot.to_owned());
            }
        }
        Ok((slots.len() as u64 >= appended).then_some(slots))
    })
    .await
}

/// Waits, at most [`HANG`], until `probe` answers `Some`.
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> Result<T, BoxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, BoxError>>,
{
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        if let Some(found) = probe().await? {
            return Ok(found);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("gave up waiting until {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The slot `ahead` seconds after now, as a tick names it.
fn slot_ahead(ahead: u64) -> Result<String, BoxError> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let slot = chrono::DateTime::from_timestamp(i64::try_from(now.as_secs() + ahead)?, 0)
        .ok_or("a time after the epoch")?;
    Ok(slot.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_dispatcher_processes_tick_each_slot_once_through_a_kill_mid_slot() -> TestResult {
    support::with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), SECONDLY_REGISTRY)?;
        let mut children = (0..3)
            .map(|n| Scheduler::spawn(&pool, &format!("evc-scheduler-{n}")))
            .collect::<Result<Vec<_>, _>>()?;
        eventually("three slots are ticked", || async {
            Ok((store.count_events(&[TICK]).await? >= 3).then_some(()))
        })
        .await?;

        // Take a coming slot's idempotency key first, in a transaction left open: the round
        // that reaches the slot waits on this row while it holds the scheduler lock.
        let (blocker, blocked_slot) = loop {
            let slot = slot_ahead(2)?;
            let mut transaction = store.begin().await?;
            let payload = serde_json::json!({"schedule": "every_second", "slot": slot});
            let event = OutgoingEvent::new(
                TICK,
                "1.0.0",
                Some("every_second".to_owned()),
                &support::trace(),
                &payload,
            )?;
            let options =
                AppendOptions::new().idempotency_key(format!("evc.schedule:every_second:{slot}"));
            // Already ticked (the machine is slow): try a later slot.
            if store
                .append(&mut transaction, event, options)
                .await?
                .created
            {
                break (transaction, slot);
            }
        };
        let waiting: String = eventually("a round waits mid-slot", || async {
            let name: Option<String> = sqlx::query_scalar(
                "SELECT application_name FROM pg_stat_activity \
                 WHERE application_name LIKE 'evc-scheduler-%' AND wait_event_type = 'Lock' \
                 LIMIT 1",
            )
            .fetch_optional(&pool)
            .await?;
            Ok(name)
        })
        .await?;
        let victim = children
            .iter_mut()
            .find(|child| child.name == waiting)
            .ok_or("the waiting round belongs to a child")?;
        victim.kill()?;
        blocker.rollback().await?;

        // The two left take over: the blocked slot and the slots after it are ticked.
        let past = slot_ahead(2)?;
        eventually("the survivors tick on", || async {
            let slots = ticked_slots(&store).await?;
            Ok(slots.iter().any(|slot| *slot >= past).then_some(()))
        })
        .await?;
        for child in &mut children {
            child.kill()?;
        }

        let slots = ticked_slots(&store).await?;
        let distinct: BTreeSet<&String> = slots.iter().collect();
        assert_eq!(
            distinct.len(),
            slots.len(),
            "a slot ticked twice: {slots:?}"
        );
        assert!(
            distinct.contains(&blocked_slot),
            "{blocked_slot} lost: {slots:?}"
        );
        // Caught up: every second from the first tick to the last.
        let mut seconds: Vec<i64> = slots
            .iter()
            .map(|slot| chrono::DateTime::parse_from_rfc3339(slot).map(|t| t.timestamp()))
            .collect::<Result<_, _>>()?;
        seconds.sort_unstable();
        let first = seconds.first().copied().ok_or("no tick")?;
        let expected: Vec<i64> = (first..first + i64::try_from(seconds.len())?).collect();
        assert_eq!(seconds, expected, "a slot missing");
        let states = store.schedule_states().await?;
        assert_eq!(states.len(), 1);
        assert_eq!(states[0].ticks, i64::try_from(slots.len())?);
        assert_eq!(states[0].skipped, 0);
        Ok(())
    })
    .await
}

/// A round that finds the scheduler lock taken does nothing, and says so; once the lock is
/// free the next round leads. The lock is PostgreSQL's transaction-level advisory lock of the
/// scheduler, taken here by another session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_finds_the_lock_taken_does_nothing() -> TestResult {
    support::with_database(|pool| async move {
        let store = PgStore::new(pool.clone(), SECONDLY_REGISTRY)?;
        let start = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        store.tick_schedules(Some(start)).await?;
        let mut holder = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('evc.schedules', 7268))")
            .execute(&mut *holder)
            .await?;
        let later = start + Duration::from_secs(5);
        let blocked = store.tick_schedules(Some(later)).await?;
        assert!(!blocked.leader);
        assert_eq!(blocked.ticks, 0);
        assert_eq!(store.count_events(&[TICK]).await?, 0);
        holder.rollback().await?;
        let led = store.tick_schedules(Some(later)).await?;
        assert!(led.leader);
        assert_eq!(led.ticks, 5);
        Ok(())
    })
    .await
}
