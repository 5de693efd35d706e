//! Objects: properties name by name (with matching patterns), `additionalProperties`,
//! `required`, `propertyNames`, property counts and dependencies.

use serde_json::{Map, Value};

use super::*;

impl Checker<'_> {
    pub(super) fn objects(
        &mut self,
        writer: &Node,
        writer_map: &Map<String, Value>,
        reader: &Node,
        reader_map: &Map<String, Value>,
        path: &[Segment],
        out: &mut Vec<Incompatibility>,
    ) {
        let empty = Map::new();
        let writer_properties = writer_map
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let reader_properties = reader_map
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let writer_patterns = patterns(writer_map);
        let reader_patterns = patterns(reader_map);
        let writer_additional = additional_properties(writer_map);
        let reader_additional = additional_properties(reader_map);

        let mut names: Vec<&String> = writer_properties.keys().collect();
        names.extend(
            reader_properties
                .keys()
                .filter(|name| !writer_properties.contains_key(*name)),
        );
        for name in names {
            let child_path = with_segment(path, Segment::Key(name.clone()));
            let own = match self.property_schema(
                writer,
                writer_properties,
                &writer_patterns,
                writer_additional,
                name,
            ) {
                Ok(parts) => parts,
                Err(reason) => {
                    out.push(reason.at(writer, &reader.pointer, &child_path));
                    continue;
                }
            };
            if own.iter().any(|part| is_false(&part.schema)) {
                continue;
            }
            let mut own_parts = own.into_iter();
            let Some(mut own) = own_parts.next() else {
                continue;
            };
            own.also.extend(own_parts);
            let others = match self.property_schema(
                reader,
                reader_properties,
                &reader_patterns,
                reader_additional,
                name,
            ) {
                Ok(parts) => parts,
                Err(reason) => {
                    out.push(reason.at(writer, &reader.pointer, &child_path));
                    continue;
                }
            };
            for other in others {
                if is_false(&other.schema) {
                    if !self.writer_is_empty(&own) {
                        let mut item = found(
                            CompatRule::PropertyRejected,
                            &own,
                            other.pointer.clone(),
                            &child_path,
                            format!(
                                "the writer may emit property `{name}`; the reader does not allow it"
                            ),
                        );
                        item.hint = Some(crate::compat::witness::sample(
                            self.writer.root(),
                            &own.schema,
                        ));
                        out.push(item);
                    }
                    continue;
                }
                out.extend(self.sub(own.clone(), other, &child_path));
            }
        }

        let writer_required = schema::required(writer_map);
        for (index, name) in schema::required(reader_map).into_iter().enumerate() {
            if writer_required.contains(&name) {
                continue;
            }
            let reason = if writer_properties.get(name).is_some_and(is_false) {
                format!("the reader requires `{name}`; the writer never emits it")
            } else {
                format!("the reader requires `{name}`; the writer may leave it out")
            };
            out.push(found(
                CompatRule::RequiredAdded,
                writer,
                format!("{}/required/{index}", reader.pointer),
                &with_segment(path, Segment::Key(name.to_owned())),
                reason,
            ));
        }

        // Names only patterns or additionalProperties describe.
        for (pattern, own, suffix) in &writer_patterns {
            if is_false(own) {
                continue;
            }
            let own = writer.child(own, suffix);
            let child_path = with_segment(path, Segment::Key(format!("<{pattern}>")));
            for (other_pattern, other, other_suffix) in &reader_patterns {
                if patterns_disjoint(pattern, other_pattern) {
                    continue;
                }
                out.extend(self.sub(own.clone(), reader.child(other, other_suffix), &child_path));
            }
            let same_pattern = reader_patterns.iter().any(|(other, _, _)| other == pattern);
            if !same_pattern && let Some((other, keyword)) = reader_additional {
                out.extend(self.open_names(&own, reader, other, keyword, &child_path));
            }
        }
        let writer_open = writer_additional.is_none_or(|(own, _)| !is_false(own));
        if writer_open {
            let own = match writer_additional {
                Some((own, keyword)) => writer.child(own, &format!("/{keyword}")),
                None => Node::synthetic(Value::Bool(true), &writer.pointer),
            };
            let child_path = with_segment(path, Segment::Key("<other>".to_owned()));
            for (_, other, other_suffix) in &reader_patterns {
                out.extend(self.sub(own.clone(), reader.child(other, other_suffix), &child_path));
            }
            if let Some((other, keyword)) = reader_additional {
                out.extend(self.open_names(&own, reader, other, keyword, &child_path));
            }
        }
        if reader_map.contains_key("unevaluatedProperties")
            && schema::has_applicators(reader_map)
            && !reader_map.contains_key("additionalProperties")
            && writer_map.get("unevaluatedProperties") != reader_map.get("unevaluatedProperties")
        {
            out.push(found(
                CompatRule::Unjudgeable,
                writer,
                format!("{}/unevaluatedProperties", reader.pointer),
                path,
                "the reader's `unevaluatedProperties` depends on its applicators, which evc does not judge"
                    .to_owned(),
            ));
        }

        if let Some(names_schema) = reader_map.get("propertyNames")
            && !is_trivial(names_schema)
            && writer_map.get("propertyNames") != Some(names_schema)
        {
            let closed = writer_patterns.is_empty()
                && writer_additional.is_some_and(|(own, _)| is_false(own));
            let pointer = format!("{}/propertyNames", reader.pointer);
            let all_named_pass = closed
                && reader.real
                && writer_properties.keys().all(|name| {
                    self.reader.accepts(&pointer, &Value::String(name.clone())) == Some(true)
                });
            if !all_named_pass {
                out.push(found(
                    CompatRule::ObjectNarrowed,
                    writer,
                    pointer,
                    path,
                    "the reader's `propertyNames` may reject property names the writer emits"
                        .to_owned(),
                ));
            }
        }
        if let Some(min) = count(reader_map, "minProperties") {
            let own = count(writer_map, "minProperties")
                .unwrap_or(0)
                .max(writer_required.len() as u64);
            if own < min {
                out.push(found(
                    CompatRule::ObjectNarrowed,
                    writer,
                    format!("{}/minProperties", reader.pointer),
                    path,
                    format!(
                        "the reader requires at least {min} properties; the writer may emit {own}"
                    ),
                ));
            }
        }
        if let Some(max) = count(reader_map, "maxProperties") {
            let closed = writer_patterns.is_empty()
                && writer_additional.is_some_and(|(own, _)| is_false(own));
            let own = count(writer_map, "maxProperties")
                .or_else(|| closed.then_some(writer_properties.len() as u64));
            if own.is_none_or(|own| own > max) {
                out.push(found(
                    CompatRule::ObjectNarrowed,
                    writer,
                    format!("{}/maxProperties", reader.pointer),
                    path,
                    format!("the reader allows at most {max} properties; the writer may emit more"),
                ));
            }
        }
        let writer_dependencies = schema::dependent_required(writer_map);
        for (key, needed, suffix) in schema::dependent_required(reader_map) {
            if writer_properties.get(key).is_some_and(is_false) {
                continue;
            }
            for name in needed {
                let holds = writer_required.contains(&name)
                    || writer_dependencies
                        .iter()
                        .any(|(own_key, own, _)| *own_key == key && own.contains(&name));
                if !holds {
                    out.push(found(
                        CompatRule::ObjectNarrowed,
                        writer,
                        format!("{}{suffix}", reader.pointer),
                        path,
                        format!("the reader requires `{name}` whenever `{key}` is present; the writer does not"),
                    ));
                }
            }
        }
        let writer_dependent_schemas = schema::dependent_schemas(writer_map);
        for (key, other, suffix) in schema::dependent_schemas(reader_map) {
            if writer_properties.get(key).is_some_and(is_false) {
                continue;
            }
            let other = reader.child(other, &suffix);
            let own_dependency = writer_dependent_schemas
                .iter()
                .find(|(own_key, _, _)| *own_key == key)
                .map(|(_, own, own_suffix)| writer.child(own, own_suffix));
            let by_dependency =
                own_dependency.is_some_and(|own| self.sub(own, other.clone(), path).is_empty());
            if by_dependency {
                continue;
            }
            let whole = self.sub(writer.clone(), other.clone(), path);
            if !whole.is_empty() {
                out.push(found(
                    CompatRule::ObjectNarrowed,
                    writer,
                    other.pointer.clone(),
                    path,
                    format!("the reader applies a schema whenever `{key}` is present that the writer's objects may not meet"),
                ));
            }
        }
    }

    /// Names covered by the reader's `additionalProperties` (or `unevaluatedProperties`).
    fn open_names(
        &mut self,
        own: &Node,
        reader: &Node,
        other: &Value,
        keyword: &str,
        path: &[Segment],
    ) -> Vec<Incompatibility> {
        if is_false(other) {
            if self.writer_is_empty(own) {
                return Vec::new();
            }
            return vec![found(
                CompatRule::PropertyRejected,
                own,
                format!("{}/{keyword}", reader.pointer),
                path,
                "the writer may emit properties the reader does not list, and the reader rejects them"
                    .to_owned(),
            )];
        }
        self.sub(
            own.clone(),
            reader.child(other, &format!("/{keyword}")),
            path,
        )
    }

    fn writer_is_empty(&mut self, node: &Node) -> bool {
        node.also.is_empty() && (is_false(&node.schema) || is_unsatisfiable(&node.schema))
    }

    /// The schemas that apply to property `name`: its `properties` entry and every matching
    /// `patternProperties` entry, or else `additionalProperties`.
    #[allow(clippy::too_many_arguments)]
    fn property_schema(
        &mut self,
        node: &Node,
        properties: &Map<String, Value>,
        node_patterns: &[(String, Value, String)],
        additional: Option<(&Value, &'static str)>,
        name: &str,
    ) -> Result<Vec<Node>, PatternError> {
        let mut parts = Vec::new();
        if let Some(schema) = properties.get(name) {
            parts.push(node.child(schema, &format!("/properties/{}", schema::escape(name))));
        }
        let mut matched = false;
        for (pattern, schema, suffix) in node_patterns {
            match self.matches(pattern, name) {
                Some(true) => {
                    matched = true;
                    parts.push(node.child(schema, suffix));
                }
                Some(false) => {}
                None => return Err(PatternError(pattern.clone())),
            }
        }
        if parts.is_empty() && !matched {
            parts.push(match additional {
                Some((schema, keyword)) => node.child(schema, &format!("/{keyword}")),
                None => Node::synthetic(Value::Bool(true), &node.pointer),
            });
        }
        Ok(parts)
    }

    fn matches(&mut self, pattern: &str, name: &str) -> Option<bool> {
        self.regexes
            .entry(pattern.to_owned())
            .or_insert_with(|| regex::Regex::new(pattern).ok())
            .as_ref()
            .map(|regex| regex.is_match(name))
    }
}

