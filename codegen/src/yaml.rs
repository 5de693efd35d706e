//! The one place that parses YAML (with `granit-parser`, the parser serde-saphyr re-exports).
//!
//! A document becomes a [`Node`] tree in which every mapping key, value and list item keeps its
//! byte range, so any later finding, down to a keyword deep inside a payload schema, can point at
//! its line and column. Hostile input is bounded before it costs anything: nesting depth, alias
//! expansion, node count and scalar bytes are all capped, and the parser's own lookahead and
//! nesting limits are serde-saphyr's [`Budget`] defaults.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_saphyr::Budget;
use serde_saphyr::granit_parser::{self as granit, Event};

use crate::diagnostic::{Diagnostic, Rule};
use crate::source::{Location, SourceFile};

mod scalars;

/// Deepest nesting accepted. Payload schemas nest a few levels; 64 leaves room and keeps every
/// recursive walk over the tree far from the stack limit.
pub const MAX_DEPTH: usize = 64;
/// Most YAML nodes accepted in one contract file (after alias expansion).
pub const MAX_NODES: usize = 100_000;
/// Most YAML nodes accepted in one AsyncAPI document ([`Limits::DOCUMENT`]).
pub const MAX_DOCUMENT_NODES: usize = 4_000_000;
/// Largest AsyncAPI document read, in bytes: the one `evc generate` writes for a large contract
/// set (8 MiB of contracts give 14 MiB) fits with room to spare.
pub const MAX_DOCUMENT_BYTES: usize = 32 * 1024 * 1024;

/// How much one parse may hold: nodes after alias expansion, and scalar bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most nodes, after alias expansion.
    pub nodes: usize,
    /// Most bytes of scalar text, after alias expansion.
    pub scalar_bytes: usize,
}

impl Limits {
    /// A contract file: at most [`crate::loader::MAX_FILE_BYTES`] long, far fewer nodes than a
    /// generated document.
    pub const CONTRACT: Self = Self {
        nodes: MAX_NODES,
        scalar_bytes: crate::loader::MAX_FILE_BYTES,
    };
    /// An AsyncAPI document, which `evc generate` writes for the whole contract set.
    pub const DOCUMENT: Self = Self {
        nodes: MAX_DOCUMENT_NODES,
        scalar_bytes: MAX_DOCUMENT_BYTES,
    };
}
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
///
/// The tree is built straight from the parser's events, which carry byte spans: going through
/// serde with a span wrapper around every node costs more than scanning the text itself.
/// Scalars resolve as serde-saphyr resolves them for an untyped value (YAML 1.2 core schema,
/// strict booleans, `<<` merge keys, duplicate keys refused).
pub fn parse(file: &SourceFile) -> Result<Option<Node>, Box<Diagnostic>> {
    parse_within(file, Limits::CONTRACT)
}

/// Parses one YAML document within `limits`; otherwise as [`parse`].
pub fn parse_within(file: &SourceFile, limits: Limits) -> Result<Option<Node>, Box<Diagnostic>> {
    let budget = Budget::default();
    let options = granit::options! {
        simple_key_max_lookahead: budget.simple_key_max_lookahead,
        flow_nesting_limit: budget.flow_nesting_limit,
        // Deep block nesting reaches the depth limit below, with its own diagnostic.
        block_nesting_limit: granit::Options::default().block_nesting_limit.max(MAX_DEPTH + 1),
        // Another crate may build the parser with comment events; the tree has no place for them.
        emit_comments: false,
    };
    let mut reader = Reader {
        file,
        parser: granit::Parser::new_from_str_with_options(file.text(), options),
        limits,
        anchors: HashMap::new(),
        nodes: 0,
        aliases: 0,
        scalar_bytes: 0,
        deepest: None,
    };
    let node = reader.document()?;
    // A document that is only `~`, `null` or `---` holds nothing, as for serde-saphyr.
    Ok(node.filter(|node| node.value != Value::Null))
}

