//! `evc relay`: publishes the outbox's event feed to NATS JetStream under a fenced cursor, a
//! thin shell over evc-relay (docs/relay.md).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use evc_relay::{Definitions, Drift, HeaderStyle, Relay, RelayConfig, apply};
use evc_runtime::{PgStore, Role};

use crate::operate::{Database, Outbox, open_sqlite, pool};

/// What `evc relay` was asked.
pub(crate) struct RelayArgs<'a> {
    pub(crate) nats_url: &'a str,
    pub(crate) definitions: &'a Path,
    pub(crate) cursor: &'a str,
    pub(crate) owner: Option<&'a str>,
    pub(crate) subject_prefix: Option<&'a str>,
    pub(crate) stream: Option<&'a str>,
    pub(crate) cloudevents: bool,
    pub(crate) apply: bool,
}

/// Relays until Ctrl-C (or SIGTERM); with `apply`, brings the stream to its specification and
/// exits (100 when it had drifted).
pub(crate) fn relay(args: &RelayArgs<'_>, database: &Database) -> anyhow::Result<ExitCode> {
    // A tenant's session would see only its own events and move the shared cursor past every
    // other tenant's, which would then never be published.
    if database.tenant().is_some() {
        anyhow::bail!("evc relay publishes every tenant's events: drop --tenant");
    }
    let mut definitions = Definitions::read(args.definitions)?;
    if let Some(stream) = args.stream {
        definitions = definitions.with_stream(stream)?;
    }
    if let Some(prefix) = args.subject_prefix {
        definitions = definitions.with_subject_prefix(prefix)?;
    }
    // A relay that stalls says why on standard error, round after round (its messages name
    // the cursor and the error, never a payload).
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_ansi(false)
        .with_target(false)
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let shown = without_credentials(args.nats_url);
    let shown = shown.as_str();
    runtime.block_on(async move {
        let client = tokio::time::timeout(Duration::from_secs(10), async_nats::connect(args.nats_url))
            .await
            .map_err(|_| anyhow::anyhow!("NATS at {shown} did not answer in 10 s"))?
            .with_context(|| format!("cannot connect to NATS at {shown}"))?;
        let jetstream = async_nats::jetstream::new(client);
        if args.apply {
            // Each line as it is done: a later failure leaves what was printed applied.
            let applied = apply(&jetstream, &definitions, |applied| match &applied.drift {
                Drift::InSync => println!("{}: in sync", applied.what),
                Drift::Created => println!("{}: created", applied.what),
                Drift::Updated(differences) => {
                    println!("{}: drifted, set back:", applied.what);
                    for difference in differences {
                        println!("  {difference}");
                    }
                }
            })
            .await?;
            let drifted = applied
                .iter()
                .any(|a| matches!(a.drift, Drift::Updated(_)));
            return Ok(if drifted {
                ExitCode::from(crate::EXIT_FINDINGS)
            } else {
                ExitCode::SUCCESS
            });
        }
        let owner = args.owner.map_or_else(default_owner, str::to_owned);
        let config = RelayConfig::new(args.cursor, owner.clone())
            .settings(&definitions.relay)
            .header_style(if args.cloudevents {
                HeaderStyle::CloudEvents
            } else {
                HeaderStyle::Evc
            });
        let announce = || {
            eprintln!(
                "evc relay: {owner} relays cursor {} to {}.> on {shown} (Ctrl-C stops)",
                args.cursor, definitions.relay.subject_prefix
            );
        };
        let stats = match database.outbox()? {
            Outbox::Postgres(options) => {
                // The relay reads payloads and moves its cursor: the dispatcher's job.
                let pool = pool(&options, 2, Role::Dispatcher).await?;
                let registry = evc_runtime::deployed_registry(&pool)
                    .await
                    .context("cannot read the deployed registry (are the evc migrations applied?)")?;
                let store = PgStore::new(pool.clone(), registry)
                    .context("the deployed registry does not load")?;
                announce();
                let stats = Relay::new(store, jetstream, config)
                    .run(crate::serve::shutdown())
                    .await;
                pool.close().await;
                stats?
            }
            Outbox::Sqlite(location, scope) => {
                let store = open_sqlite(&location, &scope, 2).await?;
                announce();
                let stats = Relay::new(store.clone(), jetstream, config)
                    .run(crate::serve::shutdown())
                    .await;
                store.close().await;
                stats?
            }
        };
        eprintln!(
            "evc relay: stopped (published {}, duplicates dropped by the broker {}, failed rounds {})",
            stats.published, stats.duplicates, stats.failures
        );
        Ok(ExitCode::SUCCESS)
    })
}

/// `HOST/PID`: unique per process, so two relays never share an owner.
fn default_owner() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    format!("{host}/{}", std::process::id())
}

/// `url` without a user or password (`nats://user:secret@host:4222` as `nats://host:4222`), to
/// print.
fn without_credentials(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").map_or(("", url), |(s, r)| (s, r));
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    if scheme.is_empty() {
        host.to_owned()
    } else {
        format!("{scheme}://{host}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_urls_hold_no_credentials() {
        assert_eq!(
            without_credentials("nats://ada:s3cret@nats.example:4222"),
            "nats://nats.example:4222"
        );
        assert_eq!(without_credentials("tok@127.0.0.1:4222"), "127.0.0.1:4222");
        assert_eq!(
            without_credentials("nats://127.0.0.1:4222"),
            "nats://127.0.0.1:4222"
        );
    }
}
