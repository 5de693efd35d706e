//! Reading JSON Schema keywords the way the comparison engine needs them: type atoms, bounds,
//! tuples, references and the merge of conjunctions, for draft-07 and 2020-12 alike.

use serde_json::{Map, Value};

/// The JSON Schema dialect of a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Draft-07: `items` arrays are tuples, `additionalItems`, `definitions`, `dependencies`.
    Draft7,
    /// 2020-12: `prefixItems`, `items` for the rest, `$defs`, `dependentRequired/Schemas`.
    Draft2020,
}

impl Dialect {
    /// The dialect `$schema` names; documents without `$schema` get `default`.
    pub fn of(root: &Value, default: Dialect) -> Dialect {
        match root.get("$schema").and_then(Value::as_str) {
            Some(uri) if uri.contains("draft-07") || uri.contains("draft-06") => Dialect::Draft7,
            Some(uri) if uri.contains("draft-04") => Dialect::Draft7,
            Some(uri) if uri.contains("2020-12") || uri.contains("2019-09") => Dialect::Draft2020,
            _ => default,
        }
    }
}

/// Keywords that never change which values a schema accepts.
pub const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "$anchor",
    "$dynamicAnchor",
    "$vocabulary",
    "$comment",
    "$defs",
    "definitions",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
];

/// True when the engine judges `keyword`: every assertion and applicator of 2020-12 (the
/// contract vocabulary, [`crate::payload_schema::KEYWORDS`]) except `$dynamicRef`, plus the
/// draft-07 spellings `dependencies` and `additionalItems`.
pub fn is_judged(keyword: &str) -> bool {
    let in_2020_12 = crate::payload_schema::KEYWORDS.contains(&keyword)
        && keyword != "$dynamicRef"
        && !is_annotation(keyword);
    in_2020_12 || matches!(keyword, "dependencies" | "additionalItems")
}

/// True when `keyword` is an annotation or an extension (`x-...`).
pub fn is_annotation(keyword: &str) -> bool {
    ANNOTATIONS.contains(&keyword) || keyword.starts_with("x-")
}

/// True when the schema accepts every value (`true`, `{}` or annotations only).
pub fn is_trivial(schema: &Value) -> bool {
    match schema {
        Value::Bool(accepts) => *accepts,
        Value::Object(map) => map.keys().all(|key| is_annotation(key)),
        _ => false,
    }
}

/// True when the schema is the `false` schema.
pub fn is_false(schema: &Value) -> bool {
    matches!(schema, Value::Bool(false))
}

/// The JSON types as disjoint atoms: `number` is `Integer | Fraction`.
pub mod types {
    /// `null`.
    pub const NULL: u8 = 1;
    /// `true` / `false`.
    pub const BOOLEAN: u8 = 2;
    /// Objects.
    pub const OBJECT: u8 = 4;
    /// Arrays.
    pub const ARRAY: u8 = 8;
    /// Numbers with an integer value.
    pub const INTEGER: u8 = 16;
    /// Numbers with a fractional part.
    pub const FRACTION: u8 = 32;
    /// Strings.
    pub const STRING: u8 = 64;
    /// Every value.
    pub const ALL: u8 = 127;
    /// Any number.
    pub const NUMBER: u8 = INTEGER | FRACTION;

    /// The atoms of a `type` name.
    pub fn of_name(name: &str) -> u8 {
        match name {
            "null" => NULL,
            "boolean" => BOOLEAN,
            "object" => OBJECT,
            "array" => ARRAY,
            "integer" => INTEGER,
            "number" => NUMBER,
            "string" => STRING,
            _ => 0,
        }
    }

