//! The dispatcher: worker tasks that claim deliveries, run consumer handlers and end every
//! attempt with a fenced ack or fail (docs/runtime.md, "Dispatch").
//!
//! ```no_run
//! # use evc_runtime::dispatcher::{BoxFuture, Dispatcher, DispatcherConfig, DynHandler, HandlerContext};
//! # use evc_runtime::{HandlerError, PgStore};
//! struct Audit;
//!
//! impl DynHandler for Audit {
//!     fn handle<'a>(&'a self, mut context: HandlerContext<'a>) -> BoxFuture<'a, Result<(), HandlerError>> {
//!         Box::pin(async move {
//!             let lease = context.claimed.lease.clone();
//!             let store = context.store;
//!             let tx = context.transaction().ok_or_else(|| HandlerError::permanent("not_transactional"))?;
//!             // The effect row, the handler's own writes and the ack commit together.
//!             if store.record_effect(tx, &lease, &lease.event_id.to_string(), "-").await
//!                 .map_err(|_| HandlerError::transient("fenced"))?
//!             {
//!                 // ... write the side effect on `tx` ...
//!             }
//!             Ok(())
//!         })
//!     }
//! }
//!
//! # async fn run(store: PgStore) -> Result<(), Box<dyn std::error::Error>> {
//! let handle = Dispatcher::new(store, DispatcherConfig::default())
//!     .consumer("audit.log", Audit)?
//!     .start();
//! // ... until the process should stop ...
//! let report = handle.shutdown().await; // stop claiming, drain, release leases
//! # let _ = report; Ok(()) }
//! ```
//!
//! The dispatcher runs on any [`Store`] (PostgreSQL unless said otherwise). Per consumer,
//! [`DispatcherConfig::workers`] tasks each loop: claim a batch ([`Store::claim`]); run its
//! deliveries one after another — a *transactional* handler inside a transaction that first
//! fences the lease ([`Store::lock_lease`]) and ends with the ack, a *leased* handler outside
//! any transaction, its success acked with the batch's others in one fenced statement
//! ([`Store::ack`], at the end of the batch or after [`DispatcherConfig::ack_window`]) — while
//! renewing the batch's leases every [`DispatcherConfig::renew_every`]; end a failed attempt
//! with the [`RetryPolicy`]'s decision ([`Store::fail`]). An idle worker waits for a wake-up
//! from [`Store::listen`] naming its consumer, its own next retry, or the polling interval,
//! whichever comes first. Beside the workers: one listening task, one lease-expiry recovery
//! task and one heartbeat task.
//!
//! Shutdown ([`DispatcherHandle::shutdown`]): workers stop claiming, finish the handler they
//! are running, skip the rest of their batch and release every lease they still hold
//! ([`crate::Store::release`]); then the helper tasks stop.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, MissedTickBehavior};

mod cursor;

use cursor::{ClaimCursor, HEAD};

use crate::append::AppendOptions;
use crate::handler::{Delivery, FailureClass, HandlerError};
use crate::registry::{HandlerKind, Registry};
use crate::retry::{RetryDecision, RetryPolicy, SplitMix64};
use crate::store::postgres::PgStore;
use crate::store::{ClaimRequest, Claimed, Connection, DispatchError, Heartbeat, Lease, Store};
use crate::trace::TraceContext;

/// How long a worker about to sleep waits for its consumer's doorbell: long enough for the
/// appends in flight to commit, short enough not to matter when another worker holds it.
const DOORBELL_WAIT: Duration = Duration::from_millis(50);

/// How soon a worker that asked for the doorbell and did not get it looks again.
const DOORBELL_RETRY: Duration = Duration::from_millis(100);

/// A boxed, sendable future: what [`DynHandler::handle`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a handler is called with: the claimed delivery, the store and, for the transactional
/// kind, the handler's transaction. `S` is the store the dispatcher runs on (PostgreSQL
/// unless said otherwise).
#[non_exhaustive]
pub struct HandlerContext<'a, S: Store = PgStore> {
    /// The claimed delivery: its lease (token), the delivery and the payload.
    pub claimed: &'a Claimed,
    /// The store, for fenced effect writes ([`Store::record_effect`]).
    pub store: &'a S,
    transaction: Option<&'a mut Connection<S>>,
}

