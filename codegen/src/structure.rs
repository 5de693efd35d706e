//! Structural checks: does a file have the shape its kind of contract file requires?
//!
//! The file's YAML tree is validated against the JSON Schema that schemars derives from the
//! format types (the same schema `evc schema` prints for editors). Every violation becomes a
//! diagnostic at the offending node, so one run reports every unknown key, wrong type and
//! missing key of a file, not only the first.

use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{ValidationError, Validator};
use schemars::generate::SchemaSettings;
use serde_json::Value as Json;

use crate::diagnostic::{Diagnostic, Rule};
use crate::format::{
    ConsumerFile, EventFile, ExecutorClassesFile, ProjectFile, RetryPoliciesFile, SchedulesFile,
    TopicsFile,
};
use crate::names;
use crate::source::SourceFile;
use crate::yaml::{Node, escape_pointer_segment, pointer_segments};

/// The kinds of contract file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileKind {
    /// `evc.yaml`.
    Project,
    /// `events/<event.type>.yaml`.
    Event,
    /// `consumers/<consumer>.yaml`.
    Consumer,
    /// `retry-policies.yaml`.
    RetryPolicies,
    /// `topics.yaml`.
    Topics,
    /// `executor-classes.yaml`.
    ExecutorClasses,
    /// `schedules.yaml`.
    Schedules,
}

impl FileKind {
    /// Every kind, in the order `evc schema --out` writes them.
    pub const ALL: [FileKind; 7] = [
        Self::Project,
        Self::Event,
        Self::Consumer,
        Self::RetryPolicies,
        Self::Topics,
        Self::ExecutorClasses,
        Self::Schedules,
    ];

    /// Short name, used for schema file names (`event.schema.json`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Project => "project",
            Self::Event => "event",
            Self::Consumer => "consumer",
            Self::RetryPolicies => "retry-policies",
            Self::Topics => "topics",
            Self::ExecutorClasses => "executor-classes",
            Self::Schedules => "schedules",
        }
    }

    /// The JSON Schema of this kind of file, derived from its format type.
    pub fn schema(self) -> Json {
        let generator = SchemaSettings::draft2020_12().into_generator();
        let schema = match self {
            Self::Project => generator.into_root_schema_for::<ProjectFile>(),
            Self::Event => generator.into_root_schema_for::<EventFile>(),
            Self::Consumer => generator.into_root_schema_for::<ConsumerFile>(),
            Self::RetryPolicies => generator.into_root_schema_for::<RetryPoliciesFile>(),
            Self::Topics => generator.into_root_schema_for::<TopicsFile>(),
            Self::ExecutorClasses => generator.into_root_schema_for::<ExecutorClassesFile>(),
            Self::Schedules => generator.into_root_schema_for::<SchedulesFile>(),
        };
        let mut schema = schema.to_value();
        forbid_null(&mut schema);
        schema
    }

    fn compiled(self) -> &'static (Json, Validator) {
        static COMPILED: [OnceLock<(Json, Validator)>; 7] = [
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
        ];
        COMPILED[self as usize].get_or_init(|| {
            let schema = self.schema();
            let validator = jsonschema::draft202012::new(&schema).unwrap_or_else(|error| {
                panic!("the {} format schema is invalid: {error}", self.name())
            });
            (schema, validator)
        })
    }
}

/// Removes the `null` that schemars allows for `Option` fields. An absent key is how a contract
/// leaves a value out; an explicit empty value (`key:`) is almost always a mistake and is reported
/// as one.
fn forbid_null(schema: &mut Json) {
    match schema {
        Json::Object(map) => {
            if let Some(Json::Array(types)) = map.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let single = types.remove(0);
                    map.insert("type".to_owned(), single);
                }
            }
            if map.get("default") == Some(&Json::Null) {
                map.remove("default");
            }
            if let Some(Json::Array(values)) = map.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            if let Some(Json::Array(variants)) = map.get_mut("anyOf") {
                variants.retain(|v| v.get("type").and_then(Json::as_str) != Some("null"));
                if variants.len() == 1 {
                    let single = variants.remove(0);
                    map.remove("anyOf");
                    if let Json::Object(single) = single {
                        for (key, value) in single {
                            map.entry(key).or_insert(value);
                        }
                    }
                }
            }
            map.values_mut().for_each(forbid_null);
        }
        Json::Array(items) => items.iter_mut().for_each(forbid_null),
        _ => {}
    }
}

