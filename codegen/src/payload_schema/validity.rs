//! Whether a payload schema is valid JSON Schema, as the validator library judges it.
//!
//! The judge is `jsonschema`: a schema is valid when a validator builds from it. Building
//! compiles the whole schema into a validator only to throw it away, which costs more than
//! the rest of a schema's checks together. For the common shape of a 2020-12 schema the same
//! verdict comes cheaper: the library checks a schema against the meta-schema first, and after
//! that the only things its compiler can still refuse are regular expressions and references.
//! So a schema that passes the meta-schema, whose `$ref`s are all JSON pointers to schemas
//! inside it and whose patterns each compile on their own (checked once per pattern and
//! thread), is valid.
//! Anything outside that shape (another draft, `$id`, `$anchor`, dynamic references, a
//! reference that does not resolve to a schema, a pattern that does not compile, a schema that
//! fails the meta-schema) is judged by building the validator, which also gives the error.

use std::cell::RefCell;
use std::collections::HashMap;

use serde_json::Value as Json;

use super::draft::Draft;

/// Keys that change how references resolve or what the meta-schema means; a schema holding
/// one anywhere (even as data) is judged by building its validator.
const BUILD_IF_PRESENT: &[&str] = &[
    "$id",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "$recursiveAnchor",
    "$vocabulary",
];

/// Keywords whose value is one schema.
const ONE_SCHEMA: &[&str] = &[
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "contentSchema",
];

/// Keywords whose value maps names to schemas.
const NAMED_SCHEMAS: &[&str] = &[
    "$defs",
    "definitions",
    "properties",
    "patternProperties",
    "dependentSchemas",
];

/// Keywords whose value is a list of schemas.
const LISTED_SCHEMAS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];

/// The error `jsonschema` reports for `schema` written in `draft` (validated with formats
/// asserted), or `None` when it is valid.
pub(super) fn error(schema: &Json, draft: Draft) -> Option<jsonschema::ValidationError<'static>> {
    if draft == Draft::Draft2020 && valid_without_building(schema) {
        return None;
    }
    build(schema, draft).err()
}

fn build(
    schema: &Json,
    draft: Draft,
) -> Result<jsonschema::Validator, jsonschema::ValidationError<'static>> {
    draft
        .validator()
        .should_validate_formats(true)
        .build(schema)
}

/// Whether a 2020-12 `schema` is certainly valid without building its validator; `false` means
/// "build it to know", not "invalid".
fn valid_without_building(schema: &Json) -> bool {
    let mut found = Found::default();
    if !found.scan(schema, true) {
        return false;
    }
    found
        .references
        .iter()
        .all(|reference| points_at_a_schema(schema, reference))
        && found
            .patterns
            .iter()
            .all(|pattern| compiles(PatternUse::Pattern, pattern))
        && found
            .property_patterns
            .iter()
            .all(|pattern| compiles(PatternUse::PropertyName, pattern))
        && jsonschema::draft202012::meta::is_valid(schema)
}

/// What a scan of a schema found that the compiler would look at beyond the meta-schema.
#[derive(Default)]
struct Found<'j> {
    references: Vec<&'j str>,
    patterns: Vec<&'j str>,
    property_patterns: Vec<&'j str>,
}

impl<'j> Found<'j> {
    /// Collects every `$ref`, `pattern` and `patternProperties` key in `value`, schema or data
    /// alike (a superset costs only a needless check); `false` when `value` holds something
    /// that only building the validator judges.
    fn scan(&mut self, value: &'j Json, root: bool) -> bool {
        match value {
            Json::Object(map) => map.iter().all(|(key, child)| {
                if BUILD_IF_PRESENT.contains(&key.as_str()) || (key == "$schema" && !root) {
                    return false;
                }
                match (key.as_str(), child) {
                    ("$ref", Json::String(reference)) => self.references.push(reference),
                    ("$ref", _) => return false,
                    ("pattern", Json::String(pattern)) => self.patterns.push(pattern),
                    ("patternProperties", Json::Object(patterns)) => {
                        self.property_patterns
                            .extend(patterns.keys().map(String::as_str));
                    }
                    _ => {}
                }
                self.scan(child, false)
            }),
            Json::Array(items) => items.iter().all(|item| self.scan(item, false)),
            _ => true,
        }
    }
}

