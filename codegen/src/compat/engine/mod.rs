//! The schema comparison engine: does every value the writer schema accepts also pass the
//! reader schema (writer ⊆ reader)?
//!
//! The engine is sound and incomplete: when it says "compatible", no payload valid for the
//! writer is rejected by the reader (the property test in `codegen/tests/compat_property.rs`
//! hunts for one). Where it cannot decide (a changed regex, an external `$ref`, a changed
//! conditional, an unknown keyword) it reports an incompatibility, never a pass.
//!
//! The method: `$ref`s are followed (recursion is assumed to hold on the cycle, coinductively);
//! the writer is split into alternatives (its `anyOf`/`oneOf`/`if` branches, `allOf` merged);
//! each alternative is checked against the reader's applicators (`allOf` member by member,
//! `anyOf`/`oneOf` by finding a member that accepts the alternative or each of its types, `not`
//! by disjointness, `if`/`then`/`else` by cases) and then keyword by keyword per JSON type.
//! A writer that lists its values (`enum`, `const`) is judged exactly, value by value, with a
//! JSON Schema validator.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

use super::report::CompatRule;
use super::schema::{
    self, Dialect, additional_properties, count, finite_values, is_annotation, is_false,
    is_trivial, is_unsatisfiable, json_equal, lower_bound, type_of_value, type_set, types,
    upper_bound,
};
use super::values::Document;
use crate::payload_schema::FORMATS;

/// How deep the engine follows nested schemas and references before it gives up (fails closed).
const MAX_DEPTH: usize = 96;
/// How many writer alternatives one schema may expand into before the engine gives up.
const MAX_ALTERNATIVES: usize = 64;

/// One step into a payload.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// An object property.
    Key(String),
    /// An array position.
    Index(usize),
}

/// One reason the reader does not accept everything the writer emits.
#[derive(Debug, Clone, PartialEq)]
pub struct Incompatibility {
    /// The rule.
    pub rule: CompatRule,
    /// JSON pointer into the writer schema, where the writer's side of the difference is.
    pub writer_pointer: String,
    /// JSON pointer into the reader schema, at the keyword that rejects.
    pub reader_pointer: String,
    /// Where in the payload the difference shows.
    pub instance_path: Vec<Segment>,
    /// What differs, in one sentence.
    pub message: String,
    /// A payload fragment (at `instance_path`) likely to show the difference, if one is known.
    pub hint: Option<Value>,
}

/// Checks `writer ⊆ reader`: an empty result means every value valid for the writer is valid
/// for the reader.
pub fn check(writer: &mut Document, reader: &mut Document) -> Vec<Incompatibility> {
    let writer_root = Node::root(writer.root());
    let reader_root = Node::root(reader.root());
    let mut checker = Checker {
        writer,
        reader,
        assumed: HashSet::new(),
        depth: 0,
        regexes: HashMap::new(),
    };
    let mut found = checker.sub(writer_root, reader_root, &[]);
    dedup(&mut found);
    found
}

fn dedup(found: &mut Vec<Incompatibility>) {
    let mut seen = HashSet::new();
    found.retain(|item| {
        seen.insert((
            item.rule,
            item.reader_pointer.clone(),
            item.writer_pointer.clone(),
        ))
    });
}

/// A subschema with where it sits.
#[derive(Debug, Clone)]
struct Node {
    schema: Value,
    /// JSON pointer into its document ("" for the root).
    pointer: String,
    /// True when `schema` is exactly what the document holds at `pointer`.
    real: bool,
    /// Further conjuncts (a `$ref` with siblings, writer conjunctions that do not merge).
    also: Vec<Node>,
    /// True when reached through a `$ref` (cycle detection keys on these).
    via_ref: bool,
}

impl Node {
    fn root(schema: &Value) -> Self {
        Self::at(schema, String::new())
    }

    fn at(schema: &Value, pointer: String) -> Self {
        Self {
            schema: schema.clone(),
            pointer,
            real: true,
            also: Vec::new(),
            via_ref: false,
        }
    }

    fn child(&self, schema: &Value, suffix: &str) -> Self {
        Self::at(schema, format!("{}{suffix}", self.pointer))
    }

