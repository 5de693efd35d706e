//! graphile_worker (crates.io, 0.14): `WorkerUtils::add_raw_jobs` (one batch statement per
//! call) for the insert; a `Worker` of `concurrency` = handlers with its local queue and
//! completion batching for the drain.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use graphile_worker::{
    IntoTaskHandlerResult, JobSpec, LocalQueueConfig, RawJobSpec, TaskHandler, WorkerContext,
    WorkerOptions,
};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;

use crate::writes::Meter;
use crate::{BenchResult, Run, System, drain_cap, open_connections, wait_until};

const SCHEMA: &str = "graphile_worker";
const IDENTIFIER: &str = "peer_noop";
/// Jobs per `add_raw_jobs` call (each call is one statement in its own transaction).
const ADD_CHUNK: usize = 10_000;

/// The no-op task.
#[derive(Debug, Serialize, Deserialize)]
struct PeerNoop {
    seq: u64,
}

/// Counts handler calls (a worker extension).
#[derive(Debug, Clone)]
struct Handled(Arc<AtomicU64>);

impl TaskHandler for PeerNoop {
    const IDENTIFIER: &'static str = IDENTIFIER;

    async fn run(self, ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        if let Some(handled) = ctx.get_ext::<Handled>() {
            handled.0.fetch_add(1, Ordering::Relaxed);
        }
        Ok::<(), String>(())
    }
}

/// A point of graphile_worker's sweep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setting {
    /// Local queue size and count (`None`: no local queue, one fetch per job).
    local_queue: Option<(usize, usize)>,
    /// `complete_job_batch_delay`.
    batch_delay: Duration,
    /// `poll_interval` (`LISTEN` is on).
    poll: Duration,
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.local_queue {
            Some((size, count)) => write!(f, "local queue {size} x {count}")?,
            None => write!(f, "no local queue")?,
        }
        write!(
            f,
            ", completion batching {} ms, poll {} ms, concurrency = handlers",
            self.batch_delay.as_millis(),
            self.poll.as_millis()
        )
    }
}

/// graphile_worker.
pub(crate) struct Graphile;

impl System for Graphile {
    type Setting = Setting;
    const NAME: &'static str = "graphile_worker";

    fn settings() -> Vec<Setting> {
        let ms = Duration::from_millis;
        let setting = |local_queue, batch_ms, poll_ms| Setting {
            local_queue,
            batch_delay: ms(batch_ms),
            poll: ms(poll_ms),
        };
        vec![
            // The figure: 2,000 x 2 queues, 5 ms completion batching.
            setting(Some((2_000, 2)), 5, 10),
            setting(Some((2_000, 1)), 5, 10),
            setting(Some((500, 2)), 5, 10),
            setting(Some((5_000, 2)), 5, 10),
            setting(Some((2_000, 4)), 5, 10),
            setting(Some((2_000, 2)), 1, 10),
            setting(Some((2_000, 2)), 20, 100),
            setting(None, 5, 10),
        ]
    }

    async fn run(
        url: &str,
        setting: &Setting,
        concurrency: usize,
        jobs: usize,
    ) -> BenchResult<Run> {
        let pool = PgPoolOptions::new()
            .max_connections(u32::try_from(concurrency)? + 10)
            .connect(url)
            .await?;
        let handled = Arc::new(AtomicU64::new(0));
        let mut options = WorkerOptions::default()
            .pg_pool(pool.clone())
            .schema(SCHEMA)
            .concurrency(concurrency)
            .poll_interval(setting.poll)
            .complete_job_batch_delay(setting.batch_delay)
            .add_extension(Handled(Arc::clone(&handled)))
            .define_job::<PeerNoop>();
        if let Some((size, count)) = setting.local_queue {
            options = options.local_queue(
                LocalQueueConfig::default()
                    .with_size(size)
                    .with_queue_count(count),
            );
        }
        // `init` migrates the schema; the worker does nothing until `run`.
        let worker = Arc::new(options.init().await?);

        // Insert: the batch add-jobs API in chunks. Building the specs is not timed.
        let specs: Vec<RawJobSpec> = (0..jobs as u64)
            .map(|seq| RawJobSpec {
                identifier: IDENTIFIER.to_owned(),
                payload: serde_json::json!({ "seq": seq }),
                spec: JobSpec::default(),
            })
            .collect();
        let utils = worker.create_utils();
        let mut meter = Meter::start(url).await?;
        let started = Instant::now();
        let mut inserted = 0;
        for chunk in specs.chunks(ADD_CHUNK) {
            inserted += utils.add_raw_jobs(chunk).await?.len();
        }
        let insert_rate = jobs as f64 / started.elapsed().as_secs_f64();
        if inserted != jobs {
            return Err(format!("add_raw_jobs inserted {inserted} of {jobs}").into());
        }
        meter.inserted().await?;
        let remaining_sql = format!("SELECT count(*) FROM {SCHEMA}._private_jobs");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "VACUUM ANALYZE {SCHEMA}._private_jobs"
        )))
        .execute(&pool)
        .await?;

        // Drain: completed jobs are deleted, so the drain ends when the table is empty.
        open_connections(&pool).await?;
        meter.draining().await?;
        let started = Instant::now();
        let running = Arc::clone(&worker);
        let task = tokio::spawn(async move { running.run().await });
        let cap = drain_cap(jobs);
        let target = jobs as u64;
        let mut finished =
            wait_until(started, cap, || handled.load(Ordering::Relaxed) >= target).await;
        let mut remaining: i64 = jobs as i64;
        while finished {
            remaining = sqlx::query_scalar(sqlx::AssertSqlSafe(remaining_sql.as_str()))
                .fetch_one(&pool)
                .await?;
            if remaining == 0 {
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
            remaining = sqlx::query_scalar(sqlx::AssertSqlSafe(remaining_sql.as_str()))
                .fetch_one(&pool)
                .await?;
        }
        worker.request_shutdown();
        match tokio::time::timeout(Duration::from_secs(10), task).await {
            Ok(joined) => joined??,
            Err(_) => eprintln!("graphile_worker did not stop within 10 s"),
        }
        pool.close().await;
        let completed = (jobs as i64 - remaining).max(0);
        Ok(Run {
            insert_rate,
            drain_rate: completed as f64 / elapsed.as_secs_f64(),
            finished,
            writes: meter.finish(jobs).await?,
        })
    }
}
