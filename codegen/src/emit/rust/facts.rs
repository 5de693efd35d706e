//! Schema facts for code written by hand against the contracts: which properties a version's
//! schema has, which are required, what JSON types a property allows, which Rust types agree,
//! and which versions a subscription admits. The `evc::Event` derive and the `evc::consumer`
//! attribute ask these questions; one answer per function, so the macros and the emitters read
//! JSON Schema the same way.

use serde_json::Value as Json;

use crate::model::{EventType, EventVersion, Subscription};

/// The JSON kind a Rust type serializes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonKind {
    /// `"string"`.
    String,
    /// `"integer"`.
    Integer,
    /// `"number"`.
    Number,
    /// `"boolean"`.
    Boolean,
    /// `"array"`.
    Array,
    /// `"object"`.
    Object,
}

impl JsonKind {
    /// The JSON Schema type name (`string`, `integer`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Array => "array",
            Self::Object => "object",
        }
    }
}

/// What a Rust type, named by the last segment of its path, serializes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RustType {
    /// A type with a known JSON kind (`String`, `u32`, `Vec`, `HashMap`, ...).
    Kind(JsonKind),
    /// A pointer that serializes as its one type argument (`Box`, `Arc`, `Rc`).
    Transparent,
    /// `Option`: its type argument, or `null`.
    Option,
    /// Any other type (the application's own structs and enums): its shape is unknown here.
    Unknown,
}

/// Classifies a Rust type by the last segment of its path (`Uuid` for `uuid::Uuid`): the
/// standard library's types and the ones evc re-exports (uuid, chrono) that serde maps to one
/// JSON kind.
pub fn rust_type(last_segment: &str) -> RustType {
    match last_segment {
        "String" | "str" | "Uuid" | "DateTime" | "NaiveDate" | "NaiveDateTime" | "Cow" | "char" => {
            RustType::Kind(JsonKind::String)
        }
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" | "u8" | "u16" | "u32" | "u64" | "u128"
        | "usize" => RustType::Kind(JsonKind::Integer),
        "f32" | "f64" => RustType::Kind(JsonKind::Number),
        "bool" => RustType::Kind(JsonKind::Boolean),
        "Vec" | "VecDeque" | "HashSet" | "BTreeSet" => RustType::Kind(JsonKind::Array),
        "HashMap" | "BTreeMap" | "Map" => RustType::Kind(JsonKind::Object),
        "Box" | "Arc" | "Rc" => RustType::Transparent,
        "Option" => RustType::Option,
        _ => RustType::Unknown,
    }
}

/// Whether a value of Rust kind `kind` can be a JSON value of schema type `schema_type`: each
/// kind matches its own name, and a float may hold an `integer` property.
pub fn agrees(kind: JsonKind, schema_type: &str) -> bool {
    match kind {
        JsonKind::Number => matches!(schema_type, "number" | "integer"),
        other => other.name() == schema_type,
    }
}

/// The property names of an object schema, in schema order.
pub fn properties(schema: &Json) -> Vec<&str> {
    schema
        .get("properties")
        .and_then(Json::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// The schema of property `name`, if the object schema has it.
pub fn property<'a>(schema: &'a Json, name: &str) -> Option<&'a Json> {
    schema.get("properties")?.as_object()?.get(name)
}

/// The property names every payload of the root schema `schema` has, in schema order: its own
/// `required`, then those of the parts it is made of in place (`allOf` parts and `$ref`
/// targets, which the generated struct merges).
pub fn required(schema: &Json) -> Vec<&str> {
    let mut required: Vec<&str> = Vec::new();
    let mut parts = vec![schema];
    // A part can only be followed so often: a cycle of references is REF_CYCLE elsewhere.
    let mut budget = 64;
    while let Some(part) = parts.pop() {
        budget -= 1;
        if budget == 0 {
            break;
        }
        for name in part
            .get("required")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .filter_map(Json::as_str)
        {
            if !required.contains(&name) {
                required.push(name);
            }
        }
        if let Some(reference) = part.get("$ref").and_then(Json::as_str)
            && let Some((target, _)) = crate::compat::schema::resolve(schema, reference)
        {
            parts.push(target);
        }
        if let Some(all) = part.get("allOf").and_then(Json::as_array) {
            parts.extend(all.iter().rev());
        }
    }
    required
}

