//! The dispatcher: worker tasks that claim deliveries, run consumer handlers and end every
//! attempt with a fenced ack or fail (docs/runtime.md, "Dispatch").
//!
//! ```no_run
//! # use evc_runtime::{BoxFuture, Dispatcher, DispatcherConfig, DynHandler, HandlerContext};
//! # use evc_runtime::{HandlerError, PgStore, Store};
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
//! task, one heartbeat task and, when the registry has them, one scheduler task for its
//! schedules and one lag-watch task for its lag thresholds.
//!
//! Shutdown ([`DispatcherHandle::shutdown`]): workers stop claiming, finish the handler they
//! are running, skip the rest of their batch and release every lease they still hold
//! ([`crate::Store::release`]); then the helper tasks stop.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

mod config;
mod context;
mod cursor;
mod held;
mod runner;
mod stats;
mod tasks;
mod worker;

pub use config::DispatcherConfig;
pub use context::{BoxFuture, Consumer, DynHandler, HandlerContext};
pub use runner::{DeliveryRunner, Outcome};
pub use stats::DispatchStats;

use cursor::ClaimCursor;
use stats::Counters;
use worker::Worker;

use crate::registry::HandlerKind;
use crate::retry::RetryPolicy;
use crate::store::postgres::PgStore;
use crate::store::{DispatchError, Heartbeat, Store};

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

    /// How many consumers it serves.
    pub fn consumer_count(&self) -> usize {
        self.consumers.len()
    }

    /// Splits it in two on the same store and configuration: the consumers `take` accepts
    /// (by name), and the rest. Consumers of one application can so run on different
    /// transports.
    pub fn split(self, take: impl Fn(&str) -> bool) -> (Self, Self) {
        let (taken, left) = self.consumers.into_iter().partition(|c| take(&c.name));
        let taken = Self {
            store: self.store.clone(),
            config: self.config.clone(),
            consumers: taken,
        };
        let left = Self {
            store: self.store,
            config: self.config,
            consumers: left,
        };
        (taken, left)
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
        let listen = self.config.listen;
        let launched = self.launch(|setup, config| {
            (0..config.workers)
                .map(|n| format!("{}/{}/{n}", config.owner, setup.name))
                .collect()
        });
        let workers = launched
            .workers
            .into_iter()
            .map(|worker| tokio::spawn(worker.run()))
            .collect();
        let mut helpers = launched.helpers;
        if listen && !launched.wakers.is_empty() {
            let (store, wakers) = (launched.store, launched.wakers);
            let (retry, signal) = (launched.config.poll_interval, launched.signal);
            helpers.push(tokio::spawn(async move {
                store.listen(wakers, retry, signal).await;
            }));
        }
        DispatcherHandle {
            shutdown: launched.shutdown,
            workers,
            helpers,
            counters: launched.counters,
        }
    }

    /// Starts the recovery and heartbeat tasks without claim loops and gives `runners(name)`
    /// [`DeliveryRunner`]s for each consumer instead (owners `<owner>/<consumer>/r<n>`), for
    /// a transport that names the deliveries to run: a broker's messages. Their counts add
    /// to the handle's [`DispatchStats`]; [`DispatcherHandle::shutdown`] tells them to stop
    /// ([`DeliveryRunner::stopping`]).
    pub fn start_runners(
        self,
        runners: impl Fn(&str) -> usize,
    ) -> (DispatcherHandle, Vec<DeliveryRunner<S>>) {
        let launched = self.launch(|setup, config| {
            (0..runners(&setup.name))
                .map(|n| format!("{}/{}/r{n}", config.owner, setup.name))
                .collect()
        });
        let runners = launched
            .workers
            .into_iter()
            .map(|worker| DeliveryRunner {
                worker,
                swept: tokio::time::Instant::now(),
            })
            .collect();
        let handle = DispatcherHandle {
            shutdown: launched.shutdown,
            workers: Vec::new(),
            helpers: launched.helpers,
            counters: launched.counters,
        };
        (handle, runners)
    }

    /// The workers `owners` names per consumer, not started, with the recovery and heartbeat
    /// tasks started.
    fn launch(
        self,
        owners_of: impl Fn(&ConsumerSetup<S>, &DispatcherConfig) -> Vec<String>,
    ) -> Launched<S> {
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
        let mut heartbeats = Vec::new();
        let mut index = 0u64;
        for consumer in self.consumers {
            let owners = owners_of(&consumer, &config);
            let consumer = Arc::new(consumer);
            let wake = Arc::clone(
                wakers
                    .entry(consumer.name.clone())
                    .or_insert_with(|| Arc::new(Notify::new())),
            );
            for owner in owners {
                index += 1;
                heartbeats.push(Heartbeat::new(
                    owner.clone(),
                    consumer.name.clone(),
                    overrides.get(&consumer.name).cloned().unwrap_or_default(),
                ));
                let rng = match config.seed {
                    Some(seed) => fastrand::Rng::with_seed(seed ^ index.wrapping_mul(0x9E37_79B9)),
                    None => fastrand::Rng::new(),
                };
                workers.push(Worker {
                    store: self.store.clone(),
                    config: Arc::clone(&config),
                    consumer: Arc::clone(&consumer),
                    owner,
                    wake: Arc::clone(&wake),
                    shutdown: signal.clone(),
                    counters: Arc::clone(&counters),
                    rng,
                    connection: None,
                });
            }
        }
        let mut helpers = vec![
            tokio::spawn(tasks::recover(
                self.store.clone(),
                config.recovery_interval,
                Arc::clone(&counters),
                signal.clone(),
            )),
            tokio::spawn(tasks::heartbeat(
                self.store.clone(),
                heartbeats,
                config.heartbeat_interval,
                signal.clone(),
            )),
        ];
        if let Some(interval) = config.schedule_interval
            && !self.store.registry().schedules.is_empty()
        {
            helpers.push(tokio::spawn(tasks::schedule(
                self.store.clone(),
                interval,
                signal.clone(),
            )));
        }
        if let Some(interval) = config.lag_watch_interval
            && !self.store.registry().lag_thresholds.is_empty()
        {
            helpers.push(tokio::spawn(tasks::watch_lag(
                self.store.clone(),
                interval,
                signal.clone(),
            )));
        }
        if let Some(interval) = config.evidence_interval
            && self.store.registry().evidence_recording.is_some()
        {
            helpers.push(tokio::spawn(tasks::record_evidence(
                self.store.clone(),
                interval,
                signal.clone(),
            )));
        }
        Launched {
            store: self.store,
            config,
            shutdown,
            signal,
            counters,
            wakers,
            workers,
            helpers,
        }
    }
}

/// A dispatcher's workers made and its helper tasks started ([`Dispatcher::launch`]).
struct Launched<S: Store> {
    store: S,
    config: Arc<DispatcherConfig>,
    shutdown: watch::Sender<bool>,
    signal: watch::Receiver<bool>,
    counters: Arc<Counters>,
    wakers: HashMap<String, Arc<Notify>>,
    workers: Vec<Worker<S>>,
    helpers: Vec<JoinHandle<()>>,
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

    /// Tells the workers, runners and helper tasks to stop, without waiting for them.
    pub fn stop(&self) {
        let _ = self.shutdown.send(true);
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
