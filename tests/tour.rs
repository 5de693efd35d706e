//! The tour (`cargo run`, `evc_reference::tour`) on both stores: the generated producers' events
//! reach the generated consumer trait, the bounced one is dead-lettered, the replay delivers it,
//! and nothing is left open. SQLite needs nothing; PostgreSQL is skipped with a message when the
//! server is unreachable, except under `CI=true`, where that is a failure.

use evc_reference::tour::{self, CONSUMER, Report};
use sqlx::Connection;
use sqlx::postgres::PgConnection;

fn check(report: &Report) {
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
    assert_eq!(report.acked, 2, "{:?}", report.notifications);
    assert_eq!(report.dead.len(), 1, "{:?}", report.dead);
    assert_eq!(report.dead[0].1, "mailbox_rejected");
    // The dead letter is the second unit's birth, bounced before the replay and told after.
    let bounced: Vec<&String> = report
        .notifications
        .iter()
        .filter(|line| line.contains("bounced"))
        .collect();
    assert_eq!(bounced.len(), 1, "{:?}", report.notifications);
    assert_eq!(report.replayed, 1);
    assert_eq!(report.acked_after_replay, 1);
    assert_eq!(report.notifications.len(), 4, "{:?}", report.notifications);
    assert_eq!(report.open_at_end, 0, "deliveries of {CONSUMER} left open");
}

#[tokio::test]
async fn the_tour_runs_end_to_end_on_sqlite() -> Result<(), tour::Error> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("tour.db");
    let mut lines = Vec::new();
    let report = tour::on_sqlite(&file.to_string_lossy(), &mut |line| lines.push(line)).await?;
    check(&report);
    // Progress lines name each step.
    for step in ["[1/5]", "[2/5]", "[3/5]", "[4/5]", "[5/5]"] {
        assert!(lines.iter().any(|line| line.starts_with(step)), "{lines:?}");
    }
    Ok(())
}

#[tokio::test]
async fn the_tour_runs_end_to_end_on_postgres() -> Result<(), tour::Error> {
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
    let mut database = None;
    let report = tour::on_postgres(&url, &mut |line| {
        if let Some(name) = line.strip_prefix("outbox: PostgreSQL database ") {
            database = name.split_whitespace().next().map(str::to_owned);
        }
    })
    .await?;
    check(&report);
    // The throw-away database is gone again.
    let database = database.ok_or("the tour did not name its database")?;
    let mut admin = PgConnection::connect(&url).await?;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(&database)
        .fetch_one(&mut admin)
        .await?;
    assert_eq!(left, 0);
    Ok(())
}