/// Builds the tree of one document from the parser's events, within the limits.
struct Reader<'a> {
    file: &'a SourceFile,
    parser: granit::Parser<'a, granit::StrInput<'a>>,
    limits: Limits,
    /// Anchored nodes by the parser's anchor id, with the nodes and scalar bytes they hold.
    anchors: HashMap<usize, Anchored>,
    nodes: usize,
    aliases: usize,
    scalar_bytes: usize,
    /// The deepest collection of the node being built, as a depth from the document's root.
    deepest: Option<usize>,
}

struct Anchored {
    node: Node,
    nodes: usize,
    scalar_bytes: usize,
    /// How far below the anchored node its deepest collection lies (`None`: it holds none), so
    /// that an alias cannot stack nesting past [`MAX_DEPTH`].
    height: Option<usize>,
}

/// Entries a mapping holds before its duplicate-key check switches from a scan to a set.
const SCAN_KEYS: usize = 16;

impl<'a> Reader<'a> {
    fn next(&mut self) -> Result<(Event<'a>, granit::Span), Box<Diagnostic>> {
        match self.parser.next() {
            Some(Ok(event)) => Ok(event),
            Some(Err(error)) => Err(Box::new(scan_diagnostic(self.file, &error))),
            None => Ok((
                Event::StreamEnd,
                granit::Span::empty(granit::Marker::new(0, 1, 0)),
            )),
        }
    }

    fn document(&mut self) -> Result<Option<Node>, Box<Diagnostic>> {
        let mut node = None;
        loop {
            let (event, span) = self.next()?;
            match event {
                Event::StreamStart | Event::DocumentEnd => {}
                Event::StreamEnd => return Ok(node),
                Event::DocumentStart(..) if node.is_some() => {
                    return Err(Box::new(Diagnostic::new(
                        Rule::YamlSyntax,
                        self.location(&span),
                        "the file holds more than one YAML document",
                        "keep one contract per file: remove the `---` separator and move the rest \
                         to its own file",
                    )));
                }
                Event::DocumentStart(..) => {
                    let (event, span) = self.next()?;
                    node = Some(self.node(event, span, 0)?);
                }
                _ => return Err(self.unexpected(&span)),
            }
        }
    }

    fn node(
        &mut self,
        event: Event<'a>,
        span: granit::Span,
        depth: usize,
    ) -> Result<Node, Box<Diagnostic>> {
        let (offset, len) = self.range(&span);
        let (nodes_before, bytes_before) = (self.nodes, self.scalar_bytes);
        let outer = self.deepest.take();
        let (value, anchor) = match event {
            Event::Scalar(text, style, anchor, tag) => {
                self.count(1, text.len(), &span)?;
                (self.scalar(text, style, tag.as_deref(), &span)?, anchor)
            }
            Event::SequenceStart(_, anchor, tag) => {
                self.collection_tag(tag.as_deref(), "list", &span)?;
                self.enter(depth, &span)?;
                let mut items = Vec::new();
                loop {
                    let (event, span) = self.next()?;
                    if matches!(event, Event::SequenceEnd) {
                        break;
                    }
                    items.push(self.node(event, span, depth + 1)?);
                }
                (Value::Seq(items), anchor)
            }
            Event::MappingStart(_, anchor, tag) => {
                self.collection_tag(tag.as_deref(), "mapping", &span)?;
                self.enter(depth, &span)?;
                (self.mapping(depth)?, anchor)
            }
            Event::Alias(id) => {
                let node = self.alias(id, offset, len, depth, &span)?;
                self.deepest = self.deepest.max(outer);
                return Ok(node);
            }
            _ => return Err(self.unexpected(&span)),
        };
        let inner = self.deepest;
        self.deepest = inner.max(outer);
        let node = Node { value, offset, len };
        if anchor != 0 {
            if self.anchors.len() >= MAX_ALIASES {
                return Err(self.limit(&span, Breach::Aliases));
            }
            let (nodes, scalar_bytes) =
                (self.nodes - nodes_before, self.scalar_bytes - bytes_before);
            // The copy kept for the aliases counts against the limits like any other node, so
            // anchors nested in anchors cannot multiply what one file holds.
            self.count(nodes, scalar_bytes, &span)?;
            let anchored = Anchored {
                node: node.clone(),
                nodes,
                scalar_bytes,
                height: inner.map(|deepest| deepest - depth),
            };
            self.anchors.insert(anchor, anchored);
        }
        Ok(node)
    }

