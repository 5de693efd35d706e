//! The relay across a NATS restart, on both stores: a JetStream server of the test's own
//! (`nats-server -js` on a free port, its store in a temporary directory) is killed while the
//! relay publishes and events keep coming, then started again on the same port and store. The
//! relay tries again until the client reconnects, and the stream ends with every event once,
//! in feed order.
//!
//! The server binary is `EVC_NATS_SERVER`, else `nats-server` on the `PATH`, else
//! `/usr/sbin/nats-server`; without one the test skips with a message, and fails under
//! `CI=true`.

#[macro_use]
mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_nats::jetstream;
use evc::{Cursors, Store};
use evc_relay::{Relay, RelayConfig};
use support::{TestResult, TestStream, append, caught_up, event_ids, feed, message_ids};
use tokio::sync::oneshot;

on_both_stores!(a_nats_restart_mid_stream_loses_and_repeats_nothing);

/// A NATS server of the test's own, killed when dropped.
struct Server {
    binary: PathBuf,
    port: u16,
    store: tempfile::TempDir,
    child: Option<Child>,
}

impl Server {
    /// Starts a server on a free port, or `None` (the test skips) when there is no binary.
    fn start() -> Result<Option<Self>, support::BoxError> {
        let Some(binary) = server_binary() else {
            let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
            assert!(
                !ci,
                "CI=true and no nats-server binary (set EVC_NATS_SERVER)"
            );
            eprintln!("skipped: no nats-server binary found; set EVC_NATS_SERVER");
            return Ok(None);
        };
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut server = Self {
            binary,
            port,
            store: tempfile::tempdir()?,
            child: None,
        };
        server.run()?;
        Ok(Some(server))
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the process on the server's port and store.
    fn run(&mut self) -> Result<(), support::BoxError> {
        let child = Command::new(&self.binary)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.store.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// Kills the process (no shutdown of its own: a crash).
    fn kill(&mut self) -> Result<(), support::BoxError> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

fn server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("EVC_NATS_SERVER") {
        return Some(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nats-server"))
            .find(|candidate| candidate.is_file())
    });
    on_path.or_else(|| {
        let debian = Path::new("/usr/sbin/nats-server");
        debian.is_file().then(|| debian.to_owned())
    })
}

/// Connects to `url`, waiting for the server to listen (10 s at most); the client reconnects
/// by itself after a restart.
async fn connect(url: &str) -> Result<async_nats::Client, support::BoxError> {
    for _ in 0..100 {
        if let Ok(Ok(client)) =
            tokio::time::timeout(Duration::from_millis(500), async_nats::connect(url)).await
        {
            return Ok(client);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("NATS at {url} did not start").into())
}

async fn a_nats_restart_mid_stream_loses_and_repeats_nothing<S>(store: S) -> TestResult
where
    S: Cursors + Store + Clone + Send + Sync + 'static,
{
    let Some(mut server) = Server::start()? else {
        return Ok(());
    };
    let client = connect(&server.url()).await?;
    // Acknowledgements are awaited half a second: the outage below outlasts it, so publishes
    // fail rather than wait in the client's buffer for the reconnect.
    let mut context = jetstream::new(client);
    context.set_timeout(Duration::from_millis(500));
    let stream = TestStream {
        jetstream: context,
        name: "EVC_RESTART".to_owned(),
        prefix: "evc".to_owned(),
    };
    stream
        .jetstream
        .create_stream(jetstream::stream::Config {
            name: stream.name.clone(),
            subjects: vec!["evc.>".to_owned()],
            duplicate_window: Duration::from_secs(600),
            ..Default::default()
        })
        .await?;
    append(&store, 400).await?;
    let mut config = RelayConfig::new("jetstream", "r1")
        .batch(4)
        .poll(Duration::from_millis(10));
    config.max_backoff = Duration::from_millis(200);
    let (stop, stopped) = oneshot::channel::<()>();
    let relay = tokio::spawn(
        Relay::new(store.clone(), stream.jetstream.clone(), config).run(async move {
            let _ = stopped.await;
        }),
    );
    // Kill the server once the relay is under way, whatever it is doing then.
    for _ in 0..1_000 {
        let cursor = store.cursor("jetstream").await?;
        if cursor.is_some_and(|c| c.position > evc::FeedPosition::default()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill()?;
    // Events keep coming while the broker is away; the relay's rounds fail meanwhile.
    append(&store, 20).await?;
    tokio::time::sleep(Duration::from_millis(750)).await;
    append(&store, 20).await?;
    tokio::time::sleep(Duration::from_millis(750)).await;
    server.run()?;
    // The client reconnects on its own; the stream answers once JetStream has recovered it.
    let mut answered = false;
    for _ in 0..100 {
        if stream.jetstream.get_stream(&stream.name).await.is_ok() {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "the restarted server never served the stream");
    caught_up(&store, &stream, "jetstream", 440).await?;
    let _ = stop.send(());
    let stats = relay.await??;

    let events = feed(&store).await?;
    assert_eq!(events.len(), 440);
    let messages = stream.messages().await?;
    assert_eq!(
        message_ids(&messages),
        event_ids(&events),
        "every event once, in feed order, across the restart"
    );
    // An event the broker stored but could not acknowledge before it died comes back as a
    // duplicate when sent again: counted once, either way.
    assert!(stats.published <= 440, "{stats:?}");
    assert!(stats.published + stats.duplicates >= 440, "{stats:?}");
    Ok(())
}
