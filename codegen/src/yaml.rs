//! The one place that parses YAML (through serde-saphyr).
//!
//! A document becomes a [`Node`] tree in which every mapping key, value and list item keeps its
//! byte range, so any later finding, down to a keyword deep inside a payload schema, can point at
//! its line and column. Hostile input is bounded before it costs anything: nesting depth, alias
//! expansion, node count and scalar bytes are all capped by an explicit [`Budget`].

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Budget, DuplicateKeyPolicy, Spanned};

use crate::diagnostic::{Diagnostic, Rule};
use crate::source::{Location, SourceFile};

/// Deepest nesting accepted. Payload schemas nest a few levels; 64 leaves room and keeps every
/// recursive walk over the tree far from the stack limit.
pub const MAX_DEPTH: usize = 64;
/// Most YAML nodes accepted in one file (after alias expansion).
pub const MAX_NODES: usize = 100_000;
/// Most aliases accepted in one file.
pub const MAX_ALIASES: usize = 1_000;

/// A YAML node and the byte range it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The value.
    pub value: Value,
    /// Byte offset of the node in its file.
    pub offset: usize,
    /// Length of the node's text in bytes (at least the first token).
    pub len: usize,
}

/// A YAML value whose children are [`Node`]s.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `~`, `null` or an empty value.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer that fits in `i64`.
    Int(i64),
    /// A positive integer above `i64::MAX`.
    UInt(u64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    String(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order, with its key nodes.
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// The string, when this node is one.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::String(text) => Some(text),
            _ => None,
        }
    }

    /// The value of `key`, when this node is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entry(key).map(|(_, value)| value)
    }

    /// The key node and value of `key`, when this node is a mapping that has it.
    pub fn entry(&self, key: &str) -> Option<(&Node, &Node)> {
        match &self.value {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(k, v)| (k, v)),
            _ => None,
        }
    }

    /// The node at a JSON pointer (`/versions/0/schema/properties/id`), if it exists.
    pub fn pointer(&self, pointer: &str) -> Option<&Node> {
        self.pointer_entry(pointer).map(|(_, node)| node)
    }

    /// Like [`Node::pointer`], also returning the mapping key node of the last segment, if the
    /// last step went through a mapping.
    pub fn pointer_entry(&self, pointer: &str) -> Option<(Option<&Node>, &Node)> {
        let mut current = self;
        let mut key_node = None;
        for segment in pointer_segments(pointer) {
            match &current.value {
                Value::Map(_) => {
                    let (key, value) = current.entry(&segment)?;
                    key_node = Some(key);
                    current = value;
                }
                Value::Seq(items) => {
                    current = items.get(segment.parse::<usize>().ok()?)?;
                    key_node = None;
                }
                _ => return None,
            }
        }
        Some((key_node, current))
    }

    /// The location of this node in `file`.
    pub fn location(&self, file: &SourceFile) -> Location {
        file.location(self.offset, self.len)
    }

    /// Converts the tree to JSON, the form schemas and serde work on.
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(value) => serde_json::Value::Bool(*value),
            Value::Int(value) => serde_json::Value::from(*value),
            Value::UInt(value) => serde_json::Value::from(*value),
            // JSON Schema counts `50.0` as an integer; so do the typed formats.
            Value::Float(value) if value.fract() == 0.0 && value.abs() < 9.0e15 => {
                serde_json::Value::from(*value as i64)
            }
            Value::Float(value) => serde_json::Number::from_f64(*value)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Value::String(text) => serde_json::Value::String(text.clone()),
            Value::Seq(items) => items.iter().map(Node::to_json).collect(),
            Value::Map(entries) => entries
                .iter()
                .map(|(key, value)| (key.key_text(), value.to_json()))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        }
    }

    /// The text of a mapping key; [`parse`] guarantees keys are strings.
    fn key_text(&self) -> String {
        self.as_str().map(str::to_owned).unwrap_or_default()
    }
}

/// Splits a JSON pointer into unescaped segments.
pub fn pointer_segments(pointer: &str) -> impl Iterator<Item = String> + '_ {
    pointer.split('/').skip(1).map(|segment| {
        if segment.contains('~') {
            segment.replace("~1", "/").replace("~0", "~")
        } else {
            segment.to_owned()
        }
    })
}

/// Escapes one segment for use in a JSON pointer; borrowed when there is nothing to escape,
/// as for almost every key (pointers are built for every node of every schema).
pub fn escape_pointer_segment(segment: &str) -> Cow<'_, str> {
    if segment.contains(['~', '/']) {
        Cow::Owned(segment.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(segment)
    }
}

