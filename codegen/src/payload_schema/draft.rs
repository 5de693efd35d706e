//! The JSON Schema drafts a payload schema may be written in, and its translation to 2020-12.
//!
//! Schemas arrive from registries and AsyncAPI documents written in older drafts. A schema that
//! names draft-04, draft-06 or draft-07 in `$schema` is validated as that draft, then translated
//! to 2020-12, the one dialect everything after the loader reads (the generator, the
//! comparison engine, the registry and run-time validation), as schema registries do:
//! `definitions` become `$defs`, array `items` and `additionalItems` become `prefixItems` and
//! `items`, `dependencies` splits into `dependentRequired` and `dependentSchemas`, draft-04's
//! boolean `exclusiveMinimum`/`exclusiveMaximum` become numbers, fragment ids become `$anchor`s,
//! and the siblings of a `$ref`, which drafts up to 07 ignore, are dropped.

use serde_json::{Map, Value as Json};

/// The 2020-12 meta-schema URI.
pub const DIALECT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// The drafts read, for messages and the editor schema.
pub const DRAFTS_READ: &str = "2020-12 (the default when `$schema` is absent), draft-07, draft-06 \
                               and draft-04";

/// A JSON Schema draft evc reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draft {
    /// Draft-04 (`id`, boolean `exclusiveMinimum`).
    Draft4,
    /// Draft-06.
    Draft6,
    /// Draft-07.
    Draft7,
    /// 2020-12, the contract dialect.
    Draft2020,
}

impl Draft {
    /// The draft `schema`'s `$schema` names (2020-12 without one), or the unread URI.
    ///
    /// # Errors
    /// The `$schema` value when it is not a string naming a draft evc reads.
    pub fn of(schema: &Json) -> Result<Draft, String> {
        let Some(uri) = schema.get("$schema") else {
            return Ok(Draft::Draft2020);
        };
        let Some(text) = uri.as_str() else {
            return Err(uri.to_string());
        };
        let bare = text
            .trim_end_matches('#')
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        match bare {
            "json-schema.org/draft-04/schema" => Ok(Draft::Draft4),
            "json-schema.org/draft-06/schema" => Ok(Draft::Draft6),
            "json-schema.org/draft-07/schema" => Ok(Draft::Draft7),
            "json-schema.org/draft/2020-12/schema" => Ok(Draft::Draft2020),
            _ => Err(text.to_owned()),
        }
    }

    /// The draft's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Draft::Draft4 => "draft-04",
            Draft::Draft6 => "draft-06",
            Draft::Draft7 => "draft-07",
            Draft::Draft2020 => "2020-12",
        }
    }

    /// Validator options for schemas of this draft.
    pub(crate) fn validator(self) -> jsonschema::ValidationOptions<'static> {
        match self {
            Draft::Draft4 => jsonschema::draft4::options(),
            Draft::Draft6 => jsonschema::draft6::options(),
            Draft::Draft7 => jsonschema::draft7::options(),
            Draft::Draft2020 => jsonschema::draft202012::options(),
        }
    }
}

/// `schema`, written in `draft`, as a 2020-12 schema with the same meaning. In a 2020-12
/// schema `definitions` and `dependencies` change (the 2020-12 meta-schema keeps them as
/// deprecated spellings of `$defs` and `dependentRequired`/`dependentSchemas`), `$ref`s into
/// them follow, boolean exclusive bounds become numbers and `$schema` is dropped.
pub fn to_2020_12(schema: &Json, draft: Draft) -> Json {
    let translator = Translator {
        root: schema,
        draft,
    };
    match translator.schema(schema) {
        Json::Object(body) if draft != Draft::Draft2020 => {
            let mut map = Map::new();
            map.insert("$schema".to_owned(), Json::from(DIALECT_2020_12));
            map.extend(body);
            Json::Object(map)
        }
        other => other,
    }
}

/// Whether [`to_2020_12`] gives `schema`, written in `draft`, back unchanged, found without
/// building the translation: a 2020-12 schema with no `$schema`, `definitions` or
/// `dependencies` key and no boolean `exclusiveMinimum`/`exclusiveMaximum` anywhere, and whose
/// every `$ref` is already in 2020-12 terms. Every object is looked into, property maps and
/// `const` or `default` data included, so such a key there also answers `false`: a
/// translation is then made, which is never wrong.
pub fn unchanged_in_2020_12(schema: &Json, draft: Draft) -> bool {
    let translator = Translator {
        root: schema,
        draft,
    };
    draft == Draft::Draft2020 && translator.unchanged(schema)
}