/// The JSON types a property allows, `null` aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropertyTypes {
    /// The non-null JSON types (`string`, `integer`, ...), in schema order.
    pub types: Vec<String>,
    /// Whether the property also allows `null`.
    pub nullable: bool,
}

/// The JSON types property schema `property` allows, resolving a local `$ref` against the
/// version's `root` schema. An `enum` or `const` without `type` has the types of its values,
/// `properties` without `type` is an object. `None` when the
/// schema names no type (any value).
pub fn property_types(property: &Json, root: &Json) -> Option<PropertyTypes> {
    let property = match property.get("$ref").and_then(Json::as_str) {
        Some(reference) => super::resolve_reference(root, reference)?.0,
        None => property,
    };
    let mut types: Vec<String> = match property.get("type") {
        Some(Json::String(single)) => vec![single.clone()],
        Some(Json::Array(list)) => list
            .iter()
            .filter_map(Json::as_str)
            .map(str::to_owned)
            .collect(),
        _ if property.get("enum").is_some() || property.get("const").is_some() => {
            value_types(property)
        }
        _ if property.get("properties").is_some() => vec!["object".to_owned()],
        _ => return None,
    };
    let nullable = types.iter().any(|t| t == "null");
    types.retain(|t| t != "null");
    Some(PropertyTypes { types, nullable })
}

/// The JSON types of the values an `enum` or `const` lists, in order of first appearance
/// (`null` included, split off by the caller).
fn value_types(property: &Json) -> Vec<String> {
    let values: Vec<&Json> = match (property.get("const"), property.get("enum")) {
        (Some(constant), _) => vec![constant],
        (None, Some(Json::Array(values))) => values.iter().collect(),
        _ => Vec::new(),
    };
    let mut types: Vec<String> = Vec::new();
    for value in values {
        let kind = match value {
            Json::Null => "null",
            Json::Bool(_) => "boolean",
            Json::Number(number) if number.is_f64() => "number",
            Json::Number(_) => "integer",
            Json::String(_) => "string",
            Json::Array(_) => "array",
            Json::Object(_) => "object",
        };
        if !types.iter().any(|t| t == kind) {
            types.push(kind.to_owned());
        }
    }
    types
}

/// Whether a struct field for a property must be an `Option`: the property is not required,
/// or it allows `null`.
pub fn must_be_optional(required: bool, types: Option<&PropertyTypes>) -> bool {
    !required || types.is_some_and(|t| t.nullable)
}

/// The registered versions of `event` that `subscription` admits, oldest first.
pub fn subscribed_versions<'a>(
    event: &'a EventType,
    subscription: &Subscription,
) -> Vec<&'a EventVersion> {
    event
        .versions
        .iter()
        .filter(|v| subscription.requirement.matches(&v.version))
        .collect()
}