/// Parses one YAML document. An empty document (only comments or whitespace) gives `Ok(None)`.
pub fn parse(file: &SourceFile) -> Result<Option<Node>, Box<Diagnostic>> {
    let mut budget = Budget::default();
    budget.max_depth = MAX_DEPTH;
    budget.max_nodes = MAX_NODES;
    budget.max_aliases = MAX_ALIASES;
    budget.max_anchors = MAX_ALIASES;
    budget.max_documents = 1;
    budget.max_total_scalar_bytes = crate::loader::MAX_FILE_BYTES;
    let options = serde_saphyr::options! {
        budget: Some(budget),
        duplicate_keys: DuplicateKeyPolicy::Error,
        strict_booleans: true,
        with_snippet: false,
    };
    let parsed: Result<Option<Spanned<RawNode>>, _> =
        serde_saphyr::from_str_with_options(file.text(), options);
    match parsed {
        Ok(None) => Ok(None),
        Ok(Some(spanned)) => {
            let node = lower(file, spanned)?;
            Ok((node.value != Value::Null || !is_blank(file.text())).then_some(node))
        }
        Err(error) => Err(Box::new(syntax_diagnostic(file, &error))),
    }
}

fn is_blank(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .all(|line| line.is_empty() || line.starts_with('#') || line == "---" || line == "...")
}

/// What serde-saphyr hands back before positions are turned into byte ranges.
#[derive(Debug)]
enum RawNode {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    String(String),
    Seq(Vec<Spanned<RawNode>>),
    Map(Vec<(Spanned<RawNode>, Spanned<RawNode>)>),
}

impl<'de> Deserialize<'de> for RawNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RawNodeVisitor)
    }
}

struct RawNodeVisitor;

