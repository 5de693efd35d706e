//! Checks on the payload schemas inside event contracts: valid JSON Schema (2020-12, or the
//! older draft `$schema` names, translated to 2020-12 by [`draft`]), objects closed unless the
//! payload policy opens them, and no key the payload policy forbids.
//!
//! Every valid schema is accepted: the generator maps the whole language to Rust types, and
//! keywords that only constrain values are enforced by schema validation at append. What is
//! refused is invalid, or breaks a rule of evc's that the diagnostic states.

pub mod draft;
mod validity;

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value as Json;

use crate::diagnostic::Rule;
use crate::model::{ContentModel, PayloadPolicy};
use crate::yaml::escape_pointer_segment;
use draft::Draft;

/// The dialect payload schemas are read in.
pub const DIALECT: &str = draft::DIALECT_2020_12;

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

/// A payload schema as read: in 2020-12, and every problem found in what was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The schema in 2020-12 (as written when it was 2020-12 already); shared, so that a
    /// [`crate::LoadCache`] keeps it for a later load without copying it.
    pub schema: Arc<Json>,
    /// The draft it was written in.
    pub draft: Draft,
    /// Every problem, at pointers into the schema as written.
    pub problems: Vec<SchemaProblem>,
}

/// Checks one payload schema written in any draft evc reads, under `policy` with `content`
/// (the event type's content model). [`check_shared`] without a shared copy at hand.
pub fn check(schema: &Json, policy: &PayloadPolicy, content: ContentModel) -> Checked {
    check_shared(&Arc::new(schema.clone()), policy, content)
}

/// [`check`] for a schema that is shared already: when it is 2020-12 and translating it would
/// change nothing, the checked schema is `shared` itself, not a copy.
pub fn check_shared(shared: &Arc<Json>, policy: &PayloadPolicy, content: ContentModel) -> Checked {
    let schema: &Json = shared;
    let draft = match Draft::of(schema) {
        Ok(draft) => draft,
        Err(uri) => {
            return Checked {
                schema: Arc::clone(shared),
                draft: Draft::Draft2020,
                problems: vec![SchemaProblem {
                    rule: Rule::InvalidJsonSchema,
                    pointer: "/$schema".to_owned(),
                    message: format!(
                        "`$schema: {uri}` names a dialect evc does not read; it reads {}",
                        draft::DRAFTS_READ
                    ),
                    fix: format!(
                        "remove `$schema` (2020-12), or name one of those drafts \
                         (`{DIALECT}`, `http://json-schema.org/draft-07/schema#`)"
                    ),
                }],
            };
        }
    };
    let translated = if draft::unchanged_in_2020_12(schema, draft) {
        Arc::clone(shared)
    } else {
        Arc::new(draft::to_2020_12(schema, draft))
    };
    // Before the validator is built: a cycle of bare references has no meaning to resolve.
    let mut problems = ref_cycles(&translated);
    if problems.is_empty()
        && let Some(error) = validity::error(schema, draft)
    {
        // Its pointer is into the schema as written already.
        return Checked {
            schema: translated,
            draft,
            problems: vec![SchemaProblem {
                rule: Rule::InvalidJsonSchema,
                pointer: error.instance_path().as_str().to_owned(),
                message: format!(
                    "the payload schema is not valid JSON Schema {}: {error}",
                    draft.name()
                ),
                fix: "correct the keyword (see https://json-schema.org/specification)".to_owned(),
            }],
        };
    }
    if problems.is_empty() {
        let closed_by_parent = closed_by_parent(&translated);
        let mut walk = Walk {
            policy,
            content,
            closed_by_parent: &closed_by_parent,
            problems: &mut problems,
        };
        walk.schema(&translated, "");
    }
    for problem in &mut problems {
        problem.pointer = draft::original_pointer(schema, &problem.pointer);
    }
    Checked {
        schema: translated,
        draft,
        problems,
    }
}

/// Subschemas evaluated in place (`allOf`, `anyOf`, `oneOf`, `if`/`then`/`else`,
/// `dependentSchemas`, `$ref`) by a schema with `unevaluatedProperties: false`: that schema
/// closes their keys, so they need not close themselves, and must not, or the parts could not
/// combine. Pointers into `root`.
fn closed_by_parent(root: &Json) -> BTreeSet<String> {
    let mut closed = BTreeSet::new();
    // References carry the closing to their targets, which may close further parts in turn.
    loop {
        let before = closed.len();
        mark_closed(root, root, "", false, &mut closed);
        if closed.len() == before {
            return closed;
        }
    }
}

