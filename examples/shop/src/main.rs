//! The shop: places orders, charges them in a transactional consumer that emits `order.paid`
//! in the same transaction, mails receipts from a leased consumer, and brings a dead-lettered
//! order back with an audited replay. Everything event-shaped comes from `contracts/` through
//! `evc generate` (the `shop-events` crate); this file is the application.
//!
//! ```sh
//! export DATABASE_URL=postgres://$(whoami)@localhost/shop_dev
//! evc migrate && cargo run
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use evc::chrono::Utc;
use evc::sqlx::postgres::PgPoolOptions;
use evc::sqlx::{self, PgPool};
use evc::uuid::Uuid;
use evc::{
    Console, Dispatcher, HandlerContext, HandlerError, PgStore, ReplayApproval, ReplaySelection,
    TraceContext,
};
use shop_events::consumers::{BillingPayments, Handlers, MailerReceipts};
use shop_events::payloads::{
    OrderCancelledV1, OrderCancelledV1ReasonCode, OrderPaidV1, OrderPlacedV1, OrderPlacedV1Currency,
};
use shop_events::producers::{emit_order_paid_v1, emit_order_placed_v1};

/// Charges placed orders. Transactional: the payment row, the `order.paid` event and the ack
/// commit together, or none of them does.
struct Billing;

impl BillingPayments for Billing {
    async fn on_order_placed(
        &self,
        cx: &mut HandlerContext<'_>,
        order: OrderPlacedV1,
    ) -> Result<(), HandlerError> {
        let trace = cx.trace();
        let tx = cx
            .transaction()
            .ok_or_else(|| HandlerError::permanent("not_transactional"))?;
        let declined: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM shop_declined_customers WHERE customer_id = $1)",
        )
        .bind(order.customer_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(|_| HandlerError::transient("database_unavailable"))?;
        if declined {
            // Retrying will not help: the order is dead-lettered until someone looks at it.
            return Err(HandlerError::permanent("card_declined"));
        }
        let payment_id = Uuid::now_v7();
        let amount = i64::try_from(order.amount_cents)
            .map_err(|_| HandlerError::permanent("amount_out_of_range"))?;
        sqlx::query(
            "INSERT INTO shop_payments (payment_id, order_id, amount_cents) VALUES ($1, $2, $3)",
        )
        .bind(payment_id)
        .bind(order.order_id)
        .bind(amount)
        .execute(&mut *tx)
        .await
        .map_err(|_| HandlerError::transient("database_unavailable"))?;
        let paid = OrderPaidV1::new(order.order_id, payment_id, order.amount_cents, Utc::now());
        let mut publisher = cx
            .publisher()
            .ok_or_else(|| HandlerError::permanent("not_transactional"))?;
        emit_order_paid_v1(&mut publisher, &trace, &paid)
            .await
            .map_err(|_| HandlerError::permanent("order_paid_refused"))?;
        Ok(())
    }
}

/// Mails receipts. Leased: the mail leaves the building, so there is no transaction to join;
/// this one writes down what it would send.
#[derive(Default)]
struct Mailer {
    sent: Mutex<Vec<String>>,
}

impl Mailer {
    fn send(&self, line: String) {
        if let Ok(mut sent) = self.sent.lock() {
            sent.push(line);
        }
    }