/// Whether `reference` is a JSON pointer fragment that leads, through schema keywords only, to
/// a schema (an object or a boolean) inside `root`: such a target has passed the meta-schema
/// with the rest of the document.
fn points_at_a_schema(root: &Json, reference: &str) -> bool {
    let Some(pointer) = reference.strip_prefix('#') else {
        return false;
    };
    // The library parses a reference as a URI and refuses what a fragment cannot hold as
    // written (a space, a non-ASCII letter); percent-encoded references are left to it too.
    let in_fragment = |byte: u8| crate::uri::stands_in_path(byte) || byte == b'?';
    if !(pointer.is_empty() || pointer.starts_with('/')) || !pointer.bytes().all(in_fragment) {
        return false;
    }
    let mut segments = crate::yaml::pointer_segments(pointer);
    let mut at = root;
    while let Some(keyword) = segments.next() {
        let Json::Object(map) = at else {
            return false;
        };
        let Some(value) = map.get(&keyword) else {
            return false;
        };
        let keyword = keyword.as_str();
        at = if ONE_SCHEMA.contains(&keyword) {
            value
        } else if NAMED_SCHEMAS.contains(&keyword) {
            let Some(child) = segments.next().and_then(|name| value.get(name.as_str())) else {
                return false;
            };
            child
        } else if LISTED_SCHEMAS.contains(&keyword) {
            let index = segments
                .next()
                .and_then(|index| index.parse::<usize>().ok());
            let Some(child) = index.and_then(|index| value.get(index)) else {
                return false;
            };
            child
        } else {
            return false;
        };
    }
    matches!(at, Json::Object(_) | Json::Bool(_))
}

/// Where a regular expression is used: each is checked in its own keyword, so that the verdict
/// is the library's for that keyword.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum PatternUse {
    Pattern,
    PropertyName,
}

thread_local! {
    /// Patterns already judged on this thread: event types repeat the same few patterns.
    static JUDGED: RefCell<HashMap<(PatternUse, String), bool>> = RefCell::new(HashMap::new());
}

