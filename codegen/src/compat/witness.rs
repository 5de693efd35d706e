//! Witness payloads: a value the writer accepts and the reader rejects, built from the engine's
//! finding and confirmed with a JSON Schema validator before it is shown.

use serde_json::{Map, Value, json};

use super::engine::{Incompatibility, Segment};
use super::schema::{self, count, finite_values, lower_bound, type_set, types, upper_bound};
use super::values::Document;

/// How deep [`sample`] builds nested values.
const SAMPLE_DEPTH: usize = 12;

/// Searches for a payload valid for `writer` and rejected by `reader` that shows `finding`;
/// `None` when no candidate passes both checks.
pub fn find(
    writer: &mut Document,
    reader: &mut Document,
    finding: &Incompatibility,
) -> Option<Value> {
    let base = sample(writer.root(), writer.root());
    let local_schema = enclosing_schema(writer.root(), &finding.writer_pointer);
    let mut locals = Vec::new();
    if let Some(hint) = &finding.hint {
        locals.push(hint.clone());
    }
    locals.extend(candidates(writer.root(), &local_schema));
    // The edges of the reader's rejecting keyword (a value its `not` excludes, a bound).
    let reader_schema = enclosing_schema(reader.root(), &finding.reader_pointer);
    locals.extend(candidates(reader.root(), &reader_schema));
    locals.extend(one_of_each_type());

    let mut bases = vec![base.clone()];
    bases.extend(variants(&base, writer.root()));
    let paths = concrete_paths(&finding.instance_path, writer.root(), reader.root());
    let mut tries = Vec::new();
    for base in &bases {
        tries.push(base.clone());
        for path in &paths {
            if let Some(without) = remove_at(base, path) {
                tries.push(without);
            }
            for local in &locals {
                if let Some(payload) = set_at(base, path, local.clone()) {
                    tries.push(payload);
                }
            }
        }
    }
    tries.into_iter().take(MAX_TRIES).find(|payload| {
        writer.accepts("", payload) == Some(true) && reader.accepts("", payload) == Some(false)
    })
}

/// How many candidate payloads [`find`] validates at most.
const MAX_TRIES: usize = 512;

/// A simple value of every JSON type.
fn one_of_each_type() -> Vec<Value> {
    vec![
        json!("a"),
        json!(0),
        json!(0.5),
        json!(true),
        Value::Null,
        json!({}),
        json!([]),
    ]
}

/// `base` with one top-level property of the writer set to each of its listed values: a
/// discriminator or a conditional's subject often decides which branch a payload meets.
fn variants(base: &Value, writer: &Value) -> Vec<Value> {
    let Some(properties) = writer.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, property) in properties {
        let Some(values) = property.as_object().and_then(finite_values) else {
            continue;
        };
        for value in values.into_iter().take(4) {
            if base.get(name) != Some(&value)
                && let Some(variant) = set_at(base, &[Segment::Key(name.clone())], value)
            {
                out.push(variant);
            }
        }
    }
    out
}

/// The payload paths a finding's path stands for: `<other>` (a name no property lists) and
/// `<pattern>` (a name a pattern matches) become concrete names to try.
fn concrete_paths(path: &[Segment], writer: &Value, reader: &Value) -> Vec<Vec<Segment>> {
    let mut out = vec![Vec::new()];
    for segment in path {
        let choices: Vec<Segment> = match segment {
            Segment::Key(key) if key.starts_with('<') => {
                let mut names = vec!["evc_other".to_owned()];
                let mut prefixes = Vec::new();
                pattern_prefixes(writer, &mut prefixes);
                pattern_prefixes(reader, &mut prefixes);
                names.extend(prefixes.into_iter().map(|prefix| format!("{prefix}a")));
                names.sort();
                names.dedup();
                names.into_iter().take(6).map(Segment::Key).collect()
            }
            other => vec![other.clone()],
        };
        out = out
            .into_iter()
            .flat_map(|prefix| {
                choices.iter().map(move |choice| {
                    let mut longer = prefix.clone();
                    longer.push(choice.clone());
                    longer
                })
            })
            .take(16)
            .collect();
    }
    out
}

/// The literal starts of every `patternProperties` regex in `schema` (`^x_` gives `x_`).
fn pattern_prefixes(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(patterns)) = map.get("patternProperties") {
                for pattern in patterns.keys() {
                    let literal: String = pattern
                        .trim_start_matches('^')
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
                        .collect();
                    out.push(literal);
                }
            }
            for value in map.values() {
                pattern_prefixes(value, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| pattern_prefixes(item, out)),
        _ => {}
    }
}

