//! What operators see, on a real server: the status report (deliveries by status, oldest
//! pending age, operator state, lag and attempt latency, silent workers), its problems in
//! order, the same as Prometheus metrics, a trace's timeline, and a dispatcher that shuts down
//! taking its heartbeats with it.

mod support;

use std::time::Duration;

use evc_runtime::Operate;
use evc_runtime::{
    ConsumerDescriptor, ConsumerMode, DispatchError, Dispatcher, DispatcherConfig, FailureClass,
    Heartbeat, PgStore, Problem, Registry, RetryDecision, Store, TraceContextError,
};
use support::{DISPATCH_REGISTRY, TestResult, append_notes, dispatch_store, with_database};

/// `d.leased`'s heartbeat threshold in the status test: short, so that a worker falls silent
/// while the test waits.
const THRESHOLD: Duration = Duration::from_secs(1);

/// How long the silent worker of the status test goes without a heartbeat: past
/// [`THRESHOLD`].
const SILENCE: Duration = Duration::from_millis(1_500);

/// [`DISPATCH_REGISTRY`] with `d.leased`'s heartbeat threshold at [`THRESHOLD`].
fn short_heartbeat_registry() -> Registry {
    let consumers: Vec<ConsumerDescriptor> = DISPATCH_REGISTRY
        .consumers
        .iter()
        .map(|consumer| {
            let mut consumer = *consumer;
            if consumer.name == "d.leased" {
                consumer.heartbeat_threshold_ms =
                    u64::try_from(THRESHOLD.as_millis()).unwrap_or(u64::MAX);
            }
            consumer
        })
        .collect();
    Registry {
        consumers: Box::leak(consumers.into_boxed_slice()),
        ..DISPATCH_REGISTRY
    }
}

/// Acks everything.
struct NoOp;