    fn mapping(&mut self, depth: usize) -> Result<Value, Box<Diagnostic>> {
        let mut entries: Vec<(Node, Node)> = Vec::new();
        let mut keys: Option<HashSet<String>> = None;
        // Entries merged in through `<<`, in order of precedence.
        let mut merged: Vec<(Node, Node)> = Vec::new();
        loop {
            let (event, span) = self.next()?;
            if matches!(event, Event::MappingEnd) {
                break;
            }
            let is_merge = match &event {
                Event::Scalar(text, granit::ScalarStyle::Plain, _, None) => text == "<<",
                Event::Scalar(_, _, _, Some(tag)) => tag_name(tag).as_deref() == Some("merge"),
                _ => false,
            };
            let key = self.node(event, span, depth + 1)?;
            let (event, span) = self.next()?;
            let value = self.node(event, span, depth + 1)?;
            if is_merge {
                self.merge_source(value, &mut merged)?;
                continue;
            }
            let Some(text) = key.as_str() else {
                return Err(Box::new(Diagnostic::new(
                    Rule::YamlNonStringKey,
                    key.location(self.file),
                    "mapping keys must be strings",
                    "quote the key (`\"1\": ...`) or rename it",
                )));
            };
            let duplicate = match &mut keys {
                Some(keys) => !keys.insert(text.to_owned()),
                None => entries.iter().any(|(k, _)| k.as_str() == Some(text)),
            };
            if duplicate {
                return Err(Box::new(Diagnostic::new(
                    Rule::YamlDuplicateKey,
                    key.location(self.file),
                    format!("the key `{text}` appears twice in the same mapping"),
                    "keep one of the two entries and delete the other",
                )));
            }
            entries.push((key, value));
            if keys.is_none() && entries.len() == SCAN_KEYS {
                keys = Some(entries.iter().map(|(k, _)| k.key_text()).collect());
            }
        }
        // Merged entries follow the mapping's own, which win, as serde-saphyr places them.
        if !merged.is_empty() {
            let mut taken: HashSet<String> = entries.iter().map(|(k, _)| k.key_text()).collect();
            entries.extend(
                merged
                    .into_iter()
                    .filter(|(key, _)| taken.insert(key.key_text())),
            );
        }
        Ok(Value::Map(entries))
    }

    /// Adds the entries of a `<<` value (a mapping, or a list of them) to `merged`.
    fn merge_source(
        &self,
        value: Node,
        merged: &mut Vec<(Node, Node)>,
    ) -> Result<(), Box<Diagnostic>> {
        match value.value {
            Value::Null => {}
            Value::Map(entries) => merged.extend(entries),
            Value::Seq(items) if items.iter().all(|item| matches!(item.value, Value::Map(_))) => {
                for item in items {
                    if let Value::Map(entries) = item.value {
                        merged.extend(entries);
                    }
                }
            }
            _ => {
                return Err(Box::new(Diagnostic::new(
                    Rule::YamlSyntax,
                    value.location(self.file),
                    "the value of a `<<` merge key must be a mapping or a list of mappings",
                    "merge an anchored mapping (`<<: *defaults`), or write the entries out",
                )));
            }
        }
        Ok(())
    }

    fn alias(
        &mut self,
        id: usize,
        offset: usize,
        len: usize,
        depth: usize,
        span: &granit::Span,
    ) -> Result<Node, Box<Diagnostic>> {
        self.aliases += 1;
        if self.aliases > MAX_ALIASES {
            return Err(self.limit(span, Breach::Aliases));
        }
        let Some(anchored) = self.anchors.get(&id) else {
            // The anchor is still open: the alias sits inside the node it names.
            return Err(Box::new(Diagnostic::new(
                Rule::YamlSyntax,
                self.location(span),
                "an alias (`*name`) refers to the node that contains it",
                "write the value out instead of referring to itself",
            )));
        };
        let (nodes, bytes, height) = (anchored.nodes, anchored.scalar_bytes, anchored.height);
        if let Some(height) = height {
            // The copy's collections nest below the alias as they did below the anchor.
            self.enter(depth + height, span)?;
        }
        // Counted before it is copied, so a bomb is refused before it costs memory.
        self.count(nodes, bytes, span)?;
        let mut node = self.anchors[&id].node.clone();
        node.offset = offset;
        node.len = len;
        Ok(node)
    }

