//! Parity between the contracts and a checked-in AsyncAPI document, for `evc check`.
//!
//! Drift is reported in both directions, and every finding names a place in the document (its
//! primary location) and, where the registry has one, the place in the contracts (a related
//! location): the event file of a missing channel, the version of a missing message, the
//! consumer's subscription of a missing operation; for things only the document has, the
//! closest contract (a likely misspelling) or `evc.yaml`.
//!
//! The document is matched the way [`super::render`] writes it: a channel stands for the event
//! type in its `address` (or `x-evc-event` when the address is null), a message for the version in
//! its `x-evc-version`, a `send` operation for its `x-evc-producer-class` and a `receive`
//! operation for its `x-evc-consumer`. Ids are not compared, so a document laid out differently
//! but carrying the same registry has no drift.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as Json;

use super::check::{check_document, deref, root_channel_id};
use crate::diagnostic::{self, Diagnostic, Rule};
use crate::loader::PROJECT_FILE;
use crate::model::{ContractSet, EventType};
use crate::names;
use crate::source::{Location, SourceFile};
use crate::yaml::{self, Node, escape_pointer_segment};

/// Compares the AsyncAPI document `asyncapi_text` (shown as `asyncapi_path_display`) with the
/// contract set and reports every drift, sorted. A document that does not parse gives the YAML
/// diagnostic. The CLI shows source snippets for the document when it adds
/// `SourceFile::new(asyncapi_path_display, asyncapi_text)` to the sources it renders with.
pub fn parity(
    set: &ContractSet,
    asyncapi_path_display: &str,
    asyncapi_text: &str,
) -> Vec<Diagnostic> {
    let file = SourceFile::new(asyncapi_path_display, asyncapi_text);
    let tree = match yaml::parse_within(&file, yaml::Limits::DOCUMENT) {
        Ok(Some(tree)) => tree,
        Ok(None) => Node {
            value: yaml::Value::Map(Vec::new()),
            offset: 0,
            len: 0,
        },
        Err(diagnostic) => return vec![*diagnostic],
    };
    let doc = tree.to_json();
    let mut parity = Parity {
        set,
        file: &file,
        tree: &tree,
        doc: &doc,
        out: Vec::new(),
        channels: BTreeMap::new(),
    };
    parity.channels();
    parity.operations();
    for problem in check_document(&doc) {
        let location = parity.at(&problem.pointer);
        parity.out.push(Diagnostic::new(
            Rule::AsyncApiBrokenReference,
            location,
            problem.message,
            "fix or remove the reference; run `evc generate` to regenerate the document",
        ));
    }
    let mut out = parity.out;
    diagnostic::sort(&mut out);
    out.dedup();
    out
}

/// A channel of the document matched to an event type.
struct MatchedChannel {
    /// The channel id.
    id: String,
}

struct Parity<'a> {
    set: &'a ContractSet,
    file: &'a SourceFile,
    tree: &'a Node,
    doc: &'a Json,
    out: Vec<Diagnostic>,
    /// Event type to its channel.
    channels: BTreeMap<String, MatchedChannel>,
}