/// Where the keyword at `pointer` of the translated schema was written in `original`: the
/// pointer a diagnostic shows. Parts the translation added map to their nearest written parent.
pub fn original_pointer(original: &Json, pointer: &str) -> String {
    let mut node = Some(original);
    let mut out = String::new();
    let segments: Vec<String> = crate::yaml::pointer_segments(pointer).collect();
    for segment in &segments {
        let written = node.and_then(|n| written_name(n, segment));
        let name = written.unwrap_or(segment.as_str());
        node = node.and_then(|n| child(n, name));
        out.push('/');
        out.push_str(&crate::yaml::escape_pointer_segment(name));
    }
    out
}

/// The keyword in the written schema `node` that the translated keyword `segment` came from.
fn written_name<'n>(node: &'n Json, segment: &'n str) -> Option<&'n str> {
    let map = node.as_object()?;
    if map.contains_key(segment) && !(segment == "items" && map["items"].is_array()) {
        return Some(segment);
    }
    Some(match segment {
        "$defs" if map.contains_key("definitions") => "definitions",
        "prefixItems" if map.get("items").is_some_and(Json::is_array) => "items",
        "items" if map.contains_key("additionalItems") => "additionalItems",
        "dependentRequired" | "dependentSchemas" if map.contains_key("dependencies") => {
            "dependencies"
        }
        "$id" | "$anchor" if map.contains_key("id") => "id",
        "$anchor" if map.contains_key("$id") => "$id",
        _ => return None,
    })
}

fn child<'n>(node: &'n Json, segment: &str) -> Option<&'n Json> {
    match node {
        Json::Object(map) => map.get(segment),
        Json::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    }
}

/// Keywords a `$ref` keeps beside it: drafts up to 07 ignore every sibling, but these only
/// annotate or hold definitions other references point into.
const REF_SIBLINGS_KEPT: &[&str] = &[
    "$ref",
    "definitions",
    "$defs",
    "title",
    "description",
    "$comment",
    "examples",
    "deprecated",
];

/// Translates the subschemas of one document.
struct Translator<'r> {
    root: &'r Json,
    draft: Draft,
}