impl<S: Store> std::fmt::Debug for HandlerContext<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerContext")
            .field("claimed", &self.claimed)
            .field("transactional", &self.transaction.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a, S: Store> HandlerContext<'a, S> {
    /// A context (the dispatcher builds these; public for tests of handlers).
    pub fn new(
        claimed: &'a Claimed,
        store: &'a S,
        transaction: Option<&'a mut Connection<S>>,
    ) -> Self {
        Self {
            claimed,
            store,
            transaction,
        }
    }

    /// The delivery.
    pub fn delivery(&self) -> &Delivery {
        &self.claimed.delivery
    }

    /// The event's payload.
    pub fn payload(&self) -> &serde_json::Value {
        &self.claimed.payload
    }

    /// The lease (its fencing token is what effect writes present).
    pub fn lease(&self) -> &Lease {
        &self.claimed.lease
    }

    /// The transactional kind's transaction: the handler's writes on it commit with the
    /// effect row and the ack, or roll back with them. `None` for the leased kind.
    pub fn transaction(&mut self) -> Option<&mut Connection<S>> {
        self.transaction.as_deref_mut()
    }

    /// The trace a follow-up event continues: a child span of the delivered event's trace, or
    /// a fresh trace when the event carried none. Pass it to the generated producers.
    pub fn trace(&self) -> TraceContext {
        self.claimed
            .trace
            .as_ref()
            .map_or_else(TraceContext::fresh, TraceContext::child)
    }

    /// A publisher on the transactional kind's transaction: follow-up events commit with the
    /// handler's writes and the ack, or roll back with them. Their causation id is the
    /// delivered event. `None` for the leased kind, which has no transaction to append in.
    pub fn publisher(&mut self) -> Option<S::Publisher<'_>> {
        let cause = self.claimed.delivery.event_id.clone();
        let store = self.store;
        let connection = self.transaction.as_deref_mut()?;
        Some(store.publisher(connection, AppendOptions::new().causation_id(cause)))
    }

    /// Whether the consumer runs in shadow mode for this delivery ([`Lease::is_shadow`]): the
    /// handler's transaction writes are rolled back and its effect writes become intents, kept
    /// as the delivery's reconciliation row. A leased handler must make no external call then.
    pub fn is_shadow(&self) -> bool {
        self.claimed.lease.is_shadow()
    }
}

/// A consumer handler behind a trait object: takes the delivery and its payload (JSON), answers
/// with a [`HandlerError`] when it fails. The generated consumer traits adapt to it.
pub trait DynHandler<S: Store = PgStore>: Send + Sync + 'static {
    /// Handles one delivery. A panic counts as a [`FailureClass::Poison`] failure with code
    /// `handler_panicked`.
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a, S>,
    ) -> BoxFuture<'a, Result<(), HandlerError>>;
}

/// A typed consumer: a handler that knows which registered consumer it serves. The generated
/// consumer adapters and `#[evc::consumer]` impl blocks implement it; [`Dispatcher::serve`]
/// takes it with the consumer's settings from the registry.
pub trait Consumer<S: Store = PgStore>: DynHandler<S> {
    /// The registered consumer's name (`worker.notification.iu`).
    const NAME: &'static str;
}

/// A shared handler is a handler: the caller keeps a clone of the `Arc` to read what the
/// handler recorded (a test's counts, a service's metrics) while the dispatcher runs it.
impl<S: Store, H: DynHandler<S> + ?Sized> DynHandler<S> for Arc<H> {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a, S>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        (**self).handle(context)
    }
}

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
    /// later ones ([`crate::Store::ack_batch`]). The acks of a batch are written at its end or
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
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        let mut rng = SplitMix64::from_entropy();
        Self {
            owner: format!("evc-{}-{:08x}", std::process::id(), rng.next_u64() as u32),
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
}

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