    /// The type names of a set of atoms, for messages.
    pub fn names(set: u8) -> Vec<&'static str> {
        let mut names = Vec::new();
        for (atom, name) in [
            (NULL, "null"),
            (BOOLEAN, "boolean"),
            (OBJECT, "object"),
            (ARRAY, "array"),
            (STRING, "string"),
        ] {
            if set & atom != 0 {
                names.push(name);
            }
        }
        match set & NUMBER {
            NUMBER => names.push("number"),
            INTEGER => names.push("integer"),
            FRACTION => names.push("non-integer number"),
            _ => {}
        }
        names
    }
}

/// The type atom of one JSON value.
pub fn type_of_value(value: &Value) -> u8 {
    match value {
        Value::Null => types::NULL,
        Value::Bool(_) => types::BOOLEAN,
        Value::Object(_) => types::OBJECT,
        Value::Array(_) => types::ARRAY,
        Value::String(_) => types::STRING,
        Value::Number(number) => {
            let integral = number.is_i64()
                || number.is_u64()
                || number.as_f64().is_some_and(|f| f.fract() == 0.0);
            if integral {
                types::INTEGER
            } else {
                types::FRACTION
            }
        }
    }
}

/// The type atoms a flat schema allows: its `type`, narrowed by `const`/`enum` values.
pub fn type_set(schema: &Map<String, Value>) -> u8 {
    let mut set = match schema.get("type") {
        Some(Value::String(name)) => types::of_name(name),
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(Value::as_str)
            .fold(0, |set, name| set | types::of_name(name)),
        _ => types::ALL,
    };
    if let Some(values) = finite_values(schema) {
        set &= values
            .iter()
            .fold(0, |acc, value| acc | type_of_value(value));
    }
    set
}

/// JSON equality as JSON Schema has it: `1` and `1.0` are the same number.
pub fn json_equal(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, x)| b.get(key).is_some_and(|y| json_equal(x, y)))
        }
        _ => left == right,
    }
}

/// The values of `const` or `enum`, when the schema lists them (a finite schema).
pub fn finite_values(schema: &Map<String, Value>) -> Option<Vec<Value>> {
    if let Some(value) = schema.get("const") {
        let values = vec![value.clone()];
        return Some(match schema.get("enum").and_then(Value::as_array) {
            Some(allowed) => values
                .into_iter()
                .filter(|value| allowed.iter().any(|item| json_equal(item, value)))
                .collect(),
            None => values,
        });
    }
    schema.get("enum").and_then(Value::as_array).cloned()
}

/// A numeric bound: value and whether it is exclusive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The limit.
    pub value: f64,
    /// True for `exclusiveMinimum`/`exclusiveMaximum`.
    pub exclusive: bool,
    /// The keyword it came from.
    pub keyword: &'static str,
}

/// The tightest lower bound of a flat schema.
pub fn lower_bound(schema: &Map<String, Value>) -> Option<Bound> {
    bound(schema, "minimum", "exclusiveMinimum", true)
}

/// The tightest upper bound of a flat schema.
pub fn upper_bound(schema: &Map<String, Value>) -> Option<Bound> {
    bound(schema, "maximum", "exclusiveMaximum", false)
}

fn bound(
    schema: &Map<String, Value>,
    inclusive_keyword: &'static str,
    exclusive_keyword: &'static str,
    lower: bool,
) -> Option<Bound> {
    // Draft-04 style `exclusiveMinimum: true` makes `minimum` exclusive.
    let legacy_exclusive = schema.get(exclusive_keyword).and_then(Value::as_bool) == Some(true);
    let inclusive = schema
        .get(inclusive_keyword)
        .and_then(Value::as_f64)
        .map(|value| Bound {
            value,
            exclusive: legacy_exclusive,
            keyword: inclusive_keyword,
        });
    let exclusive = schema
        .get(exclusive_keyword)
        .and_then(Value::as_f64)
        .map(|value| Bound {
            value,
            exclusive: true,
            keyword: exclusive_keyword,
        });
    match (inclusive, exclusive) {
        (Some(a), Some(b)) => {
            let a_tighter = if lower {
                a.value > b.value
            } else {
                a.value < b.value
            };
            Some(if a_tighter { a } else { b })
        }
        (a, b) => a.or(b),
    }
}