impl<'de> Visitor<'de> for RawNodeVisitor {
    type Value = RawNode;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<RawNode, E> {
        Ok(RawNode::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<RawNode, E> {
        Ok(RawNode::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawNode, D::Error> {
        RawNode::deserialize(deserializer)
    }
    fn visit_bool<E: de::Error>(self, value: bool) -> Result<RawNode, E> {
        Ok(RawNode::Bool(value))
    }
    fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawNode, E> {
        Ok(RawNode::Int(value))
    }
    fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawNode, E> {
        Ok(i64::try_from(value).map_or(RawNode::UInt(value), RawNode::Int))
    }
    fn visit_i128<E: de::Error>(self, value: i128) -> Result<RawNode, E> {
        i64::try_from(value)
            .map(RawNode::Int)
            .map_err(|_| E::custom("integer out of range"))
    }
    fn visit_u128<E: de::Error>(self, value: u128) -> Result<RawNode, E> {
        u64::try_from(value)
            .map_err(|_| E::custom("integer out of range"))
            .and_then(|value| self.visit_u64(value))
    }
    fn visit_f64<E: de::Error>(self, value: f64) -> Result<RawNode, E> {
        Ok(RawNode::Float(value))
    }
    fn visit_str<E: de::Error>(self, value: &str) -> Result<RawNode, E> {
        Ok(RawNode::String(value.to_owned()))
    }
    fn visit_string<E: de::Error>(self, value: String) -> Result<RawNode, E> {
        Ok(RawNode::String(value))
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<RawNode, E> {
        Err(E::custom("binary values are not supported"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawNode, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(RawNode::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawNode, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key()? {
            let value = map.next_value()?;
            entries.push((key, value));
        }
        Ok(RawNode::Map(entries))
    }
}

/// Turns serde-saphyr's character positions into byte ranges and checks keys are strings.
fn lower(file: &SourceFile, spanned: Spanned<RawNode>) -> Result<Node, Box<Diagnostic>> {
    let location = spanned.referenced;
    let offset = match location.span().byte_offset() {
        Some(offset) => usize::try_from(offset).unwrap_or(usize::MAX),
        None => file.offset_of(
            u32::try_from(location.line()).unwrap_or(u32::MAX),
            u32::try_from(location.column()).unwrap_or(u32::MAX),
        ),
    };
    let len = location
        .span()
        .byte_len()
        .map_or(0, |len| usize::try_from(len).unwrap_or(0));
    let value = match spanned.value {
        RawNode::Null => Value::Null,
        RawNode::Bool(value) => Value::Bool(value),
        RawNode::Int(value) => Value::Int(value),
        RawNode::UInt(value) => Value::UInt(value),
        RawNode::Float(value) => Value::Float(value),
        RawNode::String(text) => Value::String(text),
        RawNode::Seq(items) => Value::Seq(
            items
                .into_iter()
                .map(|item| lower(file, item))
                .collect::<Result<_, _>>()?,
        ),
        RawNode::Map(entries) => {
            let mut lowered = Vec::with_capacity(entries.len());
            for (key, value) in entries {
                let key = lower(file, key)?;
                if key.as_str().is_none() {
                    return Err(Box::new(Diagnostic::new(
                        Rule::YamlNonStringKey,
                        key.location(file),
                        "mapping keys must be strings",
                        "quote the key (`\"1\": ...`) or rename it",
                    )));
                }
                lowered.push((key, lower(file, value)?));
            }
            Value::Map(lowered)
        }
    };
    Ok(Node { value, offset, len })
}

/// Maps a serde-saphyr error to the matching rule, keeping its position.
fn syntax_diagnostic(file: &SourceFile, error: &serde_saphyr::Error) -> Diagnostic {
    let location = error.location().map_or_else(
        || Location::file(file.path()),
        |location| {
            let line = u32::try_from(location.line()).unwrap_or(u32::MAX).max(1);
            let column = u32::try_from(location.column()).unwrap_or(u32::MAX).max(1);
            let offset = file.offset_of(line, column);
            let len = file.text()[offset..]
                .chars()
                .next()
                .map_or(0, char::len_utf8);
            file.location(offset, len)
        },
    );
    let message = error.without_snippet().to_string();
    let message = strip_position_prefix(message.lines().next().unwrap_or_default());
    let lower = message.to_ascii_lowercase();
    if lower.contains("duplicate mapping key") {
        let key = message.rsplit_once(':').map_or("", |(_, key)| key.trim());
        let key = key.split(',').next().unwrap_or_default().trim();
        return Diagnostic::new(
            Rule::YamlDuplicateKey,
            location,
            format!("the key `{key}` appears twice in the same mapping"),
            "keep one of the two entries and delete the other",
        );
    }
    if lower.contains("unknown anchor") {
        return Diagnostic::new(
            Rule::YamlSyntax,
            location,
            "an alias (`*name`) refers to an anchor (`&name`) that is not defined",
            "define the anchor first, or quote the value if `*` is meant literally (`\"*failed\"`)",
        );
    }
    if lower.contains("documents") {
        return Diagnostic::new(
            Rule::YamlSyntax,
            location,
            "the file holds more than one YAML document",
            "keep one contract per file: remove the `---` separator and move the rest to its own file",
        );
    }
    if lower.contains("budget") || lower.contains("recursion limit") || lower.contains("alias") {
        let (what, fix) = if lower.contains("nodes") || lower.contains("events") {
            (
                format!("expands to more than {MAX_NODES} YAML nodes (an alias expansion bomb?)"),
                "write values out instead of multiplying them through aliases",
            )
        } else if lower.contains("alias") || lower.contains("anchor") {
            (
                format!("uses more than {MAX_ALIASES} aliases or anchors"),
                "write values out instead of referencing them through aliases",
            )
        } else if lower.contains("depth") || lower.contains("recursion") {
            (
                format!("nests deeper than {MAX_DEPTH} levels"),
                "flatten the document; contracts never need this much nesting",
            )
        } else {
            (
                "exceeds a YAML safety limit".to_owned(),
                "shrink the document; contract files are small",
            )
        };
        return Diagnostic::new(
            Rule::YamlLimitExceeded,
            location,
            format!("the document {what}"),
            fix,
        );
    }
    let fix = if lower.contains("tab") {
        "indent with spaces; YAML does not allow tabs for indentation"
    } else {
        "fix the YAML syntax at this position"
    };
    Diagnostic::new(
        Rule::YamlSyntax,
        location,
        format!("invalid YAML: {message}"),
        fix,
    )
}

/// serde-saphyr prefixes messages with `line L column C: `; the diagnostic carries that already.
fn strip_position_prefix(message: &str) -> String {
    let message = message.strip_prefix("error: ").unwrap_or(message);
    if let Some(rest) = message.strip_prefix("line ")
        && let Some((_, tail)) = rest.split_once(": ")
        && rest
            .split_once(": ")
            .is_some_and(|(head, _)| head.contains("column"))
    {
        return tail.to_owned();
    }
    match message.rfind(" at line ") {
        Some(index) if message[index..].contains(", column ") => message[..index].to_owned(),
        _ => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Result<Option<Node>, Box<Diagnostic>> {
        parse(&SourceFile::new("t.yaml", text))
    }

    #[test]
    fn keeps_byte_positions_of_keys_and_values() {
        let text = "event: iu.born\nversions:\n  - version: 1.0.0\n";
        let node = parse_text(text).expect("parses").expect("not empty");
        let (key, value) = node.pointer_entry("/versions/0/version").expect("exists");
        let key = key.expect("reached through a mapping");
        assert_eq!(&text[key.offset..key.offset + key.len], "version");
        assert_eq!(&text[value.offset..value.offset + value.len], "1.0.0");
    }

    #[test]
    fn duplicate_keys_are_reported_at_the_second_key() {
        let error = parse_text("a: 1\nb: 2\na: 3\n").expect_err("duplicate");
        assert_eq!(error.rule, Rule::YamlDuplicateKey);
        assert_eq!((error.location.line, error.location.column), (3, 1));
        assert!(error.message.contains("`a`"), "{}", error.message);
    }

    #[test]
    fn blank_documents_are_none() {
        assert_eq!(parse_text("# only a comment\n\n").expect("parses"), None);
        assert_eq!(parse_text("").expect("parses"), None);
    }

    #[test]
    fn deep_nesting_is_refused_without_overflowing_the_stack() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        let error = parse_text(&deep).expect_err("too deep");
        assert_eq!(error.rule, Rule::YamlLimitExceeded);
    }

    #[test]
    fn non_string_keys_are_refused() {
        let error = parse_text("1: a\n").expect_err("int key");
        assert_eq!(error.rule, Rule::YamlNonStringKey);
    }

    #[test]
    fn pointer_segments_unescape() {
        let segments: Vec<_> = pointer_segments("/a~1b/c~0d/0").collect();
        assert_eq!(segments, ["a/b", "c~d", "0"]);
    }
}
