//! The tour on PostgreSQL (`cargo run -- --database-url URL` does the same): generated producers
//! append in a transaction, the dispatcher delivers to a generated consumer trait's
//! implementation, a dead letter is replayed (docs/runtime.md, "Example: end to end").
//!
//! ```sh
//! DATABASE_URL=postgres://root@localhost/test cargo run --example outbox
//! ```

use evc_reference::tour;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), tour::Error> {
    let url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://root@localhost/test".into());
    let report = tour::on_postgres(&url, &mut |line| println!("{line}")).await?;
    println!(
        "done: {} events published, {} dead-lettered and replayed",
        report.published.len(),
        report.dead.len()
    );
    Ok(())
}
