//! Cross-object rules of an AsyncAPI 3.0 document that its JSON Schema does not check.
//!
//! The official schema accepts an operation whose `channel` points nowhere, or whose messages
//! belong to another channel. These checks add, for any AsyncAPI 3.0 document:
//!
//! - every document-local `$ref` (`#/...`) resolves, wherever it is (annotation values such as
//!   `examples`, `const`, `enum`, `default` and `x-` extensions hold data, not references, and
//!   are skipped; references to other files or URLs cannot be checked offline and are skipped);
//! - an operation's `channel` (and a reply's `channel`) points into the root `channels`
//!   (asyncapi/parser-js rule `asyncapi3-required-operation-channel-unambiguity`);
//! - every message of an operation (and of a reply) is one of the messages of that operation's
//!   channel (parser-js rule `asyncapi3-operation-messages-from-referred-channel`): either a
//!   reference `#/channels/<channel>/messages/<message>` to it, or a reference to the same
//!   message object the channel refers to.

use serde_json::Value as Json;

use crate::yaml::{escape_pointer_segment, pointer_segments};

/// What kind of rule a document breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProblemKind {
    /// A `$ref` whose target is not in the document.
    DanglingRef,
    /// An operation's (or reply's) `channel` that is not a reference into the root `channels`.
    ChannelNotInChannels,
    /// An operation message that is not one of its channel's messages.
    MessageNotInChannel,
}

/// One broken cross-object rule, at a JSON pointer into the document.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DocumentProblem {
    /// Where: the JSON pointer of the offending value.
    pub pointer: String,
    /// Which rule.
    pub kind: ProblemKind,
    /// One sentence saying what is wrong.
    pub message: String,
}

impl std::fmt::Display for DocumentProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.pointer, self.message)
    }
}

/// Checks the cross-object rules of an AsyncAPI 3.0 document given as JSON.
pub fn check_document(doc: &Json) -> Vec<DocumentProblem> {
    let mut problems = Vec::new();
    dangling_refs(doc, doc, &mut String::new(), &mut problems);
    if let Some(Json::Object(operations)) = doc.get("operations") {
        for (id, operation) in operations {
            let pointer = format!("/operations/{}", escape_pointer_segment(id));
            let Some(operation) = deref(doc, operation) else {
                continue;
            };
            check_operation(doc, operation, &pointer, &mut problems);
            if let Some(reply) = operation.get("reply").and_then(|reply| deref(doc, reply)) {
                let reply_pointer = format!("{pointer}/reply");
                if reply.get("channel").is_some() {
                    check_operation(doc, reply, &reply_pointer, &mut problems);
                }
            }
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

/// The value a document-local reference (`#/a/b`, percent-encoding allowed) points at.
pub fn resolve_pointer<'a>(doc: &'a Json, reference: &str) -> Option<&'a Json> {
    doc.pointer(&local_pointer(reference)?)
}

/// The JSON pointer a document-local reference stands for (`#/a/b%20c` → `/a/b c`), or `None`
/// for a reference to another document.
pub(crate) fn local_pointer(reference: &str) -> Option<String> {
    let fragment = crate::uri::percent_decode(reference.strip_prefix('#')?)?;
    (fragment.is_empty() || fragment.starts_with('/')).then_some(fragment)
}

/// Follows a chain of Reference Objects to the object they stand for (at most 32 steps).
pub(crate) fn deref<'a>(doc: &'a Json, value: &'a Json) -> Option<&'a Json> {
    let mut current = value;
    for _ in 0..32 {
        match current.get("$ref").and_then(Json::as_str) {
            Some(reference) => current = resolve_pointer(doc, reference)?,
            None => return Some(current),
        }
    }
    None
}

const DATA_KEYWORDS: &[&str] = &["const", "enum", "default", "examples", "example"];

fn dangling_refs(doc: &Json, value: &Json, pointer: &mut String, out: &mut Vec<DocumentProblem>) {
    match value {
        Json::Object(map) => {
            if let Some(Json::String(reference)) = map.get("$ref")
                && reference.starts_with('#')
                && resolve_pointer(doc, reference).is_none()
            {
                out.push(DocumentProblem {
                    pointer: format!("{pointer}/$ref"),
                    kind: ProblemKind::DanglingRef,
                    message: format!("`$ref: {reference}` points at nothing in the document"),
                });
            }
            for (key, child) in map {
                if key.starts_with("x-") || key == "$ref" {
                    continue;
                }
                // `examples: [...]` and friends are data; a property *named* `examples` is an
                // object under `properties`, which is walked.
                if DATA_KEYWORDS.contains(&key.as_str()) && !child.is_object() {
                    continue;
                }
                let length = pointer.len();
                pointer.push('/');
                pointer.push_str(&escape_pointer_segment(key));
                dangling_refs(doc, child, pointer, out);
                pointer.truncate(length);
            }
        }
        Json::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let length = pointer.len();
                pointer.push('/');
                pointer.push_str(&index.to_string());
                dangling_refs(doc, item, pointer, out);
                pointer.truncate(length);
            }
        }
        _ => {}
    }
}

/// The id of the root channel a `channel` Reference Object points at, if it points at one.
pub(crate) fn root_channel_id(reference: &Json) -> Option<String> {
    let pointer = local_pointer(reference.get("$ref")?.as_str()?)?;
    let mut segments = pointer_segments(&pointer);
    (segments.next()? == "channels")
        .then(|| segments.next())
        .flatten()
        .filter(|_| segments.next().is_none())
}