/// Checks a parsed file against its kind's schema; returns one diagnostic per violation.
pub fn check(kind: FileKind, file: &SourceFile, root: &Node, json: &Json) -> Vec<Diagnostic> {
    let (schema, validator) = kind.compiled();
    let mut diagnostics: Vec<Diagnostic> = validator
        .iter_errors(json)
        .flat_map(|error| to_diagnostics(&error, schema, file, root))
        .collect();
    diagnostics.dedup();
    diagnostics
}

fn to_diagnostics(
    error: &ValidationError<'_>,
    schema: &Json,
    file: &SourceFile,
    root: &Node,
) -> Vec<Diagnostic> {
    let path = error.instance_path().as_str();
    let (key_node, node) = root.pointer_entry(path).unwrap_or((None, root));
    let here = node.location(file);
    // A container's own position is its first child; its key says better where it is.
    let container_here = match (key_node, error.instance().as_ref()) {
        (Some(key), Json::Object(_) | Json::Array(_)) => key.location(file),
        _ => here.clone(),
    };
    let subject = describe_path(path);
    let schema_path = error.schema_path().as_str();
    match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let object_schema = resolve(schema, parent_path(schema_path));
            let allowed: Vec<&str> = object_schema
                .and_then(|s| s.get("properties"))
                .and_then(Json::as_object)
                .map(|properties| properties.keys().map(String::as_str).collect())
                .unwrap_or_default();
            unexpected
                .iter()
                .map(|key| {
                    let key_pointer = format!("{path}/{}", escape_pointer_segment(key));
                    let location = root
                        .pointer_entry(&key_pointer)
                        .and_then(|(key_node, _)| key_node)
                        .map_or_else(|| here.clone(), |key_node| key_node.location(file));
                    let fix = match names::did_you_mean(key, allowed.iter().copied()) {
                        Some(best) => format!("did you mean `{best}`? Otherwise remove the key"),
                        None => format!(
                            "remove the key; {} accepts: {}",
                            subject,
                            allowed.join(", ")
                        ),
                    };
                    Diagnostic::new(
                        Rule::UnknownKey,
                        location,
                        format!("unknown key `{key}` in {subject}"),
                        fix,
                    )
                })
                .collect()
        }
        ValidationErrorKind::Required { property } => {
            let property = property.as_str().unwrap_or_default();
            let description = resolve(schema, parent_path(schema_path))
                .and_then(|s| {
                    s.pointer(&format!("/properties/{}", escape_pointer_segment(property)))
                })
                .and_then(|p| resolve_ref(schema, p))
                .and_then(|p| p.get("description"))
                .and_then(Json::as_str)
                .map(|d| format!(" ({})", d.trim_end_matches('.')))
                .unwrap_or_default();
            vec![Diagnostic::new(
                Rule::MissingKey,
                container_here,
                format!("{subject} is missing the required key `{property}`"),
                format!("add `{property}:`{description}"),
            )]
        }
        ValidationErrorKind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(single) => type_name(&single.to_string()).to_owned(),
                TypeKind::Multiple(set) => set
                    .iter()
                    .map(|t| type_name(&t.to_string()).to_owned())
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            vec![Diagnostic::new(
                Rule::WrongType,
                container_here,
                format!(
                    "{subject} must be {expected}, found {}",
                    json_kind(error.instance())
                ),
                format!("write {subject} as {expected}"),
            )]
        }
        ValidationErrorKind::Enum { options } => {
            let options: Vec<&str> = options
                .as_array()
                .map(|o| o.iter().filter_map(Json::as_str).collect())
                .unwrap_or_default();
            let found = display_value(error.instance());
            let fix = match error
                .instance()
                .as_str()
                .and_then(|v| names::did_you_mean(v, options.iter().copied()))
            {
                Some(best) => format!("did you mean `{best}`?"),
                None => format!("use one of: {}", options.join(", ")),
            };
            vec![Diagnostic::new(
                Rule::InvalidValue,
                here,
                format!(
                    "{subject} is {found}, which is not one of: {}",
                    options.join(", ")
                ),
                fix,
            )]
        }
        ValidationErrorKind::Pattern { pattern } => {
            vec![pattern_diagnostic(
                pattern,
                &subject,
                error.instance(),
                here,
            )]
        }
        ValidationErrorKind::PropertyNames { error: inner } => {
            let name = inner.instance().as_str().unwrap_or_default().to_owned();
            let key_pointer = format!("{path}/{}", escape_pointer_segment(&name));
            let location = root
                .pointer_entry(&key_pointer)
                .and_then(|(key_node, _)| key_node)
                .map_or(here, |key_node| key_node.location(file));
            let pattern = match inner.kind() {
                ValidationErrorKind::Pattern { pattern } => pattern.as_str(),
                _ => names::NAME_PATTERN,
            };
            let subject = format!("a key in {subject}");
            vec![pattern_diagnostic(
                pattern,
                &subject,
                inner.instance(),
                location,
            )]
        }
        ValidationErrorKind::AnyOf { .. } | ValidationErrorKind::OneOfNotValid { .. } => {
            let alternatives = resolve(schema, schema_path);
            let options = alternatives.and_then(|a| constant_options(schema, a));
            if let (Some(options), Json::String(_)) = (options, error.instance().as_ref()) {
                let found = display_value(error.instance());
                let fix = match error
                    .instance()
                    .as_str()
                    .and_then(|v| names::did_you_mean(v, options.iter().map(String::as_str)))
                {
                    Some(best) => format!("did you mean `{best}`?"),
                    None => format!("use one of: {}", options.join(", ")),
                };
                return vec![Diagnostic::new(
                    Rule::InvalidValue,
                    here,
                    format!(
                        "{subject} is {found}, which is not one of: {}",
                        options.join(", ")
                    ),
                    fix,
                )];
            }
            let options = alternatives.and_then(|a| constant_options(schema, a));
            if let (Json::String(_), Some(pattern)) = (
                error.instance().as_ref(),
                alternatives.and_then(|a| string_pattern(schema, a)),
            ) {
                return vec![pattern_diagnostic(
                    pattern,
                    &subject,
                    error.instance(),
                    here,
                )];
            }
            let fix = match options {
                Some(options) => format!("write {subject} as one of: {}", options.join(", ")),
                None => format!("see docs/contracts.md for the forms {subject} accepts"),
            };
            vec![Diagnostic::new(
                Rule::WrongType,
                container_here,
                format!(
                    "{subject} is {}, which is not an accepted form",
                    json_kind(error.instance())
                ),
                fix,
            )]
        }
        _ => vec![Diagnostic::new(
            Rule::InvalidValue,
            here,
            format!("{subject}: {error}"),
            "change the value to one the key accepts (see docs/contracts.md)",
        )],
    }
}

