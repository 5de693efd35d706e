//! What a dispatcher did: the counters its tasks add to and their snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts of what a dispatcher did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DispatchStats {
    /// Deliveries claimed.
    pub claimed: u64,
    /// Attempts acked.
    pub acked: u64,
    /// Attempts failed and scheduled again.
    pub retried: u64,
    /// Attempts that dead-lettered their delivery.
    pub dead: u64,
    /// Attempts that quarantined their delivery.
    pub quarantined: u64,
    /// Fenced operations of this dispatcher refused for a stale token.
    pub stale: u64,
    /// Leases released at shutdown.
    pub released: u64,
    /// Leases recovered after expiry by this dispatcher's recovery task.
    pub recovered: u64,
    /// Leased handlers stopped unfinished (their future dropped) because their lease could not
    /// be renewed: refused as stale, or the renewal failed.
    pub cancelled: u64,
}

/// The counts of two dispatchers (or a dispatcher and its runners) together.
impl std::ops::Add for DispatchStats {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            claimed: self.claimed + other.claimed,
            acked: self.acked + other.acked,
            retried: self.retried + other.retried,
            dead: self.dead + other.dead,
            quarantined: self.quarantined + other.quarantined,
            stale: self.stale + other.stale,
            released: self.released + other.released,
            recovered: self.recovered + other.recovered,
            cancelled: self.cancelled + other.cancelled,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) claimed: AtomicU64,
    pub(super) acked: AtomicU64,
    pub(super) retried: AtomicU64,
    pub(super) dead: AtomicU64,
    pub(super) quarantined: AtomicU64,
    pub(super) stale: AtomicU64,
    pub(super) released: AtomicU64,
    pub(super) recovered: AtomicU64,
    pub(super) cancelled: AtomicU64,
}

impl Counters {
    pub(super) fn snapshot(&self) -> DispatchStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        DispatchStats {
            claimed: get(&self.claimed),
            acked: get(&self.acked),
            retried: get(&self.retried),
            dead: get(&self.dead),
            quarantined: get(&self.quarantined),
            stale: get(&self.stale),
            released: get(&self.released),
            recovered: get(&self.recovered),
            cancelled: get(&self.cancelled),
        }
    }
}

pub(super) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}
