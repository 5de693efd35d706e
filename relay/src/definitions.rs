//! The stream and consumers `evc generate` defines for the relay (`generated/jetstream.json`),
//! read back: the JetStream API's own configuration types, and the relay's own settings.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::consumer::pull;
use async_nats::jetstream::stream;
use serde::{Deserialize, Serialize};

/// What `generated/jetstream.json` defines (written back as the same JSON).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[non_exhaustive]
pub struct Definitions {
    /// The project the contracts belong to.
    pub project: String,
    /// The relay's own settings.
    pub relay: RelaySettings,
    /// The stream the relay publishes to.
    pub stream: stream::Config,
    /// A durable pull consumer per contract consumer (per partition for `per_key` ones).
    pub consumers: Vec<pull::Config>,
}

/// The relay's settings from `relay` of `evc.yaml`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[non_exhaustive]
pub struct RelaySettings {
    /// First subject tokens (`evc`).
    pub subject_prefix: String,
    /// Subject partitions of each event type.
    pub partitions: u32,
    /// How long a relay holds its cursor without moving it.
    #[serde(with = "nanos")]
    pub lease: Duration,
}

/// Why the definitions could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DefinitionsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source} (run `evc generate`)")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A stream name or subject prefix NATS would not take as one.
    #[error(
        "{found:?} is no {what}: letters, digits, `_` and `-` (a prefix: such tokens separated by dots)"
    )]
    Name {
        /// What it was meant to be.
        what: &'static str,
        /// What was given.
        found: String,
    },
    /// The file is not what `evc generate` writes.
    #[error("{path} is not a JetStream definitions file of evc generate: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: serde_json::Error,
    },
}

impl Definitions {
    /// Reads the definitions at `path`.
    ///
    /// # Errors
    /// [`DefinitionsError`] when the file cannot be read or is not what `evc generate` writes.
    pub fn read(path: &Path) -> Result<Self, DefinitionsError> {
        let text = std::fs::read_to_string(path).map_err(|source| DefinitionsError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|source| DefinitionsError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// Parses definitions from JSON text.
    ///
    /// # Errors
    /// The JSON is not what `evc generate` writes.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The same definitions under stream `name` (one broker serving several deployments).
    ///
    /// # Errors
    /// [`DefinitionsError::Name`] unless `name` is 1 to 64 letters, digits, `_` and `-`.
    pub fn with_stream(mut self, name: &str) -> Result<Self, DefinitionsError> {
        let plain = (1..=64).contains(&name.len()) && name.bytes().all(token_byte);
        if !plain {
            return Err(DefinitionsError::Name {
                what: "stream name",
                found: name.to_owned(),
            });
        }
        name.clone_into(&mut self.stream.name);
        Ok(self)
    }

    /// The same definitions under subject prefix `prefix`: the stream's subjects and every
    /// consumer's filters move with it.
    ///
    /// # Errors
    /// [`DefinitionsError::Name`] unless `prefix` is tokens of letters, digits, `_` and `-`
    /// separated by dots (no wildcard).
    pub fn with_subject_prefix(mut self, prefix: &str) -> Result<Self, DefinitionsError> {
        let plain = prefix
            .split('.')
            .all(|token| !token.is_empty() && token.bytes().all(token_byte));
        if !plain {
            return Err(DefinitionsError::Name {
                what: "subject prefix",
                found: prefix.to_owned(),
            });
        }
        let old = format!("{}.", self.relay.subject_prefix);
        let moved = |subject: &String| match subject.strip_prefix(&old) {
            Some(rest) => format!("{prefix}.{rest}"),
            None => subject.clone(),
        };
        self.stream.subjects = self.stream.subjects.iter().map(moved).collect();
        for consumer in &mut self.consumers {
            consumer.filter_subjects = consumer.filter_subjects.iter().map(moved).collect();
            if !consumer.filter_subject.is_empty() {
                consumer.filter_subject = moved(&consumer.filter_subject);
            }
        }
        prefix.clone_into(&mut self.relay.subject_prefix);
        Ok(self)
    }
}

impl Definitions {
    /// The definitions as a NATS server of `version` (`2.9.10`) takes them. Servers before 2.10
    /// know one filter subject per consumer and no metadata: each consumer gets the narrowest
    /// pattern covering its subjects (`evc.2.>` for a partition) and no metadata, and its
    /// reader skips the events it does not subscribe to. A version that does not parse gets
    /// that form too: it works on every server.
    #[must_use]
    pub fn for_server(mut self, version: &str) -> Self {
        let mut parts = version.split('.').map(|part| part.parse::<u32>());
        if let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next())
            && (major, minor) >= (2, 10)
        {
            return self;
        }
        for consumer in &mut self.consumers {
            if !consumer.filter_subjects.is_empty() {
                let filters = std::mem::take(&mut consumer.filter_subjects);
                consumer.filter_subject = covering(&filters);
            }
            consumer.metadata.clear();
        }
        self
    }
}

/// The narrowest single pattern that takes every subject of `filters`: the one filter itself,
/// else their common tokens (a shared `*` included) followed by `>`.
fn covering(filters: &[String]) -> String {
    match filters {
        [] => String::new(),
        [only] => only.clone(),
        [first, rest @ ..] => {
            // `>` takes one token or more: the pattern keeps at least one of every filter's.
            let shortest = filters
                .iter()
                .map(|filter| filter.split('.').count())
                .min()
                .unwrap_or(1);
            let mut common: Vec<&str> = Vec::new();
            for (i, token) in first.split('.').take(shortest - 1).enumerate() {
                let shared = rest
                    .iter()
                    .all(|other| other.split('.').nth(i) == Some(token));
                if !shared || token == ">" {
                    break;
                }
                common.push(token);
            }
            common.push(">");
            common.join(".")
        }
    }
}

/// Whether `byte` may stand in a NATS name or subject token as evc writes them.
fn token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'
}

