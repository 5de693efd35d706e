//! End to end on PostgreSQL: generated producers append in a transaction, the dispatcher
//! delivers to a generated consumer trait's implementation (docs/runtime.md, "Example: end to
//! end").
//!
//! ```sh
//! DATABASE_URL=postgres://root@localhost/test cargo run --example outbox
//! ```

use evc_reference::demo;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), demo::Error> {
    let url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://root@localhost/test".into());
    let report = demo::run(&url).await?;
    println!("database {} (dropped at the end)", report.database);
    println!(
        "rolled-back producer transaction left {} events",
        report.after_rollback
    );
    for (event_type, event_id, deliveries) in &report.published {
        println!("published {event_type} {event_id}: {deliveries} deliveries");
    }
    for line in &report.notifications {
        println!("{}: {line}", demo::CONSUMER);
    }
    println!("acked by the dispatcher: {}", report.acked);
    for (consumer, status, count) in &report.deliveries {
        println!("deliveries of {consumer}: {count} {status}");
    }
    Ok(())
}