/// The majors of the registered versions of `event` that `subscription` admits, ascending.
pub fn subscribed_majors(event: &EventType, subscription: &Subscription) -> Vec<u64> {
    let mut majors: Vec<u64> = subscribed_versions(event, subscription)
        .iter()
        .map(|v| v.version.major)
        .collect();
    majors.dedup();
    majors
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::format::{CompatMode, EventStatus};

    #[test]
    fn rust_types_map_to_the_kind_serde_writes() {
        assert_eq!(rust_type("Uuid"), RustType::Kind(JsonKind::String));
        assert_eq!(rust_type("u64"), RustType::Kind(JsonKind::Integer));
        assert_eq!(rust_type("f32"), RustType::Kind(JsonKind::Number));
        assert_eq!(rust_type("bool"), RustType::Kind(JsonKind::Boolean));
        assert_eq!(rust_type("Vec"), RustType::Kind(JsonKind::Array));
        assert_eq!(rust_type("BTreeMap"), RustType::Kind(JsonKind::Object));
        assert_eq!(rust_type("Arc"), RustType::Transparent);
        assert_eq!(rust_type("Option"), RustType::Option);
        assert_eq!(rust_type("GovernanceState"), RustType::Unknown);
    }

    #[test]
    fn a_float_holds_integers_but_an_integer_no_floats() {
        assert!(agrees(JsonKind::Number, "integer"));
        assert!(agrees(JsonKind::Number, "number"));
        assert!(!agrees(JsonKind::Integer, "number"));
        assert!(agrees(JsonKind::String, "string"));
        assert!(!agrees(JsonKind::String, "integer"));
    }

    #[test]
    fn properties_and_required_keep_schema_order() {
        let schema = json!({
            "type": "object",
            "properties": {"b": {"type": "string"}, "a": {"type": "integer"}},
            "required": ["a", "b"]
        });
        assert_eq!(properties(&schema), ["b", "a"]);
        assert_eq!(required(&schema), ["a", "b"]);
        assert_eq!(property(&schema, "a"), Some(&json!({"type": "integer"})));
        assert_eq!(property(&schema, "c"), None);
        assert!(properties(&json!({"type": "object"})).is_empty());
        assert!(required(&json!({"type": "object"})).is_empty());
    }

    #[test]
    fn property_types_split_off_null_and_follow_local_refs() {
        let root = json!({"$defs": {"id": {"type": ["string", "null"]}}});
        let types = property_types(&json!({"$ref": "#/$defs/id"}), &root).expect("typed");
        assert_eq!(types.types, ["string"]);
        assert!(types.nullable);
        let types = property_types(&json!({"type": "integer"}), &root).expect("typed");
        assert_eq!(
            (types.types, types.nullable),
            (vec!["integer".to_owned()], false)
        );
        let types = property_types(&json!({"enum": ["a", "b"]}), &root).expect("typed");
        assert_eq!(types.types, ["string"]);
        let types = property_types(&json!({"enum": [1, 2.5, true, null]}), &root).expect("typed");
        assert_eq!(types.types, ["integer", "number", "boolean"]);
        assert!(types.nullable);
        let types = property_types(&json!({"properties": {}}), &root).expect("typed");
        assert_eq!(types.types, ["object"]);
        assert_eq!(property_types(&json!({}), &root), None);
        assert_eq!(
            property_types(&json!({"$ref": "#/$defs/gone"}), &root),
            None
        );
    }

    #[test]
    fn optional_or_nullable_properties_need_an_option() {
        let nullable = PropertyTypes {
            types: vec!["string".to_owned()],
            nullable: true,
        };
        let plain = PropertyTypes {
            types: vec!["string".to_owned()],
            nullable: false,
        };
        assert!(must_be_optional(false, Some(&plain)));
        assert!(must_be_optional(true, Some(&nullable)));
        assert!(!must_be_optional(true, Some(&plain)));
        assert!(!must_be_optional(true, None));
    }

    fn event(versions: &[&str]) -> EventType {
        EventType {
            name: "iu.born".to_owned(),
            description: String::new(),
            producer_class: "units".to_owned(),
            order_key: Vec::new(),
            compat: CompatMode::Forward,
            status: EventStatus::default(),
            max_payload_bytes: 0,
            content: crate::model::ContentModel::Closed,
            retention: None,
            versions: versions
                .iter()
                .map(|v| EventVersion {
                    version: semver::Version::parse(v).expect("version"),
                    description: None,
                    schema: json!({}).into(),
                    migration_policy: None,
                    pointer: String::new(),
                })
                .collect(),
            file: String::new(),
        }
    }

    fn subscription(requirement: &str) -> Subscription {
        Subscription {
            event: "iu.born".to_owned(),
            requirement: semver::VersionReq::parse(requirement).expect("requirement"),
        }
    }

    #[test]
    fn subscriptions_admit_the_registered_versions_in_their_range() {
        let born = event(&["1.0.0", "1.1.0", "2.0.0", "3.0.0"]);
        let versions: Vec<String> = subscribed_versions(&born, &subscription(">=1, <3"))
            .iter()
            .map(|v| v.version.to_string())
            .collect();
        assert_eq!(versions, ["1.0.0", "1.1.0", "2.0.0"]);
        assert_eq!(subscribed_majors(&born, &subscription(">=1, <3")), [1, 2]);
        assert_eq!(subscribed_majors(&born, &subscription("^1.1")), [1]);
        assert!(subscribed_majors(&born, &subscription("^4")).is_empty());
    }
}
