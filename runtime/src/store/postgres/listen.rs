//! Wake-ups: a `LISTEN` connection on [`NOTIFY_CHANNEL`] that wakes the workers of the consumer
//! each notification names ([`crate::Store::listen`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::{Notify, watch};

use super::PgStore;
use super::sql::NOTIFY_CHANNEL;

/// Wakes the workers of a consumer when an append notifies it, until `shutdown`. Reconnects
/// after errors; the workers' polling covers what is missed meanwhile.
pub(super) async fn listen(
    store: &PgStore,
    wakers: HashMap<String, Arc<Notify>>,
    retry: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    while !*shutdown.borrow() {
        let mut listener = match PgListener::connect_with(store.pool()).await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::warn!(%error, "LISTEN connection failed; polling meanwhile");
                tokio::select! {
                    () = tokio::time::sleep(retry) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        if let Err(error) = listener.listen(NOTIFY_CHANNEL).await {
            tracing::warn!(%error, "LISTEN failed; polling meanwhile");
            tokio::select! {
                () = tokio::time::sleep(retry) => continue,
                _ = shutdown.changed() => return,
            }
        }
        // Anything appended before LISTEN took effect is picked up by this wake-up.
        wakers.values().for_each(|wake| wake.notify_waiters());
        loop {
            tokio::select! {
                received = listener.recv() => match received {
                    Ok(notification) => {
                        if let Some(wake) = wakers.get(notification.payload()) {
                            wake.notify_waiters();
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "LISTEN connection lost; reconnecting");
                        break;
                    }
                },
                _ = shutdown.changed() => return,
            }
        }
    }
}
