//! A PostgreSQL cluster of the benchmark's own whose commits are slow on purpose
//! (`PEER_BENCH_SLOW_COMMIT_US`), so the comparison also runs where commits are the cost, not
//! only on whatever day the machine's own server has.
//!
//! `initdb` into a directory under the system's temporary directory, then `pg_ctl start` on a
//! free port of 127.0.0.1 with `commit_delay` set to the given microseconds and
//! `commit_siblings = 0`: every WAL flush of a commit first waits that long (PostgreSQL's own
//! group-commit delay, which it applies only with `fsync` on), so a commit costs at least the
//! delay, and concurrent commits share a flush as they would on a slow disk. The server's
//! binaries come from `PEER_BENCH_PG_BIN` (default: `pg_config --bindir`). PostgreSQL refuses
//! to run as root: as root, its commands run as the user `postgres` (`runuser`). The cluster is
//! stopped and its directory removed when the value is dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::BenchResult;

/// A running cluster; stopped and removed on drop.
pub(crate) struct SlowCluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl SlowCluster {
    /// Creates and starts the cluster, each commit's flush delayed by `delay_us` microseconds
    /// (at most 100,000, PostgreSQL's bound).
    pub(crate) fn start(delay_us: u32) -> BenchResult<Self> {
        let bin = match std::env::var_os("PEER_BENCH_PG_BIN") {
            Some(bin) => PathBuf::from(bin),
            None => {
                let output = Command::new("pg_config").arg("--bindir").output()?;
                if !output.status.success() {
                    return Err("pg_config --bindir failed: set PEER_BENCH_PG_BIN".into());
                }
                PathBuf::from(String::from_utf8(output.stdout)?.trim())
            }
        };
        // A port nobody listens on now (released before the server binds it).
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = std::env::temp_dir().join(format!("evc-peers-cluster-{}", std::process::id()));
        let cluster = Self {
            bin,
            dir,
            port,
            as_postgres: is_root()?,
        };
        let dir = cluster.dir.display().to_string();
        cluster.run(
            "initdb",
            &[
                "-D",
                &dir,
                "--auth=trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        let options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={dir} \
             -c commit_delay={} -c commit_siblings=0 -c fsync=on -c synchronous_commit=on",
            delay_us.min(100_000)
        );
        let log = cluster.dir.join("server.log").display().to_string();
        cluster.run(
            "pg_ctl",
            &["-D", &dir, "-l", &log, "-w", "-o", &options, "start"],
        )?;
        Ok(cluster)
    }

    /// The URL of the cluster's `postgres` database, as its superuser.
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs the server's program `name` with `args` (as `postgres` when this process is root).
    fn run(&self, name: &str, args: &[&str]) -> BenchResult<()> {
        let program = self.bin.join(name);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        let output = command.args(args).current_dir(Path::new("/")).output()?;
        if !output.status.success() {
            return Err(format!(
                "{name} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )
            .into());
        }
        Ok(())
    }
}

/// Whether this process runs as root (`id -u` says 0).
fn is_root() -> BenchResult<bool> {
    let output = Command::new("id").arg("-u").output()?;
    Ok(String::from_utf8(output.stdout)?.trim() == "0")
}

impl Drop for SlowCluster {
    fn drop(&mut self) {
        let dir = self.dir.display().to_string();
        if let Err(error) = self.run("pg_ctl", &["-D", &dir, "-m", "fast", "-w", "stop"]) {
            eprintln!("could not stop the slow-commit cluster: {error}");
        }
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("could not remove {}: {error}", self.dir.display());
        }
    }
}