fn check_operation(doc: &Json, operation: &Json, pointer: &str, out: &mut Vec<DocumentProblem>) {
    let Some(channel_value) = operation.get("channel") else {
        return;
    };
    let channel_pointer = format!("{pointer}/channel");
    let Some(channel_id) = root_channel_id(channel_value) else {
        out.push(DocumentProblem {
            pointer: channel_pointer,
            kind: ProblemKind::ChannelNotInChannels,
            message: "the operation's channel is not a reference into the root `channels` \
                      (`$ref: '#/channels/<id>'`)"
                .to_owned(),
        });
        return;
    };
    let Some(channel) = doc
        .get("channels")
        .and_then(|channels| channels.get(&channel_id))
        .and_then(|channel| deref(doc, channel))
    else {
        // Reported as a dangling reference.
        return;
    };
    let channel_messages = channel.get("messages").and_then(Json::as_object);
    let Some(Json::Array(messages)) = operation.get("messages") else {
        return;
    };
    for (index, message) in messages.iter().enumerate() {
        let message_pointer = format!("{pointer}/messages/{index}");
        let Some(reference) = message.get("$ref").and_then(Json::as_str) else {
            continue;
        };
        let Some(target) = resolve_pointer(doc, reference) else {
            // Reported as a dangling reference.
            continue;
        };
        let prefix = format!(
            "#/channels/{}/messages/",
            escape_pointer_segment(&channel_id)
        );
        let direct = reference.strip_prefix(&prefix).is_some_and(|rest| {
            !rest.contains('/')
                && channel_messages.is_some_and(|messages| {
                    messages.contains_key(&rest.replace("~1", "/").replace("~0", "~"))
                })
        });
        let same_object = || {
            let target = deref(doc, target);
            channel_messages.is_some_and(|messages| {
                messages
                    .values()
                    .any(|candidate| target.is_some() && deref(doc, candidate) == target)
            })
        };
        if !direct && !same_object() {
            out.push(DocumentProblem {
                pointer: message_pointer,
                kind: ProblemKind::MessageNotInChannel,
                message: format!(
                    "`{reference}` is not one of the messages of channel `{channel_id}`"
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn doc() -> Json {
        json!({
            "asyncapi": "3.0.0",
            "info": {"title": "t", "version": "1.0.0"},
            "channels": {
                "a": {"address": "a", "messages": {"m": {"$ref": "#/components/messages/m"}}},
                "b": {"address": "b", "messages": {"n": {"$ref": "#/components/messages/n"}}}
            },
            "operations": {
                "send-a": {
                    "action": "send",
                    "channel": {"$ref": "#/channels/a"},
                    "messages": [{"$ref": "#/channels/a/messages/m"}]
                }
            },
            "components": {"messages": {
                "m": {"payload": {"type": "object", "examples": [{"$ref": "#/nowhere"}]}},
                "n": {"payload": {"type": "object"}}
            }}
        })
    }

    fn kinds(doc: &Json) -> Vec<(String, ProblemKind)> {
        check_document(doc)
            .into_iter()
            .map(|problem| (problem.pointer, problem.kind))
            .collect()
    }

    #[test]
    fn a_consistent_document_is_clean() {
        assert_eq!(kinds(&doc()), []);
    }

    #[test]
    fn a_dangling_channel_is_found() {
        let mut doc = doc();
        doc["operations"]["send-a"]["channel"]["$ref"] = json!("#/channels/zzz");
        assert_eq!(
            kinds(&doc),
            [(
                "/operations/send-a/channel/$ref".to_owned(),
                ProblemKind::DanglingRef
            )]
        );
    }

    #[test]
    fn a_message_of_another_channel_is_found() {
        let mut doc = doc();
        doc["operations"]["send-a"]["messages"][0]["$ref"] = json!("#/channels/b/messages/n");
        assert_eq!(
            kinds(&doc),
            [(
                "/operations/send-a/messages/0".to_owned(),
                ProblemKind::MessageNotInChannel
            )]
        );
    }

    #[test]
    fn a_reference_to_the_same_component_message_is_accepted() {
        let mut doc = doc();
        doc["operations"]["send-a"]["messages"][0]["$ref"] = json!("#/components/messages/m");
        assert_eq!(kinds(&doc), []);
    }

    #[test]
    fn a_channel_outside_root_channels_is_found() {
        let mut doc = doc();
        doc["components"]["channels"] = json!({"a": {"address": "a"}});
        doc["operations"]["send-a"]["channel"]["$ref"] = json!("#/components/channels/a");
        assert_eq!(
            kinds(&doc),
            [(
                "/operations/send-a/channel".to_owned(),
                ProblemKind::ChannelNotInChannels
            )]
        );
    }

    #[test]
    fn dangling_refs_anywhere_are_found_and_encoded_refs_resolve() {
        let mut doc = doc();
        doc["components"]["messages"]["n"]["payload"]["properties"] = json!({"x": {"$ref": "#/components/schemas/missing"}, "y": {"$ref": "#/channels/a~1b%20c"}});
        doc["channels"]["a/b c"] = json!({"address": "ab"});
        assert_eq!(
            kinds(&doc),
            [(
                "/components/messages/n/payload/properties/x/$ref".to_owned(),
                ProblemKind::DanglingRef
            )]
        );
    }
}