fn pattern_diagnostic(
    pattern: &str,
    subject: &str,
    instance: &Json,
    location: crate::source::Location,
) -> Diagnostic {
    let found = display_value(instance);
    let (rule, fix) = match pattern {
        names::EVENT_TYPE_PATTERN => (
            Rule::InvalidIdentifier,
            "event types are lower-case segments of letters, digits and `_` separated by dots, at least two (`iu.born`)".to_owned(),
        ),
        names::NAME_PATTERN => (
            Rule::InvalidIdentifier,
            "names are lower-case segments of letters, digits and `_` separated by dots (`worker.dot.iu_axis`)".to_owned(),
        ),
        names::EXECUTOR_CLASS_PATTERN => (
            Rule::InvalidIdentifier,
            "executor classes are a kind (dot, sql, ai, human, external, notification or \
             render), a dot, and lower-case segments of letters, digits and `_` separated by \
             dots (`notification.email`)"
                .to_owned(),
        ),
        names::DURATION_PATTERN => (
            Rule::InvalidDuration,
            "write a whole number and a unit: ms, s, m, h or d (`30s`, `10m`, `14d`)".to_owned(),
        ),
        names::VERSION_PATTERN => (
            Rule::InvalidVersion,
            "write a full semantic version, MAJOR.MINOR.PATCH (`1.2.0`)".to_owned(),
        ),
        names::SUBSCRIPTION_PATTERN => (
            Rule::InvalidSubscription,
            "write the event type, `@`, and a version requirement (`iu.born@^1`)".to_owned(),
        ),
        names::TOPIC_KEY_PATTERN => (
            Rule::InvalidValue,
            "write `payload.<field>` or `envelope.<field>` (trace_id, correlation_id, \
             causation_id, tenant_scope, order_key, producer_class)"
                .to_owned(),
        ),
        names::EVENT_PATTERN_PATTERN => (
            Rule::InvalidValue,
            "write an event type in which `*` stands for any run of characters (`iu.*`)"
                .to_owned(),
        ),
        names::SUBJECT_PREFIX_PATTERN => (
            Rule::InvalidValue,
            "write subject tokens of letters, digits, `_` and `-` separated by dots, without \
             `*` or `>` (`evc`, `shop.events`)"
                .to_owned(),
        ),
        names::STREAM_NAME_PATTERN => (
            Rule::InvalidValue,
            "write a stream name of at most 64 letters, digits, `_` and `-` (`EVC`)".to_owned(),
        ),
        names::FIELD_PATTERN => (
            Rule::InvalidIdentifier,
            "payload field names are lower-case letters, digits and `_` (`iu_unit_id`)".to_owned(),
        ),
        _ => (
            Rule::InvalidValue,
            format!("write a value matching the pattern {pattern}"),
        ),
    };
    Diagnostic::new(
        rule,
        location,
        format!("{subject} is {found}, which is not valid here"),
        fix,
    )
}

