//! Which transport runs a dispatcher's consumers, chosen by configuration: outbox dispatch
//! (claims from the store) or JetStream (the generated durable consumers), for all consumers
//! or some (docs/relay.md, "Switching a consumer's transport").

use std::collections::BTreeSet;
use std::path::PathBuf;

use evc_runtime::{DispatchStats, Dispatcher, DispatcherHandle, Store};

use crate::consume::{ConsumeConfig, ConsumeError, Consuming, consume};
use crate::definitions::{Definitions, DefinitionsError};

/// The environment variable naming the transport: `outbox` (the default) or `jetstream`.
pub const TRANSPORT_VAR: &str = "EVC_TRANSPORT";
/// The environment variable listing the consumers that run on JetStream, comma-separated
/// (unset or empty: every consumer).
pub const JETSTREAM_CONSUMERS_VAR: &str = "EVC_JETSTREAM_CONSUMERS";
/// The environment variable holding the NATS server's address (default `127.0.0.1:4222`).
pub const NATS_URL_VAR: &str = "EVC_NATS_URL";
/// The environment variable holding the definitions file's path (default
/// `generated/jetstream.json`).
pub const DEFINITIONS_VAR: &str = "EVC_JETSTREAM_DEFINITIONS";

/// Where a dispatcher's consumers take their deliveries from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Transport {
    /// Claimed from the outbox ([`Dispatcher::start`]).
    #[default]
    Outbox,
    /// From their durable consumers on JetStream ([`consume`]).
    JetStream {
        /// The NATS server's address.
        url: String,
        /// The definitions `evc generate` wrote.
        definitions: PathBuf,
        /// The consumers that run on JetStream; the others stay on outbox dispatch. Empty:
        /// every consumer.
        consumers: BTreeSet<String>,
    },
}

/// Why the transport could not be read or started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// `EVC_TRANSPORT` holds neither `outbox` nor `jetstream`.
    #[error("{TRANSPORT_VAR}={0:?}: expected `outbox` or `jetstream`")]
    Unknown(String),
    /// The definitions could not be read.
    #[error(transparent)]
    Definitions(#[from] DefinitionsError),
    /// The NATS server could not be reached.
    #[error("cannot reach NATS at {url}: {source}")]
    Connect {
        /// The address.
        url: String,
        /// Cause.
        source: async_nats::ConnectError,
    },
    /// The consumers could not start on JetStream.
    #[error(transparent)]
    Consume(#[from] ConsumeError),
}

impl Transport {
    /// The transport the environment names ([`TRANSPORT_VAR`], [`JETSTREAM_CONSUMERS_VAR`],
    /// [`NATS_URL_VAR`], [`DEFINITIONS_VAR`]).
    ///
    /// # Errors
    /// [`TransportError::Unknown`] for a transport that is neither.
    pub fn from_env() -> Result<Self, TransportError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Self::parse(
            var(TRANSPORT_VAR).as_deref(),
            var(JETSTREAM_CONSUMERS_VAR).as_deref(),
            var(NATS_URL_VAR),
            var(DEFINITIONS_VAR).map(PathBuf::from),
        )
    }

    /// The transport `name` names (`None`: outbox), on JetStream for `consumers`
    /// (comma-separated; `None`: all), at `url` with the definitions at `definitions` (or
    /// their defaults).
    ///
    /// # Errors
    /// [`TransportError::Unknown`] for a transport that is neither.
    pub fn parse(
        name: Option<&str>,
        consumers: Option<&str>,
        url: Option<String>,
        definitions: Option<PathBuf>,
    ) -> Result<Self, TransportError> {
        match name.map(str::trim) {
            None | Some("outbox") => Ok(Self::Outbox),
            Some("jetstream") => Ok(Self::JetStream {
                url: url.unwrap_or_else(|| "127.0.0.1:4222".to_owned()),
                definitions: definitions
                    .unwrap_or_else(|| PathBuf::from("generated/jetstream.json")),
                consumers: consumers
                    .unwrap_or_default()
                    .split(',')
                    .map(str::trim)
                    .filter(|name| !name.is_empty())
                    .map(str::to_owned)
                    .collect(),
            }),
            Some(other) => Err(TransportError::Unknown(other.to_owned())),
        }
    }
}