    fn synthetic(schema: Value, pointer: &str) -> Self {
        Self {
            schema,
            pointer: pointer.to_owned(),
            real: false,
            also: Vec::new(),
            via_ref: false,
        }
    }

    fn map(&self) -> &Map<String, Value> {
        static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
        match &self.schema {
            Value::Object(map) => map,
            _ => &EMPTY,
        }
    }

    fn get(&self, keyword: &str) -> Option<&Value> {
        self.schema.get(keyword)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Writer,
    Reader,
}

struct Checker<'d> {
    writer: &'d mut Document,
    reader: &'d mut Document,
    /// Pairs of referenced schemas under comparison on the current path (coinduction).
    assumed: HashSet<(String, String)>,
    depth: usize,
    regexes: HashMap<String, Option<regex::Regex>>,
}

fn found(
    rule: CompatRule,
    writer: &Node,
    reader_pointer: String,
    path: &[Segment],
    message: String,
) -> Incompatibility {
    // Point into the writer at the same keyword when it has one (a forward finding is located
    // in the writer, the new version): `/properties/a/type`, `/required`.
    let keyword = match rule {
        CompatRule::RequiredAdded => Some("required"),
        _ => reader_pointer.rsplit('/').next(),
    };
    let writer_pointer = match keyword {
        Some(keyword) if writer.real && writer.get(keyword).is_some() => {
            format!("{}/{keyword}", writer.pointer)
        }
        _ => writer.pointer.clone(),
    };
    Incompatibility {
        rule,
        writer_pointer,
        reader_pointer,
        instance_path: path.to_vec(),
        message,
        hint: None,
    }
}

fn with_segment(path: &[Segment], segment: Segment) -> Vec<Segment> {
    let mut longer = path.to_vec();
    longer.push(segment);
    longer
}

fn list(names: &[&str]) -> String {
    names.join(", ")
}