impl evc_runtime::DynHandler for NoOp {
    fn handle<'a>(
        &'a self,
        _: evc_runtime::HandlerContext<'a>,
    ) -> evc_runtime::BoxFuture<'a, Result<(), evc_runtime::HandlerError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The value of the metric line that starts with `series` (name and labels).
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_report_counts_ranks_problems_and_exports_metrics() -> TestResult {
    with_database(|pool| async move {
        let pool = dispatch_store(&pool, 8).await?.pool().clone();
        let store = PgStore::new(pool, short_heartbeat_registry())?;
        // 4 notes for d.leased, d.tx and d.unordered; all on support::TRACE_ID.
        append_notes(&store, 4, 4).await?;
        let lease = Duration::from_secs(30);

        // d.unordered: 2 acked, 1 dead, 1 quarantined.
        let claimed = support::claim(&store, "d.unordered", "w/u", 4, lease, false).await?;
        assert_eq!(claimed.len(), 4);
        let acked: Vec<_> = claimed[..2].iter().map(|c| &c.lease).collect();
        assert_eq!(support::ack(&store, &acked).await?.acked, 2);
        store
            .fail(
                &claimed[2].lease,
                FailureClass::Permanent,
                "boom",
                RetryDecision::Dead,
            )
            .await?;
        store
            .fail(
                &claimed[3].lease,
                FailureClass::Schema,
                "bad_shape",
                RetryDecision::Quarantine,
            )
            .await?;
        // d.leased: one in flight; d.tx paused; d.held switched off.
        assert_eq!(
            support::claim(&store, "d.leased", "w/l", 1, lease, true)
                .await?
                .len(),
            1
        );
        store.pause("d.tx", &support::change()).await?;
        store
            .set_mode("d.held", ConsumerMode::Off, &support::change())
            .await?;
        // One worker silent past its consumer's threshold, one fresh.
        store
            .heartbeat(&[Heartbeat::new("old/d.leased/0", "d.leased", "")])
            .await?;
        tokio::time::sleep(SILENCE).await;
        store
            .heartbeat(&[Heartbeat::new("fresh/d.leased/0", "d.leased", "")])
            .await?;

        let report = store.status(Duration::from_secs(3_600)).await?;
        let summary: Vec<_> = report
            .consumers
            .iter()
            .map(|c| {
                (
                    c.consumer.as_str(),
                    [c.pending, c.leased, c.dead, c.quarantined],
                    c.paused,
                    c.mode,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("d.held", [0, 0, 0, 0], false, ConsumerMode::Off),
                ("d.leased", [3, 1, 0, 0], false, ConsumerMode::Live),
                ("d.tx", [4, 0, 0, 0], true, ConsumerMode::Live),
                ("d.unordered", [0, 0, 1, 1], false, ConsumerMode::Live),
            ]
        );
        assert!(report.consumers[0].oldest_pending.is_none());
        assert!(report.consumers[2].oldest_pending.is_some());
        // Lag: the two acks of d.unordered; attempt latency: its four attempts.
        assert_eq!(report.lag.len(), 1);
        assert_eq!(
            (
                report.lag[0].producer_class.as_str(),
                report.lag[0].consumer.as_str()
            ),
            ("notes", "d.unordered")
        );
        assert_eq!(report.lag[0].latency.samples, 2);
        let latency = report.lag[0].latency;
        assert!(latency.p50 <= latency.p95 && latency.p95 <= latency.p99);
        assert_eq!(report.attempts.len(), 1);
        assert_eq!(report.attempts[0].latency.samples, 4);
        // Only the silent worker, with its consumer's threshold.
        assert_eq!(report.silent_workers.len(), 1);
        let silent = &report.silent_workers[0];
        assert_eq!(silent.owner, "old/d.leased/0");
        assert_eq!(silent.threshold, THRESHOLD);
        assert!(silent.silent_for >= SILENCE, "{silent:?}");
        let workers: Vec<&str> = report.workers.iter().map(|w| w.owner.as_str()).collect();
        assert_eq!(workers, ["fresh/d.leased/0", "old/d.leased/0"]);

        // Problems, most urgent first; a lag limit of zero flags the lag, an hour does not.
        let kinds = |problems: &[Problem]| -> Vec<String> {
            problems.iter().map(ToString::to_string).collect()
        };
        let problems = kinds(&report.problems(Duration::ZERO));
        assert_eq!(problems.len(), 5, "{problems:#?}");
        assert_eq!(problems[0], "d.unordered: 1 dead-lettered, 1 quarantined");
        assert!(problems[1].starts_with("d.leased: worker old/d.leased/0 silent for"));
        assert!(problems[2].starts_with("d.unordered: p99 lag of notes events"));
        assert_eq!(problems[3], "d.held: mode off");
        assert_eq!(problems[4], "d.tx: paused");
        assert_eq!(report.problems(Duration::from_secs(3_600)).len(), 4);

        // The same as metrics.
        let text = report.prometheus();
        let value = |series: &str| metric(&text, series);
        assert_eq!(
            value(r#"evc_deliveries{consumer="d.unordered",status="dead"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(r#"evc_deliveries{consumer="d.leased",status="pending"}"#),
            Some(3.0)
        );
        assert_eq!(value(r#"evc_consumer_paused{consumer="d.tx"}"#), Some(1.0));
        assert_eq!(
            value(r#"evc_consumer_paused{consumer="d.leased"}"#),
            Some(0.0)
        );
        assert_eq!(
            value(r#"evc_silent_workers{consumer="d.leased"}"#),
            Some(1.0)
        );
        assert!(
            value(
                r#"evc_lag_seconds{producer_class="notes",consumer="d.unordered",quantile="0.99"}"#
            )
            .is_some_and(|p99| p99 >= 0.0),
            "{text}"
        );
        assert_eq!(value("evc_stale_tokens_total"), Some(0.0), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_timeline_lists_events_deliveries_and_attempts_in_order() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        append_notes(&store, 2, 2).await?;
        let lease = Duration::from_secs(30);
        let claimed = support::claim(&store, "d.unordered", "w/u", 2, lease, false).await?;
        support::ack_current(&store, &claimed[0].lease).await?;
        store
            .fail(
                &claimed[1].lease,
                FailureClass::Transient,
                "timeout",
                RetryDecision::Dead,
            )
            .await?;

        let timeline = store.timeline(support::TRACE_ID).await?;
        let kinds: Vec<&str> = timeline.iter().map(|e| e.kind.as_str()).collect();
        // 2 events, their deliveries still on record (3 consumers; the acked one's ack
        // deleted it), then the 2 attempts.
        assert_eq!(
            kinds,
            [
                "event", "event", "delivery", "delivery", "delivery", "delivery", "delivery",
                "attempt", "attempt"
            ]
        );
        assert!(timeline.windows(2).all(|pair| pair[0].at <= pair[1].at));
        assert_eq!(timeline[0].detail, "test.note 1.0.0");
        assert!(timeline[0].consumer.is_none());
        let attempts: Vec<(&str, &str)> = timeline[7..]
            .iter()
            .map(|e| (e.consumer.as_deref().unwrap_or(""), e.detail.as_str()))
            .collect();
        assert_eq!(
            attempts,
            [("d.unordered", "acked"), ("d.unordered", "dead (timeout)")]
        );
        // The deliveries show their current status.
        let unordered: Vec<&str> = timeline
            .iter()
            .filter(|e| e.kind == "delivery" && e.consumer.as_deref() == Some("d.unordered"))
            .map(|e| e.detail.as_str())
            .collect();
        assert_eq!(unordered, ["dead"]);
        assert!(
            store
                .timeline("0af7651916cd43dd8448eb211c80319c")
                .await?
                .is_empty()
        );
        // Ids that are not W3C trace ids are refused, not answered with an empty timeline:
        // the upper-case form of the trace above, a short one, all zeros.
        for bad in [
            support::TRACE_ID.to_uppercase(),
            support::TRACE_ID[1..].to_owned(),
            "0".repeat(32),
        ] {
            assert!(
                matches!(
                    store.timeline(&bad).await,
                    Err(DispatchError::TraceId(TraceContextError::TraceId))
                ),
                "{bad}"
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_that_shuts_down_leaves_no_heartbeat_behind() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 8).await?;
        let config = DispatcherConfig::default()
            .owner("beats")
            .workers(2)
            .heartbeat_interval(Duration::from_millis(20))
            .poll_interval(Duration::from_millis(50));
        let handle = Dispatcher::new(store.clone(), config)
            .consumer("d.unordered", NoOp)?
            .start();
        let workers = async || -> Result<usize, DispatchError> {
            Ok(store.status(Duration::from_secs(60)).await?.workers.len())
        };
        let mut beats = 0;
        let start = std::time::Instant::now();
        while start.elapsed() < support::HANG {
            beats = workers().await?;
            if beats == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(beats, 2, "one heartbeat row per worker");
        handle.shutdown().await;
        assert_eq!(workers().await?, 0);
        assert!(
            store
                .status(Duration::from_secs(60))
                .await?
                .silent_workers
                .is_empty()
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_deliveries_are_the_pending_and_leased_ones() -> TestResult {
    with_database(|pool| async move {
        let store = dispatch_store(&pool, 4).await?;
        let names = |names: &[&str]| -> Vec<String> {
            names.iter().map(|name| (*name).to_owned()).collect()
        };
        let unordered = names(&["d.unordered"]);
        assert_eq!(store.open_deliveries(&unordered).await?, 0);
        // 4 notes: one delivery each for d.leased, d.tx and d.unordered; none for d.held.
        append_notes(&store, 4, 4).await?;
        assert_eq!(store.open_deliveries(&unordered).await?, 4);
        assert_eq!(
            store
                .open_deliveries(&names(&["d.leased", "d.unordered"]))
                .await?,
            8
        );
        assert_eq!(store.open_deliveries(&names(&["d.held"])).await?, 0);
        assert_eq!(store.open_deliveries(&[]).await?, 0);

        // Leased deliveries are still open; acked, dead and quarantined ones are not.
        let lease = Duration::from_secs(30);
        let claimed = support::claim(&store, "d.unordered", "w/u", 4, lease, false).await?;
        assert_eq!(claimed.len(), 4);
        assert_eq!(store.open_deliveries(&unordered).await?, 4);
        let acked: Vec<_> = claimed[..2].iter().map(|c| &c.lease).collect();
        assert_eq!(support::ack(&store, &acked).await?.acked, 2);
        assert_eq!(store.open_deliveries(&unordered).await?, 2);
        store
            .fail(
                &claimed[2].lease,
                FailureClass::Permanent,
                "boom",
                RetryDecision::Dead,
            )
            .await?;
        store
            .fail(
                &claimed[3].lease,
                FailureClass::Schema,
                "bad_shape",
                RetryDecision::Quarantine,
            )
            .await?;
        assert_eq!(store.open_deliveries(&unordered).await?, 0);
        // The other consumers' deliveries are untouched.
        assert_eq!(store.open_deliveries(&names(&["d.tx"])).await?, 4);
        Ok(())
    })
    .await
}
