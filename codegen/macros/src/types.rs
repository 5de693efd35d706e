//! Do a Rust field type and a JSON Schema property agree?

use serde_json::Value as Json;
use syn::{GenericArgument, PathArguments, Type};

/// The JSON kind a Rust type serializes to, when the type is one we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    String,
    Integer,
    Number,
    Boolean,
    Array,
    Object,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
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

/// A field type with its `Option` (if any) peeled off.
pub(crate) struct FieldType<'a> {
    pub(crate) optional: bool,
    pub(crate) kind: Option<Kind>,
    pub(crate) inner: &'a Type,
}

/// Classifies a field type: `Option<T>` is optional; `Box`, `Arc`, `Rc` and references are
/// looked through; unknown types (the user's own structs and enums) have no kind.
pub(crate) fn classify(ty: &Type) -> FieldType<'_> {
    match single_generic(ty, "Option") {
        Some(inner) => FieldType {
            optional: true,
            kind: kind_of(inner),
            inner,
        },
        None => FieldType {
            optional: false,
            kind: kind_of(ty),
            inner: ty,
        },
    }
}

fn kind_of(ty: &Type) -> Option<Kind> {
    match ty {
        Type::Reference(reference) => kind_of(&reference.elem),
        Type::Slice(_) | Type::Array(_) => Some(Kind::Array),
        Type::Paren(paren) => kind_of(&paren.elem),
        Type::Path(path) => {
            let last = path.path.segments.last()?;
            let name = last.ident.to_string();
            match name.as_str() {
                "String" | "str" | "Uuid" | "DateTime" | "NaiveDate" | "NaiveDateTime" | "Cow"
                | "char" => Some(Kind::String),
                "i8" | "i16" | "i32" | "i64" | "i128" | "isize" | "u8" | "u16" | "u32" | "u64"
                | "u128" | "usize" => Some(Kind::Integer),
                "f32" | "f64" => Some(Kind::Number),
                "bool" => Some(Kind::Boolean),
                "Vec" | "VecDeque" | "HashSet" | "BTreeSet" => Some(Kind::Array),
                "HashMap" | "BTreeMap" | "Map" => Some(Kind::Object),
                "Box" | "Arc" | "Rc" => single_generic(ty, &name).and_then(kind_of),
                _ => None,
            }
        }
        _ => None,
    }
}

fn single_generic<'a>(ty: &'a Type, wrapper: &str) -> Option<&'a Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != wrapper {
        return None;
    }
    let PathArguments::AngleBracketed(arguments) = &last.arguments else {
        return None;
    };
    match arguments.args.first()? {
        GenericArgument::Type(inner) => Some(inner),
        _ => None,
    }
}

/// The JSON types a property schema allows (resolving a local `$ref`), and whether it allows
/// `null`. `None` when the schema names no type.
pub(crate) fn schema_types(property: &Json, root: &Json) -> Option<(Vec<String>, bool)> {
    let property = match property.get("$ref").and_then(Json::as_str) {
        Some(reference) => root.pointer(reference.strip_prefix('#')?)?,
        None => property,
    };
    let mut types: Vec<String> = match property.get("type") {
        Some(Json::String(single)) => vec![single.clone()],
        Some(Json::Array(list)) => list
            .iter()
            .filter_map(Json::as_str)
            .map(str::to_owned)
            .collect(),
        _ => {
            if property.get("enum").is_some() || property.get("const").is_some() {
                vec!["string".to_owned()]
            } else if property.get("properties").is_some() {
                vec!["object".to_owned()]
            } else {
                return None;
            }
        }
    };
    let nullable = types.iter().any(|t| t == "null");
    types.retain(|t| t != "null");
    Some((types, nullable))
}

/// Whether a field of `kind` can hold a value of JSON type `schema_type`.
pub(crate) fn agrees(kind: Kind, schema_type: &str) -> bool {
    match kind {
        Kind::Number => matches!(schema_type, "number" | "integer"),
        other => other.name() == schema_type,
    }
}