impl Checker<'_> {
    fn document(&mut self, side: Side) -> &mut Document {
        match side {
            Side::Writer => self.writer,
            Side::Reader => self.reader,
        }
    }

    fn dialect(&self, side: Side) -> Dialect {
        match side {
            Side::Writer => self.writer.dialect(),
            Side::Reader => self.reader.dialect(),
        }
    }

    /// Follows `$ref` until the node has none.
    fn deref(&mut self, side: Side, mut node: Node) -> Result<Node, Box<Incompatibility>> {
        for _ in 0..32 {
            let Some(reference) = node.get("$ref").and_then(Value::as_str).map(str::to_owned)
            else {
                return Ok(node);
            };
            let root = self.document(side).root();
            let Some((target, pointer)) = schema::resolve(root, &reference) else {
                return Err(Box::new(found(
                    CompatRule::Unjudgeable,
                    &node,
                    format!("{}/$ref", node.pointer),
                    &[],
                    format!(
                        "the reference `{reference}` is not a local JSON pointer; evc does not follow it"
                    ),
                )));
            };
            let mut target = Node::at(target, pointer);
            target.via_ref = true;
            let siblings: Map<String, Value> = node
                .map()
                .iter()
                .filter(|(keyword, _)| *keyword != "$ref" && !is_annotation(keyword))
                .map(|(keyword, value)| (keyword.clone(), value.clone()))
                .collect();
            if self.dialect(side) == Dialect::Draft2020 && !siblings.is_empty() {
                let mut rest = Node::synthetic(Value::Object(siblings), &node.pointer);
                rest.also.push(target);
                rest.also.extend(node.also);
                rest.via_ref = true;
                return Ok(rest);
            }
            target.also.extend(node.also);
            node = target;
        }
        Err(Box::new(found(
            CompatRule::Unjudgeable,
            &node,
            node.pointer.clone(),
            &[],
            "a chain of more than 32 references".to_owned(),
        )))
    }

    /// Is every value of `writer` accepted by `reader`? Returns the reasons it is not.
    fn sub(&mut self, writer: Node, reader: Node, path: &[Segment]) -> Vec<Incompatibility> {
        if self.depth >= MAX_DEPTH {
            return vec![found(
                CompatRule::Unjudgeable,
                &writer,
                reader.pointer.clone(),
                path,
                format!("schemas nest deeper than {MAX_DEPTH} levels"),
            )];
        }
        let writer = match self.deref(Side::Writer, writer) {
            Ok(node) => node,
            Err(reason) => return vec![*reason],
        };
        let reader = match self.deref(Side::Reader, reader) {
            Ok(node) => node,
            Err(reason) => return vec![*reason],
        };
        let key = (writer.pointer.clone(), reader.pointer.clone());
        let cyclic = writer.via_ref || reader.via_ref;
        if cyclic && !self.assumed.insert(key.clone()) {
            return Vec::new();
        }
        self.depth += 1;
        let result = self.sub_derefed(writer, reader, path);
        self.depth -= 1;
        if cyclic {
            self.assumed.remove(&key);
        }
        result
    }

    fn sub_derefed(
        &mut self,
        writer: Node,
        reader: Node,
        path: &[Segment],
    ) -> Vec<Incompatibility> {
        if is_false(&writer.schema) || (is_trivial(&reader.schema) && reader.also.is_empty()) {
            return Vec::new();
        }
        let (writer, reader) = strip_shared_applicators(writer, reader);
        let alternatives = match self.alternatives(writer.clone()) {
            Ok(alternatives) => alternatives,
            Err(reason) => return vec![*reason],
        };
        let mut out = Vec::new();
        for alternative in alternatives {
            if alternative.also.is_empty() && is_unsatisfiable(&alternative.schema) {
                continue;
            }
            if self.excluded_by_own_not(&alternative) {
                continue;
            }
            out.extend(self.sub_flat(alternative, reader.clone(), path));
        }
        out
    }

    /// The writer as a list of alternatives without `anyOf`/`oneOf`/`if`, `allOf` merged where
    /// merging keeps the meaning.
    fn alternatives(&mut self, node: Node) -> Result<Vec<Node>, Box<Incompatibility>> {
        let node = self.deref(Side::Writer, node)?;
        let nothing = Map::new();
        let map = match &node.schema {
            Value::Object(map) => map,
            // `true` with conjuncts still expands them.
            Value::Bool(true) => &nothing,
            _ => return Ok(vec![node]),
        };
        let combinators = ["allOf", "anyOf", "oneOf", "if"];
        if !combinators.iter().any(|keyword| map.contains_key(*keyword)) && node.also.is_empty() {
            return Ok(vec![node]);
        }
        let mut rest = map.clone();
        for keyword in ["allOf", "anyOf", "oneOf", "if", "then", "else"] {
            rest.remove(keyword);
        }
        let mut current = vec![Node {
            schema: Value::Object(rest),
            pointer: node.pointer.clone(),
            real: false,
            also: Vec::new(),
            via_ref: node.via_ref,
        }];
        for also in node.also.clone() {
            let expanded = self.alternatives(also)?;
            current = self.cross(current, expanded, &node)?;
        }
        if let Some(Value::Array(members)) = map.get("allOf") {
            for (index, member) in members.iter().enumerate() {
                let expanded = self.alternatives(node.child(member, &format!("/allOf/{index}")))?;
                current = self.cross(current, expanded, &node)?;
            }
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(Value::Array(members)) = map.get(keyword) {
                let mut union = Vec::new();
                for (index, member) in members.iter().enumerate() {
                    union.extend(
                        self.alternatives(node.child(member, &format!("/{keyword}/{index}")))?,
                    );
                }
                current = self.cross(current, union, &node)?;
            }
        }
        if let Some(condition) = map.get("if") {
            // (if ∧ then) ∨ (¬if ∧ else) is contained in (if ∧ then) ∨ else: checking both
            // branches is safe, if sometimes stricter than needed.
            let mut then_branch = node.child(condition, "/if");
            if let Some(then) = map.get("then") {
                then_branch.also.push(node.child(then, "/then"));
            }
            let mut else_branch = map.get("else").map_or_else(
                || Node::synthetic(Value::Bool(true), &node.pointer),
                |otherwise| node.child(otherwise, "/else"),
            );
            // The else branch only holds where `if` fails; the negation lets a reader's
            // conditional tell the branches apart.
            else_branch.also.push(Node::synthetic(
                json!({"not": condition}),
                &format!("{}/if", node.pointer),
            ));
            let mut union = self.alternatives(then_branch)?;
            union.extend(self.alternatives(else_branch)?);
            current = self.cross(current, union, &node)?;
        }
        Ok(current)
    }

    fn cross(
        &mut self,
        left: Vec<Node>,
        right: Vec<Node>,
        origin: &Node,
    ) -> Result<Vec<Node>, Box<Incompatibility>> {
        if left.len() * right.len() > MAX_ALTERNATIVES {
            return Err(Box::new(found(
                CompatRule::Unjudgeable,
                origin,
                origin.pointer.clone(),
                &[],
                format!("the writer schema expands into more than {MAX_ALTERNATIVES} alternatives"),
            )));
        }
        let mut out = Vec::with_capacity(left.len() * right.len());
        for x in &left {
            for y in &right {
                out.push(conjoin(x, y));
            }
        }
        Ok(out)
    }

    /// `writer` has no combinators left (or keeps unmergeable conjuncts in `also`).
    fn sub_flat(&mut self, writer: Node, reader: Node, path: &[Segment]) -> Vec<Incompatibility> {
        if !writer.also.is_empty() {
            return self.sub_conjunction(writer, reader, path);
        }
        let reader = match self.deref(Side::Reader, reader) {
            Ok(node) => node,
            Err(reason) => return vec![*reason],
        };
        if is_trivial(&reader.schema) && reader.also.is_empty() {
            return Vec::new();
        }
        if is_false(&reader.schema) {
            return vec![found(
                CompatRule::SchemaFalse,
                &writer,
                reader.pointer.clone(),
                path,
                "the reader's schema is `false`: it rejects every value the writer emits"
                    .to_owned(),
            )];
        }
        // A writer that lists its values is judged value by value.
        if let Value::Object(writer_map) = &writer.schema
            && let Some(values) = finite_values(writer_map)
            && reader.real
            && reader.also.is_empty()
        {
            return self.finite(&writer, writer_map, values, &reader, path);
        }
        let mut out = Vec::new();
        for also in reader.also.clone() {
            out.extend(self.sub(writer.clone(), also, path));
        }
        let reader_map = reader.map();
        if let Some(Value::Array(members)) = reader_map.get("allOf") {
            for (index, member) in members.iter().enumerate() {
                let member = reader.child(member, &format!("/allOf/{index}"));
                out.extend(self.sub(writer.clone(), member, path));
            }
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(Value::Array(members)) = reader_map.get(keyword) {
                let members: Vec<Node> = members
                    .iter()
                    .enumerate()
                    .map(|(index, member)| reader.child(member, &format!("/{keyword}/{index}")))
                    .collect();
                out.extend(self.sub_union(&writer, &reader, keyword, &members, path));
            }
        }
        if let Some(negated) = reader_map.get("not") {
            let negated = reader.child(negated, "/not");
            if !self.disjoint(&writer, &negated) {
                out.push(found(
                    CompatRule::NotExtended,
                    &writer,
                    negated.pointer.clone(),
                    path,
                    "the reader's `not` excludes values the writer may emit".to_owned(),
                ));
            }
        }
        if let Some(condition) = reader_map.get("if") {
            out.extend(self.sub_conditional(&writer, &reader, condition, path));
        }
        out.extend(self.keywords(&writer, &reader, reader_map, path));
        out
    }

    /// A writer conjunction that does not merge: it is contained in the reader when one of its
    /// conjuncts is.
    fn sub_conjunction(
        &mut self,
        writer: Node,
        reader: Node,
        path: &[Segment],
    ) -> Vec<Incompatibility> {
        let mut conjuncts = writer.also.clone();
        let mut head = writer;
        head.also.clear();
        conjuncts.insert(0, head);
        let mut fewest: Option<Vec<Incompatibility>> = None;
        for conjunct in conjuncts {
            let result = self.sub(conjunct, reader.clone(), path);
            if result.is_empty() {
                return result;
            }
            if fewest.as_ref().is_none_or(|best| result.len() < best.len()) {
                fewest = Some(result);
            }
        }
        fewest.unwrap_or_default()
    }

    fn finite(
        &mut self,
        writer: &Node,
        writer_map: &Map<String, Value>,
        values: Vec<Value>,
        reader: &Node,
        path: &[Segment],
    ) -> Vec<Incompatibility> {
        let mut out = Vec::new();
        let writer_types = type_set(writer_map);
        for value in values {
            if type_of_value(&value) & writer_types == 0 {
                continue;
            }
            // Values the writer's other keywords reject are never emitted.
            let emitted = match simple_accepts(&writer.schema, &value) {
                Some(verdict) => Some(verdict),
                None if writer.real => self.writer.accepts(&writer.pointer, &value),
                None => None,
            };
            if emitted == Some(false) {
                continue;
            }
            let accepted = match simple_accepts(&reader.schema, &value) {
                Some(verdict) => Some(verdict),
                None => self.reader.accepts(&reader.pointer, &value),
            };
            if accepted != Some(true) {
                let reason = if accepted.is_none() {
                    "the reader's schema at this place could not be compiled to check it"
                } else {
                    "the reader rejects it"
                };
                let keyword = if reader.get("enum").is_some() {
                    "/enum"
                } else if reader.get("const").is_some() {
                    "/const"
                } else {
                    ""
                };
                let mut item = found(
                    CompatRule::EnumNarrowed,
                    writer,
                    format!("{}{keyword}", reader.pointer),
                    path,
                    format!("the writer may emit {value}; {reason}"),
                );
                item.hint = Some(value);
                out.push(item);
            }
        }
        out
    }

    fn sub_union(
        &mut self,
        writer: &Node,
        reader: &Node,
        keyword: &str,
        members: &[Node],
        path: &[Segment],
    ) -> Vec<Incompatibility> {
        let one_of = keyword == "oneOf";
        if self.some_member_accepts(writer, members, one_of, path) {
            return Vec::new();
        }
        // Split the writer by JSON type and look for a member per type.
        let writer_map = writer.map();
        let writer_types = type_set(writer_map);
        let groups: Vec<u8> = [
            types::NULL,
            types::BOOLEAN,
            types::OBJECT,
            types::ARRAY,
            types::STRING,
            types::NUMBER,
        ]
        .into_iter()
        .filter(|group| writer_types & group != 0)
        .collect();
        if groups.len() > 1 {
            let all_covered = groups.iter().all(|group| {
                let mut restricted = writer_map.clone();
                let names: Vec<Value> = types::names(writer_types & group)
                    .into_iter()
                    .map(|name| {
                        Value::String(if name == "non-integer number" {
                            "number".to_owned()
                        } else {
                            name.to_owned()
                        })
                    })
                    .collect();
                restricted.insert("type".to_owned(), Value::Array(names));
                let part = Node::synthetic(Value::Object(restricted), &writer.pointer);
                self.some_member_accepts(&part, members, one_of, path)
            });
            if all_covered {
                return Vec::new();
            }
        }
        vec![found(
            CompatRule::AlternativeRemoved,
            writer,
            format!("{}/{keyword}", reader.pointer),
            path,
            format!(
                "no alternative of the reader's `{keyword}` accepts every value the writer may emit here"
            ),
        )]
    }

    fn some_member_accepts(
        &mut self,
        writer: &Node,
        members: &[Node],
        one_of: bool,
        path: &[Segment],
    ) -> bool {
        for (index, member) in members.iter().enumerate() {
            if !self.sub(writer.clone(), member.clone(), path).is_empty() {
                continue;
            }
            if !one_of {
                return true;
            }
            let exclusive = members
                .iter()
                .enumerate()
                .filter(|(other, _)| *other != index)
                .all(|(_, other)| self.disjoint(writer, other));
            if exclusive {
                return true;
            }
        }
        false
    }

    /// True when no value can satisfy both (proved, never guessed).
    fn disjoint(&mut self, writer: &Node, reader: &Node) -> bool {
        let Ok(reader) = self.deref(Side::Reader, reader.clone()) else {
            return false;
        };
        let Ok(writer) = self.deref(Side::Writer, writer.clone()) else {
            return false;
        };
        if is_false(&reader.schema) || is_false(&writer.schema) {
            return true;
        }
        let (Value::Object(writer_map), Value::Object(reader_map)) =
            (&writer.schema, &reader.schema)
        else {
            return false;
        };
        if type_set(writer_map) & type_set(reader_map) == 0 {
            return true;
        }
        // The writer excludes a set of types the reader's values all belong to.
        if let Some(Value::Object(excluded)) = writer_map.get("not")
            && excluded
                .keys()
                .all(|keyword| keyword == "type" || is_annotation(keyword))
            && excluded.contains_key("type")
            && type_set(reader_map) & !type_set(excluded) == 0
        {
            return true;
        }
        if reader.real
            && reader.also.is_empty()
            && let Some(values) = finite_values(writer_map)
        {
            let all_rejected = values
                .iter()
                .all(|value| self.reader.accepts(&reader.pointer, value) == Some(false));
            if all_rejected {
                return true;
            }
        }
        if writer.real
            && writer.also.is_empty()
            && let Some(values) = finite_values(reader_map)
        {
            let all_rejected = values
                .iter()
                .all(|value| self.writer.accepts(&writer.pointer, value) == Some(false));
            if all_rejected {
                return true;
            }
        }
        if self.excluded_by_writer_not(&writer, &reader) {
            return true;
        }
        // Objects told apart by a required property whose values cannot meet (a discriminator).
        let writer_required = schema::required(writer_map);
        let reader_required = schema::required(reader_map);
        for name in writer_required {
            if !reader_required.contains(&name) {
                continue;
            }
            let (Some(left), Some(right)) = (
                writer_map.get("properties").and_then(|p| p.get(name)),
                reader_map.get("properties").and_then(|p| p.get(name)),
            ) else {
                continue;
            };
            let segment = format!("/properties/{}", schema::escape(name));
            let left = writer.child(left, &segment);
            let right = reader.child(right, &segment);
            if type_set(writer_map) & types::OBJECT == type_set(writer_map)
                && self.disjoint(&left, &right)
            {
                return true;
            }
        }
        false
    }

    fn keywords(
        &mut self,
        writer: &Node,
        reader: &Node,
        reader_map: &Map<String, Value>,
        path: &[Segment],
    ) -> Vec<Incompatibility> {
        let writer_map = writer.map();
        let mut out = Vec::new();
        for (keyword, value) in reader_map {
            if is_annotation(keyword) || schema::is_judged(keyword) {
                continue;
            }
            if writer_map.get(keyword) != Some(value) {
                out.push(found(
                    CompatRule::Unjudgeable,
                    writer,
                    format!("{}/{}", reader.pointer, schema::escape(keyword)),
                    path,
                    format!("the reader uses `{keyword}`, which evc does not judge, and the writer does not have the same value"),
                ));
            }
        }
        let writer_types = type_set(writer_map);
        let reader_types = type_set(reader_map);
        let missing = writer_types & !reader_types;
        if missing != 0 {
            let mut item = found(
                CompatRule::TypeNarrowed,
                writer,
                format!("{}/type", reader.pointer),
                path,
                format!(
                    "the writer may emit {} where the reader accepts only {}",
                    list(&types::names(missing)),
                    if reader_types == 0 {
                        "nothing".to_owned()
                    } else {
                        list(&types::names(reader_types))
                    }
                ),
            );
            item.hint = Some(sample_of_type(missing));
            if reader_map.get("type").is_none() {
                item.reader_pointer = reader.pointer.clone();
            }
            out.push(item);
        }
        let shared = writer_types & reader_types;
        if shared == 0 {
            return out;
        }
        if let Some(allowed) = finite_values(reader_map) {
            let covered = (shared & !(types::NULL | types::BOOLEAN)) == 0
                && (shared & types::NULL == 0 || allowed.contains(&Value::Null))
                && (shared & types::BOOLEAN == 0
                    || (allowed.contains(&Value::Bool(true))
                        && allowed.contains(&Value::Bool(false))));
            if !covered {
                let keyword = if reader_map.contains_key("const") {
                    "const"
                } else {
                    "enum"
                };
                out.push(found(
                    CompatRule::EnumNarrowed,
                    writer,
                    format!("{}/{keyword}", reader.pointer),
                    path,
                    format!(
                        "the reader accepts only the listed values ({}), the writer may emit any {}",
                        short_list(&allowed),
                        list(&types::names(shared))
                    ),
                ));
            }
        }
        if shared & types::NUMBER != 0 {
            self.numbers(
                writer, writer_map, reader, reader_map, shared, path, &mut out,
            );
        }
        if shared & types::STRING != 0 {
            scalars::strings(writer, writer_map, reader, reader_map, path, &mut out);
        }
        if shared & types::ARRAY != 0 {
            self.arrays(writer, writer_map, reader, reader_map, path, &mut out);
        }
        if shared & types::OBJECT != 0 {
            self.objects(writer, writer_map, reader, reader_map, path, &mut out);
        }
        out
    }
}

