//! The operator commands against a real server: `evc status` (problems first, exit 100 with
//! problems, Prometheus output), `evc consumer pause | resume | mode | show` on the consumers the
//! database's registry mirror lists, `evc timeline`, `evc dlq list`, `evc replay` and
//! `evc migrate`. The database gets this repository's generated migrations, so its deployed
//! consumers are the reference contracts'.

use std::path::Path;
use std::process::{Command, Output};
use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

const DEFAULT_URL: &str = "postgres://root@localhost/test";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
/// An iu.born 1.0.0 payload, canonical JSON.
const BORN: &str = r#"{"born_at":"2026-01-01T00:00:00Z","governance_state":"draft","iu_unit_id":"01890a5d-ac96-774b-bcce-b302099a8057","iu_version_id":"01890a5d-ac96-774b-bcce-b302099a8058"}"#;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A fresh database, with the generated migrations applied when `migrated`; `None` (after
/// saying why) when the server is unreachable outside CI.
async fn create_database(name: &str, migrated: bool) -> Option<String> {
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
    if !migrated {
        return Some(options.to_url_lossy().to_string());
    }
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
    let Some(url) = runtime.block_on(create_database(&name, true)) else {
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

    // One event on a trace: delivered twice, one attempt dead-lettered. Its payload passes
    // the deployed iu.born 1.0.0 schema (replay checks it again).
    let born_bytes = BORN.len();
    runtime.block_on(execute(
        url,
        &format!(
            "INSERT INTO evc_events (event_id, event_type, schema_version, order_key, \
                 producer_class, trace_id, parent_span_id, trace_flags, payload, payload_bytes) \
             VALUES ('01890a5d-ac96-774b-bcce-b302099a8057', 'iu.born', '1.0.0', 'k', 'dot', \
                 '{TRACE}', '00f067aa0ba902b7', '01', '{BORN}', {born_bytes}); \
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

    // The dead letters, then their replay: dry run, refusals, apply, the same key again.
    let output = evc(url, &["dlq", "list", "audit"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let fields: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        fields[..7],
        [
            "01890a5d-ac96-774b-bcce-b302099a8057",
            "0",
            "dead",
            "1",
            "-",
            "iu.born",
            "1.0.0"
        ],
        "{text}"
    );
    let output = evc(url, &["replay", "audit", "--dry-run"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with(
            "replay plan for audit: 1 deliveries
"
        ),
        "{text}"
    );
    let digest = text
        .lines()
        .find_map(|line| line.strip_prefix("digest: "))
        .expect("the dry run prints the digest")
        .to_owned();
    assert_eq!(digest.len(), 64);
    let apply = |reason: &str, key: &str| {
        evc(
            url,
            &[
                "replay",
                "audit",
                "--apply",
                "--digest",
                &digest,
                "--reason",
                reason,
                "--approval",
                "CHG-1",
                "--idempotency-key",
                key,
            ],
        )
    };
    let output = apply(&"x".repeat(501), "k-1");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(
            "replay refused, nothing written: the replay reason has 501 characters; at most 500"
        ),
        "{output:?}"
    );
    // `--apply` without its approval fields is a usage error.
    let output = evc(url, &["replay", "audit", "--apply", "--digest", &digest]);
    assert_eq!(output.status.code(), Some(2));
    let output = apply("audit sink fixed", "k-1");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        stdout(&output),
        "replay 1: 1 new deliveries of audit, pending
"
    );
    let output = apply("audit sink fixed", "k-1");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        stdout(&output),
        "replay 1 was applied before under this idempotency key (1 deliveries); nothing new
"
    );
    let output = evc(url, &["dlq", "list", "audit"]);
    assert_eq!(
        stdout(&output),
        "audit: no dead-lettered or quarantined deliveries
"
    );
    let output = evc(url, &["timeline", TRACE]);
    assert!(
        stdout(&output).contains("  replay    01890a5d-ac96-774b-bcce-b302099a8057  audit  replay 1 of generation 0 from dead (approval CHG-1)"),
        "{}",
        stdout(&output)
    );
    // worker.sql.aggregate does not subscribe to iu.born: its dry run says apply will refuse,
    // and apply does.
    let output = evc(url, &["replay", "worker.sql.aggregate", "--dry-run"]);
    let text = stdout(&output);
    assert!(
        text.contains("iu.born 1.0.0 (no longer accepted)"),
        "{text}"
    );
    assert!(
        text.contains(
            "1 of them carry a version the consumer no longer accepts: apply will refuse"
        ),
        "{text}"
    );
    let digest = text
        .lines()
        .find_map(|line| line.strip_prefix("digest: "))
        .expect("digest")
        .to_owned();
    let output = evc(
        url,
        &[
            "replay",
            "worker.sql.aggregate",
            "--apply",
            "--digest",
            &digest,
            "--reason",
            "r",
            "--approval",
            "CHG-2",
            "--idempotency-key",
            "k-2",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(
            "consumer worker.sql.aggregate no longer accepts iu.born 1.0.0 (event 01890a5d-ac96-774b-bcce-b302099a8057; no longer subscribed)"
        ),
        "{output:?}"
    );

    // A dead letter whose payload the deployed schema refuses: the dry run names it with its
    // reason code, and apply refuses.
    runtime.block_on(execute(
        url,
        "INSERT INTO evc_events (event_id, event_type, schema_version, order_key, \
             producer_class, payload, payload_bytes) \
         VALUES ('01890a5d-ac96-774b-bcce-b302099a8059', 'iu.born', '1.0.0', 'k', 'dot', \
             '{\"iu_unit_id\":\"not-a-uuid\"}', 25); \
         INSERT INTO evc_deliveries (event_id, consumer, event_seq, status, attempt) \
         SELECT event_id, 'audit', seq, 'dead', 1 FROM evc_events \
         WHERE event_id = '01890a5d-ac96-774b-bcce-b302099a8059'",
    ));
    let output = evc(url, &["replay", "audit", "--dry-run"]);
    let text = stdout(&output);
    assert!(
        text.contains(
            "1 of them cannot be replayed: apply will refuse (leave them out: --event for the others)\n  01890a5d-ac96-774b-bcce-b302099a8059  generation 0  schema_invalid\n"
        ),
        "{text}"
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

#[test]
fn migrate_applies_each_migration_once_and_reports_progress() {
    let name = format!("evc_cli_migrate_{}", std::process::id());
    let runtime = runtime();
    let Some(url) = runtime.block_on(create_database(&name, false)) else {
        return;
    };
    let outcome =
        std::panic::catch_unwind(|| {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
            let dir = dir.to_str().expect("utf-8 path");
            let files = std::fs::read_dir(dir).expect("migrations").count();

            let output = evc(&url, &["migrate", "--dir", dir, "--status"]);
            let text = stdout(&output);
            assert_eq!(output.status.code(), Some(0), "{text}");
            assert!(
                text.lines().next().is_some_and(|line| line
                    .ends_with(&format!(": {files} migrations, 0 applied, {files} pending"))),
                "{text}"
            );
            assert!(text.contains("  pending  0001  evc runtime\n"), "{text}");

            let output = evc(&url, &["migrate", "--dir", dir]);
            let text = stdout(&output);
            assert_eq!(output.status.code(), Some(0), "{text}");
            assert!(
                text.contains(&format!("[1/{files}] 0001 evc runtime ...")),
                "{text}"
            );
            assert!(text.contains(&format!("[{files}/{files}] ")), "{text}");
            assert!(
                text.ends_with(&format!("applied {files} migrations\n")),
                "{text}"
            );

            // The evc tables are there: the operator commands work on the database.
            assert_eq!(evc(&url, &["status"]).status.code(), Some(0));

            let output = evc(&url, &["migrate", "--dir", dir]);
            let text = stdout(&output);
            assert!(
                text.ends_with(&format!("{files} applied, 0 pending\nup to date\n")),
                "{text}"
            );

            // A directory without migrations: a clear error.
            let output = evc(&url, &["migrate", "--dir", "/nonexistent/migrations"]);
            assert_eq!(output.status.code(), Some(1));
            assert!(
                String::from_utf8_lossy(&output.stderr)
                    .contains("cannot read the migrations in /nonexistent/migrations"),
                "{output:?}"
            );
        });
    runtime.block_on(drop_database(&name));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn dispatch_hands_each_delivery_to_its_command_and_settles_it_by_exit_status() {
    let name = format!("evc_cli_dispatch_{}", std::process::id());
    let runtime = runtime();
    let Some(url) = runtime.block_on(create_database(&name, true)) else {
        return;
    };
    let outcome = std::panic::catch_unwind(|| {
        // Three events: audit (transactional) writes each payload to a file; the leased
        // worker.render.mout_view fails for good (exit 3); worker.notification.iu quarantines
        // (exit 65).
        runtime.block_on(execute(
            &url,
            "INSERT INTO evc_events (event_id, event_type, schema_version, order_key, \
                 producer_class, payload, payload_bytes) \
             SELECT ('01890a5d-ac96-774b-bcce-00000000000' || g)::uuid, 'iu.born', '1.0.0', \
                 'k' || g, 'dot', jsonb_build_object('n', g), 8 \
             FROM generate_series(1, 3) AS g; \
             INSERT INTO evc_deliveries (event_id, consumer, event_seq, order_key) \
             SELECT event_id, 'audit', seq, NULL FROM evc_events; \
             INSERT INTO evc_deliveries (event_id, consumer, event_seq, order_key) \
             SELECT event_id, 'worker.render.mout_view', seq, order_key FROM evc_events \
             WHERE payload->>'n' = '1'; \
             INSERT INTO evc_deliveries (event_id, consumer, event_seq, order_key) \
             SELECT event_id, 'worker.notification.iu', seq, NULL FROM evc_events \
             WHERE payload->>'n' = '2'",
        ));
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("dispatch.yaml");
        std::fs::write(
            &config,
            "defaults:\n  poll_interval: 50ms\n  workers: 2\nconsumers:\n  \
             audit:\n    command: [sh, -c, 'cat > \"$OUT/$EVC_EVENT_ID.$EVC_ATTEMPT.json\"']\n  \
             worker.render.mout_view:\n    command: [sh, -c, 'exit 3']\n  \
             worker.notification.iu:\n    command: [sh, -c, 'exit 65']\n",
        )
        .expect("config");
        let output = Command::new(env!("CARGO_BIN_EXE_evc"))
            .args([
                "dispatch",
                "--exit-when-idle",
                "--progress",
                "0s",
                "--config",
            ])
            .arg(&config)
            .args(["--database-url", &url])
            .env("OUT", dir.path())
            .output()
            .expect("evc runs");
        let text = stdout(&output);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        assert!(
            text.contains(": 3 acked (")
                && text.contains(", 0 retried, 1 dead, 1 quarantined, 0 stale"),
            "{text}"
        );
        // Each payload reached its command once, on standard input.
        for n in 1..=3 {
            let file = dir
                .path()
                .join(format!("01890a5d-ac96-774b-bcce-00000000000{n}.1.json"));
            let payload: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&file).expect("payload file"))
                    .expect("JSON");
            assert_eq!(payload, serde_json::json!({"n": n}));
        }
        // The delivery rows left, and the acked ones' attempt rows (an ack deletes its delivery).
        let settled: Vec<(String, String, Option<String>)> = runtime.block_on(async {
            let mut connection = PgConnection::connect(&url).await.expect("connect");
            sqlx::query_as(
                "SELECT consumer, status, last_error_code FROM evc_deliveries \
                 UNION ALL \
                 SELECT consumer, outcome, error_code FROM evc_delivery_attempts \
                 WHERE outcome = 'acked' \
                 ORDER BY 1, 2",
            )
            .fetch_all(&mut connection)
            .await
            .expect("deliveries")
        });
        assert_eq!(
            settled,
            [
                ("audit".to_owned(), "acked".to_owned(), None),
                ("audit".to_owned(), "acked".to_owned(), None),
                ("audit".to_owned(), "acked".to_owned(), None),
                (
                    "worker.notification.iu".to_owned(),
                    "quarantined".to_owned(),
                    Some("exit_65".to_owned())
                ),
                (
                    "worker.render.mout_view".to_owned(),
                    "dead".to_owned(),
                    Some("exit_3".to_owned())
                ),
            ]
        );

        // A consumer the database does not deploy, and a malformed file: clear errors.
        std::fs::write(
            &config,
            "consumers:\n  worker.nope:\n    command: [/bin/true]\n",
        )
        .expect("config");
        let output = evc(
            &url,
            &["dispatch", "--config", config.to_str().expect("utf-8")],
        );
        assert_eq!(output.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&output.stderr)
                .contains("consumer worker.nope is not deployed in this database"),
            "{output:?}"
        );
        std::fs::write(&config, "consumers: [oops\n").expect("config");
        let output = evc(
            &url,
            &["dispatch", "--config", config.to_str().expect("utf-8")],
        );
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("dispatch.yaml:"), "{stderr}");
    });
    runtime.block_on(drop_database(&name));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