impl Parity<'_> {
    fn regenerate(&self) -> String {
        format!("run `evc generate` to regenerate {}", self.file.path())
    }

    /// The location of the node at `pointer` in the document (its key, when it has one), or of
    /// its nearest existing ancestor.
    fn at(&self, pointer: &str) -> Location {
        let mut pointer = pointer.to_owned();
        loop {
            if let Some((key, value)) = self.tree.pointer_entry(&pointer) {
                return key.unwrap_or(value).location(self.file);
            }
            match pointer.rfind('/') {
                Some(index) => pointer.truncate(index),
                None => return Location::file(self.file.path()),
            }
        }
    }

    /// Where the registry would define an unknown event type: the closest event file, else
    /// `evc.yaml`.
    fn near_event(&self, name: &str) -> (Location, String) {
        match names::did_you_mean(name, self.set.events.keys().map(String::as_str)) {
            Some(close) => (
                self.set.locate(&self.set.events[close].file, "/event"),
                format!("the registry has `{close}`, not `{name}`"),
            ),
            None => (
                self.set.locate(PROJECT_FILE, "/project"),
                format!(
                    "the registry of `{}` has no event type `{name}` (it would be events/{name}.yaml)",
                    self.set.project.name
                ),
            ),
        }
    }

    fn channels(&mut self) {
        let Some(Json::Object(channels)) = self.doc.get("channels") else {
            self.missing_channels();
            return;
        };
        for (id, channel) in channels {
            let pointer = format!("/channels/{}", escape_pointer_segment(id));
            let Some(channel) = deref(self.doc, channel) else {
                continue;
            };
            let name = match channel.get("address") {
                Some(Json::String(address)) => Some(address.as_str()),
                _ => channel.get("x-evc-event").and_then(Json::as_str),
            };
            let Some(name) = name else {
                let related = self.set.locate(PROJECT_FILE, "/project");
                self.out.push(
                    Diagnostic::new(
                        Rule::AsyncApiUnknownChannel,
                        self.at(&pointer),
                        format!("channel `{id}` names no event type (no `address`)"),
                        format!(
                            "{}; evc channels are addressed by their event type",
                            self.regenerate()
                        ),
                    )
                    .with_related(related, "the registry's event types are the channels"),
                );
                continue;
            };
            let Some(event) = self.set.events.get(name) else {
                let (related, note) = self.near_event(name);
                self.out.push(
                    Diagnostic::new(
                        Rule::AsyncApiUnknownChannel,
                        self.at(&pointer),
                        format!("channel `{id}` is for `{name}`, which no contract defines"),
                        format!(
                            "{}; if the document is right, add events/{name}.yaml",
                            self.regenerate()
                        ),
                    )
                    .with_related(related, note),
                );
                continue;
            };
            if let Some(first) = self.channels.get(name) {
                let first = self.at(&format!("/channels/{}", escape_pointer_segment(&first.id)));
                self.out.push(
                    Diagnostic::new(
                        Rule::AsyncApiUnknownChannel,
                        self.at(&pointer),
                        format!("channel `{id}` is a second channel for `{name}`"),
                        format!("{}; one channel per event type", self.regenerate()),
                    )
                    .with_related(first, "the first channel for it")
                    .with_related(
                        self.set.locate(&event.file, "/event"),
                        format!("`{name}` is defined here"),
                    ),
                );
                continue;
            }
            self.channel_messages(event, id, channel, &pointer);
            self.channels
                .insert(name.to_owned(), MatchedChannel { id: id.clone() });
        }
        self.missing_channels();
    }

    fn missing_channels(&mut self) {
        for (name, event) in &self.set.events {
            if self.channels.contains_key(name) {
                continue;
            }
            self.out.push(
                Diagnostic::new(
                    Rule::AsyncApiMissingChannel,
                    self.at("/channels"),
                    format!("the document has no channel for the event type `{name}`"),
                    self.regenerate(),
                )
                .with_related(
                    self.set.locate(&event.file, "/event"),
                    format!("`{name}` is defined here"),
                ),
            );
        }
    }

    /// Checks a matched channel's messages against the event's versions.
    fn channel_messages(&mut self, event: &EventType, id: &str, channel: &Json, pointer: &str) {
        let mut found = BTreeSet::new();
        let messages_pointer = format!("{pointer}/messages");
        if let Some(Json::Object(messages)) = channel.get("messages") {
            for (message_id, message) in messages {
                let message_pointer =
                    format!("{messages_pointer}/{}", escape_pointer_segment(message_id));
                match self.registered_version(event, message) {
                    Ok(version) => {
                        found.insert(version);
                    }
                    // Unresolvable: reported as a broken reference.
                    Err(None) => {}
                    Err(Some(problem)) => self.out.push(
                        Diagnostic::new(
                            Rule::AsyncApiUnknownMessage,
                            self.at(&message_pointer),
                            format!("message `{message_id}` of channel `{id}` {problem}"),
                            format!(
                                "{}; if the document is right, add the version to {}",
                                self.regenerate(),
                                event.file
                            ),
                        )
                        .with_related(
                            self.set.locate(&event.file, "/versions"),
                            format!("the versions of `{}`", event.name),
                        ),
                    ),
                }
            }
        }
        for version in &event.versions {
            if found.contains(&version.version) {
                continue;
            }
            self.out.push(
                Diagnostic::new(
                    Rule::AsyncApiMissingMessage,
                    self.at(&messages_pointer),
                    format!(
                        "channel `{id}` has no message for `{}` {}",
                        event.name, version.version
                    ),
                    self.regenerate(),
                )
                .with_related(
                    self.set
                        .locate(&event.file, &format!("{}/version", version.pointer)),
                    format!("`{}` {} is defined here", event.name, version.version),
                ),
            );
        }
    }

    /// The registered version a message stands for, or why it stands for none (`None` when the
    /// message cannot be resolved, which the reference checks report).
    fn registered_version(
        &self,
        event: &EventType,
        message: &Json,
    ) -> Result<semver::Version, Option<String>> {
        let Some(message) = deref(self.doc, message) else {
            return Err(None);
        };
        let Some(text) = message.get("x-evc-version").and_then(Json::as_str) else {
            return Err(Some("names no version (`x-evc-version`)".to_owned()));
        };
        let Ok(version) = semver::Version::parse(text) else {
            return Err(Some(format!(
                "has `x-evc-version: {text}`, which is not a version"
            )));
        };
        if event.versions.iter().any(|known| known.version == version) {
            Ok(version)
        } else {
            Err(Some(format!(
                "is `{}` {version}, which the registry does not define",
                event.name
            )))
        }
    }

    fn operations(&mut self) {
        let mut sends: BTreeSet<String> = BTreeSet::new();
        let mut receives: BTreeSet<(String, String)> = BTreeSet::new();
        if let Some(Json::Object(operations)) = self.doc.get("operations") {
            for (id, operation) in operations {
                let pointer = format!("/operations/{}", escape_pointer_segment(id));
                let Some(operation) = deref(self.doc, operation) else {
                    continue;
                };
                let Some(channel_id) = operation.get("channel").and_then(root_channel_id) else {
                    continue;
                };
                let Some((event_name, _)) = self
                    .channels
                    .iter()
                    .find(|(_, channel)| channel.id == channel_id)
                else {
                    // An unknown or broken channel, reported already.
                    continue;
                };
                let event_name = event_name.clone();
                let event = &self.set.events[&event_name];
                match operation.get("action").and_then(Json::as_str) {
                    Some("send") if self.send(event, id, operation, &pointer) => {
                        sends.insert(event_name);
                    }
                    Some("receive") => {
                        if let Some(consumer) = self.receive(event, id, operation, &pointer) {
                            receives.insert((consumer, event_name));
                        }
                    }
                    _ => {}
                }
            }
        }
        for (name, event) in &self.set.events {
            if !self.channels.contains_key(name) || sends.contains(name) {
                continue;
            }
            self.out.push(
                Diagnostic::new(
                    Rule::AsyncApiMissingOperation,
                    self.at("/operations"),
                    format!(
                        "the document has no `send` operation of producer class `{}` for `{name}`",
                        event.producer_class
                    ),
                    self.regenerate(),
                )
                .with_related(
                    self.set.locate(&event.file, "/producer_class"),
                    format!("`{name}` is produced by `{}`", event.producer_class),
                ),
            );
        }
        for (name, consumer) in &self.set.consumers {
            for (index, subscription) in consumer.subscriptions.iter().enumerate() {
                if !self.channels.contains_key(&subscription.event)
                    || receives.contains(&(name.clone(), subscription.event.clone()))
                {
                    continue;
                }
                self.out.push(
                    Diagnostic::new(
                        Rule::AsyncApiMissingOperation,
                        self.at("/operations"),
                        format!(
                            "the document has no `receive` operation of consumer `{name}` for `{}`",
                            subscription.event
                        ),
                        self.regenerate(),
                    )
                    .with_related(
                        self.set
                            .locate(&consumer.file, &format!("/subscribes/{index}")),
                        format!("`{name}` subscribes to `{}` here", subscription.event),
                    ),
                );
            }
        }
    }

    /// The versions an operation lists, reporting those the registry does not define. `None`
    /// when the operation has no `messages` (it then carries all of the channel's).
    fn operation_versions(
        &mut self,
        event: &EventType,
        id: &str,
        operation: &Json,
        pointer: &str,
    ) -> Option<Vec<(usize, semver::Version)>> {
        let Some(Json::Array(messages)) = operation.get("messages") else {
            return None;
        };
        let mut versions = Vec::new();
        for (index, message) in messages.iter().enumerate() {
            match self.registered_version(event, message) {
                Ok(version) => versions.push((index, version)),
                Err(None) => {}
                Err(Some(problem)) => self.out.push(
                    Diagnostic::new(
                        Rule::AsyncApiUnknownMessage,
                        self.at(&format!("{pointer}/messages/{index}")),
                        format!("message {index} of operation `{id}` {problem}"),
                        self.regenerate(),
                    )
                    .with_related(
                        self.set.locate(&event.file, "/versions"),
                        format!("the versions of `{}`", event.name),
                    ),
                ),
            }
        }
        Some(versions)
    }

    fn send(&mut self, event: &EventType, id: &str, operation: &Json, pointer: &str) -> bool {
        let producer = operation.get("x-evc-producer-class").and_then(Json::as_str);
        if producer != Some(event.producer_class.as_str()) {
            let what = producer.map_or_else(
                || "names no producer class (`x-evc-producer-class`)".to_owned(),
                |producer| format!("is for producer class `{producer}`"),
            );
            self.out.push(
                Diagnostic::new(
                    Rule::AsyncApiUnknownOperation,
                    self.at(pointer),
                    format!(
                        "`send` operation `{id}` {what}, but `{}` is produced by `{}`",
                        event.name, event.producer_class
                    ),
                    self.regenerate(),
                )
                .with_related(
                    self.set.locate(&event.file, "/producer_class"),
                    "the producer class is defined here",
                ),
            );
            return false;
        }
        if let Some(versions) = self.operation_versions(event, id, operation, pointer) {
            for version in &event.versions {
                if versions
                    .iter()
                    .any(|(_, listed)| *listed == version.version)
                {
                    continue;
                }
                self.out.push(
                    Diagnostic::new(
                        Rule::AsyncApiMissingMessage,
                        self.at(&format!("{pointer}/messages")),
                        format!(
                            "`send` operation `{id}` does not list `{}` {}",
                            event.name, version.version
                        ),
                        self.regenerate(),
                    )
                    .with_related(
                        self.set
                            .locate(&event.file, &format!("{}/version", version.pointer)),
                        format!("`{}` {} is defined here", event.name, version.version),
                    ),
                );
            }
        }
        true
    }

    /// Checks a `receive` operation; the consumer's name when it matches a subscription.
    fn receive(
        &mut self,
        event: &EventType,
        id: &str,
        operation: &Json,
        pointer: &str,
    ) -> Option<String> {
        let Some(name) = operation.get("x-evc-consumer").and_then(Json::as_str) else {
            self.out.push(
                Diagnostic::new(
                    Rule::AsyncApiUnknownOperation,
                    self.at(pointer),
                    format!("`receive` operation `{id}` names no consumer (`x-evc-consumer`)"),
                    self.regenerate(),
                )
                .with_related(
                    self.set.locate(PROJECT_FILE, "/project"),
                    "receive operations stand for the consumers of the contracts",
                ),
            );
            return None;
        };
        let Some(consumer) = self.set.consumers.get(name) else {
            let (related, note) =
                match names::did_you_mean(name, self.set.consumers.keys().map(String::as_str)) {
                    Some(close) => (
                        self.set
                            .locate(&self.set.consumers[close].file, "/consumer"),
                        format!("the registry has `{close}`, not `{name}`"),
                    ),
                    None => (
                        self.set.locate(PROJECT_FILE, "/project"),
                        format!("no consumer `{name}` (it would be consumers/{name}.yaml)"),
                    ),
                };
            self.out.push(
                Diagnostic::new(
                    Rule::AsyncApiUnknownOperation,
                    self.at(pointer),
                    format!("`receive` operation `{id}` is for consumer `{name}`, which no contract defines"),
                    self.regenerate(),
                )
                .with_related(related, note),
            );
            return None;
        };
        let Some((index, subscription)) = consumer
            .subscriptions
            .iter()
            .enumerate()
            .find(|(_, subscription)| subscription.event == event.name)
        else {
            self.out.push(
                Diagnostic::new(
                    Rule::AsyncApiUnknownOperation,
                    self.at(pointer),
                    format!(
                        "`receive` operation `{id}` has consumer `{name}` receive `{}`, to which it does not subscribe",
                        event.name
                    ),
                    self.regenerate(),
                )
                .with_related(
                    self.set.locate(&consumer.file, "/subscribes"),
                    format!("the subscriptions of `{name}`"),
                ),
            );
            return None;
        };
        let subscription_at = self
            .set
            .locate(&consumer.file, &format!("/subscribes/{index}"));
        if let Some(versions) = self.operation_versions(event, id, operation, pointer) {
            for (position, version) in &versions {
                if subscription.requirement.matches(version) {
                    continue;
                }
                self.out.push(
                    Diagnostic::new(
                        Rule::AsyncApiUnknownMessage,
                        self.at(&format!("{pointer}/messages/{position}")),
                        format!(
                            "operation `{id}` lists `{}` {version}, which consumer `{name}` does not accept (`{}`)",
                            event.name, subscription.requirement
                        ),
                        self.regenerate(),
                    )
                    .with_related(subscription_at.clone(), "the subscription's requirement"),
                );
            }
            for version in &event.versions {
                if !subscription.requirement.matches(&version.version)
                    || versions
                        .iter()
                        .any(|(_, listed)| *listed == version.version)
                {
                    continue;
                }
                self.out.push(
                    Diagnostic::new(
                        Rule::AsyncApiMissingMessage,
                        self.at(&format!("{pointer}/messages")),
                        format!(
                            "operation `{id}` does not list `{}` {}, which consumer `{name}` accepts",
                            event.name, version.version
                        ),
                        self.regenerate(),
                    )
                    .with_related(subscription_at.clone(), "the subscription's requirement"),
                );
            }
        }
        Some(name.to_owned())
    }
}