#[derive(Debug, Default)]
struct Counters {
    claimed: AtomicU64,
    acked: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    quarantined: AtomicU64,
    stale: AtomicU64,
    released: AtomicU64,
    recovered: AtomicU64,
    cancelled: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> DispatchStats {
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

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// One consumer the dispatcher serves.
struct ConsumerSetup<S: Store> {
    name: String,
    kind: HandlerKind,
    per_key: bool,
    policy: RetryPolicy,
    /// The consumer's `handler_timeout`, from the registry.
    handler_timeout: Option<Duration>,
    /// Whether kind, ordering and retry policy were given instead of the registry's
    /// ([`Dispatcher::consumer_with_policy`]).
    explicit: bool,
    handler: Arc<dyn DynHandler<S>>,
    /// Set while one of this dispatcher's workers of the consumer holds or asks for its
    /// doorbell: one asking worker per dispatcher is enough (the holder's notifications wake
    /// them all), and the others keep their pool connections for claims.
    doorbell_busy: AtomicBool,
    /// Where the next claim starts (consumers without per-key ordering).
    cursor: ClaimCursor,
}

/// A dispatcher for one or more consumers over one store. Build it, add consumers, then
/// [`Dispatcher::start`].
pub struct Dispatcher<S: Store = PgStore> {
    store: S,
    config: DispatcherConfig,
    consumers: Vec<ConsumerSetup<S>>,
}

impl<S: Store> std::fmt::Debug for Dispatcher<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("config", &self.config)
            .field(
                "consumers",
                &self.consumers.iter().map(|c| &c.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl<S: Store> Dispatcher<S> {
    /// A dispatcher with no consumers yet, configured by `config` (for the registry's
    /// defaults, start from [`DispatcherConfig::from_registry`] or use
    /// [`Dispatcher::from_registry`]).
    pub fn new(store: S, config: DispatcherConfig) -> Self {
        Self {
            store,
            config,
            consumers: Vec::new(),
        }
    }

    /// A dispatcher with no consumers yet, configured by the store's registry
    /// ([`DispatcherConfig::from_registry`]).
    pub fn from_registry(store: S) -> Self {
        let config = DispatcherConfig::from_registry(store.registry());
        Self::new(store, config)
    }

    /// The configuration the dispatcher runs with.
    pub fn config(&self) -> &DispatcherConfig {
        &self.config
    }

    /// Serves the registered consumer `name` with `handler`: its handler kind, per-key ordering
    /// and retry policy come from the static registry.
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`], [`DispatchError::UnknownRetryPolicy`] or
    /// [`DispatchError::RetryPolicy`].
    pub fn consumer(self, name: &str, handler: impl DynHandler<S>) -> Result<Self, DispatchError> {
        let registry = self.store.registry();
        let descriptor = registry
            .consumer(name)
            .ok_or_else(|| DispatchError::UnknownConsumer(name.to_owned()))?;
        let policy = registry
            .retry_policies
            .iter()
            .find(|p| p.name == descriptor.retry_policy)
            .ok_or_else(|| DispatchError::UnknownRetryPolicy {
                consumer: name.to_owned(),
                policy: descriptor.retry_policy.to_owned(),
            })?;
        let policy = RetryPolicy::from_descriptor(policy)?.within(&registry.dispatcher);
        let handler_timeout = descriptor.handler_timeout_ms.map(Duration::from_millis);
        let mut dispatcher = self.consumer_with_policy(
            name,
            descriptor.handler,
            descriptor.per_key_ordering,
            policy,
            handler,
        );
        if let Some(setup) = dispatcher.consumers.last_mut() {
            setup.handler_timeout = handler_timeout;
            setup.explicit = false;
        }
        Ok(dispatcher)
    }

    /// Serves the typed consumer `consumer` ([`Consumer::NAME`]) with its registry settings,
    /// like [`Dispatcher::consumer`].
    ///
    /// # Errors
    /// As [`Dispatcher::consumer`].
    pub fn serve<C: Consumer<S>>(self, consumer: C) -> Result<Self, DispatchError> {
        self.consumer(C::NAME, consumer)
    }

    /// Serves consumer `name` with explicit settings instead of the registry's (operations
    /// overrides, tests).
    pub fn consumer_with_policy(
        mut self,
        name: &str,
        kind: HandlerKind,
        per_key: bool,
        policy: RetryPolicy,
        handler: impl DynHandler<S>,
    ) -> Self {
        self.consumers.push(ConsumerSetup {
            name: name.to_owned(),
            kind,
            per_key,
            policy,
            handler_timeout: None,
            explicit: true,
            handler: Arc::new(handler),
            doorbell_busy: AtomicBool::new(false),
            cursor: ClaimCursor::new(),
        });
        self
    }

    /// The settings this dispatcher runs `consumer` with apart from its registry's, by name
    /// (`batch`, `lease`, `heartbeat`, `handler_timeout`; `consumer` when its handler kind,
    /// ordering and retry policy were given explicitly); empty: all the registry's. Each
    /// worker's heartbeat records them, so `evc status` shows them.
    pub fn overrides(&self, consumer: &str) -> Vec<&'static str> {
        let declared = DispatcherConfig::from_registry(self.store.registry());
        let mut overrides = Vec::new();
        if self.config.batch != declared.batch {
            overrides.push("batch");
        }
        if self.config.lease != declared.lease {
            overrides.push("lease");
        }
        if self.config.heartbeat_interval != declared.heartbeat_interval {
            overrides.push("heartbeat");
        }
        if self.config.handler_timeout.is_some() {
            overrides.push("handler_timeout");
        }
        if self
            .consumers
            .iter()
            .any(|c| c.name == consumer && c.explicit)
        {
            overrides.push("consumer");
        }
        overrides
    }

    /// Starts the worker, listener, recovery and heartbeat tasks on the current tokio runtime.
    pub fn start(self) -> DispatcherHandle {
        let overrides: HashMap<String, String> = self
            .consumers
            .iter()
            .map(|c| (c.name.clone(), self.overrides(&c.name).join(",")))
            .collect();
        let (shutdown, signal) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let config = Arc::new(self.config);
        let mut wakers: HashMap<String, Arc<Notify>> = HashMap::new();
        let mut workers = Vec::new();
        let mut owners = Vec::new();
        let mut index = 0u64;
        for consumer in self.consumers {
            let consumer = Arc::new(consumer);
            let wake = Arc::clone(
                wakers
                    .entry(consumer.name.clone())
                    .or_insert_with(|| Arc::new(Notify::new())),
            );
            for n in 0..config.workers {
                index += 1;
                let owner = format!("{}/{}/{n}", config.owner, consumer.name);
                owners.push(Heartbeat::new(
                    owner.clone(),
                    consumer.name.clone(),
                    overrides.get(&consumer.name).cloned().unwrap_or_default(),
                ));
                let rng = match config.seed {
                    Some(seed) => SplitMix64::seeded(seed ^ index.wrapping_mul(0x9E37_79B9)),
                    None => SplitMix64::from_entropy(),
                };
                let worker = Worker {
                    store: self.store.clone(),
                    config: Arc::clone(&config),
                    consumer: Arc::clone(&consumer),
                    owner,
                    wake: Arc::clone(&wake),
                    shutdown: signal.clone(),
                    counters: Arc::clone(&counters),
                    rng,
                    connection: None,
                };
                workers.push(tokio::spawn(worker.run()));
            }
        }
        let mut helpers = Vec::new();
        if config.listen && !wakers.is_empty() {
            let store = self.store.clone();
            let (retry, signal) = (config.poll_interval, signal.clone());
            helpers.push(tokio::spawn(async move {
                store.listen(wakers, retry, signal).await;
            }));
        }
        helpers.push(tokio::spawn(recover(
            self.store.clone(),
            config.recovery_interval,
            Arc::clone(&counters),
            signal.clone(),
        )));
        helpers.push(tokio::spawn(heartbeat(
            self.store.clone(),
            owners,
            config.heartbeat_interval,
            signal,
        )));
        DispatcherHandle {
            shutdown,
            workers,
            helpers,
            counters,
        }
    }
}

/// A running dispatcher.
#[derive(Debug)]
pub struct DispatcherHandle {
    shutdown: watch::Sender<bool>,
    workers: Vec<JoinHandle<()>>,
    helpers: Vec<JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl DispatcherHandle {
    /// What the dispatcher did so far.
    pub fn stats(&self) -> DispatchStats {
        self.counters.snapshot()
    }

    /// Graceful shutdown: stop claiming, let running handlers finish, release the leases still
    /// held, stop the helper tasks. Returns the final counts.
    pub async fn shutdown(self) -> DispatchStats {
        let _ = self.shutdown.send(true);
        for task in self.workers.into_iter().chain(self.helpers) {
            if let Err(error) = task.await {
                tracing::error!(%error, "dispatcher task ended abnormally");
            }
        }
        self.counters.snapshot()
    }
}

struct Worker<S: Store> {
    store: S,
    config: Arc<DispatcherConfig>,
    consumer: Arc<ConsumerSetup<S>>,
    owner: String,
    wake: Arc<Notify>,
    shutdown: watch::Receiver<bool>,
    counters: Arc<Counters>,
    rng: SplitMix64,
    /// The pool connection a busy worker keeps for its claims, acks and transactions, batch
    /// after batch. An sqlx pool pings a connection when it hands it out (a round trip the
    /// worker waits for: a fifth more for a held batch's four) and again when it comes back.
    /// The worker gives it back when a claim finds nothing (idle workers hold no connection)
    /// and after an error or a failed batch.
    connection: Option<PoolConnection<S::Database>>,
}

impl<S: Store> Worker<S> {
    fn stopping(&self) -> bool {
        *self.shutdown.borrow()
    }

    async fn run(mut self) {
        // The earliest moment a delivery this worker scheduled for retry becomes due.
        let mut next_due: Option<Instant> = None;
        while !self.stopping() {
            let wake = Arc::clone(&self.wake);
            let notified = wake.notified();
            tokio::pin!(notified);
            // Registered before the claim, so a notification during the claim is not lost.
            notified.as_mut().enable();
            if self.claim_and_run(&mut next_due).await {
                continue;
            }
            let now = Instant::now();
            let mut wait = self.config.poll_interval;
            if let Some(due) = next_due {
                if due <= now {
                    next_due = None;
                    continue;
                }
                wait = wait.min(due - now);
            }
            // About to sleep: ring-while-asleep. With the doorbell held, appends notify; the
            // claim after taking it sees every append that got in before.
            let (doorbell, asked) = self.take_doorbell().await;
            if doorbell.is_some() && self.claim_and_run(&mut next_due).await {
                self.give_back(doorbell).await;
                continue;
            }
            if asked && doorbell.is_none() {
                // The doorbell could not be had in time (appends kept it busy, or another
                // dispatcher holds it): nobody may be ringing for this worker, so it looks
                // again soon instead of after a whole poll interval.
                wait = wait.min(DOORBELL_RETRY);
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep(wait) => {}
                changed = self.shutdown.changed() => {
                    if changed.is_err() {
                        self.give_back(doorbell).await;
                        break;
                    }
                }
            }
            self.give_back(doorbell).await;
            if next_due.is_some_and(|due| due <= Instant::now()) {
                next_due = None;
            }
        }
        self.connection = None;
        match self.store.release(&self.owner).await {
            Ok(released) => add(&self.counters.released, released),
            Err(error) => {
                tracing::warn!(owner = %self.owner, %error, "could not release leases; they expire");
            }
        }
    }

    /// One claim and its batch; `true` when it found work. Moves `next_due` earlier when the
    /// batch scheduled a retry.
    async fn claim_and_run(&mut self, next_due: &mut Option<Instant>) -> bool {
        let due = if self.holds_batches() {
            match self.run_held_batch().await {
                Ok((0, _)) => return false,
                Ok((_, due)) => due,
                Err(error) => {
                    tracing::warn!(consumer = %self.consumer.name, %error, "held batch failed");
                    return false;
                }
            }
        } else {
            match self.claim().await {
                Ok(batch) if !batch.is_empty() => {
                    add(&self.counters.claimed, batch.len() as u64);
                    self.run_batch(batch).await
                }
                Ok(_) => return false,
                Err(error) => {
                    tracing::warn!(consumer = %self.consumer.name, %error, "claim failed");
                    return false;
                }
            }
        };
        if let Some(due) = due {
            *next_due = Some(next_due.map_or(due, |d| d.min(due)));
        }
        true
    }

    /// The worker's kept connection ([`Worker::connection`]), or one from the pool.
    async fn take_connection(&mut self) -> Result<PoolConnection<S::Database>, DispatchError> {
        match self.connection.take() {
            Some(connection) => Ok(connection),
            None => Ok(self.store.pool().acquire().await?),
        }
    }

    /// Whether this worker's claims use the consumer's claim cursor: not for a consumer that
    /// orders per key (its claim must see every key's head), nor when it is turned off.
    fn uses_cursor(&self) -> bool {
        self.config.claim_cursor && !self.consumer.per_key
    }

    /// Where this worker's next claim starts: after the consumer's claim cursor, or the head.
    fn claim_start(&self) -> i64 {
        if self.uses_cursor() {
            self.consumer.cursor.start()
        } else {
            HEAD
        }
    }

    /// Claims a batch on `connection` from where the claim cursor says, held (in the
    /// transaction open on `connection`) or leased, and moves the cursor. A claim from the
    /// cursor that finds nothing runs once more from the head, so a worker never sleeps with
    /// due work behind the cursor.
    async fn claim_from_cursor(
        &self,
        connection: &mut Connection<S>,
        held: bool,
    ) -> Result<Vec<Claimed>, DispatchError> {
        let start = self.claim_start();
        let mut batch = self.claim_once(connection, held, start).await?;
        if batch.is_empty() && start != HEAD {
            batch = self.claim_once(connection, held, HEAD).await?;
        }
        self.claimed(&batch);
        Ok(batch)
    }

    /// One claim statement after `event_seq` `start`, held or leased.
    async fn claim_once(
        &self,
        connection: &mut Connection<S>,
        held: bool,
        start: i64,
    ) -> Result<Vec<Claimed>, DispatchError> {
        let (consumer, owner, batch) = (&self.consumer.name, &self.owner, self.config.batch);
        let request = if held {
            ClaimRequest::held(consumer, owner, batch)
        } else {
            ClaimRequest::leased(consumer, owner, batch, self.config.lease)
                .per_key(self.consumer.per_key)
        };
        self.store
            .claim(connection, &request.after_seq(start))
            .await
    }

    /// Moves the consumer's claim cursor after a claim.
    fn claimed(&self, batch: &[Claimed]) {
        if self.uses_cursor() {
            self.consumer.cursor.claimed(
                self.config.batch,
                batch.len(),
                batch.iter().map(|claimed| claimed.event_seq).max(),
            );
        }
    }

    /// Claims a leased batch on the kept connection; keeps it when the claim found work. A
    /// claim from the cursor that finds nothing is tried again from the head.
    async fn claim(&mut self) -> Result<Vec<Claimed>, DispatchError> {
        let mut connection = self.take_connection().await?;
        let batch = self.claim_from_cursor(&mut connection, false).await?;
        if !batch.is_empty() {
            self.connection = Some(connection);
        }
        Ok(batch)
    }

    /// The consumer's doorbell, when this dispatcher listens, none of its other workers of the
    /// consumer holds or asks for it, and no other dispatcher's worker holds it. Not taken when
    /// the poll interval is at most [`DOORBELL_WAIT`]: the next poll comes as soon as a
    /// notification could, and the idle worker keeps its connection.
    /// Also says whether it was asked for (`false`: not this worker's turn, or no doorbells).
    async fn take_doorbell(&self) -> (Option<S::Doorbell>, bool) {
        if !self.config.listen
            || self.config.poll_interval <= DOORBELL_WAIT
            || self
                .consumer
                .doorbell_busy
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return (None, false);
        }
        let doorbell = match self
            .store
            .hold_doorbell(&self.consumer.name, DOORBELL_WAIT)
            .await
        {
            Ok(doorbell) => doorbell,
            Err(error) => {
                tracing::debug!(consumer = %self.consumer.name, %error, "doorbell not taken");
                None
            }
        };
        if doorbell.is_none() {
            self.consumer.doorbell_busy.store(false, Ordering::Release);
        }
        (doorbell, true)
    }

    async fn give_back(&self, doorbell: Option<S::Doorbell>) {
        let Some(doorbell) = doorbell else {
            return;
        };
        if let Err(error) = self.store.release_doorbell(doorbell).await {
            tracing::debug!(consumer = %self.consumer.name, %error, "doorbell released by closing its connection");
        }
        self.consumer.doorbell_busy.store(false, Ordering::Release);
    }

    fn holds_batches(&self) -> bool {
        self.config.held_batches
            && self.consumer.kind == HandlerKind::Transactional
            && !self.consumer.per_key
    }

    /// A held batch: claim with row locks, every handler, the acks and their attempt rows, all
    /// in one transaction. Returns how many deliveries it claimed, and when a retry it
    /// scheduled is due. A failing (or panicking) handler rolls everything back, its
    /// siblings' writes too (the next batch runs them again); its failure is then recorded
    /// with its attempt and the retry policy's decision. Stopping between handlers acks the
    /// ones that ran; the rest are simply unlocked.
    async fn run_held_batch(&mut self) -> Result<(usize, Option<Instant>), DispatchError> {
        // Taken out for the batch: an error or a failed handler returns it to the pool (where a
        // connection left inside a transaction is rolled back), a claim that finds nothing too.
        let mut connection = self.take_connection().await?;
        let mut tx = self.store.begin_on(&mut *connection).await?;
        let mut batch = self.claim_from_cursor(&mut tx, true).await?;
        if batch.is_empty() {
            tx.rollback().await?;
            return Ok((0, None));
        }
        let claimed = batch.len();
        add(&self.counters.claimed, claimed as u64);
        let mut ran = 0;
        for held in &mut batch {
            if self.stopping() {
                break;
            }
            held.lease.mark_started();
            let shadow = held.lease.is_shadow();
            if shadow {
                self.store.begin_shadow(&mut tx).await?;
            }
            let handler = Arc::clone(&self.consumer.handler);
            let context = HandlerContext::new(held, &self.store, Some(&mut *tx));
            if let Err(failure) = flatten(self.timed(CatchUnwind(handler.handle(context))).await) {
                tx.rollback().await?;
                let due = self.record_failure(&held.lease, &failure).await;
                return Ok((claimed, due));
            }
            if shadow {
                self.store.end_shadow(&mut tx).await?;
                self.store
                    .record_reconciliation(&mut tx, &held.lease)
                    .await?;
            }
            ran += 1;
        }
        let leases: Vec<&Lease> = batch[..ran].iter().map(|held| &held.lease).collect();
        let acked = self.store.ack(&mut tx, &leases).await?.acked;
        tx.commit().await?;
        self.connection = Some(connection);
        add(&self.counters.acked, acked as u64);
        add(&self.counters.stale, (ran - acked) as u64);
        Ok((claimed, None))
    }

    /// Ends a failed attempt with the retry policy's decision, counted; returns when a retry
    /// it scheduled is due.
    async fn record_failure(&mut self, lease: &Lease, failure: &HandlerError) -> Option<Instant> {
        let decision = self
            .consumer
            .policy
            .decide(failure.class, lease.attempt, &mut self.rng);
        match self
            .store
            .fail(lease, failure.class, &failure.code, decision)
            .await
        {
            Ok(()) => match decision {
                RetryDecision::Retry(delay) => {
                    add(&self.counters.retried, 1);
                    return Some(Instant::now() + delay);
                }
                RetryDecision::Dead => add(&self.counters.dead, 1),
                RetryDecision::Quarantine => add(&self.counters.quarantined, 1),
            },
            Err(error) => self.count_error(&error),
        }
        None
    }

    /// Runs a claimed batch in order; returns when the earliest retry it scheduled is due.
    async fn run_batch(&mut self, batch: Vec<Claimed>) -> Option<Instant> {
        let mut remaining: VecDeque<Claimed> = batch.into();
        let mut ticker = tokio::time::interval_at(
            Instant::now() + self.config.renew_every,
            self.config.renew_every,
        );
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut next_due = None;
        // Leased handlers that succeeded, not acked yet, and when the oldest succeeded.
        let mut unacked: Vec<Lease> = Vec::new();
        let mut oldest_unacked: Option<Instant> = None;
        while let Some(mut claimed) = remaining.pop_front() {
            if self.stopping() {
                // Not started: released with the rest at the end of `run`.
                break;
            }
            claimed.lease.mark_started();
            let outcome = match self.consumer.kind {
                HandlerKind::Transactional => match self.take_connection().await {
                    Ok(mut connection) => {
                        let outcome = self
                            .run_transactional(&mut connection, &claimed, &remaining, &mut ticker)
                            .await;
                        if matches!(outcome, Ok(Ran::Succeeded)) {
                            self.connection = Some(connection);
                        }
                        outcome
                    }
                    Err(error) => Err(error),
                },
                HandlerKind::Leased => {
                    self.run_leased(&claimed, &unacked, &remaining, &mut ticker)
                        .await
                }
            };
            let failure = match outcome {
                Ok(Ran::Succeeded) => {
                    match self.consumer.kind {
                        HandlerKind::Transactional => add(&self.counters.acked, 1),
                        HandlerKind::Leased => {
                            unacked.push(claimed.lease);
                            let oldest = *oldest_unacked.get_or_insert_with(Instant::now);
                            if oldest.elapsed() >= self.config.ack_window {
                                self.flush_acks(&mut unacked).await;
                                oldest_unacked = None;
                            }
                        }
                    }
                    continue;
                }
                Ok(Ran::Failed(failure)) => failure,
                // No ack and no fail: the lease is another claim's now, or expires and is
                // recovered (its `lease_expired` attempt row is the attempt's record).
                Ok(Ran::Cancelled) => continue,
                Err(error) => {
                    self.count_error(&error);
                    continue;
                }
            };
            if let Some(due) = self.record_failure(&claimed.lease, &failure).await {
                next_due = Some(next_due.map_or(due, |d: Instant| d.min(due)));
            }
        }
        // Also when stopping: the handlers ran, so their acks must not be released.
        self.flush_acks(&mut unacked).await;
        next_due
    }

    /// Acks the leased handlers' successes in one fenced statement.
    async fn flush_acks(&mut self, unacked: &mut Vec<Lease>) {
        if unacked.is_empty() {
            return;
        }
        let leases: Vec<&Lease> = unacked.iter().collect();
        let acked = match self.take_connection().await {
            Ok(mut connection) => {
                let acked = self.store.ack(&mut connection, &leases).await;
                if acked.is_ok() {
                    self.connection = Some(connection);
                }
                acked
            }
            Err(error) => Err(error),
        };
        match acked {
            Ok(outcome) => {
                add(&self.counters.acked, outcome.acked as u64);
                add(&self.counters.stale, outcome.stale.len() as u64);
            }
            Err(error) => tracing::warn!(
                consumer = %self.consumer.name,
                deliveries = unacked.len(),
                %error,
                "acks not written; the leases expire and the deliveries run again"
            ),
        }
        unacked.clear();
    }

    fn count_error(&self, error: &DispatchError) {
        if error.is_stale_token() {
            add(&self.counters.stale, 1);
        } else {
            tracing::warn!(consumer = %self.consumer.name, %error, "delivery not settled; its lease expires");
        }
    }

    /// The transactional kind: fence, handler, ack, all in one transaction on `connection` (the
    /// worker's kept connection). [`Ran::Succeeded`]: acked; [`Ran::Failed`]: the handler
    /// failed and everything it wrote was rolled back.
    async fn run_transactional(
        &self,
        connection: &mut Connection<S>,
        claimed: &Claimed,
        remaining: &VecDeque<Claimed>,
        ticker: &mut Interval,
    ) -> Result<Ran, DispatchError> {
        let mut tx = self.store.begin_on(connection).await?;
        // Row-locks the delivery: recovery and renewal leave it alone until we commit.
        self.store.lock_lease(&mut tx, &claimed.lease).await?;
        let shadow = claimed.lease.is_shadow();
        if shadow {
            self.store.begin_shadow(&mut tx).await?;
        }
        // The current delivery's row is locked by `tx`; renewing it from another connection
        // would wait for `tx`, so only the rest of the batch is renewed.
        let held: Vec<&Lease> = remaining.iter().map(|c| &c.lease).collect();
        let handler = Arc::clone(&self.consumer.handler);
        let result = {
            let context = HandlerContext::new(claimed, &self.store, Some(&mut *tx));
            let future = std::pin::pin!(self.timed(CatchUnwind(handler.handle(context))));
            // The row lock keeps this lease: only another lease's loss ends the renewals.
            self.with_renewal(future, &held, None, ticker).await
        };
        let Some(result) = result else {
            return Ok(Ran::Cancelled);
        };
        match flatten(result) {
            Ok(()) => {
                if shadow {
                    // No side effect: the handler's writes go, its intents stay.
                    self.store.end_shadow(&mut tx).await?;
                    self.store
                        .record_reconciliation(&mut tx, &claimed.lease)
                        .await?;
                }
                let acked = self.store.ack(&mut tx, &[&claimed.lease]).await?;
                if let Some((event_id, consumer, token)) = acked.stale.into_iter().next() {
                    return Err(DispatchError::StaleToken {
                        event_id,
                        consumer,
                        token,
                    });
                }
                tx.commit().await?;
                Ok(Ran::Succeeded)
            }
            Err(failure) => {
                tx.rollback().await?;
                Ok(Ran::Failed(failure))
            }
        }
    }

    /// The leased kind: the handler outside any transaction. [`Ran::Succeeded`]: its lease
    /// waits for the batch's fenced ack ([`Worker::flush_acks`]); [`Ran::Cancelled`]: its lease
    /// was lost while it ran, and it was stopped.
    async fn run_leased(
        &self,
        claimed: &Claimed,
        unacked: &[Lease],
        remaining: &VecDeque<Claimed>,
        ticker: &mut Interval,
    ) -> Result<Ran, DispatchError> {
        let held: Vec<&Lease> = unacked
            .iter()
            .chain(std::iter::once(&claimed.lease))
            .chain(remaining.iter().map(|c| &c.lease))
            .collect();
        let handler = Arc::clone(&self.consumer.handler);
        let result = {
            let context = HandlerContext::new(claimed, &self.store, None);
            let future = std::pin::pin!(self.timed(CatchUnwind(handler.handle(context))));
            self.with_renewal(future, &held, Some(&claimed.lease), ticker)
                .await
        };
        let Some(result) = result else {
            add(&self.counters.cancelled, 1);
            tracing::warn!(
                consumer = %claimed.lease.consumer,
                event_id = %claimed.lease.event_id,
                token = claimed.lease.token,
                "lease lost while the handler ran; handler cancelled"
            );
            return Ok(Ran::Cancelled);
        };
        match flatten(result) {
            Ok(()) => {
                if claimed.lease.is_shadow() {
                    let mut connection = self.store.pool().acquire().await?;
                    self.store
                        .record_reconciliation(&mut connection, &claimed.lease)
                        .await?;
                }
                Ok(Ran::Succeeded)
            }
            Err(failure) => Ok(Ran::Failed(failure)),
        }
    }

    /// `future` (a handler run) under the handler timeout, if one applies: past it, `future` is
    /// dropped unfinished and the run fails as transient with code `handler_timeout`.
    async fn timed<F>(&self, future: F) -> std::thread::Result<Result<(), HandlerError>>
    where
        F: Future<Output = std::thread::Result<Result<(), HandlerError>>>,
    {
        match self
            .config
            .handler_timeout
            .or(self.consumer.handler_timeout)
        {
            None => future.await,
            Some(limit) => tokio::time::timeout(limit, future)
                .await
                .unwrap_or_else(|_| {
                    Ok(Err(HandlerError::new(
                        FailureClass::Transient,
                        "handler_timeout",
                    )))
                }),
        }
    }

    /// Drives `future`, renewing `held` leases on every tick meanwhile. `None` when the lease
    /// `current` (the one `future` runs under, when renewals keep it) could not be renewed:
    /// refused as stale (another claim took it, or it expired and was recovered) or the
    /// renewal failed, so the lease may end before `future` does. `future` is dropped then,
    /// unfinished: a leased handler must not go on acting for a delivery it may no longer hold,
    /// and its ack would be refused anyway.
    async fn with_renewal<F: Future + Unpin>(
        &self,
        mut future: F,
        held: &[&Lease],
        current: Option<&Lease>,
        ticker: &mut Interval,
    ) -> Option<F::Output> {
        loop {
            tokio::select! {
                output = &mut future => return Some(output),
                _ = ticker.tick() => {
                    if held.is_empty() {
                        continue;
                    }
                    let kept = match self.store.renew(held, self.config.lease).await {
                        Ok(renewed) => {
                            if renewed.len() < held.len() {
                                add(&self.counters.stale, (held.len() - renewed.len()) as u64);
                            }
                            current.is_none_or(|lease| renewed.contains(&lease.event_id))
                        }
                        Err(error) => {
                            tracing::warn!(%error, "lease renewal failed");
                            current.is_none()
                        }
                    };
                    if !kept {
                        drop(future);
                        return None;
                    }
                }
            }
        }
    }
}

/// How one handler run ended.
enum Ran {
    /// It succeeded: a transactional run is acked, a leased one waits for its batch's ack.
    Succeeded,
    /// It failed (or panicked); a transactional run's writes were rolled back.
    Failed(HandlerError),
    /// Its lease was lost while it ran, and it was dropped unfinished: no ack, no fail.
    Cancelled,
}

/// A handler's result with a panic turned into a poison failure.
fn flatten(result: std::thread::Result<Result<(), HandlerError>>) -> Result<(), HandlerError> {
    match result {
        Ok(result) => result,
        Err(_) => Err(HandlerError::new(FailureClass::Poison, "handler_panicked")),
    }
}

/// Catches a panic while polling the inner future.
struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut *inner).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// Lease-expiry recovery every `interval`.
async fn recover<S: Store>(
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
async fn heartbeat<S: Store>(
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