impl Translator<'_> {
    fn schema(&self, value: &Json) -> Json {
        let Json::Object(map) = value else {
            return value.clone();
        };
        let older = self.draft != Draft::Draft2020;
        // Drafts up to 07 ignore a `$ref`'s siblings; 2020-12 applies them.
        let is_ref = older && map.contains_key("$ref");
        let tuple = older && map.get("items").is_some_and(Json::is_array);
        let draft4_exclusive = |keyword: &str| {
            self.draft == Draft::Draft4 && map.get(keyword) == Some(&Json::Bool(true))
        };
        let mut out = Map::new();
        for (key, child) in map {
            if is_ref && !REF_SIBLINGS_KEPT.contains(&key.as_str()) {
                continue;
            }
            match key.as_str() {
                "$schema" => {}
                "id" if self.draft == Draft::Draft4 => identifier(child, &mut out),
                "$id" if older => identifier(child, &mut out),
                "$ref" => {
                    let reference = child
                        .as_str()
                        .map_or_else(|| child.clone(), |r| Json::from(self.reference(r)));
                    out.insert("$ref".to_owned(), reference);
                }
                "definitions" | "$defs" | "properties" | "patternProperties" => {
                    let name = if key == "definitions" { "$defs" } else { key };
                    let translated = self.map_of(child);
                    merge_map(&mut out, name, translated);
                }
                "dependencies" => {
                    let Json::Object(entries) = child else {
                        continue;
                    };
                    for (property, dependency) in entries {
                        let (keyword, value) = match dependency {
                            Json::Array(_) => ("dependentRequired", dependency.clone()),
                            _ => ("dependentSchemas", self.schema(dependency)),
                        };
                        let mut one = Map::new();
                        one.insert(property.clone(), value);
                        merge_map(&mut out, keyword, Json::Object(one));
                    }
                }
                "items" if tuple => {
                    out.insert("prefixItems".to_owned(), self.list_of(child));
                }
                "additionalItems" if older => {
                    // Without a tuple, draft-07 ignores `additionalItems`.
                    if tuple {
                        out.insert("items".to_owned(), self.schema(child));
                    }
                }
                "items"
                | "additionalProperties"
                | "contains"
                | "propertyNames"
                | "not"
                | "if"
                | "then"
                | "else" => {
                    out.insert(key.clone(), self.schema(child));
                }
                "allOf" | "anyOf" | "oneOf" => {
                    out.insert(key.clone(), self.list_of(child));
                }
                "exclusiveMinimum" | "exclusiveMaximum" if child.is_boolean() => {
                    let bound = if key == "exclusiveMinimum" {
                        "minimum"
                    } else {
                        "maximum"
                    };
                    if child == &Json::Bool(true)
                        && let Some(value) = map.get(bound)
                    {
                        out.insert(key.clone(), value.clone());
                    }
                }
                "minimum" if draft4_exclusive("exclusiveMinimum") => {}
                "maximum" if draft4_exclusive("exclusiveMaximum") => {}
                _ => {
                    out.insert(key.clone(), child.clone());
                }
            }
        }
        Json::Object(out)
    }

    /// Whether [`Translator::schema`] copies `value` as it is (see [`unchanged_in_2020_12`]).
    fn unchanged(&self, value: &Json) -> bool {
        match value {
            Json::Object(map) => map.iter().all(|(key, child)| match key.as_str() {
                "$schema" | "definitions" | "dependencies" => false,
                "exclusiveMinimum" | "exclusiveMaximum" if child.is_boolean() => false,
                // A property may be named `$ref`: its value is then a schema to look into.
                "$ref" => match child.as_str() {
                    Some(reference) => self.reference(reference) == reference,
                    None => self.unchanged(child),
                },
                _ => self.unchanged(child),
            }),
            Json::Array(items) => items.iter().all(|item| self.unchanged(item)),
            _ => true,
        }
    }

    fn map_of(&self, value: &Json) -> Json {
        match value {
            Json::Object(entries) => Json::Object(
                entries
                    .iter()
                    .map(|(name, schema)| (name.clone(), self.schema(schema)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    fn list_of(&self, value: &Json) -> Json {
        match value {
            Json::Array(items) => Json::Array(items.iter().map(|s| self.schema(s)).collect()),
            other => other.clone(),
        }
    }

    /// A local JSON pointer reference, rewritten for the translated document.
    fn reference(&self, reference: &str) -> String {
        let Some(fragment) = reference.strip_prefix("#/") else {
            return reference.to_owned();
        };
        let Some(decoded) = crate::uri::percent_decode(fragment) else {
            return reference.to_owned();
        };
        let mut node = Some(self.root);
        let mut out = String::from("#");
        let segments: Vec<String> = crate::yaml::pointer_segments(&format!("/{decoded}")).collect();
        let mut index = 0;
        while index < segments.len() {
            let segment = segments[index].as_str();
            let map = node.and_then(Json::as_object);
            let translated = match segment {
                "definitions" => "$defs".to_owned(),
                "items" if map.is_some_and(|m| m.get("items").is_some_and(Json::is_array)) => {
                    "prefixItems".to_owned()
                }
                "additionalItems" if self.draft != Draft::Draft2020 => "items".to_owned(),
                "dependencies" => {
                    let entry = segments
                        .get(index + 1)
                        .and_then(|name| map?.get("dependencies")?.get(name));
                    match entry {
                        Some(Json::Array(_)) => "dependentRequired".to_owned(),
                        _ => "dependentSchemas".to_owned(),
                    }
                }
                other => other.to_owned(),
            };
            node = node.and_then(|n| child(n, segment));
            out.push('/');
            out.push_str(&crate::uri::percent_encode(
                &crate::yaml::escape_pointer_segment(&translated),
            ));
            index += 1;
        }
        out
    }
}

/// `id`/`$id` in 2020-12 terms: a plain-name fragment (`#address`) is an `$anchor`; a URI
/// keeps its base as `$id` (2020-12 forbids fragments there).
fn identifier(value: &Json, out: &mut Map<String, Json>) {
    let Some(text) = value.as_str() else {
        out.insert("$id".to_owned(), value.clone());
        return;
    };
    match text.split_once('#') {
        Some((base, fragment)) => {
            if !base.is_empty() {
                out.insert("$id".to_owned(), Json::from(base));
            }
            if !fragment.is_empty() && !fragment.starts_with('/') {
                out.insert("$anchor".to_owned(), Json::from(fragment));
            }
        }
        None => {
            out.insert("$id".to_owned(), Json::from(text));
        }
    }
}

/// Adds the entries of `entries` to the map at `out[keyword]`, creating it.
fn merge_map(out: &mut Map<String, Json>, keyword: &str, entries: Json) {
    let Json::Object(entries) = entries else {
        out.insert(keyword.to_owned(), entries);
        return;
    };
    match out.get_mut(keyword) {
        Some(Json::Object(existing)) => existing.extend(entries),
        _ => {
            out.insert(keyword.to_owned(), Json::Object(entries));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_a_schema_the_translation_would_not_change_is_taken_as_it_is() {
        let as_is = [
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}},
                   "$defs": {"a": {"type": "string"}}}),
            json!({"prefixItems": [{"type": "integer"}], "items": false}),
            json!({"exclusiveMinimum": 3, "oneOf": [{"const": 1}, {"const": 2}]}),
            json!(true),
        ];
        for schema in as_is {
            assert!(unchanged_in_2020_12(&schema, Draft::Draft2020), "{schema}");
            assert_eq!(to_2020_12(&schema, Draft::Draft2020), schema);
        }
        let translated = [
            (
                json!({"$schema": DIALECT_2020_12, "type": "string"}),
                Draft::Draft2020,
            ),
            (json!({"definitions": {"a": {}}}), Draft::Draft2020),
            (
                json!({"properties": {"a": {"dependencies": {"b": ["c"]}}}}),
                Draft::Draft2020,
            ),
            (
                json!({"minimum": 1, "exclusiveMinimum": true}),
                Draft::Draft2020,
            ),
            (
                json!({"items": {"$ref": "#/definitions/a"}}),
                Draft::Draft2020,
            ),
            (
                json!({"properties": {"$ref": {"definitions": {}}}}),
                Draft::Draft2020,
            ),
            (json!({"type": "string"}), Draft::Draft7),
        ];
        for (schema, draft) in translated {
            assert!(!unchanged_in_2020_12(&schema, draft), "{schema}");
        }
    }

    #[test]
    fn drafts_are_recognised_by_their_meta_schema_uri() {
        let of = |uri: &str| Draft::of(&json!({"$schema": uri}));
        assert_eq!(
            of("http://json-schema.org/draft-04/schema#"),
            Ok(Draft::Draft4)
        );
        assert_eq!(
            of("https://json-schema.org/draft-06/schema"),
            Ok(Draft::Draft6)
        );
        assert_eq!(
            of("http://json-schema.org/draft-07/schema#"),
            Ok(Draft::Draft7)
        );
        assert_eq!(of(DIALECT_2020_12), Ok(Draft::Draft2020));
        assert_eq!(Draft::of(&json!({})), Ok(Draft::Draft2020));
        assert!(of("https://json-schema.org/draft/2019-09/schema").is_err());
    }

    #[test]
    fn draft_07_keywords_become_their_2020_12_spellings() {
        let draft7 = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "definitions": {"point": {"type": "array", "items": [{"type": "number"}, {"type": "number"}], "additionalItems": false}},
            "properties": {
                "at": {"$ref": "#/definitions/point", "minItems": 5, "description": "where"},
                "x": {"$ref": "#/definitions/point/items/1"},
                "definitions": {"type": "string"}
            },
            "dependencies": {"a": ["b"], "c": {"required": ["d"]}}
        });
        assert_eq!(
            to_2020_12(&draft7, Draft::Draft7),
            json!({
                "$schema": DIALECT_2020_12,
                "type": "object",
                "$defs": {"point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}], "items": false}},
                "properties": {
                    "at": {"$ref": "#/$defs/point", "description": "where"},
                    "x": {"$ref": "#/$defs/point/prefixItems/1"},
                    "definitions": {"type": "string"}
                },
                "dependentRequired": {"a": ["b"]},
                "dependentSchemas": {"c": {"required": ["d"]}}
            })
        );
    }

    #[test]
    fn a_2020_12_schema_changes_only_its_deprecated_spellings() {
        let schema = json!({
            "definitions": {"n": {"type": "integer"}},
            "properties": {"a": {"$ref": "#/definitions/n", "minimum": 1}},
            "dependencies": {"a": ["b"]}
        });
        assert_eq!(
            to_2020_12(&schema, Draft::Draft2020),
            json!({
                "$defs": {"n": {"type": "integer"}},
                "properties": {"a": {"$ref": "#/$defs/n", "minimum": 1}},
                "dependentRequired": {"a": ["b"]}
            })
        );
        let plain = json!({"type": "array", "items": {"type": "string"}});
        assert_eq!(to_2020_12(&plain, Draft::Draft2020), plain);
    }

    #[test]
    fn draft_04_ids_and_boolean_bounds_are_translated() {
        let draft4 = json!({
            "$schema": "http://json-schema.org/draft-04/schema#",
            "properties": {
                "n": {"type": "integer", "minimum": 0, "exclusiveMinimum": true, "maximum": 9, "exclusiveMaximum": false},
                "a": {"id": "#address", "type": "string"}
            }
        });
        assert_eq!(
            to_2020_12(&draft4, Draft::Draft4),
            json!({
                "$schema": DIALECT_2020_12,
                "properties": {
                    "n": {"type": "integer", "exclusiveMinimum": 0, "maximum": 9},
                    "a": {"$anchor": "address", "type": "string"}
                }
            })
        );
    }

    #[test]
    fn pointers_into_the_translation_lead_back_to_what_was_written() {
        let draft7 = json!({
            "definitions": {"t": {"items": [{"type": "string"}], "additionalItems": {"type": "integer"}}},
            "dependencies": {"c": {"required": ["d"]}}
        });
        let back = |pointer| original_pointer(&draft7, pointer);
        assert_eq!(
            back("/$defs/t/prefixItems/0/type"),
            "/definitions/t/items/0/type"
        );
        assert_eq!(
            back("/$defs/t/items/type"),
            "/definitions/t/additionalItems/type"
        );
        assert_eq!(
            back("/dependentSchemas/c/required"),
            "/dependencies/c/required"
        );
    }
}
