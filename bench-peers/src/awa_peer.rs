//! awa (crates.io, 0.6): its default engine (queue storage, promoted on a fresh database the
//! way `Client::start` promotes it), `QueueStorage::enqueue_params_copy` (COPY) for the insert,
//! the `Client` with one queue of `max_workers` = handlers for the drain.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use awa::model::{QueueStorage, QueueStorageConfig, migrations};
use awa::{Client, InsertOpts, JobArgs, JobContext, JobError, JobResult, QueueConfig};
use serde::{Deserialize, Serialize};
use sqlx08::postgres::{PgConnectOptions, PgPoolOptions};

use crate::writes::Meter;
use crate::{BenchResult, Run, System, drain_cap, wait_until};

const QUEUE: &str = "peer_bench";
/// Jobs per `enqueue_params_copy` call (each call is one transaction).
const COPY_CHUNK: usize = 10_000;

/// The no-op job (kind `peer_noop`).
#[derive(Debug, Serialize, Deserialize, JobArgs)]
struct PeerNoop {
    seq: u64,
}

/// A point of awa's sweep: its per-queue knobs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setting {
    /// Jobs claimed per round trip (awa's default 512).
    claim_batch_size: usize,
    /// Claimer loops of the queue (default 1).
    claimers: u16,
    /// Fallback poll interval (default 200 ms; `LISTEN` wakes it sooner).
    poll: Duration,
    /// Job deadline; zero takes awa's receipt-plane short path (awa's own throughput
    /// benchmark runs zero), the default is 5 minutes.
    deadline: Duration,
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "queue storage, COPY insert, max_workers = handlers, claim_batch_size {}, claimers {}, poll {} ms, deadline {}",
            self.claim_batch_size,
            self.claimers,
            self.poll.as_millis(),
            if self.deadline.is_zero() {
                "0 (receipts)".to_owned()
            } else {
                format!("{} s", self.deadline.as_secs())
            }
        )
    }
}

/// [`crate::open_connections`] for awa's pool, which is sqlx 0.8's.
async fn open_connections(pool: &sqlx08::PgPool) -> BenchResult<()> {
    let mut open = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        open.push(pool.acquire().await?);
    }
    Ok(())
}

/// awa.
pub(crate) struct Awa;

impl System for Awa {
    type Setting = Setting;
    const NAME: &'static str = "awa";

    fn settings() -> Vec<Setting> {
        let defaults = QueueConfig::default();
        let fast = |claim_batch_size, claimers, poll_ms| Setting {
            claim_batch_size,
            claimers,
            poll: Duration::from_millis(poll_ms),
            deadline: Duration::ZERO,
        };
        vec![
            Setting {
                claim_batch_size: defaults.claim_batch_size,
                claimers: defaults.claimers,
                poll: defaults.poll_interval,
                deadline: defaults.deadline_duration,
            },
            // A claim takes at most as many jobs as there are free handler permits
            // (`max_workers`), so at 4 and 16 handlers the claim batch size is not a knob.
            fast(defaults.claim_batch_size, 1, 200),
            fast(defaults.claim_batch_size, 1, 50),
            fast(defaults.claim_batch_size, 2, 50),
        ]
    }

    async fn run(
        url: &str,
        setting: &Setting,
        concurrency: usize,
        jobs: usize,
    ) -> BenchResult<Run> {
        let options = PgConnectOptions::from_str(url)?;
        let pool = PgPoolOptions::new()
            .max_connections(u32::try_from(concurrency)? + 10)
            .connect_with(options)
            .await?;
        migrations::run(&pool).await?;

        // The default engine on a fresh database: what `Client::start` does there (install
        // the queue-storage schema, then let the SQL gate promote it to active), done before
        // the insert so the jobs go straight into queue storage.
        let store = QueueStorage::new(QueueStorageConfig::default())?;
        store.prepare_schema(&pool).await?;
        let promoted: bool = sqlx08::query_scalar("SELECT awa.storage_auto_finalize_if_fresh($1)")
            .bind(store.schema())
            .fetch_one(&pool)
            .await?;
        if !promoted {
            return Err("awa did not promote queue storage on the fresh database".into());
        }

        // Insert: COPY in chunks, one transaction per chunk. Building the params is not timed.
        let params = (0..jobs as u64)
            .map(|seq| {
                awa::model::insert::params_with(
                    &PeerNoop { seq },
                    InsertOpts {
                        queue: QUEUE.into(),
                        ..Default::default()
                    },
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut meter = Meter::start(url).await?;
        let started = Instant::now();
        let mut inserted = 0;
        for chunk in params.chunks(COPY_CHUNK) {
            inserted += store.enqueue_params_copy(&pool, chunk).await?;
        }
        let insert_rate = jobs as f64 / started.elapsed().as_secs_f64();
        meter.inserted().await?;
        if inserted != jobs {
            return Err(format!("enqueue_params_copy inserted {inserted} of {jobs}").into());
        }

        // Drain: the handler counts its calls; once all ran, the completions are awaited in
        // the database (awa batches them).
        let handled = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&handled);
        let client = Client::builder(pool.clone())
            .queue(
                QUEUE,
                QueueConfig {
                    max_workers: u32::try_from(concurrency)?,
                    claimers: setting.claimers,
                    claim_batch_size: setting.claim_batch_size,
                    poll_interval: setting.poll,
                    deadline_duration: setting.deadline,
                    ..QueueConfig::default()
                },
            )
            .register::<PeerNoop, _, _>(move |_job: PeerNoop, _ctx: &JobContext| {
                counter.fetch_add(1, Ordering::Relaxed);
                async { Ok::<_, JobError>(JobResult::Completed) }
            })
            .build()?;
        open_connections(&pool).await?;
        meter.draining().await?;
        let started = Instant::now();
        client.start().await?;
        let cap = drain_cap(jobs);
        let target = jobs as u64;
        let mut finished =
            wait_until(started, cap, || handled.load(Ordering::Relaxed) >= target).await;
        let mut terminal = 0;
        while finished {
            terminal = store.queue_counts(&pool, QUEUE).await?.terminal;
            if terminal >= jobs as i64 {
                break;
            }
            if started.elapsed() >= cap {
                finished = false;
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let elapsed = started.elapsed();
        if !finished {
            terminal = store.queue_counts(&pool, QUEUE).await?.terminal;
        }
        client.shutdown(Duration::from_secs(5)).await;
        pool.close().await;
        Ok(Run {
            insert_rate,
            drain_rate: terminal.min(jobs as i64) as f64 / elapsed.as_secs_f64(),
            finished,
            writes: meter.finish(jobs).await?,
        })
    }
}