/// Names the node at `pointer` for messages: `the file`, `` `versions[0].version` ``.
fn describe_path(pointer: &str) -> String {
    if pointer.is_empty() {
        return "the file".to_owned();
    }
    let mut text = String::new();
    for segment in pointer_segments(pointer) {
        if segment.parse::<usize>().is_ok() {
            text.push_str(&format!("[{segment}]"));
        } else {
            if !text.is_empty() {
                text.push('.');
            }
            text.push_str(&segment);
        }
    }
    format!("`{text}`")
}

fn parent_path(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}

/// Walks a keyword location through the schema, following `$ref`s into `$defs`.
fn resolve<'a>(schema: &'a Json, path: &str) -> Option<&'a Json> {
    let mut current = schema;
    for segment in pointer_segments(path) {
        current = if segment == "$ref" {
            let reference = current.get("$ref")?.as_str()?;
            schema.pointer(reference.strip_prefix('#')?)?
        } else {
            match current {
                Json::Object(map) => map.get(&segment)?,
                Json::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
                _ => return None,
            }
        };
    }
    Some(current)
}

fn resolve_ref<'a>(schema: &'a Json, node: &'a Json) -> Option<&'a Json> {
    match node.get("$ref").and_then(Json::as_str) {
        Some(reference) => schema.pointer(reference.strip_prefix('#')?),
        None => Some(node),
    }
}

/// The allowed strings of a `oneOf`/`anyOf` whose alternatives are all constants (how schemars
/// writes an enum with documented variants).
fn constant_options(schema: &Json, alternatives: &Json) -> Option<Vec<String>> {
    let mut options = Vec::new();
    for alternative in alternatives.as_array()? {
        let alternative = resolve_ref(schema, alternative)?;
        if let Some(constant) = alternative.get("const").and_then(Json::as_str) {
            options.push(constant.to_owned());
        } else {
            for value in alternative.get("enum")?.as_array()? {
                options.push(value.as_str()?.to_owned());
            }
        }
    }
    (!options.is_empty()).then_some(options)
}

/// The pattern of the first string alternative that has one (`order_key: One(FieldName)`).
fn string_pattern<'a>(schema: &'a Json, alternatives: &'a Json) -> Option<&'a str> {
    alternatives.as_array()?.iter().find_map(|alternative| {
        let alternative = resolve_ref(schema, alternative)?;
        (alternative.get("type")? == "string")
            .then(|| alternative.get("pattern")?.as_str())
            .flatten()
    })
}

fn type_name(json_type: &str) -> &str {
    match json_type {
        "object" => "a mapping",
        "array" => "a list",
        "string" => "a string",
        "integer" => "an integer",
        "number" => "a number",
        "boolean" => "`true` or `false`",
        "null" => "empty",
        other => other,
    }
}

fn json_kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "empty",
        Json::Bool(_) => "a boolean",
        Json::Number(n) if n.is_f64() => "a number",
        Json::Number(_) => "an integer",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a mapping",
    }
}

fn display_value(value: &Json) -> String {
    match value {
        Json::String(text) => format!("`{text}`"),
        other => format!("`{other}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_schema_compiles() {
        for kind in FileKind::ALL {
            let (schema, _) = kind.compiled();
            assert_eq!(
                schema["$schema"],
                "https://json-schema.org/draft/2020-12/schema"
            );
        }
    }

    #[test]
    fn describe_path_reads_like_yaml() {
        assert_eq!(
            describe_path("/versions/0/version"),
            "`versions[0].version`"
        );
        assert_eq!(describe_path(""), "the file");
    }
}
