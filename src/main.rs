//! The repository's own user of evc: `cargo run` tours the reference contracts end to end on an
//! embedded SQLite outbox (no service needed): append, dispatch, dead-letter, replay.
//!
//! ```sh
//! cargo run                                   # SQLite file in the temp directory
//! cargo run -- --database-url sqlite:tour.db  # a SQLite file of your choice
//! cargo run -- --database-url postgres://root@localhost/test
//! ```

use evc_reference::tour;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let mut url = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--database-url" => url = args.next(),
            "-h" | "--help" => {
                println!(
                    "usage: cargo run [-- --database-url sqlite:FILE|postgres://...]\n\
                     Tours the reference contracts end to end ({}).",
                    env!("EVC_CONTRACT_SUMMARY")
                );
                return std::process::ExitCode::SUCCESS;
            }
            other => {
                eprintln!("error: unknown argument {other} (try --help)");
                return std::process::ExitCode::from(2);
            }
        }
    }
    println!(
        "evc tour: reference contracts checked at build time ({})",
        env!("EVC_CONTRACT_SUMMARY")
    );
    let mut say = |line: String| println!("{line}");
    let result = match url.as_deref() {
        Some(url) if url.starts_with("postgres:") || url.starts_with("postgresql:") => {
            tour::on_postgres(url, &mut say).await
        }
        Some(location) => tour::on_sqlite(location, &mut say).await,
        None => {
            let dir = std::env::temp_dir().join("evc-tour");
            let file = dir.join("outbox.db");
            // A fresh outbox each run; the file stays for inspection until the next one.
            for stale in [
                file.clone(),
                dir.join("outbox.db-wal"),
                dir.join("outbox.db-shm"),
            ] {
                let _ = std::fs::remove_file(stale);
            }
            match std::fs::create_dir_all(&dir) {
                Ok(()) => tour::on_sqlite(&file.to_string_lossy(), &mut say).await,
                Err(error) => Err(format!("cannot create {}: {error}", dir.display()).into()),
            }
        }
    };
    match result {
        Ok(report) => {
            println!(
                "done: {} events published, {} acked, {} dead-lettered and replayed, {} open at the end",
                report.published.len(),
                report.acked + report.acked_after_replay,
                report.dead.len(),
                report.open_at_end
            );
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