/// Whether the library compiles `pattern` used as `usage`, judged by building a validator of
/// that one keyword.
fn compiles(usage: PatternUse, pattern: &str) -> bool {
    let key = (usage, pattern.to_owned());
    if let Some(known) = JUDGED.with(|judged| judged.borrow().get(&key).copied()) {
        return known;
    }
    let verdict = match usage {
        PatternUse::Pattern => {
            build(&serde_json::json!({ "pattern": pattern }), Draft::Draft2020).is_ok()
        }
        // The library compiles a map of plain patterns its own cheaper way, and the others as
        // regular expressions; a lookahead, which only the full engine reads, forces the second.
        PatternUse::PropertyName => [
            serde_json::json!({ "patternProperties": { pattern: true } }),
            serde_json::json!({ "patternProperties": { pattern: true, "(?=a)": true } }),
        ]
        .iter()
        .all(|schema| build(schema, Draft::Draft2020).is_ok()),
    };
    JUDGED.with(|judged| judged.borrow_mut().insert(key, verdict));
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The shortcut never calls valid what the library refuses, and `error` agrees with it.
    fn agrees(schema: &Json) {
        let built = build(schema, Draft::Draft2020);
        if valid_without_building(schema) {
            assert!(
                built.is_ok(),
                "judged valid without building, refused: {schema}"
            );
        }
        assert_eq!(
            error(schema, Draft::Draft2020).map(|e| e.to_string()),
            built.err().map(|e| e.to_string()),
            "{schema}"
        );
    }

    #[test]
    fn the_shortcut_takes_the_usual_shape_and_agrees_with_the_library() {
        let usual = json!({
            "type": "object",
            "additionalProperties": false,
            "$defs": {"money": {"type": "object", "properties": {
                "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}}}},
            "properties": {
                "total": {"$ref": "#/$defs/money"},
                "lines": {"type": "array", "items": {"$ref": "#/$defs/money"}},
                "tags": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
                "at": {"type": "string", "format": "date-time"}
            }
        });
        assert!(valid_without_building(&usual));
        agrees(&usual);
    }

    #[test]
    fn what_the_shortcut_cannot_judge_is_built() {
        for schema in [
            // Fails the meta-schema.
            json!({"type": "bogus"}),
            json!({"minLength": 1.5}),
            // A pattern the library refuses.
            json!({"type": "string", "pattern": "(unclosed"}),
            json!({"patternProperties": {"[z-a]": true}}),
            // References that do not resolve, or not to a schema.
            json!({"$ref": "#/$defs/missing"}),
            json!({"required": ["a"], "properties": {"a": {"$ref": "#/required"}}}),
            json!({"const": {"type": "bogus"}, "properties": {"a": {"$ref": "#/const"}}}),
            json!({"$ref": "other.json"}),
            json!({"$defs": {"a b": {"type": "string"}}, "$ref": "#/$defs/a%20b"}),
            // References the library cannot parse as URIs.
            json!({"$defs": {"a b": {"type": "string"}}, "properties": {"x": {"$ref": "#/$defs/a b"}}}),
            json!({"properties": {"größe": {"type": "string"}, "x": {"$ref": "#/properties/größe"}}}),
            json!({"$defs": {"C#": true}, "properties": {"x": {"$ref": "#/$defs/C#"}}}),
            json!({"$defs": {"a[]": true}, "properties": {"x": {"$ref": "#/$defs/a[]"}}}),
            // Keys that change resolution.
            json!({"$id": "https://example.com/a", "$ref": "#/$defs/a", "$defs": {"a": true}}),
            json!({"$defs": {"a": {"$anchor": "x"}}, "$ref": "#x"}),
            json!({"properties": {"a": {"$schema": "http://json-schema.org/draft-07/schema#"}}}),
            // Data that looks like a pattern is checked, then left to the library.
            json!({"const": {"pattern": "(unclosed"}}),
        ] {
            assert!(!valid_without_building(&schema), "{schema}");
            agrees(&schema);
        }
    }

    /// Schemas built from the keywords the shortcut looks at, valid and not: references that
    /// resolve or not, patterns that compile or not, bounds of every numeric form, data that
    /// looks like schemas.
    fn schema(depth: u32) -> BoxedStrategy<Json> {
        let leaf = prop_oneof![
            Just(json!(true)),
            Just(json!(false)),
            Just(json!({})),
            prop::sample::select(vec!["string", "integer", "number", "object", "bogus"])
                .prop_map(|kind| json!({ "type": kind })),
            prop::sample::select(vec![
                "^[A-Z]{3}$",
                "(unclosed",
                "[z-a]",
                "\\p{L}+",
                "a{2,1}"
            ])
            .prop_map(|pattern| json!({ "type": "string", "pattern": pattern })),
            prop::sample::select(vec![
                json!(1),
                json!(1.0),
                json!(1.5),
                json!(-1),
                json!("a")
            ])
            .prop_map(|bound| json!({ "minLength": bound })),
            prop::sample::select(vec![
                "#",
                "#/$defs/a",
                "#/$defs/missing",
                "#/properties/x",
                "#/required",
                "#/items",
                "#/allOf/0",
                "#/allOf/9",
                "#/const",
                "#/$defs/a/properties/x",
                "#a",
                "#/$defs/a b",
                "#/$defs/é",
                "other.json",
            ])
            .prop_map(|reference| json!({ "$ref": reference })),
        ];
        leaf.prop_recursive(depth, 24, 4, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone(), inner.clone()).prop_map(|(a, x, items)| json!({
                    "$defs": { "a": a.clone(), "a b": a.clone(), "é": a },
                    "properties": { "x": x },
                    "items": items,
                })),
                prop::collection::vec(inner.clone(), 1..3).prop_map(|all| json!({ "allOf": all })),
                (
                    inner.clone(),
                    prop::sample::select(vec!["^x-", "(", "[0-9]+"])
                )
                    .prop_map(
                        |(child, pattern)| json!({ "patternProperties": { pattern: child } })
                    ),
                inner
                    .clone()
                    .prop_map(|data| json!({ "required": ["x"], "const": data })),
            ]
        })
        .boxed()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
        #[test]
        fn the_shortcut_agrees_with_building_on_generated_schemas(schema in schema(3)) {
            agrees(&schema);
        }
    }

    #[test]
    fn references_through_every_schema_keyword_resolve() {
        let schema = json!({
            "$defs": {"a": {"type": "string"}},
            "definitions": {"b": {"type": "integer"}},
            "properties": {"p": {"items": {"type": "string"}}},
            "anyOf": [true, {"not": {"type": "null"}}],
            "prefixItems": [{"type": "number"}],
            "dependentSchemas": {"p": {"required": ["q"]}},
            "allOf": [
                {"$ref": "#"},
                {"$ref": "#/$defs/a"},
                {"$ref": "#/definitions/b"},
                {"$ref": "#/properties/p/items"},
                {"$ref": "#/anyOf/1/not"},
                {"$ref": "#/prefixItems/0"},
                {"$ref": "#/dependentSchemas/p"}
            ]
        });
        assert!(valid_without_building(&schema));
        agrees(&schema);
    }
}
