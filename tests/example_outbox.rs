//! The end-to-end example's flow (`examples/outbox.rs`, `evc_reference::demo`) against a real
//! PostgreSQL: the generated producers' events reach the generated consumer trait once each
//! and are acked. Skipped with a message when the server is unreachable, except under
//! `CI=true`, where that is a failure.

use evc_reference::demo;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

#[tokio::test]
async fn the_example_publishes_dispatches_and_acks() -> Result<(), demo::Error> {
    let url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://root@localhost/test".into());
    match PgConnection::connect(&url).await {
        Ok(connection) => connection.close().await?,
        Err(error) => {
            let ci = std::env::var("CI").is_ok_and(|value| value.eq_ignore_ascii_case("true"));
            assert!(
                !ci,
                "CI=true and PostgreSQL at {url} is unreachable: {error}"
            );
            eprintln!("skipped: PostgreSQL at {url} is unreachable ({error}); set DATABASE_URL");
            return Ok(());
        }
    }
    let report = demo::run(&url).await?;
    assert_eq!(
        report.after_rollback, 0,
        "a rolled-back append left an event"
    );
    assert_eq!(report.published.len(), 3);
    assert!(
        report
            .published
            .iter()
            .all(|(_, _, deliveries)| *deliveries >= 1)
    );
    assert_eq!(report.acked, 3);
    assert_eq!(report.notifications.len(), 3, "{:?}", report.notifications);
    assert!(
        report
            .notifications
            .iter()
            .all(|line| line.starts_with("attempt 1:"))
    );
    let served: Vec<(String, i64)> = report
        .deliveries
        .iter()
        .filter(|(consumer, _, _)| consumer == demo::CONSUMER)
        .map(|(_, status, count)| (status.clone(), *count))
        .collect();
    assert_eq!(served, [("acked".to_owned(), 3)]);
    // The database is gone again.
    let mut admin = PgConnection::connect(&url).await?;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(&report.database)
        .fetch_one(&mut admin)
        .await?;
    assert_eq!(left, 0);
    Ok(())
}