fn mark_closed(
    root: &Json,
    schema: &Json,
    pointer: &str,
    inherited: bool,
    closed: &mut BTreeSet<String>,
) {
    let Json::Object(map) = schema else {
        return;
    };
    let closes = inherited
        || closed.contains(pointer)
        || map.get("unevaluatedProperties") == Some(&Json::Bool(false));
    if closes
        && let Some(reference) = map.get("$ref").and_then(Json::as_str)
        && let Ok((target, _)) = crate::emit::rust::resolve_alias(root, reference)
    {
        closed.insert(target);
    }
    for (keyword, child) in map {
        let in_place = matches!(
            keyword.as_str(),
            "allOf" | "anyOf" | "oneOf" | "if" | "then" | "else" | "dependentSchemas"
        );
        for (at, grandchild) in subschemas(pointer, keyword, child) {
            if closes && in_place {
                closed.insert(at.clone());
            }
            mark_closed(root, grandchild, &at, closes && in_place, closed);
        }
    }
}

/// The subschemas the 2020-12 keyword `keyword` of the schema at `parent` holds in `value`,
/// with their pointers (built only for keywords that hold subschemas).
fn subschemas<'j>(parent: &str, keyword: &str, value: &'j Json) -> Vec<(String, &'j Json)> {
    let pointer = || format!("{parent}/{}", escape_pointer_segment(keyword));
    match (keyword, value) {
        (
            "properties" | "patternProperties" | "$defs" | "dependentSchemas",
            Json::Object(children),
        ) => {
            let pointer = pointer();
            children
                .iter()
                .map(|(name, child)| (format!("{pointer}/{}", escape_pointer_segment(name)), child))
                .collect()
        }
        ("allOf" | "anyOf" | "oneOf" | "prefixItems", Json::Array(children)) => {
            let pointer = pointer();
            children
                .iter()
                .enumerate()
                .map(|(index, child)| (format!("{pointer}/{index}"), child))
                .collect()
        }
        (
            "items"
            | "additionalProperties"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "unevaluatedProperties"
            | "unevaluatedItems"
            | "propertyNames"
            | "contentSchema",
            child,
        ) => vec![(pointer(), child)],
        _ => Vec::new(),
    }
}

/// Visits every subschema of a translated schema, checking objects and property names.
struct Walk<'a> {
    policy: &'a PayloadPolicy,
    content: ContentModel,
    closed_by_parent: &'a BTreeSet<String>,
    problems: &'a mut Vec<SchemaProblem>,
}