    fn scalar(
        &self,
        text: Cow<'a, str>,
        style: granit::ScalarStyle,
        tag: Option<&granit::Tag>,
        span: &granit::Span,
    ) -> Result<Value, Box<Diagnostic>> {
        let non_finite = || {
            Box::new(Diagnostic::new(
                Rule::YamlSyntax,
                self.location(span),
                format!("invalid YAML: `{}` is not a finite number", text.trim()),
                "quote the value if it is meant as text (`\".inf\"`)",
            ))
        };
        let invalid = |what: &str| {
            Box::new(Diagnostic::new(
                Rule::YamlSyntax,
                self.location(span),
                format!("invalid YAML: the value is not a valid {what}"),
                "fix the value, or remove the tag",
            ))
        };
        if let Some(tag) = tag {
            match tag_name(tag).as_deref() {
                Some("str" | "!") => return Ok(Value::String(text.into_owned())),
                Some("null") => return Ok(Value::Null),
                Some("bool") => {
                    return scalars::boolean(&text)
                        .map(Value::Bool)
                        .ok_or_else(|| invalid("boolean"));
                }
                Some("int") => return scalars::integer(&text).ok_or_else(|| invalid("integer")),
                Some("float") => {
                    return match scalars::float(&text) {
                        Some(value) if value.is_finite() => Ok(Value::Float(value)),
                        Some(_) => Err(non_finite()),
                        None => Err(invalid("number")),
                    };
                }
                // Decoded, a binary value could hold any byte, NUL included, behind plain text.
                Some(name @ ("binary" | "timestamp")) => {
                    return Err(Box::new(Diagnostic::new(
                        Rule::YamlSyntax,
                        self.location(span),
                        format!("`!!{name}` values are not supported"),
                        "write the value as a string",
                    )));
                }
                Some(name @ ("seq" | "map")) => {
                    return Err(Box::new(Diagnostic::new(
                        Rule::YamlSyntax,
                        self.location(span),
                        format!("invalid YAML: the tag `!!{name}` is on a single value"),
                        "remove the tag",
                    )));
                }
                // Other tags (`!!timestamp`, custom ones) leave the value as written.
                _ => {}
            }
        }
        if style != granit::ScalarStyle::Plain {
            return Ok(Value::String(text.into_owned()));
        }
        match scalars::plain(&text) {
            scalars::Plain::Value(value) => Ok(value),
            scalars::Plain::NonFinite => Err(non_finite()),
            scalars::Plain::Text => Ok(Value::String(text.into_owned())),
        }
    }

    /// Notes a collection at `depth`, refusing one too deep.
    fn enter(&mut self, depth: usize, span: &granit::Span) -> Result<(), Box<Diagnostic>> {
        if depth >= MAX_DEPTH {
            return Err(self.limit(span, Breach::Depth));
        }
        self.deepest = self.deepest.max(Some(depth));
        Ok(())
    }

    /// Refuses a scalar's tag (`!!str`, `!!int`, ...) on a list or mapping.
    fn collection_tag(
        &self,
        tag: Option<&granit::Tag>,
        what: &str,
        span: &granit::Span,
    ) -> Result<(), Box<Diagnostic>> {
        let name = tag.and_then(tag_name);
        match name.as_deref() {
            Some(name @ ("str" | "null" | "bool" | "int" | "float" | "binary" | "timestamp")) => {
                Err(Box::new(Diagnostic::new(
                    Rule::YamlSyntax,
                    self.location(span),
                    format!("invalid YAML: the tag `!!{name}` is on a {what}"),
                    "remove the tag",
                )))
            }
            _ => Ok(()),
        }
    }