    fn sent(&self) -> Vec<String> {
        self.sent.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl MailerReceipts for Mailer {
    async fn on_order_paid(
        &self,
        cx: &mut HandlerContext<'_>,
        paid: OrderPaidV1,
    ) -> Result<(), HandlerError> {
        self.send(format!(
            "receipt for order {}: {} cents (trace {})",
            paid.order_id,
            paid.amount_cents,
            cx.trace().trace_id()
        ));
        Ok(())
    }

    async fn on_order_cancelled(
        &self,
        _cx: &mut HandlerContext<'_>,
        cancelled: OrderCancelledV1,
    ) -> Result<(), HandlerError> {
        self.send(format!(
            "notice for order {}: cancelled ({:?})",
            cancelled.order_id, cancelled.reason_code
        ));
        Ok(())
    }
}

const SHOP_TABLES: &str = "
CREATE TABLE IF NOT EXISTS shop_orders (
    order_id uuid PRIMARY KEY,
    customer_id uuid NOT NULL,
    amount_cents bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS shop_payments (
    payment_id uuid PRIMARY KEY,
    order_id uuid NOT NULL UNIQUE REFERENCES shop_orders (order_id),
    amount_cents bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS shop_declined_customers (customer_id uuid PRIMARY KEY);
";

/// Places an order: the order row and its `order.placed` event commit in one transaction.
async fn place_order(
    pool: &PgPool,
    store: &PgStore,
    customer_id: Uuid,
    amount_cents: u64,
) -> anyhow::Result<Uuid> {
    let order_id = Uuid::now_v7();
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO shop_orders (order_id, customer_id, amount_cents) VALUES ($1, $2, $3)",
    )
    .bind(order_id)
    .bind(customer_id)
    .bind(i64::try_from(amount_cents)?)
    .execute(&mut *tx)
    .await?;
    let placed = OrderPlacedV1::new(
        order_id,
        customer_id,
        amount_cents,
        OrderPlacedV1Currency::EUR,
        Utc::now(),
    );
    emit_order_placed_v1(
        &mut store.publisher(&mut tx),
        &TraceContext::fresh(),
        &placed,
    )
    .await?;
    tx.commit().await?;
    Ok(order_id)
}

/// Waits until `done` holds, at most a minute.
async fn wait_for<F, Fut>(what: &str, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    while !done().await? {
        if start.elapsed() > Duration::from_secs(60) {
            bail!("gave up waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").context("set DATABASE_URL to a PostgreSQL database")?;
    let pool = PgPoolOptions::new()
        .max_connections(10)
        .connect(&url)
        .await?;
    sqlx::raw_sql(SHOP_TABLES).execute(&pool).await?;

    // `evc migrate` applied the outbox tables and the registry mirror; start refuses a
    // database whose registry differs from the generated one. Payload policy, envelope rules
    // and dispatcher settings all come from the contracts.
    let store = PgStore::start(pool.clone(), shop_events::REGISTRY)
        .await
        .context("the outbox is not ready: run `evc migrate` with the generated migrations")?;

    let good = Uuid::now_v7();
    let declined = Uuid::now_v7();
    sqlx::query("INSERT INTO shop_declined_customers VALUES ($1)")
        .bind(declined)
        .execute(&pool)
        .await?;
    let first = place_order(&pool, &store, good, 1250).await?;
    let second = place_order(&pool, &store, good, 990).await?;
    let stuck = place_order(&pool, &store, declined, 4500).await?;
    // A cancellation straight from the producer, without an order row.
    let mut tx = pool.begin().await?;
    let cancelled = OrderCancelledV1::new(
        second,
        OrderCancelledV1ReasonCode::CustomerRequest,
        Utc::now(),
    );
    shop_events::producers::emit_order_cancelled_v1(
        &mut store.publisher(&mut tx),
        &TraceContext::fresh(),
        &cancelled,
    )
    .await?;
    tx.commit().await?;
    println!("placed orders {first}, {second} and {stuck}; cancelled {second}");

    let mailer = Arc::new(Mailer::default());
    let handlers = Handlers {
        billing_payments: Billing,
        mailer_receipts: Arc::clone(&mailer),
    };
    let dispatcher = handlers
        .serve(Dispatcher::from_registry(store.clone()))?
        .start();

    let console = Console::connect(pool.clone()).await?;
    let dead = ReplaySelection::consumer("billing.payments");
    wait_for("two receipts, one notice and one dead letter", || async {
        Ok(mailer.sent().len() == 3 && console.dead_letters(&dead).await?.len() == 1)
    })
    .await?;
    let letters = console.dead_letters(&dead).await?;
    println!(
        "dead-lettered: order.placed {} ({} attempt(s), {})",
        letters[0].event_id,
        letters[0].attempts,
        letters[0].last_error_code.as_deref().unwrap_or("-")
    );

    // Someone fixes the card, then replays the dead letter with an audited approval.
    sqlx::query("DELETE FROM shop_declined_customers WHERE customer_id = $1")
        .bind(declined)
        .execute(&pool)
        .await?;
    // Two people: support proposes the replay, the on-call engineer approves it.
    let plan = console.propose_replay(&dead, "support").await?.plan;
    let approval = ReplayApproval::new(
        plan.digest.clone(),
        "card fixed by the customer",
        "SHOP-42",
        format!("replay-{stuck}"),
        "on-call",
    );
    let applied = console.replay(&dead, &approval).await?;
    println!(
        "replayed {} delivery(ies) as replay {}",
        applied.deliveries, applied.replay_id
    );
    wait_for("the replayed order's receipt", || async {
        Ok(mailer.sent().len() == 4)
    })
    .await?;

    let stats = dispatcher.shutdown().await;
    for line in mailer.sent() {
        println!("mailer.receipts: {line}");
    }
    let payments: i64 = sqlx::query_scalar("SELECT count(*) FROM shop_payments")
        .fetch_one(&pool)
        .await?;
    println!(
        "payments: {payments}; dispatcher acked {}, dead-lettered {}",
        stats.acked, stats.dead
    );
    ensure!(payments == 3, "expected three payments, found {payments}");
    ensure!(
        console.dead_letters(&dead).await?.is_empty(),
        "the replayed order is still dead-lettered"
    );
    Ok(())
}