impl Walk<'_> {
    fn schema(&mut self, schema: &Json, pointer: &str) {
        let Json::Object(map) = schema else {
            return;
        };
        let is_object_schema = match map.get("type") {
            Some(Json::String(single)) => single == "object",
            Some(Json::Array(types)) => types.iter().any(|t| t == "object"),
            _ => false,
        } || map.contains_key("properties");
        if is_object_schema
            && self.content == ContentModel::Closed
            && !self.closed_by_parent.contains(pointer)
        {
            check_closed(map, pointer, self.problems);
        }
        check_vocabulary(map, pointer, self.problems);
        check_numbers(map, pointer, self.problems);
        if let Some(Json::Object(properties)) = map.get("properties") {
            for key in properties.keys() {
                self.key(key, pointer);
            }
        }
        for (keyword, child) in map {
            for (at, grandchild) in subschemas(pointer, keyword, child) {
                self.schema(grandchild, &at);
            }
        }
    }

    /// A property name the payload policy may forbid, of the schema at `parent`.
    fn key(&mut self, key: &str, parent: &str) {
        let pointer = || format!("{parent}/properties/{}", escape_pointer_segment(key));
        if let Some(denied) = self.policy.denied_as(key) {
            self.problems.push(SchemaProblem {
                rule: Rule::DeniedKeyInSchema,
                pointer: pointer(),
                message: format!("`{key}` is on the payload policy's deny-list (`{denied}`)"),
                fix: "payloads carry references, not content: replace it with an id of where \
                      the content is stored"
                    .to_owned(),
            });
        } else if let Some(shape) = self.policy.credential_shape(key) {
            self.problems.push(SchemaProblem {
                rule: Rule::CredentialKeyInSchema,
                pointer: pointer(),
                message: format!("`{key}` is shaped like a credential (`{shape}`)"),
                fix: "never put credentials in events; pass a reference to a secret store \
                      entry under a name without the credential word"
                    .to_owned(),
            });
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
    let mut path = pointer.to_owned();
    references_at(schema, &mut path, out);
}

/// [`references`] with one pointer buffer, extended and cut back on the way down.
fn references_at<'j>(schema: &'j Json, path: &mut String, out: &mut Vec<(String, &'j str)>) {
    let len = path.len();
    match schema {
        Json::Object(map) => {
            if let Some(reference) = map.get("$ref").and_then(Json::as_str) {
                out.push((path.clone(), reference));
            }
            for (key, child) in map {
                if matches!(child, Json::Object(_) | Json::Array(_)) {
                    path.push('/');
                    path.push_str(&escape_pointer_segment(key));
                    references_at(child, path, out);
                    path.truncate(len);
                }
            }
        }
        Json::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                if matches!(item, Json::Object(_) | Json::Array(_)) {
                    use std::fmt::Write as _;
                    let _ = write!(path, "/{index}");
                    references_at(item, path, out);
                    path.truncate(len);
                }
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
    // A schema made of itself through `allOf` (`a: {allOf: [{$ref: a}]}`) adds nothing to
    // itself: the generator would merge it into itself forever.
    for (pointer, target) in &targets {
        let mut stack = all_of_references(schema, target);
        let mut seen = BTreeSet::new();
        while let Some(next) = stack.pop() {
            if next == *pointer {
                problems.push(SchemaProblem {
                    rule: Rule::RefCycle,
                    pointer: pointer.clone(),
                    message: format!(
                        "`#{pointer}` is made of itself through `allOf`, so it describes no \
                         value of its own"
                    ),
                    fix: "remove the reference to itself from its `allOf`".to_owned(),
                });
                break;
            }
            if seen.insert(next.clone())
                && let Some(part) = targets.get(&next)
            {
                stack.extend(all_of_references(schema, part));
            }
        }
    }
    problems
}

/// The resolved targets of the `$ref`s among the `allOf` parts of `schema`, nested `allOf`s
/// included.
fn all_of_references(root: &Json, schema: &Json) -> Vec<String> {
    let mut out = Vec::new();
    for part in schema
        .get("allOf")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(reference) = part.get("$ref").and_then(Json::as_str)
            && let Ok((target, _)) = crate::emit::rust::resolve_alias(root, reference)
        {
            out.push(target);
        }
        out.extend(all_of_references(root, part));
    }
    out
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
            "definitions" | "dependencies" | "additionalItems" => format!(
                "`{keyword}` is spelt as in draft-07: use its 2020-12 form, or name the draft \
                 with `$schema: http://json-schema.org/draft-07/schema#`"
            ),
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

/// How to resolve an open object under closed content.
const OPEN_CONTENT_FIX: &str = "add `additionalProperties: false` (or `unevaluatedProperties: \
                                false` where parts combine), or allow open objects with \
                                `payload_policy: {content: open}` in `evc.yaml` or the event type";

/// Under closed content, an object must list its keys: otherwise it accepts any key, deny-listed ones included.
fn check_closed(
    map: &serde_json::Map<String, Json>,
    pointer: &str,
    problems: &mut Vec<SchemaProblem>,
) {
    if map.contains_key("patternProperties") {
        problems.push(SchemaProblem {
            rule: Rule::OpenPayloadObject,
            pointer: format!("{pointer}/patternProperties"),
            message: "`patternProperties` lets the object carry keys the contract does not name, \
                      and the payload policy's content model is `closed`"
                .to_owned(),
            fix: OPEN_CONTENT_FIX.to_owned(),
        });
    }
    let closed = |keyword: &str| map.get(keyword) == Some(&Json::Bool(false));
    if !closed("additionalProperties") && !closed("unevaluatedProperties") {
        problems.push(SchemaProblem {
            rule: Rule::OpenPayloadObject,
            pointer: pointer.to_owned(),
            message: "this object accepts keys it does not list, and the payload policy's \
                      content model is `closed`"
                .to_owned(),
            fix: OPEN_CONTENT_FIX.to_owned(),
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rules_under(schema: Json, content: ContentModel) -> Vec<(Rule, String)> {
        check(&schema, &PayloadPolicy::default(), content)
            .problems
            .into_iter()
            .map(|problem| (problem.rule, problem.pointer))
            .collect()
    }

    fn rules(schema: Json) -> Vec<(Rule, String)> {
        rules_under(schema, ContentModel::Closed)
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
    fn open_content_allows_open_objects_but_not_forbidden_keys() {
        let schema = json!({
            "type": "object",
            "properties": {
                "meta": {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
                "inner": {"type": "object", "properties": {"session_token": {"type": "string"}}}
            }
        });
        assert_eq!(
            rules_under(schema, ContentModel::Open),
            [(
                Rule::CredentialKeyInSchema,
                "/properties/inner/properties/session_token".to_owned()
            )]
        );
    }

    #[test]
    fn the_whole_2020_12_language_is_accepted() {
        let schema = json!({
            "$defs": {
                "card": {"type": "object", "properties": {"kind": {"const": "card"}, "last4": {"type": "string"}},
                         "required": ["kind"], "additionalProperties": false},
                "node": {"$anchor": "node", "type": "object", "additionalProperties": false,
                         "properties": {"children": {"type": "array", "items": {"$ref": "#node"}}}}
            },
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "method": {"oneOf": [{"$ref": "#/$defs/card"},
                    {"type": "object", "properties": {"kind": {"const": "iban"}}, "required": ["kind"], "additionalProperties": false}]},
                "code": {"enum": [1, 2, 3]},
                "flag": {"const": true},
                "either": {"type": ["string", "integer"]},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}], "items": false},
                "tree": {"$ref": "#/$defs/node"},
                "sibling": {"$ref": "#/properties/code"},
                "some": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "cond": {"type": "string", "not": {"const": "x"}, "if": {"minLength": 2}, "then": {"pattern": "^a"}, "else": {"maxLength": 0}},
                "list": {"type": "array", "contains": {"const": 1}, "unevaluatedItems": false}
            },
            "dependentSchemas": {"method": {"required": ["code"]}}
        });
        assert_eq!(rules(schema), []);
    }

    #[test]
    fn parts_combined_under_unevaluated_properties_need_not_close_themselves() {
        let schema = json!({
            "$defs": {"base": {"type": "object", "properties": {"id": {"type": "string"}}}},
            "type": "object",
            "allOf": [{"$ref": "#/$defs/base"}, {"type": "object", "properties": {"n": {"type": "integer"}}}],
            "unevaluatedProperties": false
        });
        assert_eq!(rules(schema), []);
        let open_part = json!({
            "type": "object",
            "allOf": [{"type": "object", "properties": {"n": {"type": "integer"}}}],
            "additionalProperties": false
        });
        assert_eq!(
            rules(open_part),
            [(Rule::OpenPayloadObject, "/allOf/0".to_owned())]
        );
    }

    #[test]
    fn older_drafts_are_read_and_problems_point_at_what_was_written() {
        let draft7 = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"pair": {"type": "array", "items": [{"type": "object", "properties": {"api_key": {}}}], "additionalItems": false}},
            "type": "object",
            "properties": {"p": {"$ref": "#/definitions/pair"}}
        });
        let checked = check(&draft7, &PayloadPolicy::default(), ContentModel::Open);
        assert_eq!(
            checked.schema["properties"]["p"]["$ref"],
            json!("#/$defs/pair"),
            "references follow the translation"
        );
        assert_eq!(
            checked
                .problems
                .iter()
                .map(|p| (p.rule, p.pointer.as_str()))
                .collect::<Vec<_>>(),
            [(
                Rule::CredentialKeyInSchema,
                "/definitions/pair/items/0/properties/api_key"
            )]
        );
        let draft4 = json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
                            "properties": {"n": {"type": "number", "minimum": 0, "exclusiveMinimum": true}}});
        assert_eq!(rules_under(draft4, ContentModel::Open), []);
    }

    #[test]
    fn invalid_keywords_and_unread_dialects_are_invalid_schemas() {
        assert_eq!(
            rules(
                json!({"type": "object", "additionalProperties": false, "properties": {"n": {"type": "integr"}}})
            ),
            [(Rule::InvalidJsonSchema, "/properties/n/type".to_owned())]
        );
        assert_eq!(
            rules(
                json!({"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "object"})
            ),
            [(Rule::InvalidJsonSchema, "/$schema".to_owned())]
        );
        // Draft-04's boolean `exclusiveMinimum` is not 2020-12.
        assert_eq!(
            rules(json!({"type": "number", "minimum": 0, "exclusiveMinimum": true})),
            [(Rule::InvalidJsonSchema, "/exclusiveMinimum".to_owned())]
        );
    }

    #[test]
    fn a_schema_made_of_itself_is_a_reference_cycle() {
        let schema =
            json!({"$ref": "#/$defs/a", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}});
        assert_eq!(rules(schema), [(Rule::RefCycle, "/$defs/a".to_owned())]);
        let through_a_property = json!({"$ref": "#/$defs/a", "$defs": {"a": {"allOf": [
            {"type": "object", "additionalProperties": false, "properties": {"next": {"$ref": "#/$defs/a"}}}
        ]}}});
        assert_eq!(rules(through_a_property), []);
    }

    #[test]
    fn any_root_is_a_payload() {
        assert_eq!(rules(json!({"type": "string"})), []);
        assert_eq!(rules(json!(true)), []);
    }
}
