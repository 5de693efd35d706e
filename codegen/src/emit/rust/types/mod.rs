//! JSON Schema to Rust types: the payload type of each event major and everything it nests.
//!
//! Objects become `#[non_exhaustive]` structs with a constructor and setters (open objects keep
//! unknown keys in a flattened map), `oneOf`/`anyOf` and type unions enums (internally tagged
//! when the branches share a string `const` property, untagged otherwise), `allOf` of objects
//! one merged struct, `prefixItems` tuples, string enums Rust enums with serde renames and any
//! other `enum`/`const` an enum that converts through `serde_json::Value`. Every named item is
//! named from its path, never anonymous; a `$ref` (any JSON pointer or `$anchor` in the schema)
//! is generated once and boxed where it recurses. Keywords that only constrain values are left
//! to run-time schema validation and named in the doc comment. The full table is in
//! `docs/codegen.md`.

mod enums;
mod refs;
mod shape;
mod structs;
mod tuples;
mod unions;

pub use refs::{resolve_alias, resolve_reference};

use std::collections::BTreeMap;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use serde_json::Value as Json;

use super::super::EmitError;
use crate::naming::{Clash, Names, Taker};

/// Generates the types of one payload schema.
pub(super) struct TypeGen<'a> {
    root: &'a Json,
    /// Prefix of every type name (`IuBornV1`).
    base: String,
    /// What is being generated, for errors (`iu.born 1.1.0`).
    subject: String,
    /// The contract file and the JSON pointer of the schema in it, for name clashes.
    file: String,
    schema_pointer: String,
    /// Items generated so far (none when only names are taken).
    pub(super) items: Vec<TokenStream>,
    /// Whether items are built; without them the walk only takes names and reports clashes
    /// and errors, which is all `evc check` needs.
    render: bool,
    /// The Rust type (and whether `null` is allowed) of every schema generated so far at a
    /// pointer of the document, so a schema reached twice (by the walk and by `$ref`) is one type.
    generated: BTreeMap<String, (TokenStream, bool)>,
    /// Schemas being generated (pointer → type name), to box recursive references.
    in_progress: BTreeMap<String, String>,
    /// The fields of every generated struct (struct name → property → field name), for code
    /// that reads the payload struct (the order key).
    pub(super) struct_fields: BTreeMap<String, BTreeMap<String, String>>,
    names: &'a mut Names,
    clashes: &'a mut Vec<Clash>,
    /// The path of the `evc` crate, whose re-exports (serde, uuid, chrono...) generated types
    /// name, so an application depends on `evc` alone.
    runtime: TokenStream,
}

/// Where a schema of a payload is: the path used in messages and docs (`/properties/state/`),
/// its JSON pointer from the schema root (`/properties/state`), and whether the schema is the
/// one at that pointer (`false` for schemas the generator builds: a merged `allOf`, a tagged
/// branch without its tag), so only the former are shared by pointer.
#[derive(Clone, Copy)]
struct At<'p> {
    path: &'p str,
    pointer: &'p str,
    in_document: bool,
}

impl<'p> At<'p> {
    /// The same place, for a schema the generator built from the one there.
    fn built(self) -> Self {
        Self {
            in_document: false,
            ..self
        }
    }
}

/// A child location: its path, pointer and whether it is in the document.
struct Child {
    path: String,
    pointer: String,
    in_document: bool,
}

impl Child {
    /// The child reached from `at` through the pointer segments `keyword` and `segment`.
    fn of(at: At<'_>, keyword: &str, segment: Option<&str>) -> Self {
        let escaped = segment.map(crate::yaml::escape_pointer_segment);
        let (path, pointer) = match (&escaped, segment) {
            (Some(escaped), Some(segment)) => (
                format!("{}{keyword}/{segment}/", at.path),
                format!("{}/{keyword}/{escaped}", at.pointer),
            ),
            _ => (
                format!("{}{keyword}/", at.path),
                format!("{}/{keyword}", at.pointer),
            ),
        };
        Self {
            path,
            pointer,
            in_document: at.in_document,
        }
    }

