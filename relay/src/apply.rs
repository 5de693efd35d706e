//! `evc relay --apply`: the stream and consumers of the definitions created when missing and
//! set back when they drifted, reported like the registry's parity.

use async_nats::jetstream::consumer::{FromConsumer, pull};
use async_nats::jetstream::context::{GetStreamError, GetStreamErrorKind};
use async_nats::jetstream::stream::{self, ConsumerError, ConsumerUpdateError, Stream};
use async_nats::jetstream::{Context, ErrorCode};

use crate::definitions::Definitions;

/// What [`apply`] found and did for one stream or consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// It was missing; it was created.
    Created,
    /// It differed; these settings were set back (`subjects [...], not [...]`).
    Updated(Vec<String>),
    /// It matched.
    InSync,
}

/// One stream or consumer [`apply`] looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// `stream EVC` or `consumer worker-audit-p0`.
    pub what: String,
    /// What was found and done.
    pub drift: Drift,
}

/// Why the stream or a consumer could not be read, created or updated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// Reading the stream failed.
    #[error("reading stream {name}: {source}")]
    GetStream {
        /// The stream.
        name: String,
        /// Cause.
        source: GetStreamError,
    },
    /// Creating or updating the stream failed.
    #[error("writing stream {name}: {source}")]
    WriteStream {
        /// The stream.
        name: String,
        /// Cause.
        source: async_nats::Error,
    },
    /// Reading a consumer failed.
    #[error("reading consumer {name}: {source}")]
    GetConsumer {
        /// The consumer.
        name: String,
        /// Cause.
        source: async_nats::jetstream::context::ConsumerInfoError,
    },
    /// Creating a consumer failed.
    #[error("creating consumer {name}: {source}")]
    CreateConsumer {
        /// The consumer.
        name: String,
        /// Cause.
        source: ConsumerError,
    },
    /// Updating a consumer failed.
    #[error("updating consumer {name}: {source}")]
    UpdateConsumer {
        /// The consumer.
        name: String,
        /// Cause.
        source: ConsumerUpdateError,
    },
    /// A consumer on the broker is not a pull consumer.
    #[error("consumer {name} is not a pull consumer: {source}")]
    ReadConsumer {
        /// The consumer.
        name: String,
        /// Cause.
        source: async_nats::Error,
    },
    /// A consumer differs in a setting JetStream does not change in place.
    #[error(
        "consumer {name} has {setting} {found}, not {wanted}, which JetStream cannot change in \
         place: delete the consumer (`nats consumer rm {stream} {name}`) and apply again"
    )]
    Immutable {
        /// The stream.
        stream: String,
        /// The consumer.
        name: String,
        /// The setting.
        setting: &'static str,
        /// What the broker has.
        found: String,
        /// What the definitions say.
        wanted: String,
    },
    /// A consumer of the definitions has no durable name (not written by `evc generate`).
    #[error("a consumer of the definitions has no durable name")]
    Unnamed,
}

/// Creates the stream and every consumer of `definitions` that is missing, and sets back the
/// settings the definitions own where they drifted; settings an operator chose (limits,
/// replicas) are left alone. Consumers the definitions do not name are left alone too. On a
/// server before 2.10 the consumers take the form [`Definitions::for_server`] gives them.
///
/// # Errors
/// [`ApplyError`] when the broker refuses or does not answer, or a consumer differs in a
/// setting that cannot change in place; what was applied before stays applied, and `each`
/// was told of it as it happened.
pub async fn apply(
    jetstream: &Context,
    definitions: &Definitions,
    mut each: impl FnMut(&Applied),
) -> Result<Vec<Applied>, ApplyError> {
    let version = jetstream.client().server_info().version;
    let definitions = &definitions.clone().for_server(&version);
    let (stream, drift) = apply_stream(jetstream, &definitions.stream).await?;
    let first = Applied {
        what: format!("stream {}", definitions.stream.name),
        drift,
    };
    each(&first);
    let mut applied = vec![first];
    for consumer in &definitions.consumers {
        let drift = apply_consumer(&stream, consumer).await?;
        let done = Applied {
            what: format!(
                "consumer {}",
                consumer.durable_name.as_deref().unwrap_or_default()
            ),
            drift,
        };
        each(&done);
        applied.push(done);
    }
    Ok(applied)
}