/// Removes applicators both sides share verbatim: `X ∧ C ⊆ Y ∧ C` holds when `X ⊆ Y`.
fn strip_shared_applicators(writer: Node, reader: Node) -> (Node, Node) {
    let (Value::Object(own), Value::Object(other)) = (&writer.schema, &reader.schema) else {
        return (writer, reader);
    };
    let unevaluated = |map: &Map<String, Value>| {
        map.contains_key("unevaluatedProperties") || map.contains_key("unevaluatedItems")
    };
    if unevaluated(own) || unevaluated(other) {
        return (writer, reader);
    }
    let mut shared = Vec::new();
    for keyword in ["allOf", "anyOf", "oneOf", "not"] {
        if own.get(keyword).is_some() && own.get(keyword) == other.get(keyword) {
            shared.push(keyword);
        }
    }
    let conditional_equal = ["if", "then", "else"]
        .iter()
        .all(|keyword| own.get(*keyword) == other.get(*keyword));
    if own.contains_key("if") && conditional_equal {
        shared.extend(["if", "then", "else"]);
    }
    if shared.is_empty() {
        return (writer, reader);
    }
    let strip = |node: Node| {
        let mut map = node.map().clone();
        for keyword in &shared {
            map.remove(*keyword);
        }
        Node {
            schema: Value::Object(map),
            real: false,
            ..node
        }
    };
    (strip(writer), strip(reader))
}