/// A non-negative integer keyword (`minLength`, `maxItems`).
pub fn count(schema: &Map<String, Value>, keyword: &str) -> Option<u64> {
    schema.get(keyword).and_then(|value| {
        value
            .as_u64()
            .or_else(|| value.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    })
}

/// An array schema's items by position: the tuple prefix and the schema for the rest.
pub struct Tuple<'a> {
    /// Item schemas by position, with the pointer keyword they sit under.
    pub prefix: Vec<(&'a Value, String)>,
    /// The schema of items after the prefix, and its keyword; `None` accepts anything.
    pub rest: Option<(&'a Value, &'static str)>,
}

/// The tuple view of an array schema in `dialect`.
pub fn tuple(schema: &Map<String, Value>) -> Tuple<'_> {
    fn indexed<'v>(keyword: &str, items: &'v [Value]) -> Vec<(&'v Value, String)> {
        items
            .iter()
            .enumerate()
            .map(|(index, item)| (item, format!("/{keyword}/{index}")))
            .collect()
    }
    let (prefix, rest) = match (schema.get("prefixItems"), schema.get("items")) {
        (Some(Value::Array(items)), rest) => (
            indexed("prefixItems", items),
            rest.map(|rest| (rest, "items")),
        ),
        (_, Some(Value::Array(items))) => (
            indexed("items", items),
            schema
                .get("additionalItems")
                .map(|rest| (rest, "additionalItems")),
        ),
        (_, Some(rest)) => (Vec::new(), Some((rest, "items"))),
        (_, None) => (Vec::new(), None),
    };
    let rest = rest.or_else(|| {
        let unevaluated_applies = !has_applicators(schema) && !schema.contains_key("contains");
        unevaluated_applies
            .then(|| {
                schema
                    .get("unevaluatedItems")
                    .map(|rest| (rest, "unevaluatedItems"))
            })
            .flatten()
    });
    Tuple { prefix, rest }
}

/// True when the schema has in-place applicators, which `unevaluated*` keywords look through.
pub fn has_applicators(schema: &Map<String, Value>) -> bool {
    [
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "$ref",
        "$dynamicRef",
        "dependentSchemas",
    ]
    .iter()
    .any(|keyword| schema.contains_key(*keyword))
}

/// The schema for property names no `properties` or `patternProperties` entry covers, and its
/// keyword; `None` accepts anything.
pub fn additional_properties(schema: &Map<String, Value>) -> Option<(&Value, &'static str)> {
    if let Some(additional) = schema.get("additionalProperties") {
        return Some((additional, "additionalProperties"));
    }
    if has_applicators(schema) {
        // `unevaluatedProperties` sees properties evaluated by subschemas: not judged here
        // (ignoring it on the writer side only widens the writer, which is safe).
        return None;
    }
    schema
        .get("unevaluatedProperties")
        .map(|unevaluated| (unevaluated, "unevaluatedProperties"))
}

/// `required` as strings.
pub fn required(schema: &Map<String, Value>) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Property dependencies as arrays (`dependentRequired`, draft-07 `dependencies` arrays).
pub fn dependent_required(schema: &Map<String, Value>) -> Vec<(&str, Vec<&str>, String)> {
    let mut out = Vec::new();
    for keyword in ["dependentRequired", "dependencies"] {
        if let Some(Value::Object(map)) = schema.get(keyword) {
            for (key, value) in map {
                if let Value::Array(names) = value {
                    out.push((
                        key.as_str(),
                        names.iter().filter_map(Value::as_str).collect(),
                        format!("/{keyword}/{}", escape(key)),
                    ));
                }
            }
        }
    }
    out
}

