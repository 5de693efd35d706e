//! Checks on the payload schemas inside event contracts: valid JSON Schema 2020-12, an object
//! at the root, every object closed, and no key the payload policy forbids.

use std::collections::BTreeSet;

use serde_json::Value as Json;

use crate::diagnostic::Rule;
use crate::model::PayloadPolicy;
use crate::yaml::escape_pointer_segment;

/// The dialect payload schemas are written in.
pub const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// Every keyword of JSON Schema 2020-12 (core, applicator, unevaluated, validation, format,
/// content and meta-data vocabularies). Extensions are written `x-...`.
pub const KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "$ref",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$vocabulary",
    "$comment",
    "$defs",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "prefixItems",
    "items",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "format",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    "title",
    "description",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "examples",
];

/// The formats JSON Schema 2020-12 defines; payload validation checks them.
pub const FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Keywords that would change the shape of the generated type, which the Rust generator does not
/// map. Keywords that only constrain values (`pattern`, `maximum`, ...) are kept and enforced by
/// run-time schema validation.
pub const SHAPE_KEYWORDS_NOT_GENERATED: &[&str] = &[
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "prefixItems",
    "contains",
    "unevaluatedItems",
    "$dynamicRef",
    "$dynamicAnchor",
];

/// One problem in a payload schema, at a JSON pointer relative to the schema's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaProblem {
    /// The rule broken.
    pub rule: Rule,
    /// Where, relative to the schema root.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
    /// What to do.
    pub fix: String,
}

/// Checks one payload schema; returns every problem found.
pub fn check(schema: &Json, policy: &PayloadPolicy) -> Vec<SchemaProblem> {
    if let Some(dialect) = schema.get("$schema")
        && dialect.as_str() != Some(DIALECT)
    {
        return vec![SchemaProblem {
            rule: Rule::InvalidJsonSchema,
            pointer: "/$schema".to_owned(),
            message: format!("payload schemas are JSON Schema 2020-12, not {dialect}"),
            fix: format!("remove `$schema` or set it to `{DIALECT}`"),
        }];
    }
    // Before the validator is built: a cycle of bare references has no meaning to resolve.
    let cycles = ref_cycles(schema);
    if !cycles.is_empty() {
        return cycles;
    }
    if let Err(error) = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(schema)
    {
        return vec![SchemaProblem {
            rule: Rule::InvalidJsonSchema,
            pointer: error.instance_path().as_str().to_owned(),
            message: format!("the payload schema is not valid JSON Schema 2020-12: {error}"),
            fix: "correct the keyword (see https://json-schema.org/draft/2020-12)".to_owned(),
        }];
    }
    let mut problems = Vec::new();
    if schema.get("type").and_then(Json::as_str) != Some("object") {
        problems.push(SchemaProblem {
            rule: Rule::PayloadNotObject,
            pointer: String::new(),
            message: "the payload schema's root must be `type: object`".to_owned(),
            fix: "set `type: object` and list the payload's fields under `properties`".to_owned(),
        });
    }
    walk(schema, "", policy, &mut problems);
    problems
}

/// Visits every subschema, checking objects and their property names.
fn walk(schema: &Json, pointer: &str, policy: &PayloadPolicy, problems: &mut Vec<SchemaProblem>) {
    let Json::Object(map) = schema else {
        return;
    };
    let is_object_schema = match map.get("type") {
        Some(Json::String(single)) => single == "object",
        Some(Json::Array(types)) => types.iter().any(|t| t == "object"),
        _ => false,
    } || map.contains_key("properties");
    if is_object_schema {
        check_closed(map, pointer, problems);
    }
    check_vocabulary(map, pointer, problems);
    check_generatable(map, pointer, problems);
    check_numbers(map, pointer, problems);
    if let Some(Json::Object(properties)) = map.get("properties") {
        for key in properties.keys() {
            let key_pointer = format!("{pointer}/properties/{}", escape_pointer_segment(key));
            if let Some(denied) = policy.denied_as(key) {
                problems.push(SchemaProblem {
                    rule: Rule::DeniedKeyInSchema,
                    pointer: key_pointer.clone(),
                    message: format!("`{key}` is on the payload policy's deny-list (`{denied}`)"),
                    fix: "payloads carry references, not content: replace it with an id of where \
                          the content is stored"
                        .to_owned(),
                });
            } else if let Some(shape) = policy.credential_shape(key) {
                problems.push(SchemaProblem {
                    rule: Rule::CredentialKeyInSchema,
                    pointer: key_pointer,
                    message: format!("`{key}` is shaped like a credential (`{shape}`)"),
                    fix: "never put credentials in events; pass a reference to a secret store \
                          entry under a name without the credential word"
                        .to_owned(),
                });
            }
        }
    }
    for (keyword, child) in map {
        let child_pointer = format!("{pointer}/{}", escape_pointer_segment(keyword));
        match keyword.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                if let Json::Object(children) = child {
                    for (name, grandchild) in children {
                        let pointer = format!("{child_pointer}/{}", escape_pointer_segment(name));
                        walk(grandchild, &pointer, policy, problems);
                    }
                }
            }
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                if let Json::Array(children) = child {
                    for (index, grandchild) in children.iter().enumerate() {
                        walk(
                            grandchild,
                            &format!("{child_pointer}/{index}"),
                            policy,
                            problems,
                        );
                    }
                }
            }
            "items"
            | "additionalProperties"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "unevaluatedProperties"
            | "unevaluatedItems"
            | "propertyNames" => {
                walk(child, &child_pointer, policy, problems);
            }
            _ => {}
        }
    }
}