/// The schema at `pointer`, or the nearest one above it when the pointer names a keyword
/// (`/properties/a/type` gives the schema of `a`).
fn enclosing_schema(root: &Value, pointer: &str) -> Value {
    let mut pointer = pointer;
    loop {
        match root.pointer(pointer) {
            Some(schema @ (Value::Object(_) | Value::Bool(_))) => return schema.clone(),
            _ if pointer.is_empty() => return Value::Bool(true),
            _ => pointer = &pointer[..pointer.rfind('/').unwrap_or(0)],
        }
    }
}

/// A small value the schema most likely accepts (required properties only, lower bounds,
/// format examples). Not guaranteed: callers check it.
pub fn sample(root: &Value, schema: &Value) -> Value {
    sample_at(root, schema, 0)
}

fn sample_at(root: &Value, schema: &Value, depth: usize) -> Value {
    if depth > SAMPLE_DEPTH {
        return Value::Null;
    }
    let Value::Object(map) = schema else {
        return Value::Null;
    };
    if let Some(reference) = map.get("$ref").and_then(Value::as_str)
        && let Some((target, _)) = schema::resolve(root, reference)
    {
        return sample_at(root, target, depth + 1);
    }
    if let Some(values) = finite_values(map)
        && let Some(first) = values.into_iter().next()
    {
        return first;
    }
    for keyword in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(members)) = map.get(keyword)
            && let Some(first) = members.first()
        {
            let mut rest = map.clone();
            rest.remove(keyword);
            let merged =
                schema::merge(&Value::Object(rest), first).unwrap_or_else(|| first.clone());
            return sample_at(root, &merged, depth + 1);
        }
    }
    let set = type_set(map);
    if set & types::OBJECT != 0 {
        return object(root, map, depth, false);
    }
    if set & types::STRING != 0 {
        return string(map);
    }
    if set & types::INTEGER != 0 {
        return number(map, true);
    }
    if set & types::FRACTION != 0 {
        return number(map, false);
    }
    if set & types::ARRAY != 0 {
        return array(root, map, depth);
    }
    if set & types::BOOLEAN != 0 {
        return Value::Bool(false);
    }
    Value::Null
}

fn object(root: &Value, map: &Map<String, Value>, depth: usize, every_property: bool) -> Value {
    let mut out = Map::new();
    let properties = map.get("properties").and_then(Value::as_object);
    let mut names: Vec<String> = schema::required(map)
        .into_iter()
        .map(str::to_owned)
        .collect();
    if every_property && let Some(properties) = properties {
        names.extend(properties.keys().cloned());
    }
    for name in names {
        if out.contains_key(&name) {
            continue;
        }
        let property = properties
            .and_then(|properties| properties.get(&name))
            .cloned()
            .unwrap_or(Value::Bool(true));
        out.insert(name, sample_at(root, &property, depth + 1));
    }
    Value::Object(out)
}

fn array(root: &Value, map: &Map<String, Value>, depth: usize) -> Value {
    let tuple = schema::tuple(map);
    let mut items: Vec<Value> = tuple
        .prefix
        .iter()
        .map(|(item, _)| sample_at(root, item, depth + 1))
        .collect();
    let min = count(map, "minItems").unwrap_or(0) as usize;
    while items.len() < min.min(16) {
        let item = tuple
            .rest
            .map_or(Value::Null, |(rest, _)| sample_at(root, rest, depth + 1));
        items.push(item);
    }
    Value::Array(items)
}

fn string(map: &Map<String, Value>) -> Value {
    if let Some(format) = map.get("format").and_then(Value::as_str)
        && let Some(example) = format_example(format)
    {
        return json!(example);
    }
    let min = count(map, "minLength").unwrap_or(0) as usize;
    json!("a".repeat(min.clamp(1, 4096)))
}

fn number(map: &Map<String, Value>, integer: bool) -> Value {
    let mut value = match lower_bound(map) {
        Some(bound) if bound.exclusive => bound.value + if integer { 1.0 } else { 0.5 },
        Some(bound) => bound.value,
        None => 0.0,
    };
    if let Some(bound) = upper_bound(map)
        && value > bound.value
    {
        value = bound.value;
    }
    if let Some(divisor) = map.get("multipleOf").and_then(Value::as_f64)
        && divisor > 0.0
    {
        value = (value / divisor).ceil() * divisor;
    }
    if integer || value.fract() == 0.0 {
        json!(value.ceil() as i64)
    } else {
        json!(value)
    }
}

