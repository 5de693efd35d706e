//! The dispatcher's settings: defaults, the registry's `dispatcher` block and setters.

use std::time::Duration;

use crate::registry::Registry;

/// Dispatcher settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DispatcherConfig {
    /// Lease owner prefix; each worker's owner is `<owner>/<consumer>/<n>`. Unique per process.
    pub owner: String,
    /// Worker tasks per consumer.
    pub workers: usize,
    /// Deliveries per claim.
    pub batch: u32,
    /// Lease length.
    pub lease: Duration,
    /// Renewal interval of held leases while a handler runs (well below `lease`).
    pub renew_every: Duration,
    /// How long an idle worker waits without a notification before claiming again.
    pub poll_interval: Duration,
    /// Lease-expiry recovery interval.
    pub recovery_interval: Duration,
    /// Heartbeat interval.
    pub heartbeat_interval: Duration,
    /// Whether to `LISTEN` for append notifications (else polling only).
    pub listen: bool,
    /// Jitter seed (each worker derives its own); `None`: from entropy.
    pub seed: Option<u64>,
    /// How long a leased handler's success may wait to be acked together with the batch's
    /// later ones ([`crate::Store::ack`]). The acks of a batch are written at its end or
    /// once the oldest waiting one is this old, whichever comes first; a crash meanwhile runs
    /// those deliveries again (at least once). Zero acks every delivery on its own.
    pub ack_window: Duration,
    /// Whether transactional consumers that do not order per key run their batches held
    /// (docs/runtime.md, "Held batches"): one transaction claims the batch with row locks and
    /// no write, runs every handler on it and acks them all before it commits. A failing
    /// handler rolls the batch back (its siblings run again in the next batch) and its failure
    /// is recorded with its attempt. Off by default: a held batch keeps a transaction open for
    /// all its handlers, and a process that dies mid-batch counts no attempt.
    pub held_batches: bool,
    /// Whether claims of consumers that do not order per key start after the claim cursor
    /// (docs/runtime.md, "Claim cursor"): after the highest `event_seq` a full batch claimed,
    /// with a claim from the head after a short or empty one and at least every 100 ms. On by
    /// default; off, every claim starts at the head of the due index, so a delivery that
    /// becomes due behind a backlog is seen at the next claim rather than within 100 ms, at
    /// the cost of walking the backlog's claimed region on every claim.
    pub claim_cursor: bool,
    /// Longest run of one handler attempt for every consumer, instead of each consumer's
    /// `handler_timeout`; `None`: each consumer's own (none: no limit). A handler that runs
    /// longer is dropped unfinished (a transactional one's writes roll back) and the attempt
    /// fails as transient with code `handler_timeout`.
    pub handler_timeout: Option<Duration>,
    /// How often the scheduler runs a round of the registry's schedules (docs/runtime.md,
    /// "Schedules"): one tick per slot across every dispatcher, so a slot is appended at most
    /// this long after it comes. `None`: this dispatcher runs no schedules. Every second by
    /// default; unused without `schedules.yaml`.
    pub schedule_interval: Option<Duration>,
    /// How often the lag watch measures the registry's lag thresholds (docs/runtime.md, "Lag
    /// breaches"): a breach opens within this long of crossing its threshold. `None`: this
    /// dispatcher watches no lag. Every 5 seconds by default; unused without thresholds.
    pub lag_watch_interval: Option<Duration>,
    /// How often the evidence recording checks whether the current slot is recorded
    /// (docs/runtime.md, "Recorded evidence"): a slot's snapshot is recorded within this long
    /// of the slot's start. `None`: this dispatcher records no evidence. Every 30 seconds by
    /// default; unused without `evidence` in `evc.yaml`.
    pub evidence_interval: Option<Duration>,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        Self {
            owner: format!("evc-{}-{:08x}", std::process::id(), fastrand::u32(..)),
            workers: 4,
            batch: 50,
            lease: Duration::from_secs(30),
            renew_every: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            recovery_interval: Duration::from_secs(5),
            heartbeat_interval: Duration::from_secs(10),
            listen: true,
            seed: None,
            ack_window: Duration::from_millis(100),
            held_batches: false,
            claim_cursor: true,
            handler_timeout: None,
            schedule_interval: Some(Duration::from_secs(1)),
            lag_watch_interval: Some(Duration::from_secs(5)),
            evidence_interval: Some(Duration::from_secs(30)),
        }
    }
}

impl DispatcherConfig {
    /// The defaults with the registry's dispatcher block (`dispatcher` of `evc.yaml`): batch
    /// size, lease and heartbeat interval. Lease renewal runs at a third of the lease, at most
    /// every 10 s, so a lease is renewed before it runs out. Setters called afterwards win.
    pub fn from_registry(registry: &Registry) -> Self {
        let declared = &registry.dispatcher;
        // `evc check` refuses leases under 1 s; a hand-written registry gets no zero interval.
        let floor = Duration::from_millis(1);
        let lease = Duration::from_millis(declared.lease_ms).max(floor);
        let defaults = Self::default();
        Self {
            batch: declared.batch_size.max(1),
            lease,
            renew_every: defaults.renew_every.min(lease / 3).max(floor),
            heartbeat_interval: Duration::from_millis(declared.heartbeat_ms).max(floor),
            ..defaults
        }
    }

    /// Sets the handler timeout of every consumer (overrides their `handler_timeout`).
    #[must_use]
    pub fn handler_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.handler_timeout = timeout;
        self
    }

    /// Sets the owner prefix.
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Sets the workers per consumer (at least 1).
    #[must_use]
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Sets the claim batch size (at least 1).
    #[must_use]
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Sets the lease length and renews every third of it.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self.renew_every = (lease / 3).max(Duration::from_millis(1));
        self
    }

    /// Sets the polling interval.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets the recovery interval.
    #[must_use]
    pub fn recovery_interval(mut self, interval: Duration) -> Self {
        self.recovery_interval = interval;
        self
    }

    /// Sets the heartbeat interval.
    #[must_use]
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// Turns `LISTEN` on or off.
    #[must_use]
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = listen;
        self
    }

    /// Seeds the jitter.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sets the ack window of leased handlers ([`DispatcherConfig::ack_window`]).
    #[must_use]
    pub fn ack_window(mut self, window: Duration) -> Self {
        self.ack_window = window;
        self
    }

    /// Turns held batches on or off ([`DispatcherConfig::held_batches`]).
    #[must_use]
    pub fn held_batches(mut self, held: bool) -> Self {
        self.held_batches = held;
        self
    }

    /// Turns the claim cursor on or off ([`DispatcherConfig::claim_cursor`]).
    #[must_use]
    pub fn claim_cursor(mut self, on: bool) -> Self {
        self.claim_cursor = on;
        self
    }

    /// Sets how often the scheduler runs, or turns it off with `None`
    /// ([`DispatcherConfig::schedule_interval`]).
    #[must_use]
    pub fn schedule_interval(mut self, interval: Option<Duration>) -> Self {
        self.schedule_interval = interval;
        self
    }

    /// Sets how often the lag watch runs, or turns it off with `None`
    /// ([`DispatcherConfig::lag_watch_interval`]).
    #[must_use]
    pub fn lag_watch_interval(mut self, interval: Option<Duration>) -> Self {
        self.lag_watch_interval = interval;
        self
    }

    /// Sets how often the evidence recording runs, or turns it off with `None`
    /// ([`DispatcherConfig::evidence_interval`]).
    #[must_use]
    pub fn evidence_interval(mut self, interval: Option<Duration>) -> Self {
        self.evidence_interval = interval;
        self
    }
}
