//! Held batches (docs/runtime.md, "Held batches"): one transaction claims a batch with row
//! locks, runs every handler on it and acks them all before it commits.

use std::sync::Arc;

use tokio::time::Instant;

use super::context::HandlerContext;
use super::stats::add;
use super::worker::{CatchUnwind, Worker, flatten};
use crate::store::{DispatchError, Lease, Store};

impl<S: Store> Worker<S> {
    /// A held batch: claim with row locks, every handler, the acks and their attempt rows, all
    /// in one transaction. Returns how many deliveries it claimed, and when a retry it
    /// scheduled is due. A failing (or panicking) handler rolls everything back, its
    /// siblings' writes too (the next batch runs them again); its failure is then recorded
    /// with its attempt and the retry policy's decision. Stopping between handlers acks the
    /// ones that ran; the rest are simply unlocked.
    pub(super) async fn run_held_batch(
        &mut self,
    ) -> Result<(usize, Option<Instant>), DispatchError> {
        let start = self.claim_start().await;
        // Taken out for the batch: an error or a failed handler returns it to the pool (where a
        // connection left inside a transaction is rolled back), a claim that finds nothing too.
        let mut connection = self.take_connection().await?;
        let mut tx = self.store.begin_on(&mut *connection).await?;
        let mut batch = self.claim_from_cursor(&mut tx, true, start).await?;
        if Self::retries_from_head(start, &batch) {
            tx.rollback().await?;
            self.connection = Some(connection);
            let start = self.claim_start().await;
            connection = self.take_connection().await?;
            tx = self.store.begin_on(&mut *connection).await?;
            batch = self.claim_from_cursor(&mut tx, true, start).await?;
        }
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
                let due = self.record_failure(&held.lease, &failure).await.due();
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
}
