//! Reading a field's Rust type: which JSON kind it serializes to (the mapping is evc-codegen's,
//! [`evc_codegen::facts::rust_type`]); this module only walks the syntax.

use evc_codegen::facts::{self, JsonKind, RustType};
use syn::{GenericArgument, PathArguments, Type};

/// A field type with its `Option` (if any) peeled off.
pub(crate) struct FieldType<'a> {
    pub(crate) optional: bool,
    pub(crate) kind: Option<JsonKind>,
    pub(crate) inner: &'a Type,
}

/// Classifies a field type: `Option<T>` is optional; `Box`, `Arc`, `Rc` and references are
/// looked through; unknown types (the user's own structs and enums) have no kind.
pub(crate) fn classify(ty: &Type) -> FieldType<'_> {
    match last_segment(ty).map(|name| (facts::rust_type(&name), single_generic(ty))) {
        Some((RustType::Option, Some(inner))) => FieldType {
            optional: true,
            kind: kind_of(inner),
            inner,
        },
        _ => FieldType {
            optional: false,
            kind: kind_of(ty),
            inner: ty,
        },
    }
}

fn kind_of(ty: &Type) -> Option<JsonKind> {
    match ty {
        Type::Reference(reference) => kind_of(&reference.elem),
        Type::Slice(_) | Type::Array(_) => Some(JsonKind::Array),
        Type::Paren(paren) => kind_of(&paren.elem),
        Type::Path(_) => match facts::rust_type(&last_segment(ty)?) {
            RustType::Kind(kind) => Some(kind),
            RustType::Transparent => single_generic(ty).and_then(kind_of),
            RustType::Option | RustType::Unknown => None,
        },
        _ => None,
    }
}

/// The last segment of a path type's path (`Uuid` for `uuid::Uuid`).
fn last_segment(ty: &Type) -> Option<String> {
    let Type::Path(path) = ty else { return None };
    Some(path.path.segments.last()?.ident.to_string())
}

/// The first type argument of a path type's last segment (`T` of `Box<T>`).
fn single_generic(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    let PathArguments::AngleBracketed(arguments) = &path.path.segments.last()?.arguments else {
        return None;
    };
    match arguments.args.first()? {
        GenericArgument::Type(inner) => Some(inner),
        _ => None,
    }
}