/// Keywords whose value is a length or a count, a non-negative integer in JSON Schema.
const COUNT_KEYWORDS: &[&str] = &[
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "maxProperties",
    "minProperties",
    "maxContains",
    "minContains",
];

/// Keywords whose numbers must be integers when the schema's type is `integer`.
const INTEGER_KEYWORDS: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "const",
    "enum",
];

/// 2^53: every integer up to this magnitude has an exact IEEE double, the number type of most
/// JSON Schema tools (JavaScript's among them).
const MAX_EXACT_INTEGER: u64 = 1 << 53;

/// Numbers that a JSON Schema tool would round: a length or count that is not an integer that
/// fits in 64 bits (`1e38`, `2.5`), and, in an integer schema, a bound, `multipleOf`, `const` or
/// `enum` member that is not an integer within ±2^53. YAML hands such numbers over as floats;
/// rounding them silently would change the contract.
fn check_numbers(
    map: &serde_json::Map<String, Json>,
    pointer: &str,
    problems: &mut Vec<SchemaProblem>,
) {
    for &keyword in COUNT_KEYWORDS {
        if let Some(Json::Number(number)) = map.get(keyword)
            && number.is_f64()
        {
            problems.push(SchemaProblem {
                rule: Rule::InvalidJsonSchema,
                pointer: format!("{pointer}/{keyword}"),
                message: format!(
                    "`{keyword}: {number}` cannot be held exactly: lengths and counts are whole \
                     numbers from 0 to {}",
                    u64::MAX
                ),
                fix: format!("write `{keyword}` as a whole number in that range, or remove it"),
            });
        }
    }
    let is_integer_schema = match map.get("type") {
        Some(Json::String(single)) => single == "integer",
        Some(Json::Array(types)) => {
            types.iter().any(|t| t == "integer") && !types.iter().any(|t| t == "number")
        }
        _ => false,
    };
    if !is_integer_schema {
        return;
    }
    for &keyword in INTEGER_KEYWORDS {
        let numbers: Vec<(String, &serde_json::Number)> = match map.get(keyword) {
            Some(Json::Number(number)) => vec![(format!("{pointer}/{keyword}"), number)],
            Some(Json::Array(items)) if keyword == "enum" => items
                .iter()
                .enumerate()
                .filter_map(|(index, item)| match item {
                    Json::Number(number) => Some((format!("{pointer}/{keyword}/{index}"), number)),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        for (at, number) in numbers {
            let exact = number.as_i64().map(i64::unsigned_abs).or(number.as_u64());
            if exact.is_some_and(|magnitude| magnitude <= MAX_EXACT_INTEGER) {
                continue;
            }
            problems.push(SchemaProblem {
                rule: Rule::InvalidJsonSchema,
                pointer: at,
                message: format!(
                    "`{keyword}` holds {number} in an integer schema, which JSON Schema tools \
                     cannot hold exactly: integers there are whole numbers within ±2^53 \
                     ({MAX_EXACT_INTEGER})"
                ),
                fix: format!(
                    "write a whole number within ±{MAX_EXACT_INTEGER}, or use `type: string` \
                     with a `pattern` for larger identifiers"
                ),
            });
        }
    }
}

/// Every `$ref` in `schema` with the JSON pointer of the schema object that holds it.
fn references<'j>(schema: &'j Json, pointer: &str, out: &mut Vec<(String, &'j str)>) {
    match schema {
        Json::Object(map) => {
            if let Some(reference) = map.get("$ref").and_then(Json::as_str) {
                out.push((pointer.to_owned(), reference));
            }
            for (key, child) in map {
                references(
                    child,
                    &format!("{pointer}/{}", escape_pointer_segment(key)),
                    out,
                );
            }
        }
        Json::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                references(item, &format!("{pointer}/{index}"), out);
            }
        }
        _ => {}
    }
}

/// `$ref` cycles the Rust generator cannot turn into a type: bare references that lead back to
/// themselves (`a: {$ref: b}`, `b: {$ref: a}`), and recursion that passes through a target that is
/// not an object (a list of itself), which Rust cannot name. Recursion through objects is fine:
/// the generator boxes it. Uses the generator's own resolution of references.
fn ref_cycles(schema: &Json) -> Vec<SchemaProblem> {
    use crate::emit::rust::{generates_struct, resolve_alias};
    let mut all = Vec::new();
    references(schema, "", &mut all);
    let mut problems = Vec::new();
    // Targets (after bare references) and the targets their subtrees refer to.
    let mut edges: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut targets: std::collections::BTreeMap<String, &Json> = Default::default();
    for (holder, reference) in &all {
        match resolve_alias(schema, reference) {
            Ok((pointer, target)) => {
                targets.insert(pointer, target);
            }
            Err(problem) if problem.contains("cycle") => {
                // Reported at each reference inside the cycle; one that only leads into it is
                // fixed with it.
                let in_cycle = problem.contains(&format!("#{holder} "))
                    || problem.ends_with(&format!("#{holder}"));
                if in_cycle {
                    problems.push(SchemaProblem {
                        rule: Rule::RefCycle,
                        pointer: format!("{holder}/$ref"),
                        message: format!("`$ref: {reference}` {problem}"),
                        fix: "point the reference at a schema that describes a value".to_owned(),
                    });
                }
            }
            Err(_) => {}
        }
    }
    for (pointer, target) in &targets {
        let mut inner = Vec::new();
        references(target, pointer, &mut inner);
        let next = inner
            .iter()
            .filter_map(|(_, reference)| resolve_alias(schema, reference).ok())
            .map(|(next, _)| next)
            .collect();
        edges.insert(pointer.clone(), next);
    }
    for (pointer, target) in &targets {
        if generates_struct(target) {
            continue;
        }
        // Does this non-object target reach itself?
        let mut stack: Vec<&String> = edges
            .get(pointer)
            .map(|n| n.iter().collect())
            .unwrap_or_default();
        let mut seen = BTreeSet::new();
        let mut cyclic = false;
        while let Some(next) = stack.pop() {
            if next == pointer {
                cyclic = true;
                break;
            }
            if seen.insert(next) {
                stack.extend(edges.get(next).into_iter().flatten());
            }
        }
        if cyclic {
            problems.push(SchemaProblem {
                rule: Rule::RefCycle,
                pointer: pointer.clone(),
                message: format!(
                    "`#{pointer}` refers back to itself without passing through an object, so \
                     no Rust type can hold it"
                ),
                fix: "let the recursion pass through an object (a property that holds the list)"
                    .to_owned(),
            });
        }
    }
    problems
}

/// Keywords outside 2020-12 are typos or another dialect's; unknown formats go unchecked.
fn check_vocabulary(
    map: &serde_json::Map<String, Json>,
    pointer: &str,
    problems: &mut Vec<SchemaProblem>,
) {
    for keyword in map.keys() {
        if KEYWORDS.contains(&keyword.as_str()) || keyword.starts_with("x-") {
            continue;
        }
        let fix = match keyword.as_str() {
            "definitions" => "use `$defs` (JSON Schema 2020-12)".to_owned(),
            "nullable" => "write `type: [string, \"null\"]` instead of `nullable`".to_owned(),
            _ => match crate::names::did_you_mean(keyword, KEYWORDS.iter().copied()) {
                Some(best) => {
                    format!("did you mean `{best}`? Extensions are written `x-{keyword}`")
                }
                None => format!("remove it, or write an extension as `x-{keyword}`"),
            },
        };
        problems.push(SchemaProblem {
            rule: Rule::UnknownSchemaKeyword,
            pointer: format!("{pointer}/{}", escape_pointer_segment(keyword)),
            message: format!("`{keyword}` is not a JSON Schema 2020-12 keyword"),
            fix,
        });
    }
    if let Some(Json::String(format)) = map.get("format")
        && !FORMATS.contains(&format.as_str())
    {
        problems.push(SchemaProblem {
            rule: Rule::UnknownSchemaFormat,
            pointer: format!("{pointer}/format"),
            message: format!(
                "the format `{format}` is not defined by JSON Schema 2020-12 and is not checked"
            ),
            fix: match crate::names::did_you_mean(format, FORMATS.iter().copied()) {
                Some(best) => format!("did you mean `{best}`?"),
                None => "use a standard format, or a `pattern`".to_owned(),
            },
        });
    }
}

/// Shapes the Rust generator maps: one type (or one type and `null`), string enums and consts,
/// references into `#/$defs`.
fn check_generatable(
    map: &serde_json::Map<String, Json>,
    pointer: &str,
    problems: &mut Vec<SchemaProblem>,
) {
    let mut unsupported = |keyword: &str, message: String, fix: &str| {
        problems.push(SchemaProblem {
            rule: Rule::UnsupportedSchemaKeyword,
            pointer: format!("{pointer}/{}", escape_pointer_segment(keyword)),
            message,
            fix: fix.to_owned(),
        });
    };
    for keyword in SHAPE_KEYWORDS_NOT_GENERATED {
        if map.contains_key(*keyword) {
            unsupported(
                keyword,
                format!("`{keyword}` has no Rust type mapping in evc's generator"),
                "model the payload as one closed object with optional fields, or split the \
                 variants into their own event types",
            );
        }
    }
    if let Some(Json::Array(types)) = map.get("type") {
        let non_null = types.iter().filter(|t| *t != "null").count();
        if non_null > 1 {
            unsupported(
                "type",
                "a union of several types has no Rust type mapping".to_owned(),
                "use one type, optionally with `null`",
            );
        }
    }
    for keyword in ["enum", "const"] {
        let values: Vec<&Json> = match map.get(keyword) {
            Some(Json::Array(values)) if keyword == "enum" => values.iter().collect(),
            Some(value) if keyword == "const" => vec![value],
            _ => continue,
        };
        // `null` among the values goes with `type: [string, "null"]` and maps to `Option`.
        if values
            .iter()
            .any(|value| !value.is_string() && !value.is_null())
        {
            unsupported(
                keyword,
                format!("`{keyword}` with non-string values has no Rust type mapping"),
                "use string values, or `type: integer` with `minimum`/`maximum`",
            );
        }
    }
    if let Some(reference) = map.get("$ref").and_then(Json::as_str)
        && !reference.starts_with("#/$defs/")
    {
        unsupported(
            "$ref",
            format!("`$ref: {reference}` does not point into this schema's `$defs`"),
            "define the shared part under `$defs` and refer to it as `#/$defs/<name>`",
        );
    }
}

/// An object must list its keys: otherwise it accepts any key, deny-listed ones included.
fn check_closed(
    map: &serde_json::Map<String, Json>,
    pointer: &str,
    problems: &mut Vec<SchemaProblem>,
) {
    if map.contains_key("patternProperties") {
        problems.push(SchemaProblem {
            rule: Rule::OpenPayloadObject,
            pointer: format!("{pointer}/patternProperties"),
            message: "`patternProperties` lets the object carry keys the contract does not name"
                .to_owned(),
            fix: "list each key under `properties` and set `additionalProperties: false`"
                .to_owned(),
        });
    }
    let closed = |keyword: &str| map.get(keyword) == Some(&Json::Bool(false));
    if !closed("additionalProperties") && !closed("unevaluatedProperties") {
        problems.push(SchemaProblem {
            rule: Rule::OpenPayloadObject,
            pointer: pointer.to_owned(),
            message: "this object accepts keys it does not list, including deny-listed ones"
                .to_owned(),
            fix: "add `additionalProperties: false`".to_owned(),
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rules(schema: Json) -> Vec<(Rule, String)> {
        check(&schema, &PayloadPolicy::default())
            .into_iter()
            .map(|problem| (problem.rule, problem.pointer))
            .collect()
    }

    #[test]
    fn a_closed_reference_payload_passes() {
        let schema = json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["id"],
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "error": {"type": "object", "additionalProperties": false,
                          "properties": {"code": {"type": "string"}}}
            }
        });
        assert_eq!(rules(schema), []);
    }

    #[test]
    fn nested_open_objects_and_forbidden_keys_are_found() {
        let schema = json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "body_text": {"type": "string"},
                "auth": {"type": "object", "properties": {"api_key": {"type": "string"}},
                         "additionalProperties": false},
                "meta": {"type": "object"}
            }
        });
        assert_eq!(
            rules(schema),
            [
                (Rule::DeniedKeyInSchema, "/properties/body_text".to_owned()),
                (
                    Rule::CredentialKeyInSchema,
                    "/properties/auth/properties/api_key".to_owned()
                ),
                (Rule::OpenPayloadObject, "/properties/meta".to_owned()),
            ]
        );
    }

    #[test]
    fn invalid_keywords_and_foreign_dialects_are_invalid_schemas() {
        assert_eq!(
            rules(
                json!({"type": "object", "additionalProperties": false, "properties": {"n": {"type": "integr"}}})
            ),
            [(Rule::InvalidJsonSchema, "/properties/n/type".to_owned())]
        );
        assert_eq!(
            rules(json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"})),
            [(Rule::InvalidJsonSchema, "/$schema".to_owned())]
        );
    }

    #[test]
    fn the_root_must_be_an_object() {
        assert_eq!(
            rules(json!({"type": "string"})),
            [(Rule::PayloadNotObject, String::new())]
        );
    }
}
