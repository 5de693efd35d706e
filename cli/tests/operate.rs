//! The operator commands against a real server: `evc status` (problems first, exit 100 with
//! problems, Prometheus output), `evc consumer pause | resume | mode | show` on the consumers the
//! database's registry mirror lists, and `evc timeline`. The database gets this repository's
//! generated migrations, so its deployed consumers are the reference contracts'.

use std::path::Path;
use std::process::{Command, Output};
use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

const DEFAULT_URL: &str = "postgres://root@localhost/test";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A fresh database with the generated migrations applied; `None` (after saying why) when the
/// server is unreachable outside CI.
async fn create_database(name: &str) -> Option<String> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let mut admin = match PgConnection::connect(&url).await {
        Ok(connection) => connection,
        Err(error) => {
            let ci = std::env::var("CI").is_ok_and(|value| value.eq_ignore_ascii_case("true"));
            assert!(
                !ci,
                "CI=true and PostgreSQL at {url} is unreachable: {error}"
            );
            eprintln!("skipped: PostgreSQL at {url} is unreachable ({error}); set DATABASE_URL");
            return None;
        }
    };
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .expect("drop");
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("create");
    let options = PgConnectOptions::from_str(&url)
        .expect("url")
        .database(name);
    let mut connection = options.connect().await.expect("connect");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("migrations")
        .map(|entry| entry.expect("entry").path())
        .collect();
    files.sort();
    for file in files {
        let sql = std::fs::read_to_string(&file).expect("migration");
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&mut connection)
            .await
            .expect("migration applies");
    }
    Some(options.to_url_lossy().to_string())
}

async fn drop_database(name: &str) {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    if let Ok(mut admin) = PgConnection::connect(&url).await {
        let _ = sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await;
    }
}

async fn execute(url: &str, sql: &str) {
    let mut connection = PgConnection::connect(url).await.expect("connect");
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&mut connection)
        .await
        .expect("sql runs");
}

fn evc(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_evc"))
        .args(args)
        .args(["--database-url", url])
        .output()
        .expect("evc runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn operator_commands_report_and_steer_the_deployed_consumers() {
    let name = format!("evc_cli_operate_{}", std::process::id());
    let runtime = runtime();
    let Some(url) = runtime.block_on(create_database(&name)) else {
        return;
    };
    let outcome = std::panic::catch_unwind(|| check(&runtime, &url));
    runtime.block_on(drop_database(&name));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn check(runtime: &tokio::runtime::Runtime, url: &str) {
    // A fresh outbox: no problems, every deployed consumer listed.
    let output = evc(url, &["status"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.starts_with("no problems\n"), "{text}");
    assert!(text.contains("worker.sql.aggregate"), "{text}");

    // Pause: the status leads with it and exits 100; the metrics say so too.
    let output = evc(url, &["consumer", "pause", "worker.sql.aggregate"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        stdout(&output),
        "worker.sql.aggregate: paused, mode live (revision 1)\n"
    );
    let output = evc(url, &["status"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(100), "{text}");
    assert!(
        text.starts_with("problems (1):\n  worker.sql.aggregate: paused\n"),
        "{text}"
    );
    let output = evc(url, &["status", "--format", "prometheus"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(100));
    assert!(
        text.contains("evc_consumer_paused{consumer=\"worker.sql.aggregate\"} 1"),
        "{text}"
    );

    // Mode off, then back to running and live: no problems again.
    let output = evc(url, &["consumer", "mode", "worker.sql.aggregate", "off"]);
    assert_eq!(
        stdout(&output),
        "worker.sql.aggregate: paused, mode off (revision 2)\n"
    );
    evc(url, &["consumer", "resume", "worker.sql.aggregate"]);
    evc(url, &["consumer", "mode", "worker.sql.aggregate", "live"]);
    let output = evc(url, &["consumer", "show", "worker.sql.aggregate"]);
    assert_eq!(
        stdout(&output),
        "worker.sql.aggregate: running, mode live (revision 4)\n"
    );
    assert_eq!(evc(url, &["status"]).status.code(), Some(0));

    // An unknown consumer: exit 1, naming the deployed ones; nothing written.
    let output = evc(url, &["consumer", "pause", "worker.nope"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("consumer worker.nope is not deployed in this database (deployed: audit,"),
        "{stderr}"
    );

    // One event on a trace: delivered twice, one attempt dead-lettered.
    runtime.block_on(execute(
        url,
        &format!(
            "INSERT INTO evc_events (event_id, event_type, schema_version, order_key, \
                 producer_class, trace_id, parent_span_id, trace_flags, payload, payload_bytes) \
             VALUES ('01890a5d-ac96-774b-bcce-b302099a8057', 'iu.born', '1.0.0', 'k', 'dot', \
                 '{TRACE}', '00f067aa0ba902b7', '01', '{{}}', 2); \
             INSERT INTO evc_deliveries (event_id, consumer, event_seq, status, attempt) \
             SELECT event_id, c, seq, 'dead', 1 FROM evc_events, \
                 (VALUES ('audit'), ('worker.sql.aggregate')) AS v (c); \
             INSERT INTO evc_delivery_attempts (event_id, consumer, attempt, owner, \
                 fencing_token, started_at, finished_at, outcome, error_code, duration_ms) \
             VALUES ('01890a5d-ac96-774b-bcce-b302099a8057', 'audit', 1, 'w', 1, \
                 now(), now() + interval '1 second', 'dead', 'boom', 1000)"
        ),
    ));
    let output = evc(url, &["status"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(100));
    assert!(
        text.starts_with("problems (2):\n  audit: 1 dead-lettered, 0 quarantined\n"),
        "{text}"
    );
    let output = evc(url, &["timeline", TRACE]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].contains("  event     01890a5d-ac96-774b-bcce-b302099a8057  -  iu.born 1.0.0"),
        "{text}"
    );
    assert!(
        lines[1].contains("  delivery  ") && lines[1].contains("  audit  dead (attempt 1)"),
        "{text}"
    );
    assert!(
        lines[3].contains("  attempt   ") && lines[3].contains("  audit  dead (boom) (attempt 1)"),
        "{text}"
    );
    let output = evc(url, &["timeline", "0af7651916cd43dd8448eb211c80319c"]);
    assert_eq!(output.status.code(), Some(100));
    assert_eq!(
        stdout(&output),
        "nothing recorded for trace 0af7651916cd43dd8448eb211c80319c\n"
    );

    // No database named: a clear error, exit 1.
    let output = Command::new(env!("CARGO_BIN_EXE_evc"))
        .arg("status")
        .env_remove("DATABASE_URL")
        .output()
        .expect("evc runs");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("no database: pass --database-url or set DATABASE_URL")
    );
}
