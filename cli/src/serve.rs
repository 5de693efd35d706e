//! `evc serve`: the governance API and the operations endpoints over HTTP, on either store, a
//! thin shell over evc-serve (docs/serve.md).

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use evc_codegen::format::keyword;
use evc_codegen::names::glob_matches;
use evc_codegen::{ContractSet, LoadError};
use evc_runtime::{PgStore, Role};
use evc_serve::{Catalog, GatewayConfig, PgStores, Tokens, Topic, TopicKey};

use crate::operate::{Database, Outbox, open_sqlite, pool};

/// Connections the service keeps to the outbox.
const CONNECTIONS: u32 = 4;

/// Serves until Ctrl-C (or SIGTERM), then lets the requests in flight finish.
pub(crate) fn serve(
    listen: SocketAddr,
    tokens: &Path,
    contracts: Option<&Path>,
    database: &Database,
) -> anyhow::Result<ExitCode> {
    let (topics, catalog) = match contracts {
        Some(dir) => from_contracts(dir)?,
        None => (Vec::new(), Catalog::default()),
    };
    let gateway = GatewayConfig::new(topics);
    let text = std::fs::read_to_string(tokens)
        .with_context(|| format!("cannot read the tokens file {}", tokens.display()))?;
    let tokens = Tokens::parse(&text)
        .with_context(|| format!("the tokens file {} is not usable", tokens.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        // The address first: a port in use is refused before any store is opened.
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let address = listener
            .local_addr()
            .context("cannot read the listening address")?;
        let outbox = open(database).await?;
        eprintln!(
            "evc serve: listening on http://{address} with {} realtime topic{} (Ctrl-C stops)",
            gateway.topics.len(),
            if gateway.topics.len() == 1 { "" } else { "s" }
        );
        let served = evc_serve::run(
            listener,
            outbox.clone(),
            tokens,
            gateway,
            catalog,
            shutdown(),
        )
        .await;
        close(outbox).await;
        served.context("the server stopped")?;
        eprintln!("evc serve: stopped");
        Ok(ExitCode::SUCCESS)
    })
}

/// The realtime topics of the contracts in `dir` (each pattern resolved to the event types it
/// matches) and each event type's compatibility mode.
fn from_contracts(dir: &Path) -> anyhow::Result<(Vec<Topic>, Catalog)> {
    let set = match ContractSet::load(dir) {
        Ok(loaded) => loaded.contracts,
        Err(LoadError::Invalid { diagnostics, .. }) => anyhow::bail!(
            "the contracts in {} do not pass `evc check` ({} problem{}): run `evc check {}`",
            dir.display(),
            diagnostics.len(),
            if diagnostics.len() == 1 { "" } else { "s" },
            dir.display()
        ),
        Err(error) => {
            return Err(error)
                .with_context(|| format!("cannot load the contracts in {}", dir.display()));
        }
    };
    let catalog = Catalog::new(
        set.events
            .iter()
            .map(|(name, event)| (name.clone(), keyword(&event.compat)))
            .collect(),
    );
    let topics = set
        .topics
        .values()
        .map(|topic| {
            let key = topic
                .key
                .as_deref()
                .map(str::parse::<TopicKey>)
                .transpose()
                .with_context(|| format!("topic `{}`", topic.name))?;
            Ok(Topic {
                name: topic.name.clone(),
                description: topic.description.clone(),
                event_types: set
                    .events
                    .keys()
                    .filter(|event| topic.events.iter().any(|p| glob_matches(p, event)))
                    .cloned()
                    .collect(),
                key,
                filter: topic.filter.clone(),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((topics, catalog))
}

/// The outbox `database` names: on PostgreSQL a store per API role, each on a pool of its job's
/// database role; on SQLite the file's store.
async fn open(database: &Database) -> anyhow::Result<evc_serve::Outbox> {
    match database.outbox()? {
        Outbox::Postgres(options) => {
            let reader = pool(&options, CONNECTIONS, Role::Reader).await?;
            let registry = evc_runtime::deployed_registry(&reader)
                .await
                .context("cannot read the deployed registry (are the evc migrations applied?)")?;
            let store =
                |pool| PgStore::new(pool, registry).context("the deployed registry does not load");
            Ok(evc_serve::Outbox::Postgres(Box::new(PgStores {
                reader: store(reader)?,
                // The realtime gateway reads the feed through the operator's pool too.
                operator: store(pool(&options, CONNECTIONS, Role::Operator).await?)?,
                approver: store(pool(&options, 2, Role::Approver).await?)?,
            })))
        }
        Outbox::Sqlite(location, scope) => Ok(evc_serve::Outbox::Sqlite(
            open_sqlite(&location, &scope, CONNECTIONS).await?,
        )),
    }
}

/// Closes every pool of `outbox` (a SQLite file's lock is released with its store).
async fn close(outbox: evc_serve::Outbox) {
    match outbox {
        evc_serve::Outbox::Postgres(stores) => {
            for store in [&stores.reader, &stores.operator, &stores.approver] {
                store.pool().close().await;
            }
        }
        evc_serve::Outbox::Sqlite(store) => store.close().await,
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub(crate) async fn shutdown() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