    fn count(
        &mut self,
        nodes: usize,
        scalar_bytes: usize,
        span: &granit::Span,
    ) -> Result<(), Box<Diagnostic>> {
        self.nodes += nodes.max(1);
        self.scalar_bytes += scalar_bytes;
        if self.nodes > self.limits.nodes {
            return Err(self.limit(span, Breach::Nodes(self.limits.nodes)));
        }
        if self.scalar_bytes > self.limits.scalar_bytes {
            return Err(self.limit(span, Breach::ScalarBytes));
        }
        Ok(())
    }

    fn limit(&self, span: &granit::Span, breach: Breach) -> Box<Diagnostic> {
        Box::new(limit_diagnostic(self.location(span), breach))
    }

    fn unexpected(&self, span: &granit::Span) -> Box<Diagnostic> {
        Box::new(Diagnostic::new(
            Rule::YamlSyntax,
            self.location(span),
            "invalid YAML: unexpected structure at this position",
            "fix the YAML syntax at this position",
        ))
    }

    /// The byte offset and length of a span.
    fn range(&self, span: &granit::Span) -> (usize, usize) {
        let start = self.byte_offset(&span.start);
        let end = self.byte_offset(&span.end).max(start);
        (start, end - start)
    }

    fn byte_offset(&self, marker: &granit::Marker) -> usize {
        marker_offset(self.file, marker)
    }

    fn location(&self, span: &granit::Span) -> Location {
        let (offset, len) = self.range(span);
        self.file.location(offset, len)
    }
}

/// The name of a scalar's tag as serde-saphyr reads it: the core schema's (`!!int`, or its
/// long form), a local spelling of one (`!int`), or `!` for the non-specific tag, which keeps
/// the text.
fn tag_name(tag: &granit::Tag) -> Option<Cow<'_, str>> {
    if let Some(name) = tag.core_suffix() {
        return Some(Cow::Borrowed(name));
    }
    if let Some(name) = tag.suffix_in_namespace("tag:yaml.org,2002:") {
        return Some(Cow::Owned(
            name.strip_prefix('!').unwrap_or(&name).to_owned(),
        ));
    }
    let suffix = tag.suffix_in_namespace("!")?;
    match suffix.as_ref() {
        "" | "!" => Some(Cow::Borrowed("!")),
        name => Some(Cow::Owned(
            name.strip_prefix('!').unwrap_or(name).to_owned(),
        )),
    }
}

/// The byte offset of a parser position; from its line and (0-based) column when the parser
/// gives no byte offset.
fn marker_offset(file: &SourceFile, marker: &granit::Marker) -> usize {
    marker.byte_offset().unwrap_or_else(|| {
        file.offset_of(
            u32::try_from(marker.line()).unwrap_or(u32::MAX).max(1),
            u32::try_from(marker.col() + 1).unwrap_or(u32::MAX),
        )
    })
}

/// Which safety limit a document went past.
#[derive(Debug, Clone, Copy)]
enum Breach {
    /// More nodes than the limit given, after alias expansion.
    Nodes(usize),
    /// More than [`MAX_ALIASES`] aliases, or as many anchors.
    Aliases,
    /// Nesting deeper than [`MAX_DEPTH`].
    Depth,
    /// More scalar text than the limits allow, after alias expansion.
    ScalarBytes,
}

fn limit_diagnostic(location: Location, breach: Breach) -> Diagnostic {
    let (what, fix) = match breach {
        Breach::Nodes(nodes) => (
            format!("expands to more than {nodes} YAML nodes (an alias expansion bomb?)"),
            "write values out instead of multiplying them through aliases",
        ),
        Breach::Aliases => (
            format!("uses more than {MAX_ALIASES} aliases or anchors"),
            "write values out instead of referencing them through aliases",
        ),
        Breach::Depth => (
            format!("nests deeper than {MAX_DEPTH} levels"),
            "flatten the document; contracts never need this much nesting",
        ),
        Breach::ScalarBytes => (
            "exceeds a YAML safety limit".to_owned(),
            "shrink the document; contract files are small",
        ),
    };
    Diagnostic::new(
        Rule::YamlLimitExceeded,
        location,
        format!("the document {what}"),
        fix,
    )
}

