//! The dispatcher's background tasks beside its workers: lease-expiry recovery, heartbeats, the
//! scheduler and the lag watch.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use super::stats::{Counters, add};
use crate::store::{Heartbeat, Store};

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

/// A scheduler round every `interval` ([`Store::tick_schedules`]), the first at once. A handle
/// scoped to one tenant runs no schedules: it says so once and stops.
pub(super) async fn schedule<S: Store>(
    store: S,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    // A zero period would panic the interval; the config's fields are public.
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failures = Failures::default();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        match store.tick_schedules(None).await {
            Ok(round) => {
                if round.ticks > 0 || round.skipped > 0 {
                    tracing::debug!(
                        ticks = round.ticks,
                        skipped = round.skipped,
                        "scheduler round"
                    );
                }
            }
            Err(error @ crate::store::DispatchError::TenantScoped(..)) => {
                tracing::warn!(%error, "this dispatcher runs no schedules");
                return;
            }
            Err(error) => failures.note(&error, "scheduler round failed"),
        }
    }
}

/// A lag-watch round every `interval` ([`Store::watch_lag`]). A handle scoped to one tenant
/// watches no lag: it says so once and stops.
pub(super) async fn watch_lag<S: Store>(
    store: S,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failures = Failures::default();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        match store.watch_lag().await {
            Ok(round) => {
                if round.opened > 0 || round.closed > 0 {
                    tracing::info!(opened = round.opened, closed = round.closed, "lag breaches");
                }
            }
            Err(error @ crate::store::DispatchError::TenantScoped(..)) => {
                tracing::warn!(%error, "this dispatcher watches no lag");
                return;
            }
            Err(error) => failures.note(&error, "lag watch failed"),
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
    fn note(&mut self, error: &crate::store::DispatchError, what: &'static str) {
        self.since += 1;
        if self
            .logged
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(60))
        {
            tracing::warn!(%error, failures = self.since, "{what}");
            self.logged = Some(std::time::Instant::now());
            self.since = 0;
        }
    }
}
