//! `$ref` resolution for the generator: JSON pointers anywhere in the schema and `$anchor`
//! names, followed through chains of bare references; and the type name of a target.

use serde_json::Value as Json;

use crate::naming;

/// Resolves a reference inside `root`: `#` and `#/json/pointer` through
/// [`crate::compat::schema::resolve`], `#name` to the subschema whose `$anchor` is `name` (the
/// first in document order). Returns the target and its JSON pointer.
pub fn resolve_reference<'j>(root: &'j Json, reference: &str) -> Option<(&'j Json, String)> {
    let fragment = reference.strip_prefix('#')?;
    if fragment.is_empty() || fragment.starts_with('/') {
        return crate::compat::schema::resolve(root, reference);
    }
    let anchor = crate::uri::percent_decode(fragment)?;
    find_anchor(root, &anchor, "")
}

fn find_anchor<'j>(schema: &'j Json, anchor: &str, pointer: &str) -> Option<(&'j Json, String)> {
    match schema {
        Json::Object(map) => {
            if map.get("$anchor").and_then(Json::as_str) == Some(anchor) {
                return Some((schema, pointer.to_owned()));
            }
            map.iter().find_map(|(key, child)| {
                let child_pointer =
                    format!("{pointer}/{}", crate::yaml::escape_pointer_segment(key));
                // `const`, `enum` and `examples` hold values, not schemas.
                if matches!(key.as_str(), "const" | "enum" | "examples" | "default") {
                    return None;
                }
                find_anchor(child, anchor, &child_pointer)
            })
        }
        Json::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(index, child)| find_anchor(child, anchor, &format!("{pointer}/{index}"))),
        _ => None,
    }
}

/// Follows `reference` and every `$ref` its target holds in turn to a schema that is not itself
/// a reference; returns that schema's JSON pointer and the schema.
///
/// # Errors
/// What is wrong: the reference does not resolve in `root`, or the chain comes back to a
/// reference it already followed (a cycle of bare `$ref`s, which names no type at all).
pub fn resolve_alias<'j>(root: &'j Json, reference: &str) -> Result<(String, &'j Json), String> {
    let mut seen: Vec<String> = Vec::new();
    let mut reference = reference.to_owned();
    loop {
        let Some((target, pointer)) = resolve_reference(root, &reference) else {
            return Err("does not resolve inside the schema".to_owned());
        };
        if seen.contains(&pointer) {
            seen.push(pointer);
            return Err(format!(
                "is a cycle of references that never reaches a schema: {}",
                seen.iter()
                    .map(|p| format!("#{p}"))
                    .collect::<Vec<_>>()
                    .join(" -> ")
            ));
        }
        seen.push(pointer.clone());
        match target.get("$ref").and_then(Json::as_str) {
            Some(next) => reference = next.to_owned(),
            None => return Ok((pointer, target)),
        }
    }
}

/// The type name of the schema at `pointer`, after `base`: the names the structural walk gives
/// (`/properties/address` → `Address`, `/items` → `Item`), and a `$defs` or `definitions` entry
/// its own name (`/$defs/unit_ref` → `UnitRef`).
pub(super) fn name_for_pointer(base: &str, pointer: &str) -> String {
    let segments: Vec<String> = crate::yaml::pointer_segments(pointer).collect();
    let mut name = base.to_owned();
    let mut index = 0;
    while index < segments.len() {
        let segment = segments[index].as_str();
        let next = segments.get(index + 1).map(String::as_str);
        match (segment, next) {
            ("properties" | "$defs" | "definitions" | "patternProperties", Some(next)) => {
                name.push_str(&naming::pascal(next));
                index += 2;
            }
            ("prefixItems", Some(next)) => {
                name.push_str(&format!("Item{next}"));
                index += 2;
            }
            ("oneOf" | "anyOf" | "allOf", Some(next)) => {
                name.push_str(&format!("Variant{next}"));
                index += 2;
            }
            ("items", _) => {
                name.push_str("Item");
                index += 1;
            }
            ("additionalProperties", _) => {
                name.push_str("Value");
                index += 1;
            }
            (other, _) => {
                name.push_str(&naming::pascal(other));
                index += 1;
            }
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn anchors_and_pointers_resolve_anywhere() {
        let root = json!({
            "properties": {"a": {"$anchor": "alpha", "type": "string"}, "b": {"$ref": "#alpha"}},
            "$defs": {"c": {"$ref": "#/properties/b"}}
        });
        let (target, pointer) = resolve_reference(&root, "#alpha").expect("anchor");
        assert_eq!(pointer, "/properties/a");
        assert_eq!(target["type"], "string");
        let (pointer, _) = resolve_alias(&root, "#/$defs/c").expect("chain");
        assert_eq!(pointer, "/properties/a");
        assert!(resolve_reference(&root, "#nowhere").is_none());
    }

    #[test]
    fn pointer_names_follow_the_structural_names() {
        assert_eq!(name_for_pointer("XV1", "/$defs/unit_ref"), "XV1UnitRef");
        assert_eq!(
            name_for_pointer("XV1", "/properties/a/items/properties/b"),
            "XV1AItemB"
        );
        assert_eq!(name_for_pointer("XV1", "/prefixItems/1"), "XV1Item1");
    }
}