/// An example value for each format the payload validator checks.
pub fn format_example(format: &str) -> Option<&'static str> {
    Some(match format {
        "date-time" => "2026-01-01T00:00:00Z",
        "date" => "2026-01-01",
        "time" => "00:00:00Z",
        "duration" => "P1D",
        "email" | "idn-email" => "someone@example.com",
        "hostname" | "idn-hostname" => "example.com",
        "ipv4" => "192.0.2.1",
        "ipv6" => "2001:db8::1",
        "uri" | "iri" => "https://example.com/a",
        "uri-reference" | "iri-reference" => "/a",
        "uuid" => "0190c0de-0000-7000-8000-000000000001",
        "uri-template" => "https://example.com/{id}",
        "json-pointer" => "/a",
        "relative-json-pointer" => "0/a",
        "regex" => "^a$",
        _ => return None,
    })
}

/// Values likely to sit on the edges of a schema: samples, listed values and bounds.
fn candidates(root: &Value, schema: &Value) -> Vec<Value> {
    let mut out = vec![sample(root, schema)];
    let Value::Object(map) = schema else {
        return out;
    };
    if let Some(values) = finite_values(map) {
        out.extend(values);
    }
    let set = type_set(map);
    if set & types::NUMBER != 0 {
        for bound in [lower_bound(map), upper_bound(map)].into_iter().flatten() {
            for delta in [0.0, 1.0, -1.0, 0.5, -0.5] {
                out.push(json!(bound.value + delta));
            }
        }
        out.extend([
            json!(0),
            json!(-1),
            json!(1),
            json!(0.5),
            json!(1_000_000_000),
        ]);
    }
    if set & types::STRING != 0 {
        out.push(json!(""));
        for length in [count(map, "minLength"), count(map, "maxLength")]
            .into_iter()
            .flatten()
        {
            out.push(json!("a".repeat((length as usize).min(4096))));
        }
        out.push(json!("a".repeat(300)));
    }
    if set & types::BOOLEAN != 0 {
        out.extend([json!(true), json!(false)]);
    }
    if set & types::NULL != 0 {
        out.push(Value::Null);
    }
    if set & types::OBJECT != 0 {
        out.push(object(root, map, 0, true));
        out.push(json!({}));
    }
    if set & types::ARRAY != 0 {
        let item = sample(root, &Value::Object(map.clone()));
        out.push(json!([]));
        if let Value::Array(items) = item {
            let mut doubled = items.clone();
            doubled.extend(items);
            out.push(Value::Array(doubled));
        }
    }
    out
}

/// `base` with `value` placed at `path`, creating objects on the way.
fn set_at(base: &Value, path: &[Segment], value: Value) -> Option<Value> {
    let mut out = base.clone();
    let mut slot = &mut out;
    for segment in path {
        slot = match segment {
            Segment::Key(key) => {
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                slot.as_object_mut()?
                    .entry(key.clone())
                    .or_insert(Value::Null)
            }
            Segment::Index(index) => {
                if !slot.is_array() {
                    *slot = Value::Array(Vec::new());
                }
                let items = slot.as_array_mut()?;
                while items.len() <= *index {
                    let filler = items.last().cloned().unwrap_or(Value::Null);
                    items.push(filler);
                }
                items.get_mut(*index)?
            }
        };
    }
    *slot = value;
    Some(out)
}

/// `base` without the property at `path`.
fn remove_at(base: &Value, path: &[Segment]) -> Option<Value> {
    let (Segment::Key(last), parents) = path.split_last()? else {
        return None;
    };
    let mut out = base.clone();
    let mut slot = &mut out;
    for segment in parents {
        slot = match segment {
            Segment::Key(key) => slot.get_mut(key)?,
            Segment::Index(index) => slot.get_mut(*index)?,
        };
    }
    slot.as_object_mut()?.remove(last)?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_fill_required_properties_with_formats_and_bounds() {
        let schema = json!({
            "type": "object",
            "required": ["id", "count", "state"],
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "count": {"type": "integer", "minimum": 3},
                "state": {"enum": ["draft", "active"]},
                "note": {"type": "string"}
            }
        });
        assert_eq!(
            sample(&schema, &schema),
            json!({"id": "0190c0de-0000-7000-8000-000000000001", "count": 3, "state": "draft"})
        );
    }

    #[test]
    fn values_are_placed_at_nested_paths() {
        let base = json!({"a": {"b": 1}});
        let path = [
            Segment::Key("a".into()),
            Segment::Key("c".into()),
            Segment::Index(1),
        ];
        assert_eq!(
            set_at(&base, &path, json!(true)),
            Some(json!({"a": {"b": 1, "c": [null, true]}}))
        );
    }
}