/// Starts `dispatcher`'s consumers on `transport`: the ones it puts on JetStream from their
/// durable consumers, the rest on outbox dispatch.
///
/// # Errors
/// [`TransportError`] when the definitions cannot be read, NATS cannot be reached, or a
/// consumer has no durable consumer; nothing runs then.
pub async fn serve<S: Store>(
    dispatcher: Dispatcher<S>,
    transport: &Transport,
) -> Result<Serving, TransportError> {
    let Transport::JetStream {
        url,
        definitions,
        consumers,
    } = transport
    else {
        return Ok(Serving {
            outbox: Some(dispatcher.start()),
            jetstream: None,
        });
    };
    let (on_jetstream, on_outbox) =
        dispatcher.split(|name| consumers.is_empty() || consumers.contains(name));
    if on_jetstream.consumer_count() == 0 {
        return Ok(Serving {
            outbox: Some(on_outbox.start()),
            jetstream: None,
        });
    }
    let definitions = Definitions::read(definitions)?;
    let client =
        async_nats::connect(url.as_str())
            .await
            .map_err(|source| TransportError::Connect {
                url: without_credentials(url),
                source,
            })?;
    let jetstream = async_nats::jetstream::new(client);
    let consuming = consume(
        on_jetstream,
        &jetstream,
        &definitions,
        ConsumeConfig::default(),
    )
    .await?;
    let outbox = (on_outbox.consumer_count() > 0).then(|| on_outbox.start());
    Ok(Serving {
        outbox,
        jetstream: Some(consuming),
    })
}

/// `url` without the user and password or token it may carry (`nats://user:secret@host`),
/// for messages.
fn without_credentials(url: &str) -> String {
    match url.rsplit_once('@') {
        Some((before, host)) => {
            let scheme = before.split_once("://").map_or("", |(scheme, _)| scheme);
            if scheme.is_empty() {
                format!("***@{host}")
            } else {
                format!("{scheme}://***@{host}")
            }
        }
        None => url.to_owned(),
    }
}

/// Consumers running on their transports ([`serve`]).
#[derive(Debug)]
pub struct Serving {
    outbox: Option<DispatcherHandle>,
    jetstream: Option<Consuming>,
}

impl Serving {
    /// What they did so far, on both transports.
    pub fn stats(&self) -> DispatchStats {
        let outbox = self.outbox.as_ref().map(DispatcherHandle::stats);
        let jetstream = self.jetstream.as_ref().map(Consuming::stats);
        outbox.unwrap_or_default() + jetstream.unwrap_or_default()
    }

    /// Graceful shutdown of both ([`DispatcherHandle::shutdown`], [`Consuming::shutdown`]);
    /// returns the final counts.
    pub async fn shutdown(self) -> DispatchStats {
        let mut stats = DispatchStats::default();
        if let Some(jetstream) = self.jetstream {
            stats = stats + jetstream.shutdown().await;
        }
        if let Some(outbox) = self.outbox {
            stats = stats + outbox.shutdown().await;
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_are_read_from_their_settings() {
        assert_eq!(
            Transport::parse(None, Some("a"), None, None).ok(),
            Some(Transport::Outbox)
        );
        assert_eq!(
            Transport::parse(Some("outbox"), None, None, None).ok(),
            Some(Transport::Outbox)
        );
        let Ok(Transport::JetStream {
            url,
            definitions,
            consumers,
        }) = Transport::parse(Some("jetstream"), Some(" audit, ,b.c "), None, None)
        else {
            panic!("jetstream expected");
        };
        assert_eq!(url, "127.0.0.1:4222");
        assert_eq!(definitions, PathBuf::from("generated/jetstream.json"));
        assert_eq!(
            consumers.into_iter().collect::<Vec<_>>(),
            ["audit".to_owned(), "b.c".to_owned()]
        );
        assert!(matches!(
            Transport::parse(Some("kafka"), None, None, None),
            Err(TransportError::Unknown(name)) if name == "kafka"
        ));
    }

    #[test]
    fn credentials_in_an_address_are_not_shown() {
        assert_eq!(
            without_credentials("nats://app:s3cret@10.0.0.1:4222"),
            "nats://***@10.0.0.1:4222"
        );
        assert_eq!(without_credentials("tok3n@host:4222"), "***@host:4222");
        assert_eq!(without_credentials("127.0.0.1:4222"), "127.0.0.1:4222");
    }
}