    fn at(&self) -> At<'_> {
        At {
            path: &self.path,
            pointer: &self.pointer,
            in_document: self.in_document,
        }
    }
}

impl<'a> TypeGen<'a> {
    /// A generator for `root` (at `schema_pointer` in `file`), whose types are named from `base`;
    /// names go to `names`, and refused names to `clashes`.
    pub(super) fn new(
        root: &'a Json,
        base: String,
        subject: String,
        (file, schema_pointer): (String, String),
        names: &'a mut Names,
        clashes: &'a mut Vec<Clash>,
        runtime: &TokenStream,
    ) -> Self {
        Self {
            runtime: runtime.clone(),
            root,
            base,
            subject,
            file,
            schema_pointer,
            items: Vec::new(),
            render: true,
            generated: BTreeMap::new(),
            in_progress: BTreeMap::new(),
            struct_fields: BTreeMap::new(),
            names,
            clashes,
        }
    }

    /// The same generator taking names only: the walk, its names, clashes and errors are
    /// those of rendering, but no item is built.
    pub(super) fn names_only(mut self) -> Self {
        self.render = false;
        self
    }

    fn error(&self, message: impl Into<String>) -> EmitError {
        EmitError::Rust {
            subject: self.subject.clone(),
            message: message.into(),
        }
    }

    /// The taker of a name generated for the schema at `pointer`.
    fn taker(&self, what: String, pointer: &str) -> Taker {
        Taker::new(
            what,
            &self.file,
            format!("{}{pointer}", self.schema_pointer),
        )
    }

    fn take(names: &mut Names, clashes: &mut Vec<Clash>, name: &str, taker: Taker) {
        if let Err(clash) = names.take(name, taker) {
            clashes.push(*clash);
        }
    }

    /// Takes the type name `name` for the schema at `at`.
    fn take_type_name(&mut self, name: &str, at: At<'_>) {
        let what = match at.path {
            "/" => format!("the payload type of {}", self.subject),
            _ => format!("the type of {} at {}", self.subject, at.path),
        };
        let taker = self.taker(what, at.pointer);
        Self::take(self.names, self.clashes, name, taker);
    }

    /// Generates the payload type, named `base`: the root's own struct or enum, or a
    /// `#[serde(transparent)]` newtype of whatever the root maps to.
    pub(super) fn root_type(&mut self) -> Result<(), EmitError> {
        let name = self.base.clone();
        let root = self.root;
        let at = At {
            path: "/",
            pointer: "",
            in_document: true,
        };
        // A payload that may be `null` is a newtype of an `Option`, so its struct or enum takes
        // another name.
        let inner_name = if allows_null(root) && root.get("type") != Some(&Json::from("null")) {
            format!("{name}Value")
        } else {
            name.clone()
        };
        let name_of_inner = inner_name.as_str();
        // A root that is a bare `$ref` gives its target the payload type's name.
        let (ty, nullable) = match root.get("$ref").and_then(Json::as_str) {
            Some(reference) => {
                let (pointer, target) = refs::resolve_alias(root, reference)
                    .map_err(|problem| self.error(format!("`$ref: {reference}` {problem}")))?;
                let path = format!("#{pointer}/");
                let target_at = At {
                    path: &path,
                    pointer: &pointer,
                    in_document: true,
                };
                self.mapped(target, name_of_inner, target_at)?
            }
            None => self.mapped(root, name_of_inner, at)?,
        };
        if ty.to_string() == name {
            if nullable {
                return Err(self.error(
                    "the payload schema allows `null` besides its struct or enum: a payload \
                     type cannot be `null`",
                ));
            }
            return Ok(());
        }
        let ty = optional_if(nullable, ty);
        self.take_type_name(&name, at);
        if !self.render {
            return Ok(());
        }
        let ident = format_ident!("{name}");
        let doc = type_doc(
            root,
            &format!(
                "The {} payload (its schema is not an object, or allows `null`).",
                self.subject
            ),
        );
        let derives = derives(&self.runtime);
        let derive_crates = derive_crates(&self.runtime);
        self.items.push(quote! {
            #doc
            #[derive(Debug, Clone, PartialEq, #derives)]
            #derive_crates
            #[serde(transparent)]
            pub struct #ident(pub #ty);
        });
        Ok(())
    }

