//! The dispatcher's background tasks beside its workers: lease-expiry recovery, heartbeats, the
//! scheduler and the lag watch.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use super::stats::{Counters, add};
use crate::store::{DispatchError, Heartbeat, Store};

/// Lease-expiry recovery every `interval`.
pub(super) async fn recover<S: Store>(
    store: S,
    interval: Duration,
    counters: Arc<Counters>,
    mut shutdown: watch::Receiver<bool>,
) {
    const LIMIT: u32 = 1_000;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        loop {
            match store.recover_expired(LIMIT).await {
                Ok(recovered) => {
                    add(&counters.recovered, recovered);
                    if recovered < u64::from(LIMIT) {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "lease-expiry recovery failed");
                    break;
                }
            }
        }
    }
}

/// Heartbeats of every worker every `interval`.
pub(super) async fn heartbeat<S: Store>(
    store: S,
    owners: Vec<Heartbeat>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => break,
        }
        if let Err(error) = store.heartbeat(&owners).await {
            tracing::warn!(%error, "heartbeat failed");
        }
    }
    // Shut down, not silent: the status report must not flag these workers.
    let owners: Vec<String> = owners.into_iter().map(|beat| beat.owner).collect();
    if let Err(error) = store.forget_heartbeats(&owners).await {
        tracing::warn!(%error, "heartbeats of a stopped dispatcher not removed");
    }
}

/// A scheduler round every `interval` ([`Store::tick_schedules`]), the first at once.
pub(super) async fn schedule<S: Store>(
    store: S,
    interval: Duration,
    shutdown: watch::Receiver<bool>,
) {
    let round = |store: S| async move { store.tick_schedules(None).await };
    rounds(
        store,
        interval,
        shutdown,
        "scheduler round",
        round,
        |round| {
            if round.ticks > 0 || round.skipped > 0 {
                tracing::debug!(
                    ticks = round.ticks,
                    skipped = round.skipped,
                    "scheduler round"
                );
            }
        },
    )
    .await;
}

/// A lag-watch round every `interval` ([`Store::watch_lag`]), the first at once.
pub(super) async fn watch_lag<S: Store>(
    store: S,
    interval: Duration,
    shutdown: watch::Receiver<bool>,
) {
    let round = |store: S| async move { store.watch_lag().await };
    rounds(store, interval, shutdown, "lag watch", round, |round| {
        if round.opened > 0 || round.closed > 0 {
            tracing::info!(opened = round.opened, closed = round.closed, "lag breaches");
        }
    })
    .await;
}

/// An evidence-recording round every `interval` ([`Store::record_evidence`]), the first at
/// once; the store logs what a round recorded.
pub(super) async fn record_evidence<S: Store>(
    store: S,
    interval: Duration,
    shutdown: watch::Receiver<bool>,
) {
    let round = |store: S| async move { store.record_evidence().await };
    rounds(
        store,
        interval,
        shutdown,
        "evidence recording",
        round,
        |_| {},
    )
    .await;
}

/// Runs `round` every `interval` until `shutdown`, handing what each did to `report`. A
/// handle scoped to one tenant runs none (the rounds span tenants): it says so once and stops.
async fn rounds<S, R, Fut>(
    store: S,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
    what: &'static str,
    round: impl Fn(S) -> Fut,
    report: impl Fn(R),
) where
    S: Store,
    Fut: std::future::Future<Output = Result<R, DispatchError>>,
{
    // A zero period would panic the interval; the config's fields are public.
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failures = Failures::default();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        match round(store.clone()).await {
            Ok(done) => report(done),
            Err(error @ DispatchError::TenantScoped(..)) => {
                tracing::warn!(%error, "{what}: not run by this dispatcher");
                return;
            }
            Err(error) => failures.note(&error, what),
        }
    }
}

/// The failures of a task that runs every second or so, logged at most once a minute: a
/// database without the task's table (a runtime step not applied) fails every round, and one
/// line a minute says so without drowning the log.
#[derive(Default)]
struct Failures {
    /// When a failure was last logged.
    logged: Option<std::time::Instant>,
    /// Failures since.
    since: u64,
}

impl Failures {
    fn note(&mut self, error: &DispatchError, what: &'static str) {
        self.since += 1;
        if self
            .logged
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(60))
        {
            tracing::warn!(%error, failures = self.since, "{what} failed");
            self.logged = Some(std::time::Instant::now());
            self.since = 0;
        }
    }
}