/// The conjunction of two writer alternatives, merged when merging keeps the meaning.
fn conjoin(left: &Node, right: &Node) -> Node {
    if is_trivial(&left.schema) && left.also.is_empty() {
        return right.clone();
    }
    if is_trivial(&right.schema) && right.also.is_empty() {
        let mut node = left.clone();
        node.pointer = if node.real {
            node.pointer
        } else {
            right.pointer.clone().min(node.pointer)
        };
        return node;
    }
    if left.also.is_empty()
        && right.also.is_empty()
        && let Some(merged) = schema::merge(&left.schema, &right.schema)
    {
        return Node::synthetic(merged, &right.pointer);
    }
    let mut node = left.clone();
    node.real = false;
    node.also.push(right.clone());
    node
}

/// Decides simple readers (types, enum and const only) without compiling a validator.
fn simple_accepts(reader: &Value, value: &Value) -> Option<bool> {
    let Value::Object(map) = reader else {
        return Some(reader.as_bool().unwrap_or(false));
    };
    let simple = map.keys().all(|keyword| {
        is_annotation(keyword) || matches!(keyword.as_str(), "type" | "enum" | "const")
    });
    if !simple {
        return None;
    }
    if type_of_value(value) & type_set(&without_values(map)) == 0 {
        return Some(false);
    }
    if let Some(constant) = map.get("const")
        && !json_equal(constant, value)
    {
        return Some(false);
    }
    if let Some(Value::Array(allowed)) = map.get("enum")
        && !allowed.iter().any(|item| json_equal(item, value))
    {
        return Some(false);
    }
    Some(true)
}

fn without_values(map: &Map<String, Value>) -> Map<String, Value> {
    let mut map = map.clone();
    map.remove("enum");
    map.remove("const");
    map
}

fn short_list(values: &[Value]) -> String {
    let shown: Vec<String> = values.iter().take(6).map(Value::to_string).collect();
    if values.len() > 6 {
        format!("{}, …", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

fn sample_of_type(set: u8) -> Value {
    if set & types::STRING != 0 {
        json!("a")
    } else if set & types::FRACTION != 0 {
        json!(0.5)
    } else if set & types::INTEGER != 0 {
        json!(1)
    } else if set & types::BOOLEAN != 0 {
        json!(true)
    } else if set & types::NULL != 0 {
        Value::Null
    } else if set & types::ARRAY != 0 {
        json!([])
    } else {
        json!({})
    }
}

mod arrays;
mod conditions;
#[cfg(test)]
mod family_tests;
mod objects;
mod scalars;
#[cfg(test)]
mod tests;
