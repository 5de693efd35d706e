//! What a schema looks like to the generator: its non-null types, whether it allows `null`,
//! whether it has a shape at all or only constrains, whether it becomes a named item, and which
//! of its keywords are left to run-time validation. The generator dispatches in the order of
//! [`named_item`], so the two agree.

use serde_json::{Map, Value as Json};

use super::refs;

/// Keywords that give a schema a shape (a Rust type other than `serde_json::Value`).
const SHAPE_KEYWORDS: &[&str] = &[
    "type",
    "$ref",
    "const",
    "enum",
    "properties",
    "additionalProperties",
    "patternProperties",
    "items",
    "prefixItems",
    "oneOf",
    "anyOf",
    "allOf",
];

/// Keywords that only constrain values: the Rust type does not express them, the schema
/// validation at append checks them.
const RUNTIME_ONLY: &[&str] = &[
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "patternProperties",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedItems",
    "not",
    "if",
    "then",
    "else",
];

/// The non-null JSON types `type` names, in schema order, and whether it names `null`.
pub(super) fn types(map: &Map<String, Json>) -> (Vec<&str>, bool) {
    match map.get("type") {
        Some(Json::String(single)) if single == "null" => (Vec::new(), true),
        Some(Json::String(single)) => (vec![single.as_str()], false),
        Some(Json::Array(list)) => (
            list.iter()
                .filter_map(Json::as_str)
                .filter(|t| *t != "null")
                .collect(),
            list.iter().any(|t| t == "null"),
        ),
        _ => (Vec::new(), false),
    }
}

/// Whether `schema` allows only `null` (`type: null`, `const: null`, `enum: [null]`).
pub(super) fn is_null_only(schema: &Json) -> bool {
    let Json::Object(map) = schema else {
        return false;
    };
    if let Some(constant) = map.get("const") {
        return constant.is_null();
    }
    if let Some(Json::Array(values)) = map.get("enum") {
        return !values.is_empty() && values.iter().all(Json::is_null);
    }
    matches!(types(map), (list, true) if list.is_empty())
}

/// Whether `schema` gives its values a shape; a schema without one (`{}`, `{required: [a]}`,
/// `{not: ...}`) only constrains whatever it is combined with.
pub(super) fn has_shape(schema: &Json) -> bool {
    match schema {
        Json::Object(map) => SHAPE_KEYWORDS
            .iter()
            .any(|keyword| match map.get(*keyword) {
                Some(Json::Array(parts)) if matches!(*keyword, "oneOf" | "anyOf" | "allOf") => {
                    parts.iter().any(has_shape)
                }
                Some(_) => true,
                None => false,
            }),
        _ => false,
    }
}

/// The branches of `oneOf`/`anyOf` (the first present), when at least one has a shape.
pub(super) fn union_branches(map: &Map<String, Json>) -> Option<(&'static str, &Vec<Json>)> {
    ["oneOf", "anyOf"]
        .into_iter()
        .find_map(|keyword| match map.get(keyword) {
            Some(Json::Array(branches)) if branches.iter().any(has_shape) => {
                Some((keyword, branches))
            }
            _ => None,
        })
}

/// The parts of `allOf`, when at least one has a shape.
pub(super) fn all_of_parts(map: &Map<String, Json>) -> Option<&Vec<Json>> {
    match map.get("allOf") {
        Some(Json::Array(parts)) if parts.iter().any(has_shape) => Some(parts),
        _ => None,
    }
}

/// Whether `map` is an object schema: `type: object`, or no type and object keywords.
pub(super) fn is_object(map: &Map<String, Json>) -> bool {
    match types(map).0.as_slice() {
        ["object"] => true,
        [] => ["properties", "additionalProperties", "patternProperties"]
            .iter()
            .any(|keyword| map.contains_key(*keyword)),
        _ => false,
    }
}

/// Whether an object schema refuses keys it does not list (`additionalProperties: false` or
/// `unevaluatedProperties: false`).
pub(super) fn is_closed(map: &Map<String, Json>) -> bool {
    let closed = |keyword: &str| map.get(keyword) == Some(&Json::Bool(false));
    closed("additionalProperties") || closed("unevaluatedProperties")
}

/// Whether an object schema lists properties (an object without any is a map when open).
pub(super) fn has_properties(map: &Map<String, Json>) -> bool {
    map.get("properties")
        .and_then(Json::as_object)
        .is_some_and(|properties| !properties.is_empty())
}