/// Durations in whole nanoseconds, as the JetStream API writes them.
mod nanos {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_nanos)
    }

    pub(super) fn serialize<S: Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pattern_covers_every_filter_of_a_consumer() {
        let filters = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            covering(&filters(&["evc.2.iu.born.v1"])),
            "evc.2.iu.born.v1"
        );
        assert_eq!(
            covering(&filters(&["evc.2.iu.born.v1", "evc.2.iu.edited.v1"])),
            "evc.2.iu.>"
        );
        assert_eq!(
            covering(&filters(&["evc.2.iu.born.v1", "evc.2.step.ready.v1"])),
            "evc.2.>"
        );
        assert_eq!(
            covering(&filters(&["evc.*.iu.born.v1", "evc.*.iu.edited.v1"])),
            "evc.*.iu.>"
        );
        assert_eq!(
            covering(&filters(&["evc.*.iu.born.v1", "evc.*.step.ready.v1"])),
            "evc.*.>"
        );
        assert_eq!(
            covering(&filters(&["evc.0.iu.born.v1", "evc.0.iu.born.v1.v1"])),
            "evc.0.iu.born.>"
        );
        assert_eq!(covering(&[]), "");
    }

    #[test]
    fn overrides_take_only_names_nats_takes() {
        let text = include_str!("../../generated/jetstream.json");
        let definitions = Definitions::parse(text).expect("the generated definitions parse");
        for bad in ["", "a.", "a.*", "a b", "shop.>"] {
            assert!(
                definitions.clone().with_subject_prefix(bad).is_err(),
                "{bad:?}"
            );
        }
        for bad in ["", "EVC.X", "EVC*", &"S".repeat(65)] {
            assert!(definitions.clone().with_stream(bad).is_err(), "{bad:?}");
        }
        let moved = definitions
            .for_server("2.9.10")
            .with_subject_prefix("staging.evc")
            .expect("a plain prefix");
        assert_eq!(moved.stream.subjects, ["staging.evc.>"]);
        assert!(
            moved
                .consumers
                .iter()
                .all(|c| c.filter_subject.starts_with("staging.evc.")),
            "{:?}",
            moved.consumers
        );
    }
}