/// Creates the stream `wanted` when missing and sets its subjects, duplicate window and
/// description back when they differ.
///
/// # Errors
/// [`ApplyError`] when the broker refuses or does not answer.
pub async fn apply_stream(
    jetstream: &Context,
    wanted: &stream::Config,
) -> Result<(Stream, Drift), ApplyError> {
    let name = &wanted.name;
    let write = |source: async_nats::Error| ApplyError::WriteStream {
        name: name.clone(),
        source,
    };
    let stream = match jetstream.get_stream(name).await {
        Ok(stream) => stream,
        Err(error)
            if matches!(error.kind(), GetStreamErrorKind::JetStream(e)
                if e.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
        {
            let stream = jetstream
                .create_stream(wanted.clone())
                .await
                .map_err(|error| write(error.into()))?;
            return Ok((stream, Drift::Created));
        }
        Err(source) => {
            return Err(ApplyError::GetStream {
                name: name.clone(),
                source,
            });
        }
    };
    let mut config = stream.cached_info().config.clone();
    let mut differences = Vec::new();
    set_back(
        &mut differences,
        "subjects",
        &mut config.subjects,
        &wanted.subjects,
    );
    set_back(
        &mut differences,
        "duplicate_window",
        &mut config.duplicate_window,
        &wanted.duplicate_window,
    );
    set_back(
        &mut differences,
        "description",
        &mut config.description,
        &wanted.description,
    );
    if differences.is_empty() {
        return Ok((stream, Drift::InSync));
    }
    jetstream
        .update_stream(&config)
        .await
        .map_err(|error| write(error.into()))?;
    let stream = jetstream
        .get_stream(name)
        .await
        .map_err(|source| ApplyError::GetStream {
            name: name.clone(),
            source,
        })?;
    Ok((stream, Drift::Updated(differences)))
}

/// Creates the durable consumer `wanted` on `stream` when missing and sets back the settings
/// the definitions own when they differ.
///
/// # Errors
/// [`ApplyError`] when the broker refuses, or the consumer's acknowledgement or delivery
/// policy differs (JetStream changes neither in place).
pub async fn apply_consumer(stream: &Stream, wanted: &pull::Config) -> Result<Drift, ApplyError> {
    let name = wanted.durable_name.clone().ok_or(ApplyError::Unnamed)?;
    let info = match stream.consumer_info(&name).await {
        Ok(info) => info,
        Err(error)
            if matches!(
                error.kind(),
                async_nats::jetstream::context::ConsumerInfoErrorKind::NotFound
            ) =>
        {
            stream
                .create_consumer(wanted.clone())
                .await
                .map_err(|source| ApplyError::CreateConsumer {
                    name: name.clone(),
                    source,
                })?;
            return Ok(Drift::Created);
        }
        Err(source) => return Err(ApplyError::GetConsumer { name, source }),
    };
    let found = &info.config;
    let immutable = |setting, found: String, wanted: String| ApplyError::Immutable {
        stream: info.stream_name.clone(),
        name: name.clone(),
        setting,
        found,
        wanted,
    };
    if found.ack_policy != wanted.ack_policy {
        return Err(immutable(
            "ack_policy",
            format!("{:?}", found.ack_policy),
            format!("{:?}", wanted.ack_policy),
        ));
    }
    if found.deliver_policy != wanted.deliver_policy {
        return Err(immutable(
            "deliver_policy",
            format!("{:?}", found.deliver_policy),
            format!("{:?}", wanted.deliver_policy),
        ));
    }
    // Everything else stays as the broker holds it (an operator's choices included).
    let mut config =
        pull::Config::try_from_consumer_config(info.config.clone()).map_err(|source| {
            ApplyError::ReadConsumer {
                name: name.clone(),
                source,
            }
        })?;
    let mut differences = Vec::new();
    set_back(
        &mut differences,
        "description",
        &mut config.description,
        &wanted.description,
    );
    set_back(
        &mut differences,
        "ack_wait",
        &mut config.ack_wait,
        &wanted.ack_wait,
    );
    set_back(
        &mut differences,
        "max_deliver",
        &mut config.max_deliver,
        &wanted.max_deliver,
    );
    set_back(
        &mut differences,
        "filter_subject",
        &mut config.filter_subject,
        &wanted.filter_subject,
    );
    set_back(
        &mut differences,
        "filter_subjects",
        &mut config.filter_subjects,
        &wanted.filter_subjects,
    );
    set_back(
        &mut differences,
        "max_ack_pending",
        &mut config.max_ack_pending,
        &wanted.max_ack_pending,
    );
    // The server adds metadata of its own (`_nats.*`); only evc's keys are compared.
    for (key, value) in &wanted.metadata {
        let mut current = config.metadata.get(key).cloned();
        set_back(
            &mut differences,
            &format!("metadata {key}"),
            &mut current,
            &Some(value.clone()),
        );
        if let Some(current) = current {
            config.metadata.insert(key.clone(), current);
        }
    }
    if differences.is_empty() {
        return Ok(Drift::InSync);
    }
    stream
        .update_consumer(config)
        .await
        .map_err(|source| ApplyError::UpdateConsumer { name, source })?;
    Ok(Drift::Updated(differences))
}

/// Notes `setting` and sets `found` to `wanted` when they differ.
fn set_back<T: PartialEq + Clone + std::fmt::Debug>(
    differences: &mut Vec<String>,
    setting: &str,
    found: &mut T,
    wanted: &T,
) {
    if found != wanted {
        differences.push(format!("{setting} {found:?}, not {wanted:?}"));
        *found = wanted.clone();
    }
}