/// Whether the generator makes a named item (a struct or an enum) of `schema`, resolving
/// `$ref`s of `allOf` parts in `root` (`None`: count them as objects). Only a named item can be
/// referred to recursively: the reference is boxed.
pub(super) fn named_item(root: Option<&Json>, schema: &Json) -> bool {
    let Json::Object(map) = schema else {
        return false;
    };
    if let Some(reference) = map.get("$ref") {
        // Keywords with a shape beside `$ref` make it an `allOf` of the two.
        let mut beside = map.clone();
        beside.remove("$ref");
        let beside = Json::Object(beside);
        if !has_shape(&beside) {
            return false;
        }
        let parts = [serde_json::json!({"$ref": reference}), beside];
        return all_of_is_object(root, &Map::new(), &parts);
    }
    if let Some(values) = enum_values(map) {
        return values.iter().any(|v| !v.is_null());
    }
    if let Some((_, branches)) = union_branches(map) {
        let non_null: Vec<&Json> = branches.iter().filter(|b| !is_null_only(b)).collect();
        return match non_null.as_slice() {
            [single] => named_item(root, single),
            [] => false,
            _ => true,
        };
    }
    if let Some(parts) = all_of_parts(map) {
        return all_of_is_object(root, map, parts) || {
            let shaped = parts.iter().find(|part| has_shape(part));
            shaped.is_some_and(|part| named_item(root, part))
        };
    }
    if map.contains_key("prefixItems") {
        return false;
    }
    let (list, _) = types(map);
    if list.len() > 1 {
        return true;
    }
    is_object(map) && (has_properties(map) || is_closed(map))
}

/// `const` as a one-value list, or `enum`.
pub(super) fn enum_values(map: &Map<String, Json>) -> Option<Vec<&Json>> {
    if let Some(constant) = map.get("const") {
        return Some(vec![constant]);
    }
    match map.get("enum") {
        Some(Json::Array(values)) => Some(values.iter().collect()),
        _ => None,
    }
}

/// Whether an `allOf` (with the schema that holds it) merges into one struct: every part with
/// a shape is an object, inline or through `$ref`.
pub(super) fn all_of_is_object(
    root: Option<&Json>,
    holder: &Map<String, Json>,
    parts: &[Json],
) -> bool {
    all_of_is_object_within(root, holder, parts, MAX_ALL_OF_DEPTH)
}

/// How deep `allOf` parts are followed (through `$ref`s that may come back to themselves).
const MAX_ALL_OF_DEPTH: usize = 32;

fn all_of_is_object_within(
    root: Option<&Json>,
    holder: &Map<String, Json>,
    parts: &[Json],
    depth: usize,
) -> bool {
    let Some(depth) = depth.checked_sub(1) else {
        return false;
    };
    let holder_ok = !types_conflict_with_object(holder);
    holder_ok
        && parts.iter().filter(|part| has_shape(part)).all(|part| {
            let Json::Object(map) = part else {
                return false;
            };
            match (map.get("$ref").and_then(Json::as_str), root) {
                (Some(reference), Some(root)) => refs::resolve_alias(root, reference)
                    .ok()
                    .and_then(|(_, target)| target.as_object())
                    .is_some_and(|target| object_part(Some(root), target, depth)),
                (Some(_), None) => true,
                (None, _) => object_part(root, map, depth),
            }
        })
}

fn object_part(root: Option<&Json>, map: &Map<String, Json>, depth: usize) -> bool {
    if let Some(parts) = all_of_parts(map) {
        return all_of_is_object_within(root, map, parts, depth);
    }
    is_object(map) && union_branches(map).is_none()
}

fn types_conflict_with_object(map: &Map<String, Json>) -> bool {
    let (list, _) = types(map);
    !(list.is_empty() || list == ["object"])
}

/// The keywords of `schema` the Rust type does not express, in a fixed order, for doc comments.
pub(super) fn runtime_only(schema: &Json) -> Vec<&'static str> {
    let Json::Object(map) = schema else {
        return Vec::new();
    };
    let mut found: Vec<&'static str> = RUNTIME_ONLY
        .iter()
        .copied()
        .filter(|keyword| map.contains_key(*keyword))
        .collect();
    // An unsigned integer type already enforces `minimum: 0`.
    let unsigned =
        types(map).0 == ["integer"] && map.get("minimum").and_then(Json::as_f64) == Some(0.0);
    if unsigned {
        found.retain(|keyword| *keyword != "minimum");
    }
    if let Some(Json::String(format)) = map.get("format")
        && !matches!(format.as_str(), "uuid" | "date-time")
    {
        found.push("format");
    }
    for keyword in ["oneOf", "anyOf", "allOf"] {
        if matches!(map.get(keyword), Some(Json::Array(parts)) if !parts.iter().any(has_shape)) {
            found.push(keyword);
        }
    }
    found
}

/// The doc comment line that names the run-time-only keywords of `schema`, if it has any.
pub(super) fn runtime_only_note(schema: &Json) -> Option<String> {
    let keywords = runtime_only(schema);
    (!keywords.is_empty()).then(|| {
        format!(
            "Checked at run time only (schema validation at append): {}.",
            keywords
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}