/// Property dependencies as schemas (`dependentSchemas`, draft-07 `dependencies` schemas).
pub fn dependent_schemas(schema: &Map<String, Value>) -> Vec<(&str, &Value, String)> {
    let mut out = Vec::new();
    for keyword in ["dependentSchemas", "dependencies"] {
        if let Some(Value::Object(map)) = schema.get(keyword) {
            for (key, value) in map {
                if !value.is_array() {
                    out.push((key.as_str(), value, format!("/{keyword}/{}", escape(key))));
                }
            }
        }
    }
    out
}

/// Escapes one JSON pointer segment.
pub fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Resolves a local `$ref` (`#`, `#/json/pointer`) in `root`; `None` for anything else.
pub fn resolve<'a>(root: &'a Value, reference: &str) -> Option<(&'a Value, String)> {
    let fragment = reference.strip_prefix('#')?;
    let decoded = crate::uri::percent_decode(fragment)?;
    if !decoded.is_empty() && !decoded.starts_with('/') {
        return None;
    }
    root.pointer(&decoded).map(|target| (target, decoded))
}

/// Merges two flat conjuncts into one schema with the same meaning, or `None` when the
/// keywords interact in a way a plain merge would change (open/closed objects with different
/// property sets, two different tuples, ...).
pub fn merge(left: &Value, right: &Value) -> Option<Value> {
    match (left, right) {
        (Value::Bool(false), _) | (_, Value::Bool(false)) => return Some(Value::Bool(false)),
        (Value::Bool(true), other) | (other, Value::Bool(true)) => return Some(other.clone()),
        _ => {}
    }
    let (left, right) = (left.as_object()?, right.as_object()?);
    let closes = |map: &Map<String, Value>| {
        [
            "additionalProperties",
            "patternProperties",
            "unevaluatedProperties",
        ]
        .iter()
        .any(|keyword| map.contains_key(*keyword))
    };
    let property_names = |map: &Map<String, Value>| {
        map.get("properties")
            .and_then(Value::as_object)
            .map(|properties| properties.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    if (closes(left) || closes(right)) && property_names(left) != property_names(right) {
        let left_only_closes = closes(left) && !closes(right) && !right.contains_key("properties");
        let right_only_closes = closes(right) && !closes(left) && !left.contains_key("properties");
        if !(left_only_closes || right_only_closes) {
            return None;
        }
    }
    let mut merged = left.clone();
    for (keyword, value) in right {
        let Some(existing) = merged.get(keyword) else {
            merged.insert(keyword.clone(), value.clone());
            continue;
        };
        if json_equal(existing, value) || is_annotation(keyword) {
            continue;
        }
        let combined = match keyword.as_str() {
            "type" => {
                let set = type_set(&single("type", existing)) & type_set(&single("type", value));
                Value::Array(
                    types::names(set)
                        .into_iter()
                        .map(|name| {
                            Value::String(if name == "non-integer number" {
                                "number".to_owned()
                            } else {
                                name.to_owned()
                            })
                        })
                        .collect(),
                )
            }
            "required" => {
                let mut names = existing.as_array()?.clone();
                for name in value.as_array()? {
                    if !names.contains(name) {
                        names.push(name.clone());
                    }
                }
                Value::Array(names)
            }
            "enum" => Value::Array(
                existing
                    .as_array()?
                    .iter()
                    .filter(|item| {
                        value
                            .as_array()
                            .is_some_and(|other| other.iter().any(|x| json_equal(x, item)))
                    })
                    .cloned()
                    .collect(),
            ),
            "properties" => {
                let mut properties = existing.as_object()?.clone();
                for (name, schema) in value.as_object()? {
                    let entry = match properties.get(name) {
                        Some(current) if current != schema => {
                            serde_json::json!({"allOf": [current, schema]})
                        }
                        Some(current) => current.clone(),
                        None => schema.clone(),
                    };
                    properties.insert(name.clone(), entry);
                }
                Value::Object(properties)
            }
            "minimum" | "exclusiveMinimum" | "minLength" | "minItems" | "minProperties"
            | "minContains" => max_number(existing, value)?,
            "maximum" | "exclusiveMaximum" | "maxLength" | "maxItems" | "maxProperties"
            | "maxContains" => min_number(existing, value)?,
            "uniqueItems" => Value::Bool(existing.as_bool()? || value.as_bool()?),
            _ => return None,
        };
        merged.insert(keyword.clone(), combined);
    }
    // A `const` outside the merged `enum` leaves nothing.
    if let (Some(constant), Some(Value::Array(allowed))) = (merged.get("const"), merged.get("enum"))
        && !allowed.iter().any(|item| json_equal(item, constant))
    {
        return Some(Value::Bool(false));
    }
    Some(Value::Object(merged))
}

fn single(keyword: &str, value: &Value) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert(keyword.to_owned(), value.clone());
    map
}

fn max_number(left: &Value, right: &Value) -> Option<Value> {
    Some(if left.as_f64()? >= right.as_f64()? {
        left.clone()
    } else {
        right.clone()
    })
}

fn min_number(left: &Value, right: &Value) -> Option<Value> {
    Some(if left.as_f64()? <= right.as_f64()? {
        left.clone()
    } else {
        right.clone()
    })
}

/// True when a flat schema can match no value at all.
pub fn is_unsatisfiable(schema: &Value) -> bool {
    let Value::Object(map) = schema else {
        return is_false(schema);
    };
    if type_set(map) == 0 {
        return true;
    }
    if finite_values(map).is_some_and(|values| values.is_empty()) {
        return true;
    }
    if let (Some(low), Some(high)) = (lower_bound(map), upper_bound(map))
        && (low.value > high.value
            || (low.value == high.value && (low.exclusive || high.exclusive)))
    {
        return type_set(map) & !types::NUMBER == 0;
    }
    let pairs = [
        ("minLength", "maxLength", types::STRING),
        ("minItems", "maxItems", types::ARRAY),
        ("minProperties", "maxProperties", types::OBJECT),
    ];
    pairs.iter().any(|(min, max, only)| {
        matches!((count(map, min), count(map, max)), (Some(low), Some(high)) if low > high)
            && type_set(map) & !only == 0
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn type_sets_split_numbers_into_integer_and_fraction() {
        let schema = json!({"type": ["integer", "string"]});
        let set = type_set(schema.as_object().expect("object"));
        assert_eq!(set, types::INTEGER | types::STRING);
        let constant = json!({"type": "number", "const": 2});
        assert_eq!(
            type_set(constant.as_object().expect("object")),
            types::INTEGER
        );
    }

    #[test]
    fn merge_intersects_types_and_unions_required() {
        let merged = merge(
            &json!({"type": ["string", "number"], "required": ["a"]}),
            &json!({"type": "string", "required": ["b"], "maxLength": 3}),
        )
        .expect("mergeable");
        assert_eq!(
            merged,
            json!({"type": ["string"], "required": ["a", "b"], "maxLength": 3})
        );
        let contradiction =
            merge(&json!({"type": "number"}), &json!({"type": "string"})).expect("mergeable");
        assert!(is_unsatisfiable(&contradiction));
    }

    #[test]
    fn merge_refuses_closed_objects_with_different_properties() {
        let closed = json!({"properties": {"a": {}}, "additionalProperties": false});
        let other = json!({"properties": {"b": {}}});
        assert_eq!(merge(&closed, &other), None);
    }

    #[test]
    fn local_references_resolve_with_percent_decoding() {
        let root = json!({"$defs": {"a b": {"type": "string"}}});
        let (target, pointer) = resolve(&root, "#/$defs/a%20b").expect("resolves");
        assert_eq!(target, &json!({"type": "string"}));
        assert_eq!(pointer, "/$defs/a b");
        assert!(resolve(&root, "other.json#/x").is_none());
    }
}
