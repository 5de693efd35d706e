//! In-process wake-ups: a [`Notify`] per consumer that fires when a transaction that appended
//! deliveries for the consumer commits (PostgreSQL's `NOTIFY` after commit, without a round
//! trip: one process owns the file).
//!
//! An append records its consumers as pending under the connection it runs on (keyed by the
//! connection's SQLite handle) and installs that connection's commit and rollback hooks
//! (`sqlite3_commit_hook`, `sqlite3_rollback_hook`, through sqlx's `lock_handle`). The commit
//! hook takes the connection's pending consumers and wakes them; the rollback hook forgets
//! them. So a rolled-back append wakes nobody, and an append in autocommit mode wakes its
//! consumers when its own transaction commits.
//!
//! A dispatcher's listener ([`crate::Store::listen`]) registers its own wakers here for as long
//! as it runs ([`Wakeups::subscribe`]); a commit wakes them too (`notify_waiters`, as
//! PostgreSQL's `LISTEN` loop does).
//!
//! SQLite calls the commit hook just before the commit completes. A woken claim still sees
//! the new deliveries: it starts with `BEGIN IMMEDIATE`, which waits for the committing
//! writer to finish and then reads the newest snapshot.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use sqlx::sqlite::SqliteConnection;
use tokio::sync::Notify;

use crate::registry::Registry;

/// The wake-ups of one store.
#[derive(Debug)]
pub(super) struct Wakeups {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// One per registered consumer, fixed with the registry.
    notifies: HashMap<&'static str, Arc<Notify>>,
    /// Consumers appended for in each connection's open transaction, by connection handle.
    pending: Mutex<HashMap<usize, BTreeSet<&'static str>>>,
    /// Listeners' wakers by consumer, by subscription.
    listeners: Mutex<HashMap<u64, HashMap<String, Arc<Notify>>>>,
    /// The next subscription's id.
    next_listener: AtomicU64,
}

/// A listener's subscription: its wakers are woken by commits until it is dropped.
#[derive(Debug)]
pub(super) struct Subscription {
    shared: Weak<Shared>,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared
                .listeners
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&self.id);
        }
    }
}

impl Wakeups {
    /// A [`Notify`] for every consumer of `registry`.
    pub(super) fn new(registry: &Registry) -> Self {
        let notifies = registry
            .consumers
            .iter()
            .map(|consumer| (consumer.name, Arc::new(Notify::new())))
            .collect();
        Self {
            shared: Arc::new(Shared {
                notifies,
                pending: Mutex::new(HashMap::new()),
                listeners: Mutex::new(HashMap::new()),
                next_listener: AtomicU64::new(0),
            }),
        }
    }

    /// The wake-up of `consumer` (`None`: not in the registry).
    pub(super) fn get(&self, consumer: &str) -> Option<Arc<Notify>> {
        self.shared.notifies.get(consumer).cloned()
    }

    /// Wakes `wakers` (by consumer name) at every commit that appended for their consumer,
    /// until the subscription is dropped.
    pub(super) fn subscribe(&self, wakers: HashMap<String, Arc<Notify>>) -> Subscription {
        let id = self.shared.next_listener.fetch_add(1, Ordering::Relaxed);
        self.shared
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, wakers);
        Subscription {
            shared: Arc::downgrade(&self.shared),
            id,
        }
    }

    /// Records `consumers` as appended for in `connection`'s transaction and (re)installs the
    /// connection's hooks. Called before the append writes, so an append in autocommit mode,
    /// which commits inside its own statements, is seen by the hook.
    ///
    /// The hooks replace any the application installed on the connection.
    pub(super) async fn arm(
        &self,
        connection: &mut SqliteConnection,
        consumers: &[&'static str],
    ) -> Result<(), sqlx::Error> {
        if consumers.is_empty() {
            return Ok(());
        }
        let mut handle = connection.lock_handle().await?;
        let key = handle.as_raw_handle().addr().get();
        self.shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_default()
            .extend(consumers.iter().copied());
        // Weak: a pooled connection may outlive the store.
        let on_commit: Weak<Shared> = Arc::downgrade(&self.shared);
        let on_rollback = on_commit.clone();
        handle.set_commit_hook(move || {
            if let Some(shared) = on_commit.upgrade() {
                shared.committed(key);
            }
            // Never veto the commit.
            true
        });
        handle.set_rollback_hook(move || {
            if let Some(shared) = on_rollback.upgrade() {
                shared.take(key);
            }
        });
        Ok(())
    }
}

impl Shared {
    /// The pending consumers of connection `key`, forgotten.
    fn take(&self, key: usize) -> BTreeSet<&'static str> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key)
            .unwrap_or_default()
    }

    /// Wakes the pending consumers of connection `key`: every worker waiting now, and one
    /// permit for the next to wait, so a worker between its last claim and its wait does not
    /// miss the append.
    fn committed(&self, key: usize) {
        let consumers = self.take(key);
        if consumers.is_empty() {
            return;
        }
        for consumer in &consumers {
            if let Some(notify) = self.notifies.get(consumer) {
                notify.notify_waiters();
                notify.notify_one();
            }
        }
        let listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for wakers in listeners.values() {
            for consumer in &consumers {
                if let Some(wake) = wakers.get(*consumer) {
                    wake.notify_waiters();
                }
            }
        }
    }
}
