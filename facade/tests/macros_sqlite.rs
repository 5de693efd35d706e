//! A `#[evc::consumer]` impl block whose handlers name the SQLite store in their context
//! (`&mut HandlerContext<'_, SqliteStore>`) is served by a `Dispatcher<SqliteStore>` on an
//! embedded file: each event reaches its typed handler once, and every delivery is acked.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evc::uuid::Uuid;
use evc::{
    DeliveryStatus, Dispatcher, HandlerContext, HandlerError, Publish, SqliteStore, TraceContext,
};
use evc_generated::payloads::{
    IuBornV1, IuBornV1GovernanceState, IuDeprecatedV1, IuDeprecatedV1ReasonCode,
    ProposalApprovedV1, ProposalRejectedV1, StepEscalatedV1,
};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const CONSUMER: &str = "worker.notification.iu";

/// One handled delivery: the handler, the event id and the unit the payload named.
type Handled = (&'static str, String, Uuid);

/// What the consumer saw.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Handled>>>);

impl Seen {
    fn record(&self, handler: &'static str, cx: &HandlerContext<'_, SqliteStore>, unit: Uuid) {
        if let Ok(mut seen) = self.0.lock() {
            seen.push((handler, cx.delivery().event_id.clone(), unit));
        }
    }
}

struct Notifier {
    seen: Seen,
}

#[evc::consumer("worker.notification.iu")]
impl Notifier {
    async fn on_iu_born(
        &self,
        cx: &mut HandlerContext<'_, SqliteStore>,
        payload: IuBornV1,
    ) -> Result<(), HandlerError> {
        self.seen.record("on_iu_born", cx, payload.iu_unit_id);
        Ok(())
    }

    async fn on_iu_deprecated(
        &self,
        cx: &mut HandlerContext<'_, SqliteStore>,
        payload: IuDeprecatedV1,
    ) -> Result<(), HandlerError> {
        self.seen.record("on_iu_deprecated", cx, payload.iu_unit_id);
        Ok(())
    }

    async fn on_proposal_approved(
        &self,
        _cx: &mut HandlerContext<'_, SqliteStore>,
        _payload: ProposalApprovedV1,
    ) -> Result<(), HandlerError> {
        Err(HandlerError::permanent("not_published_here"))
    }

    async fn on_proposal_rejected(
        &self,
        _cx: &mut HandlerContext<'_, SqliteStore>,
        _payload: ProposalRejectedV1,
    ) -> Result<(), HandlerError> {
        Err(HandlerError::permanent("not_published_here"))
    }

    async fn on_step_escalated(
        &self,
        _cx: &mut HandlerContext<'_, SqliteStore>,
        _payload: StepEscalatedV1,
    ) -> Result<(), HandlerError> {
        Err(HandlerError::permanent("not_published_here"))
    }
}

#[tokio::test]
async fn an_attribute_consumer_serves_the_sqlite_store() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("outbox.db");
    let store = SqliteStore::open(path.to_string_lossy(), evc_generated::REGISTRY).await?;
    let trace = TraceContext::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)?;
    let units = [Uuid::now_v7(), Uuid::now_v7()];
    let mut expected = BTreeMap::new();
    let mut tx = store.begin().await?;
    {
        let mut publisher = store.publisher(&mut tx);
        for unit in units {
            let born = IuBornV1::new(
                unit,
                Uuid::now_v7(),
                IuBornV1GovernanceState::Draft,
                evc::chrono::Utc::now(),
            );
            let receipt = publisher.emit(&trace, &born).await?;
            expected.insert(receipt.event_id.to_string(), ("on_iu_born", unit));
        }
        let deprecated = IuDeprecatedV1::new(
            units[0],
            Uuid::now_v7(),
            IuDeprecatedV1ReasonCode::Superseded,
            evc::chrono::Utc::now(),
        );
        let receipt = publisher.emit(&trace, &deprecated).await?;
        expected.insert(receipt.event_id.to_string(), ("on_iu_deprecated", units[0]));
    }
    tx.commit().await?;

    let seen = Seen::default();
    let handle = Dispatcher::from_registry(store.clone())
        .serve(Notifier { seen: seen.clone() })?
        .start();
    // Bounded wait for the work to be done; how long it takes is not asserted.
    let open_statuses = [DeliveryStatus::Pending, DeliveryStatus::Leased];
    let deadline = Instant::now() + Duration::from_secs(60);
    let open = loop {
        let open = store.count_deliveries(CONSUMER, &open_statuses).await?;
        if open == 0 || Instant::now() > deadline {
            break open;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stats = handle.shutdown().await;
    assert_eq!(open, 0, "deliveries of {CONSUMER} still open");

    let mut got = BTreeMap::new();
    for (handler, event_id, unit) in seen.0.lock().map(|s| s.clone()).unwrap_or_default() {
        let previous = got.insert(event_id.clone(), (handler, unit));
        assert!(previous.is_none(), "{event_id} handled twice");
    }
    assert_eq!(got, expected);
    assert_eq!(stats.acked, expected.len() as u64);
    assert_eq!((stats.dead, stats.quarantined), (0, 0));
    store.close().await;
    Ok(())
}
