//! The JetStream stream the relay publishes to: created when missing, brought back to its
//! specification when it drifted (`evc relay --apply`), reported like the registry's parity.

use std::time::Duration;

use async_nats::jetstream::Context;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::GetStreamErrorKind;
use async_nats::jetstream::stream::{Config, StorageType};

/// What the relay needs of its stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamSpec {
    /// The stream's name.
    pub name: String,
    /// The subjects it takes: `<prefix>.>`.
    pub subjects: Vec<String>,
    /// How long the broker remembers a message id, so a relay that sends an event again
    /// within it stores nothing twice. It must outlast the longest a relay can be stopped
    /// between a publish and its cursor's move, and the time another relay waits for a lost
    /// holder's lease to run out.
    pub duplicate_window: Duration,
}

impl StreamSpec {
    /// The stream `name` taking every subject under `prefix`, remembering message ids for
    /// `duplicate_window`.
    pub fn new(name: impl Into<String>, prefix: &str, duplicate_window: Duration) -> Self {
        Self {
            name: name.into(),
            subjects: vec![format!("{prefix}.>")],
            duplicate_window,
        }
    }

    fn config(&self) -> Config {
        Config {
            name: self.name.clone(),
            subjects: self.subjects.clone(),
            duplicate_window: self.duplicate_window,
            storage: StorageType::File,
            ..Config::default()
        }
    }
}

/// What [`apply_stream`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamDrift {
    /// The stream was missing; it was created.
    Created,
    /// The stream differed; these settings were set back (`subjects`, `duplicate_window`).
    Updated(Vec<String>),
    /// The stream matched.
    InSync,
}

/// Why a stream could not be read, created or updated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// Reading the stream failed.
    #[error("reading stream {name}: {source}")]
    Get {
        /// The stream.
        name: String,
        /// Cause.
        source: async_nats::jetstream::context::GetStreamError,
    },
    /// Creating it failed.
    #[error("creating stream {name}: {source}")]
    Create {
        /// The stream.
        name: String,
        /// Cause.
        source: async_nats::jetstream::context::CreateStreamError,
    },
    /// Updating it failed.
    #[error("updating stream {name}: {source}")]
    Update {
        /// The stream.
        name: String,
        /// Cause.
        source: async_nats::jetstream::context::UpdateStreamError,
    },
}

/// Creates the stream of `spec` when missing and sets its subjects and duplicate window back
/// when they differ; other settings an operator chose (limits, replicas) are left alone.
///
/// # Errors
/// [`StreamError`] when the broker refuses or does not answer.
pub async fn apply_stream(
    jetstream: &Context,
    spec: &StreamSpec,
) -> Result<StreamDrift, StreamError> {
    let stream = match jetstream.get_stream(&spec.name).await {
        Ok(stream) => stream,
        Err(error)
            if matches!(error.kind(), GetStreamErrorKind::JetStream(e)
                if e.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
        {
            jetstream
                .create_stream(spec.config())
                .await
                .map_err(|source| StreamError::Create {
                    name: spec.name.clone(),
                    source,
                })?;
            return Ok(StreamDrift::Created);
        }
        Err(source) => {
            return Err(StreamError::Get {
                name: spec.name.clone(),
                source,
            });
        }
    };
    let mut config = stream.cached_info().config.clone();
    let mut differences = Vec::new();
    if config.subjects != spec.subjects {
        differences.push(format!(
            "subjects {:?}, not {:?}",
            config.subjects, spec.subjects
        ));
        config.subjects = spec.subjects.clone();
    }
    if config.duplicate_window != spec.duplicate_window {
        differences.push(format!(
            "duplicate_window {:?}, not {:?}",
            config.duplicate_window, spec.duplicate_window
        ));
        config.duplicate_window = spec.duplicate_window;
    }
    if differences.is_empty() {
        return Ok(StreamDrift::InSync);
    }
    jetstream
        .update_stream(&config)
        .await
        .map_err(|source| StreamError::Update {
            name: spec.name.clone(),
            source,
        })?;
    Ok(StreamDrift::Updated(differences))
}
