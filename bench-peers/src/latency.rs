//! evc's produce-to-handler latency at a steady 1,000 events/s: producers append single
//! events, each in its own transaction (`PgStore::append`), on a fixed schedule; a dispatcher
//! with `LISTEN` on and the default polling serves a leased consumer whose handler records when
//! it starts. Latency = handler start - the producer's commit returning. Both instants are
//! recorded on their own side and joined after the run, so neither side waits for the other.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evc_runtime::{AppendOptions, Dispatcher, DispatcherConfig, HandlerError};
use evc_runtime::{BoxFuture, DynHandler, HandlerContext};

use crate::BenchResult;
use crate::evc::{LEASED_CONSUMER, LEASED_EVENT, event, migrated_store, trace};

/// Events per second the producers keep to.
const RATE: u64 = 1_000;
/// Seconds of producing.
const SECONDS: u64 = 10;
/// Producer tasks (each its own connection). Each takes the next event number from a shared
/// counter, waits for that event's slot in the schedule and appends it, so a slow commit on one
/// connection delays only its own event. On a loaded 2-core machine one append plus commit
/// takes several milliseconds, and commits waiting together share one WAL flush: 8 tasks, each
/// serving every eighth slot, kept only 716 events/s there.
const PRODUCERS: u64 = 32;

/// Per event number: when its commit returned, when its handler started.
type Stamps = Arc<Mutex<Vec<Option<Instant>>>>;

/// Records when each event's handler starts (the event number is in its unit id).
struct Recorder {
    started: Stamps,
}

impl DynHandler for Recorder {
    fn handle<'a>(
        &'a self,
        context: HandlerContext<'a>,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        let now = Instant::now();
        let number = context
            .payload()
            .get("iu_unit_id")
            .and_then(|unit| unit.as_str())
            .and_then(|unit| unit.rsplit('-').next())
            .and_then(|tail| usize::from_str_radix(tail, 16).ok());
        if let Some(number) = number {
            let mut started = self.started.lock().expect("not poisoned");
            if let Some(slot) = started.get_mut(number) {
                slot.get_or_insert(now);
            }
        }
        Box::pin(async { Ok(()) })
    }
}

/// The latency part: prints p50/p95/p99/max and the count.
pub(crate) async fn run(url: &str) -> BenchResult<()> {
    let total = (RATE * SECONDS) as usize;
    let config = DispatcherConfig::default().owner(format!("peers-latency-{}", std::process::id()));
    println!(
        "\n== evc produce-to-handler latency: {RATE} events/s for {SECONDS} s, one event per transaction ({PRODUCERS} producer connections) ==\n\
         dispatcher: leased consumer, {} workers, batch {}, listen {}, poll {} ms, ack window {} ms (the defaults)",
        config.workers,
        config.batch,
        if config.listen { "on" } else { "off" },
        config.poll_interval.as_millis(),
        config.ack_window.as_millis()
    );
    let connections = u32::try_from(config.workers + PRODUCERS as usize)? + 6;
    let store = migrated_store(url, connections).await?;
    let committed: Stamps = Arc::new(Mutex::new(vec![None; total]));
    let started: Stamps = Arc::new(Mutex::new(vec![None; total]));
    let handle = Dispatcher::new(store.clone(), config)
        .consumer(
            LEASED_CONSUMER,
            Recorder {
                started: Arc::clone(&started),
            },
        )?
        .start();
    // Let the listener connect and the workers go idle, as in a running service.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let begin = tokio::time::Instant::now() + Duration::from_millis(10);
    // The next event number to produce, and the most any event started after its slot (µs).
    let next = Arc::new(AtomicU64::new(0));
    let late = Arc::new(AtomicU64::new(0));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let store = store.clone();
            let late = Arc::clone(&late);
            let committed = Arc::clone(&committed);
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                let trace = trace();
                let mut connection = store.pool().acquire().await?;
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= total as u64 {
                        break;
                    }
                    let due = begin + Duration::from_micros(n * 1_000_000 / RATE);
                    tokio::time::sleep_until(due).await;
                    let behind = due.elapsed();
                    let mut tx = sqlx::Connection::begin(&mut *connection).await?;
                    store
                        .append(
                            &mut tx,
                            event(LEASED_EVENT, &trace, n),
                            AppendOptions::default(),
                        )
                        .await?;
                    tx.commit().await?;
                    let now = Instant::now();
                    committed.lock().expect("not poisoned")[n as usize] = Some(now);
                    late.fetch_max(
                        u64::try_from(behind.as_micros()).unwrap_or(u64::MAX),
                        Ordering::Relaxed,
                    );
                }
                BenchResult::Ok(())
            })
        })
        .collect();
    for producer in producers {
        producer.await??;
    }
    let produced_in = begin.elapsed();

    // Wait for the last handlers (at most 5 s more).
    let waited = Instant::now();
    while started
        .lock()
        .expect("not poisoned")
        .iter()
        .any(Option::is_none)
        && waited.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stats = handle.shutdown().await;

    let committed = committed.lock().expect("not poisoned").clone();
    let started = started.lock().expect("not poisoned").clone();
    let mut latencies: Vec<Duration> = committed
        .iter()
        .zip(&started)
        .filter_map(|(commit, start)| match (commit, start) {
            // A handler may start before the producer's commit call has returned to it.
            (Some(commit), Some(start)) => Some(start.saturating_duration_since(*commit)),
            _ => None,
        })
        .collect();
    latencies.sort();
    let missing = total - latencies.len();
    println!(
        "produced {total} events in {:.2} s ({:.0} events/s; the latest append started {:.1} ms after its slot); handled {}, acked {} ({missing} not seen by a handler)",
        produced_in.as_secs_f64(),
        total as f64 / produced_in.as_secs_f64(),
        late.load(Ordering::Relaxed) as f64 / 1_000.0,
        latencies.len(),
        stats.acked
    );
    if latencies.is_empty() {
        return Err("no event reached the handler".into());
    }
    let at = |q: f64| {
        let index = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[index].as_secs_f64() * 1_000.0
    };
    println!(
        "produce-to-handler latency (ms): p50 {:.2}, p95 {:.2}, p99 {:.2}, max {:.2}; count {}",
        at(0.50),
        at(0.95),
        at(0.99),
        at(1.0),
        latencies.len()
    );
    store.pool().close().await;
    Ok(())
}