/// Maps a scanner error to a diagnostic at its position.
fn scan_diagnostic(file: &SourceFile, error: &granit::ScanError) -> Diagnostic {
    let offset = marker_offset(file, error.marker()).min(file.text().len());
    let len = file.text()[offset..]
        .chars()
        .next()
        .map_or(0, char::len_utf8);
    let location = file.location(offset, len);
    if matches!(error.kind(), granit::ErrorKind::UnknownAnchor) {
        return Diagnostic::new(
            Rule::YamlSyntax,
            location,
            "an alias (`*name`) refers to an anchor (`&name`) that is not defined",
            "define the anchor first, or quote the value if `*` is meant literally (`\"*failed\"`)",
        );
    }
    let message = error.info();
    let lower = message.to_ascii_lowercase();
    if lower.contains("nesting") || lower.contains("recursion") {
        return limit_diagnostic(location, Breach::Depth);
    }
    let fix = if lower.contains("tab") {
        "indent with spaces; YAML does not allow tabs for indentation"
    } else {
        "fix the YAML syntax at this position"
    };
    Diagnostic::new(
        Rule::YamlSyntax,
        location,
        format!(
            "invalid YAML: {}",
            message.lines().next().unwrap_or_default()
        ),
        fix,
    )
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

    /// The tree reads every value as serde-saphyr reads it into an untyped value.
    #[test]
    fn values_resolve_as_serde_saphyr_resolves_them() {
        let cases = [
            "a: ~\nb: null\nc:\nd: NULL\ne: ''\n",
            "a: true\nb: False\nc: yes\nd: on\ne: 'true'\nf: !!str true\n",
            "a: 12\nb: -12\nc: +7\nd: 0x1f\ne: 0o17\nf: 0b101\ng: 1_000\nh: 0127\n",
            "a: 0X1F\nb: 9223372036854775808\nc: 18446744073709551615\nd: 1.0.0\n",
            "a: 2.5\nb: 2.5e3\nc: .5\nd: 5.\ne: 50.0\nf: -0.0\ng: inf\nh: nan\n",
            "a: !!int '42'\nb: !!float 1\nc: !!bool 'true'\nd: !!null x\ne: ! 12\n",
            "a: \"x\\ty\"\nb: |\n  line\n  next\nc: >\n  folded\n  text\n",
            "base: &base {a: 1, b: 2}\nderived:\n  <<: *base\n  b: 3\n  c: 4\n",
            "x: &x [1, 2]\ny: [*x, *x]\nz: {k: [a, {m: n}]}\n",
            "one: &one {a: 1}\ntwo: &two {a: 2, b: 2}\nboth:\n  <<: [*one, *two]\n",
            "base: &b {z: 1}\nm: {a: 0, <<: *b, b: 2}\nn: {<<: , c: 1}\no: {!!merge <<: *b}\n",
            "a: !!int 0X1F\nb: !!float 1\nc: !bool true\nd: !custom 12\ne: !!str\n",
            "- a\n- - b\n  - c\n- {d: e}\n",
        ];
        for text in cases {
            let ours = parse_text(text)
                .expect("parses")
                .expect("not empty")
                .to_json();
            let options = serde_saphyr::options! { strict_booleans: true };
            let theirs: serde_json::Value =
                serde_saphyr::from_str_with_options(text, options).expect("serde-saphyr parses");
            // Compared as text: the maps keep document order, which map equality ignores.
            let (ours, theirs) = (ours.to_string(), integral(theirs).to_string());
            assert_eq!(ours, theirs, "{text}");
        }
    }

    /// Whole floats as integers, as [`Node::to_json`] gives them.
    fn integral(value: serde_json::Value) -> serde_json::Value {
        use serde_json::Value as Json;
        match value {
            Json::Number(number) => match number.as_f64() {
                Some(float) if number.is_f64() && float.fract() == 0.0 && float.abs() < 9.0e15 => {
                    Json::from(float as i64)
                }
                _ => Json::Number(number),
            },
            Json::Array(items) => items.into_iter().map(integral).collect(),
            Json::Object(map) => map.into_iter().map(|(k, v)| (k, integral(v))).collect(),
            other => other,
        }
    }

    #[test]
    fn merged_keys_follow_the_mappings_own_which_win() {
        let text = "base: &base {b: 1, z: 1}\nm:\n  a: 0\n  <<: *base\n  b: 2\n";
        let node = parse_text(text).expect("parses").expect("not empty");
        let m = node.get("m").expect("m");
        let keys: Vec<_> = match &m.value {
            Value::Map(entries) => entries.iter().filter_map(|(k, _)| k.as_str()).collect(),
            other => panic!("not a mapping: {other:?}"),
        };
        assert_eq!(keys, ["a", "b", "z"]);
        assert_eq!(m.get("b").map(|b| &b.value), Some(&Value::Int(2)));
    }

    #[test]
    fn aliases_cannot_stack_nesting_past_the_depth_limit() {
        // Each line nests 20 lists around an alias to the line before: pasted together, three
        // lines nest 60 deep, within the limit; four nest 80.
        let line = |n: usize| {
            let inner = if n == 0 {
                "1".to_owned()
            } else {
                format!("*x{}", n - 1)
            };
            format!("x{n}: &x{n} {}{inner}{}\n", "[".repeat(20), "]".repeat(20))
        };
        let three: String = (0..3).map(line).collect();
        assert!(parse_text(&three).is_ok());
        let four: String = (0..4).map(line).collect();
        let error = parse_text(&four).expect_err("too deep through aliases");
        assert_eq!(error.rule, Rule::YamlLimitExceeded);
        assert!(error.message.contains("nests deeper"), "{}", error.message);
    }

    #[test]
    fn anchors_nested_in_anchors_count_every_copy_they_keep() {
        // 60 anchors around one list of 2,000 items: each anchor keeps a copy of the list, so
        // the file holds 120,000 nodes, over a contract file's limit.
        let text = format!(
            "a: {}[{}]{}\n",
            (0..60).map(|n| format!("&a{n} [")).collect::<String>(),
            vec!["1"; 2_000].join(", "),
            "]".repeat(60)
        );
        let error = parse_text(&text).expect_err("the kept copies count");
        assert_eq!(error.rule, Rule::YamlLimitExceeded);
    }

    #[test]
    fn a_null_document_is_no_document() {
        for text in ["~\n", "null\n", "--- # comment\n", "---\n...\n"] {
            assert_eq!(parse_text(text).expect("parses"), None, "{text:?}");
        }
    }

    #[test]
    fn tags_that_do_not_fit_are_refused() {
        for text in [
            "a: !!binary aGk=\n",
            "a: !!timestamp 2001-12-14\n",
            "a: !!str [1]\n",
            "a: !!int\n  b: 1\n",
            "a: !!map x\n",
            "a: !!float .inf\n",
            "a: !!float 0x1f\n",
        ] {
            let error = parse_text(text).expect_err(text);
            assert_eq!(error.rule, Rule::YamlSyntax, "{text:?}: {}", error.message);
        }
    }

    #[test]
    fn an_alias_inside_its_own_anchor_is_refused() {
        let error = parse_text("a: &a [1, *a]\n").expect_err("recursive");
        assert_eq!(error.rule, Rule::YamlSyntax);
    }

    #[test]
    fn non_finite_numbers_are_refused_with_their_text() {
        let error = parse_text("a: .inf\n").expect_err("not JSON");
        assert!(error.message.contains(".inf"), "{}", error.message);
    }

    #[test]
    fn a_generated_document_gets_room_a_contract_file_does_not() {
        // 150,000 list items: beyond a contract file's node limit, within a document's.
        let text = format!("items: [{}]\n", vec!["1"; 150_000].join(", "));
        let error = parse_text(&text).expect_err("too many nodes for a contract");
        assert_eq!(error.rule, Rule::YamlLimitExceeded);
        let file = SourceFile::new("asyncapi.yaml", text);
        let tree = parse_within(&file, Limits::DOCUMENT)
            .expect("a document may hold more")
            .expect("not empty");
        let items = tree.get("items").map(|items| &items.value);
        assert!(matches!(items, Some(Value::Seq(items)) if items.len() == 150_000));
    }

    #[test]
    fn pointer_segments_unescape() {
        let segments: Vec<_> = pointer_segments("/a~1b/c~0d/0").collect();
        assert_eq!(segments, ["a/b", "c~d", "0"]);
    }
}