    /// The Rust type for `schema`, generating named items as needed.
    fn type_for(
        &mut self,
        schema: &Json,
        name: &str,
        at: At<'_>,
    ) -> Result<TokenStream, EmitError> {
        let (inner, nullable) = self.mapped(schema, name, at)?;
        Ok(optional_if(nullable, inner))
    }

    /// The Rust type for the non-null values of `schema`, and whether the schema allows `null`
    /// too (then the type of a value is an `Option` of it, and an optional field of that type
    /// needs no second `Option`). A schema of the document is generated once; reached again
    /// while it is being generated (recursion), it is boxed.
    fn mapped(
        &mut self,
        schema: &Json,
        name: &str,
        at: At<'_>,
    ) -> Result<(TokenStream, bool), EmitError> {
        if !at.in_document {
            return self.mapped_uncached(schema, name, at);
        }
        if let Some(done) = self.generated.get(at.pointer) {
            return Ok(done.clone());
        }
        if let Some(in_progress) = self.in_progress.get(at.pointer) {
            if !shape::named_item(Some(self.root), schema) {
                return Err(self.error(format!(
                    "#{} is recursive through something that is not a struct or an enum",
                    at.pointer
                )));
            }
            let ident = format_ident!("{in_progress}");
            return Ok((quote!(::std::boxed::Box<#ident>), allows_null(schema)));
        }
        self.in_progress
            .insert(at.pointer.to_owned(), name.to_owned());
        let result = self.mapped_uncached(schema, name, at);
        self.in_progress.remove(at.pointer);
        let result = result?;
        self.generated.insert(at.pointer.to_owned(), result.clone());
        Ok(result)
    }

    /// [`Self::mapped`] without the sharing; dispatches in the order of [`shape::named_item`].
    fn mapped_uncached(
        &mut self,
        schema: &Json,
        name: &str,
        at: At<'_>,
    ) -> Result<(TokenStream, bool), EmitError> {
        let runtime = self.runtime.clone();
        let Json::Object(map) = schema else {
            return Ok((quote!(#runtime::serde_json::Value), false));
        };
        if let Some(reference) = map.get("$ref").and_then(Json::as_str) {
            // Keywords beside `$ref` apply too (2020-12): with a shape of their own, the two
            // are an `allOf`.
            let mut beside = map.clone();
            beside.remove("$ref");
            let beside = Json::Object(beside);
            if !shape::has_shape(&beside) {
                return self.reference(reference);
            }
            let both = serde_json::json!({"allOf": [{"$ref": reference}, beside]});
            let parts = both["allOf"].as_array().cloned().unwrap_or_default();
            return self.all_of(&both, &parts, name, at.built());
        }
        let (types, type_null) = shape::types(map);
        if let Some(values) = shape::enum_values(map) {
            let nullable = type_null || values.iter().any(|v| v.is_null());
            let non_null: Vec<&Json> = values.into_iter().filter(|v| !v.is_null()).collect();
            if non_null.is_empty() {
                return Ok((quote!(()), false));
            }
            let ty = if non_null.iter().all(|v| v.is_string()) {
                self.string_enum(schema, &non_null, name, at)?
            } else {
                self.value_enum(schema, &non_null, name, at)?
            };
            return Ok((ty, nullable));
        }
        if let Some((keyword, branches)) = shape::union_branches(map) {
            let (ty, nullable) = self.union(schema, keyword, branches, name, at)?;
            return Ok((ty, nullable || type_null));
        }
        if let Some(parts) = shape::all_of_parts(map) {
            let (ty, nullable) = self.all_of(schema, parts, name, at)?;
            return Ok((ty, nullable || type_null));
        }
        if map.contains_key("prefixItems") && matches!(types.as_slice(), [] | ["array"]) {
            return Ok((self.tuple(schema, name, at)?, type_null));
        }
        let inner = match types.as_slice() {
            // `type: "null"`: the one value is `null`.
            [] if type_null => return Ok((quote!(()), false)),
            [] if shape::is_object(map) => self.object(schema, name, at)?,
            [] => quote!(#runtime::serde_json::Value),
            [single] => self.single_type(schema, single, name, at)?,
            _ => self.type_union(schema, &types, name, at)?,
        };
        Ok((inner, type_null))
    }

    /// The Rust type of `schema` read as one JSON type `kind`.
    fn single_type(
        &mut self,
        schema: &Json,
        kind: &str,
        name: &str,
        at: At<'_>,
    ) -> Result<TokenStream, EmitError> {
        let runtime = self.runtime.clone();
        let empty = serde_json::Map::new();
        let map = schema.as_object().unwrap_or(&empty);
        Ok(match kind {
            "object" => self.object(schema, name, at)?,
            "string" => match map.get("format").and_then(Json::as_str) {
                Some("uuid") => quote!(#runtime::uuid::Uuid),
                Some("date-time") => quote!(#runtime::chrono::DateTime<#runtime::chrono::Utc>),
                _ => quote!(::std::string::String),
            },
            "integer" => integer_type(map),
            "number" => quote!(f64),
            "boolean" => quote!(bool),
            "array" if map.contains_key("prefixItems") => self.tuple(schema, name, at)?,
            "array" => {
                let item = match map.get("items") {
                    Some(items) => {
                        let child = Child::of(at, "items", None);
                        self.type_for(items, &format!("{name}Item"), child.at())?
                    }
                    None => quote!(#runtime::serde_json::Value),
                };
                quote!(::std::vec::Vec<#item>)
            }
            other => {
                return Err(self.error(format!(
                    "{}: `type: {other}` is not a JSON Schema type",
                    at.path
                )));
            }
        })
    }

    /// The type of a `$ref` target, generated once under the name of its pointer.
    fn reference(&mut self, reference: &str) -> Result<(TokenStream, bool), EmitError> {
        let (pointer, target) = refs::resolve_alias(self.root, reference)
            .map_err(|problem| self.error(format!("`$ref: {reference}` {problem}")))?;
        let name = if pointer.is_empty() {
            self.base.clone()
        } else {
            refs::name_for_pointer(&self.base, &pointer)
        };
        let path = format!("#{pointer}/");
        self.mapped(
            target,
            &name,
            At {
                path: &path,
                pointer: &pointer,
                in_document: true,
            },
        )
    }
}

/// Whether `schema` lets a value be `null` besides its other values (as [`TypeGen::mapped`]
/// reports it).
fn allows_null(schema: &Json) -> bool {
    let Json::Object(map) = schema else {
        return false;
    };
    let type_null = shape::types(map).1;
    if let Some(values) = shape::enum_values(map) {
        return type_null || values.iter().any(|v| v.is_null());
    }
    if let Some((_, branches)) = shape::union_branches(map) {
        return type_null || branches.iter().any(shape::is_null_only);
    }
    type_null
}

/// Whether the generator makes a named item of `schema`: a struct or an enum, the only kinds of
/// item a recursive `$ref` can point back to (it is boxed). `$ref`s inside `allOf` count as
/// objects here; the generator resolves them and reports a recursion it cannot box.
pub fn generates_struct(schema: &Json) -> bool {
    shape::named_item(None, schema)
}

/// The doc attributes of a generated type: the schema's `description` (or `fallback`), then a
/// line naming the keywords checked at run time only.
fn type_doc(schema: &Json, fallback: &str) -> TokenStream {
    let doc = description(schema).unwrap_or_else(|| fallback.to_owned());
    let note = shape::runtime_only_note(schema).map(|note| {
        quote! {
            #[doc = ""]
            #[doc = #note]
        }
    });
    quote! {
        #[doc = #doc]
        #note
    }
}

/// The serde and schemars derives, through the `evc` crate's re-exports.
pub(super) fn derives(runtime: &TokenStream) -> TokenStream {
    quote!(#runtime::serde::Serialize, #runtime::serde::Deserialize, #runtime::schemars::JsonSchema)
}

/// Tells the serde and schemars derives where their crates are: the `evc` crate's re-exports,
/// so the generated crate needs no dependency of its own on them.
pub(super) fn derive_crates(runtime: &TokenStream) -> TokenStream {
    let serde = serde_crate(runtime);
    let schemars = format!("{}::schemars", compact(runtime));
    quote! {
        #serde
        #[schemars(crate = #schemars)]
    }
}

/// `#[serde(crate = "...")]` for a serde derive through the `evc` crate's re-export.
pub(super) fn serde_crate(runtime: &TokenStream) -> TokenStream {
    let path = format!("{}::serde", compact(runtime));
    quote!(#[serde(crate = #path)])
}

/// A path's tokens as Rust source without spaces (`::evc`).
fn compact(path: &TokenStream) -> String {
    path.to_string().replace(' ', "")
}

/// `Option<inner>` when `optional`, else `inner`.
fn optional_if(optional: bool, inner: TokenStream) -> TokenStream {
    if optional {
        quote!(::std::option::Option<#inner>)
    } else {
        inner
    }
}

fn description(schema: &Json) -> Option<String> {
    schema
        .get("description")
        .and_then(Json::as_str)
        .map(str::to_owned)
}

/// `name`, or `name2`, `name3`... : the first that `taken` does not hold; marks it taken.
fn unique(taken: &mut std::collections::BTreeSet<String>, name: String) -> String {
    let mut candidate = name.clone();
    let mut number = 2;
    while !taken.insert(candidate.clone()) {
        candidate = format!("{name}{number}");
        number += 1;
    }
    candidate
}

/// The narrowest integer type the schema's bounds allow.
fn integer_type(map: &serde_json::Map<String, Json>) -> TokenStream {
    let bound = |keyword: &str, exclusive: &str, step: i128| -> Option<i128> {
        let inclusive = map.get(keyword).and_then(Json::as_f64).map(|v| v as i128);
        let exclusive = map
            .get(exclusive)
            .and_then(Json::as_f64)
            .map(|v| v as i128 + step);
        match (inclusive, exclusive) {
            (Some(a), Some(b)) => Some(if step > 0 { a.max(b) } else { a.min(b) }),
            (a, b) => a.or(b),
        }
    };
    let minimum = bound("minimum", "exclusiveMinimum", 1);
    let maximum = bound("maximum", "exclusiveMaximum", -1);
    match (minimum, maximum) {
        (Some(min), Some(max)) if min >= 0 && max <= i128::from(u8::MAX) => quote!(u8),
        (Some(min), Some(max)) if min >= 0 && max <= i128::from(u16::MAX) => quote!(u16),
        (Some(min), Some(max)) if min >= 0 && max <= i128::from(u32::MAX) => quote!(u32),
        (Some(min), _) if min >= 0 => quote!(u64),
        (Some(min), Some(max)) if min >= i128::from(i32::MIN) && max <= i128::from(i32::MAX) => {
            quote!(i32)
        }
        _ => quote!(i64),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The items generated for `schema` as one string of tokens, and the fields of its structs.
    fn generate(schema: &Json) -> (String, BTreeMap<String, BTreeMap<String, String>>) {
        let mut names = Names::new("type");
        let mut clashes = Vec::new();
        let mut generator = TypeGen::new(
            schema,
            "XV1".to_owned(),
            "x 1.0.0".to_owned(),
            ("events/x.yaml".to_owned(), "/versions/0/schema".to_owned()),
            &mut names,
            &mut clashes,
            &quote!(::evc),
        );
        generator.root_type().expect("generates");
        let items = generator.items.iter().map(ToString::to_string).collect();
        let fields = generator.struct_fields.clone();
        assert!(clashes.is_empty(), "{clashes:?}");
        (items, fields)
    }

    #[test]
    fn a_root_that_is_not_a_struct_or_enum_is_a_transparent_newtype() {
        let (items, fields) = generate(&json!({"type": "array", "items": {"type": "string"}}));
        assert!(items.contains("serde (transparent)"), "{items}");
        assert!(
            items.contains(
                "pub struct XV1 (pub :: std :: vec :: Vec < :: std :: string :: String >)"
            ),
            "{items}"
        );
        assert!(fields.is_empty());
    }

    #[test]
    fn a_root_union_is_the_payload_enum_itself() {
        let (items, _) = generate(&json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}));
        assert!(items.contains("pub enum XV1"), "{items}");
        assert!(!items.contains("transparent"), "{items}");
    }

    #[test]
    fn a_root_ref_names_its_target_after_the_payload() {
        let (items, fields) = generate(&json!({
            "$ref": "#/$defs/body",
            "$defs": {"body": {"type": "object", "properties": {"a": {"type": "string"}}}}
        }));
        assert!(items.contains("pub struct XV1 {"), "{items}");
        assert!(!items.contains("XV1Body"), "{items}");
        assert_eq!(fields["XV1"]["a"], "a");
    }

    #[test]
    fn the_map_of_unlisted_keys_avoids_a_property_named_like_it() {
        let (items, _) = generate(&json!({
            "type": "object",
            "properties": {"extra": {"type": "string"}}
        }));
        assert!(items.contains("pub extra_properties :"), "{items}");
        assert!(items.contains("serde (flatten)"), "{items}");
    }

    #[test]
    fn unevaluated_properties_beside_one_of_close_its_branches() {
        let branches = json!([
            {"type": "object", "required": ["kind"], "properties": {"kind": {"const": "a"}, "x": {"type": "string"}}},
            {"type": "object", "required": ["kind"], "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}}
        ]);
        let (closed, _) = generate(&json!({"oneOf": branches, "unevaluatedProperties": false}));
        assert!(closed.contains("serde (tag = \"kind\")"), "{closed}");
        assert!(!closed.contains("flatten"), "{closed}");
        let (open, _) = generate(&json!({"oneOf": branches}));
        assert!(open.contains("flatten"), "{open}");
    }

    #[test]
    fn null_only_schemas_are_the_unit_type() {
        let (items, _) = generate(&json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["a", "b"],
            "properties": {"a": {"type": "null"}, "b": {"const": null}}
        }));
        assert!(items.contains("pub a : ()"), "{items}");
        assert!(items.contains("pub b : ()"), "{items}");
    }

    #[test]
    fn an_all_of_that_includes_itself_is_an_error_not_a_loop() {
        let schema =
            json!({"$ref": "#/$defs/a", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}});
        let mut names = Names::new("type");
        let mut clashes = Vec::new();
        let mut generator = TypeGen::new(
            &schema,
            "XV1".to_owned(),
            "x 1.0.0".to_owned(),
            ("events/x.yaml".to_owned(), String::new()),
            &mut names,
            &mut clashes,
            &quote!(::evc),
        );
        let error = generator
            .root_type()
            .expect_err("an allOf of itself has no Rust type");
        assert!(error.to_string().contains("recursive"), "{error}");
    }

    #[test]
    fn recursion_through_a_non_item_is_an_error() {
        let schema = json!({"$ref": "#/$defs/list", "$defs": {"list": {"type": "array", "items": {"$ref": "#/$defs/list"}}}});
        let mut names = Names::new("type");
        let mut clashes = Vec::new();
        let mut generator = TypeGen::new(
            &schema,
            "XV1".to_owned(),
            "x 1.0.0".to_owned(),
            ("events/x.yaml".to_owned(), String::new()),
            &mut names,
            &mut clashes,
            &quote!(::evc),
        );
        let error = generator
            .root_type()
            .expect_err("a list of itself has no Rust type");
        assert!(error.to_string().contains("recursive"), "{error}");
    }
}
