//! Negations and conditionals: a reader's `if`/`then`/`else` judged by splitting the writer on
//! the condition, and containment checks where both schemas, or the two sides swapped, are
//! needed (`not` on the writer's side excludes values, `if` on the writer's side splits them).

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{Checker, Incompatibility, Node, Segment, found};
use crate::compat::report::CompatRule;
use crate::compat::schema;
use crate::compat::values::Document;

/// The subschema `schema` of `parent` under `suffix`: a node of the document when the parent is
/// one, a synthetic node otherwise (its pointer is then only a label).
pub(super) fn part(parent: &Node, schema: &Value, suffix: &str) -> Node {
    if parent.real {
        parent.child(schema, suffix)
    } else {
        Node::synthetic(schema.clone(), &format!("{}{suffix}", parent.pointer))
    }
}

/// True when `schema` or a subschema of it holds a `$ref` (which only resolves in its own
/// document).
fn has_reference(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map
            .iter()
            .any(|(keyword, value)| keyword == "$ref" || has_reference(value)),
        Value::Array(items) => items.iter().any(has_reference),
        _ => false,
    }
}

impl Checker<'_> {
    /// Is every value of `inner`, a node of the reader's document, accepted by `outer`, a node
    /// of the writer's document? The two documents swap roles for the check.
    pub(super) fn reader_within_writer(&mut self, inner: &Node, outer: &Node) -> bool {
        std::mem::swap(&mut self.writer, &mut self.reader);
        let assumed = std::mem::take(&mut self.assumed);
        let holds = self.sub(inner.clone(), outer.clone(), &[]).is_empty();
        self.assumed = assumed;
        std::mem::swap(&mut self.writer, &mut self.reader);
        holds
    }

    /// Is every value of `inner` accepted by `outer`, both nodes of the writer's document?
    fn writer_within_writer(&mut self, inner: &Node, outer: &Node) -> bool {
        let mut copy = Document::new(self.writer.root().clone(), self.writer.dialect());
        let mut checker = Checker {
            writer: &mut *self.writer,
            reader: &mut copy,
            assumed: HashSet::new(),
            depth: self.depth,
            regexes: HashMap::new(),
        };
        checker.sub(inner.clone(), outer.clone(), &[]).is_empty()
    }

    /// True when the writer alternative excludes, with its own `not`, every value its other
    /// keywords allow: it emits nothing (the `else` branch of a writer whose `if` always holds).
    pub(super) fn excluded_by_own_not(&mut self, writer: &Node) -> bool {
        let Value::Object(map) = &writer.schema else {
            return false;
        };
        let Some(negated) = map.get("not") else {
            return false;
        };
        if !writer.also.is_empty() {
            return false;
        }
        let negated = part(writer, negated, "/not");
        let mut rest = map.clone();
        rest.remove("not");
        let rest = Node::synthetic(Value::Object(rest), &writer.pointer);
        self.writer_within_writer(&rest, &negated)
    }

    /// The writer's `not` excludes every value of `reader` (so the two are disjoint).
    pub(super) fn excluded_by_writer_not(&mut self, writer: &Node, reader: &Node) -> bool {
        let Some(negated) = writer.get("not") else {
            return false;
        };
        let negated = part(writer, negated, "/not");
        self.reader_within_writer(reader, &negated)
    }

    /// The reader's `if`/`then`/`else`: writer values that meet `if` must meet `then`, the
    /// others `else`. The writer is split on the condition where it can be; what cannot be
    /// split is reported as undecided.
    pub(super) fn sub_conditional(
        &mut self,
        writer: &Node,
        reader: &Node,
        condition: &Value,
        path: &[Segment],
    ) -> Vec<Incompatibility> {
        let condition = part(reader, condition, "/if");
        let then = reader.get("then").map(|then| part(reader, then, "/then"));
        let otherwise = reader
            .get("else")
            .map(|otherwise| part(reader, otherwise, "/else"));
        let branch = |checker: &mut Self, branch: &Option<Node>| match branch {
            Some(branch) => checker.sub(writer.clone(), branch.clone(), path),
            None => Vec::new(),
        };
        let then_found = branch(self, &then);
        let else_found = branch(self, &otherwise);
        if then_found.is_empty() && else_found.is_empty() {
            return Vec::new();
        }
        if self.sub(writer.clone(), condition.clone(), path).is_empty() {
            // Every writer value meets `if`: only `then` applies.
            return then_found;
        }
        if self.disjoint(writer, &condition) {
            return else_found;
        }
        let mut out = Vec::new();
        if !then_found.is_empty() {
            out.extend(self.sub_where_condition_holds(writer, &condition, then.as_ref(), path));
        }
        if !else_found.is_empty() {
            out.push(found(
                CompatRule::Unjudgeable,
                writer,
                condition.pointer.clone(),
                path,
                "the reader's `else` rejects some values the writer may emit, and evc cannot tell whether those values meet the reader's `if`".to_owned(),
            ));
        }
        out
    }

    /// Judges `writer ∧ condition ⊆ then` by merging the condition into the writer; undecided
    /// when they do not merge.
    fn sub_where_condition_holds(
        &mut self,
        writer: &Node,
        condition: &Node,
        then: Option<&Node>,
        path: &[Segment],
    ) -> Vec<Incompatibility> {
        let Some(then) = then else {
            return Vec::new();
        };
        let merged = (writer.also.is_empty() && !has_reference(&condition.schema))
            .then(|| schema::merge(&writer.schema, &condition.schema))
            .flatten();
        match merged {
            Some(merged) => {
                let narrowed = Node {
                    via_ref: writer.via_ref,
                    ..Node::synthetic(merged, &writer.pointer)
                };
                self.sub(narrowed, then.clone(), path)
            }
            None => vec![found(
                CompatRule::Unjudgeable,
                writer,
                condition.pointer.clone(),
                path,
                "the reader's `then` rejects some values the writer may emit, and evc cannot tell whether those values meet the reader's `if`".to_owned(),
            )],
        }
    }
}