/// A `patternProperties` regex the engine could not compile.
struct PatternError(String);

impl PatternError {
    fn at(self, writer: &Node, reader_pointer: &str, path: &[Segment]) -> Incompatibility {
        found(
            CompatRule::Unjudgeable,
            writer,
            reader_pointer.to_owned(),
            path,
            format!(
                "the pattern `{}` cannot be compiled, so which properties it covers is unknown",
                self.0
            ),
        )
    }
}

/// True when no name can match both patterns: both are anchored literal prefixes (`^S_`,
/// `^I_`) and neither prefix starts the other.
fn patterns_disjoint(left: &str, right: &str) -> bool {
    fn literal_prefix(pattern: &str) -> Option<&str> {
        let rest = pattern.strip_prefix('^')?;
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(rest.len());
        // A quantifier right after the prefix would make its last character optional.
        let next = rest[end..].chars().next();
        let prefix = &rest[..end];
        let quantified = matches!(next, Some('*' | '?' | '{'));
        (!prefix.is_empty() && !quantified).then_some(prefix)
    }
    match (literal_prefix(left), literal_prefix(right)) {
        (Some(a), Some(b)) => !a.starts_with(b) && !b.starts_with(a),
        _ => false,
    }
}

fn patterns(map: &Map<String, Value>) -> Vec<(String, Value, String)> {
    map.get("patternProperties")
        .and_then(Value::as_object)
        .map(|patterns| {
            patterns
                .iter()
                .map(|(pattern, schema)| {
                    (
                        pattern.clone(),
                        schema.clone(),
                        format!("/patternProperties/{}", schema::escape(pattern)),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
