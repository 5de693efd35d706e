//! Writer and reader views of a schema (docs/compat.md).
//!
//! The *writer view* is what a generated producer can emit: objects that declare `properties`
//! are closed (the struct has exactly those fields) unless the event's payload content is open
//! (the struct then keeps unknown fields and may emit any extra key), and tuples are closed
//! (exactly their positions). The *reader view* is what a generated consumer tolerates: objects are open,
//! because the payload types ignore unknown fields. BACKWARD compatibility then means
//! `writer(old) ⊆ reader(new)` and FORWARD `writer(new) ⊆ reader(old)`: adding or removing an
//! optional field is safe, while reusing a removed name with another type is caught.

use serde_json::{Map, Value};

use super::schema::has_applicators;
use crate::model::ContentModel;

/// Keywords whose value is one subschema.
const SINGLE: &[&str] = &[
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// Keywords whose value is a map of subschemas.
const MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];
/// Keywords whose value is a list of subschemas.
const LISTS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];

/// The writer view: closes tuples, and objects with declared properties when `content` is
/// closed (an open content model's generated struct keeps unknown fields, so a producer may
/// emit any extra key the schema allows).
pub fn writer(schema: &Value, content: ContentModel) -> Value {
    match content {
        ContentModel::Closed => transform(schema, &|map| {
            close_object(map);
            close_tuple(map);
        }),
        ContentModel::Open => transform(schema, &close_tuple),
    }
}

/// The reader view: opens closed objects.
pub fn reader(schema: &Value) -> Value {
    transform(schema, &open)
}

fn close_object(map: &mut Map<String, Value>) {
    let open_object = map.contains_key("properties")
        && !map.contains_key("additionalProperties")
        && !map.contains_key("patternProperties")
        && !map.contains_key("unevaluatedProperties")
        && !has_applicators(map);
    if open_object {
        map.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
}

fn close_tuple(map: &mut Map<String, Value>) {
    let open_tuple = !map.contains_key("unevaluatedItems") && !has_applicators(map);
    if open_tuple {
        if map.get("prefixItems").is_some_and(Value::is_array) && !map.contains_key("items") {
            map.insert("items".to_owned(), Value::Bool(false));
        }
        if map.get("items").is_some_and(Value::is_array) && !map.contains_key("additionalItems") {
            map.insert("additionalItems".to_owned(), Value::Bool(false));
        }
    }
}

fn open(map: &mut Map<String, Value>) {
    for keyword in ["additionalProperties", "unevaluatedProperties"] {
        if map.get(keyword) == Some(&Value::Bool(false)) {
            map.remove(keyword);
        }
    }
}

fn transform(schema: &Value, change: &dyn Fn(&mut Map<String, Value>)) -> Value {
    let Value::Object(map) = schema else {
        return schema.clone();
    };
    let mut out = Map::with_capacity(map.len() + 1);
    for (keyword, value) in map {
        let value = if SINGLE.contains(&keyword.as_str())
            || (keyword == "items" && value.is_object())
        {
            transform(value, change)
        } else if MAPS.contains(&keyword.as_str()) {
            match value {
                Value::Object(entries) => Value::Object(
                    entries
                        .iter()
                        .map(|(name, entry)| {
                            let entry = if entry.is_array() {
                                entry.clone()
                            } else {
                                transform(entry, change)
                            };
                            (name.clone(), entry)
                        })
                        .collect(),
                ),
                other => other.clone(),
            }
        } else if LISTS.contains(&keyword.as_str()) || (keyword == "items" && value.is_array()) {
            match value {
                Value::Array(items) => {
                    Value::Array(items.iter().map(|item| transform(item, change)).collect())
                }
                other => other.clone(),
            }
        } else {
            value.clone()
        };
        out.insert(keyword.clone(), value);
    }
    change(&mut out);
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn writers_close_declared_objects_and_tuples() {
        let schema = json!({
            "type": "object",
            "properties": {"tags": {"type": "array", "prefixItems": [{"type": "string"}]},
                           "inner": {"properties": {"a": {}}}},
        });
        assert_eq!(
            writer(&schema, ContentModel::Closed),
            json!({
                "type": "object",
                "properties": {"tags": {"type": "array", "prefixItems": [{"type": "string"}], "items": false},
                               "inner": {"properties": {"a": {}}, "additionalProperties": false}},
                "additionalProperties": false
            })
        );
    }

    #[test]
    fn open_content_writers_keep_objects_open_and_close_tuples() {
        let schema = json!({
            "type": "object",
            "properties": {"tags": {"type": "array", "prefixItems": [{"type": "string"}]},
                           "inner": {"properties": {"a": {}}}},
        });
        assert_eq!(
            writer(&schema, ContentModel::Open),
            json!({
                "type": "object",
                "properties": {"tags": {"type": "array", "prefixItems": [{"type": "string"}], "items": false},
                               "inner": {"properties": {"a": {}}}}
            })
        );
        let closed = json!({"properties": {"a": {}}, "additionalProperties": false});
        assert_eq!(writer(&closed, ContentModel::Open), closed);
    }

    #[test]
    fn readers_open_closed_objects_only() {
        let schema = json!({"properties": {"m": {"additionalProperties": {"type": "string"}}},
                            "additionalProperties": false});
        assert_eq!(
            reader(&schema),
            json!({"properties": {"m": {"additionalProperties": {"type": "string"}}}})
        );
    }
}
