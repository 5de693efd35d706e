//! JSON Schema to Rust types: the payload type of each event major and everything it nests.
//!
//! Closed objects become structs that ignore unknown fields when read (the reader view of
//! `docs/compat.md`: a consumer built for 1.2 reads a 1.3 payload with a new optional field),
//! optional properties `Option`s, string
//! enums Rust enums with serde renames, `const` a one-variant enum, nested objects and `$defs`
//! named types (named from their path, never anonymous). Every struct is `#[non_exhaustive]`
//! with a constructor of its required properties and a setter per optional one, so a new
//! optional property breaks no producer. Keywords that only constrain values
//! (`pattern`, `minLength`, `maximum`, ...) are left to run-time schema validation; keywords
//! that would change the shape of the type are refused by `evc check` (see
//! [`crate::payload_schema`]), so reaching one here is a bug.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use serde_json::Value as Json;

use super::super::EmitError;
use crate::naming::{self, Clash, Names, Taker};

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
    /// Items generated so far.
    pub(super) items: Vec<TokenStream>,
    /// The Rust type of every `$ref` target generated so far, by resolved pointer.
    refs: BTreeMap<String, TokenStream>,
    /// `$ref` targets being generated (resolved pointer → type name), to box recursive references.
    in_progress: BTreeMap<String, String>,
    names: &'a mut Names,
    clashes: &'a mut Vec<Clash>,
    /// The path of the `evc` crate, whose re-exports (serde, uuid, chrono...) generated types
    /// name, so an application depends on `evc` alone.
    runtime: TokenStream,
}

/// Where a schema of a payload is: the path used in messages and docs (`/properties/state/`)
/// and its JSON pointer from the schema root (`/properties/state`).
#[derive(Clone, Copy)]
struct At<'p> {
    path: &'p str,
    pointer: &'p str,
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
            refs: BTreeMap::new(),
            in_progress: BTreeMap::new(),
            names,
            clashes,
        }
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

    /// Generates the root struct, named `base`.
    pub(super) fn root_struct(&mut self) -> Result<(), EmitError> {
        let name = self.base.clone();
        let root = self.root;
        self.struct_type(
            root,
            &name,
            At {
                path: "/",
                pointer: "",
            },
        )?;
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
    /// needs no second `Option`).
    fn mapped(
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
            return Ok((self.reference(reference)?, false));
        }
        let (types, nullable) = match map.get("type") {
            Some(Json::String(single)) => (vec![single.as_str()], false),
            Some(Json::Array(list)) => {
                let types: Vec<&str> = list
                    .iter()
                    .filter_map(Json::as_str)
                    .filter(|t| *t != "null")
                    .collect();
                let nullable = list.iter().any(|t| t == "null");
                (types, nullable)
            }
            _ => (Vec::new(), false),
        };
        let inner = if let Some(constant) = map.get("const") {
            self.string_enum(schema, std::slice::from_ref(constant), name, at, "/const")?
        } else if let Some(Json::Array(values)) = map.get("enum") {
            self.string_enum(schema, values, name, at, "/enum")?
        } else {
            match types.as_slice() {
                ["object"] => self.struct_type(schema, name, at)?,
                ["string"] => match map.get("format").and_then(Json::as_str) {
                    Some("uuid") => quote!(#runtime::uuid::Uuid),
                    Some("date-time") => quote!(#runtime::chrono::DateTime<#runtime::chrono::Utc>),
                    _ => quote!(::std::string::String),
                },
                ["integer"] => integer_type(map),
                ["number"] => quote!(f64),
                ["boolean"] => quote!(bool),
                ["array"] => {
                    let item = match map.get("items") {
                        Some(items) => {
                            let path = format!("{}items/", at.path);
                            let pointer = format!("{}/items", at.pointer);
                            self.type_for(
                                items,
                                &format!("{name}Item"),
                                At {
                                    path: &path,
                                    pointer: &pointer,
                                },
                            )?
                        }
                        None => quote!(#runtime::serde_json::Value),
                    };
                    quote!(::std::vec::Vec<#item>)
                }
                [] if map.contains_key("properties") => self.struct_type(schema, name, at)?,
                [] => quote!(#runtime::serde_json::Value),
                other => {
                    return Err(self.error(format!(
                        "{}: the type union {other:?} has no Rust mapping",
                        at.path
                    )));
                }
            }
        };
        Ok((inner, nullable))
    }

    fn reference(&mut self, reference: &str) -> Result<TokenStream, EmitError> {
        let (pointer, target) = resolve_alias(self.root, reference)
            .map_err(|problem| self.error(format!("`$ref: {reference}` {problem}")))?;
        if let Some(generated) = self.refs.get(&pointer) {
            return Ok(generated.clone());
        }
        if let Some(name) = self.in_progress.get(&pointer) {
            // Only a struct is named before its fields are generated; `evc check` refuses other
            // cycles (REF_CYCLE).
            if !generates_struct(target) {
                return Err(self.error(format!(
                    "`$ref: {reference}` is recursive through something other than an object"
                )));
            }
            let ident = format_ident!("{name}");
            return Ok(quote!(::std::boxed::Box<#ident>));
        }
        let last = pointer.rsplit('/').next().unwrap_or_default();
        let last = crate::yaml::pointer_segments(&format!("/{last}"))
            .next()
            .unwrap_or_default();
        let name = format!("{}{}", self.base, naming::pascal(&last));
        self.in_progress.insert(pointer.clone(), name.clone());
        let path = format!("#{pointer}/");
        let generated = self.type_for(
            target,
            &name,
            At {
                path: &path,
                pointer: &pointer,
            },
        );
        self.in_progress.remove(&pointer);
        let generated = generated?;
        self.refs.insert(pointer, generated.clone());
        Ok(generated)
    }

    fn struct_type(
        &mut self,
        schema: &Json,
        name: &str,
        at: At<'_>,
    ) -> Result<TokenStream, EmitError> {
        let owner = format!("{} at {}", self.subject, at.path);
        let what = match at.path {
            "/" => format!("the payload type of {}", self.subject),
            _ => format!("the type of {owner}"),
        };
        let taker = self.taker(what, at.pointer);
        Self::take(self.names, self.clashes, name, taker);
        let ident = format_ident!("{name}");
        let required: BTreeSet<&str> = schema
            .get("required")
            .and_then(Json::as_array)
            .map(|r| r.iter().filter_map(Json::as_str).collect())
            .unwrap_or_default();
        let mut fields = Vec::new();
        let mut constructor = Constructor::default();
        let mut field_names = Names::new("field");
        if let Some(Json::Object(properties)) = schema.get("properties") {
            for (property, property_schema) in properties {
                let field_name = naming::snake(property);
                let path = format!("{}properties/{property}/", at.path);
                let pointer = format!(
                    "{}/properties/{}",
                    at.pointer,
                    crate::yaml::escape_pointer_segment(property)
                );
                let taker = self.taker(format!("the property `{property}`"), &pointer);
                Self::take(&mut field_names, self.clashes, &field_name, taker);
                let field_ident = naming::ident(&field_name);
                let type_name = format!("{name}{}", naming::pascal(property));
                let (inner, nullable) = self.mapped(
                    property_schema,
                    &type_name,
                    At {
                        path: &path,
                        pointer: &pointer,
                    },
                )?;
                let doc = description(property_schema)
                    .unwrap_or_else(|| format!("The `{property}` property."));
                let rename = (field_name != *property).then(|| quote!(rename = #property,));
                let field = if required.contains(property.as_str()) {
                    let serde = rename.map(|rename| quote!(#[serde(#rename)]));
                    let ty = optional_if(nullable, inner);
                    constructor.required(&field_ident, &ty);
                    quote! {
                        #[doc = #doc]
                        #serde
                        pub #field_ident: #ty,
                    }
                } else {
                    constructor.optional(&field_name, &field_ident, property, &inner);
                    // Absent and `null` both read as `None`; `None` is written as absent.
                    let ty = quote!(::std::option::Option<#inner>);
                    quote! {
                        #[doc = #doc]
                        #[serde(#rename default, skip_serializing_if = "::std::option::Option::is_none")]
                        pub #field_ident: #ty,
                    }
                };
                fields.push(field);
            }
        }
        let doc =
            description(schema).unwrap_or_else(|| format!("Part of the {} payload.", self.subject));
        let constructor = constructor.tokens(name);
        let derives = derives(&self.runtime);
        let derive_crates = derive_crates(&self.runtime);
        // `non_exhaustive`: outside the generated crate a struct literal does not compile, so
        // the constructor and setters are the one way to build a payload, and a new optional
        // property in a minor version breaks no caller (docs/codegen.md).
        self.items.push(quote! {
            #[doc = #doc]
            #[derive(Debug, Clone, PartialEq, #derives)]
            #derive_crates
            #[non_exhaustive]
            pub struct #ident {
                #(#fields)*
            }

            #constructor
        });
        Ok(quote!(#ident))
    }

    fn string_enum(
        &mut self,
        schema: &Json,
        values: &[Json],
        name: &str,
        at: At<'_>,
        keyword: &str,
    ) -> Result<TokenStream, EmitError> {
        let owner = format!("{} at {}", self.subject, at.path);
        let taker = self.taker(format!("the type of {owner}"), at.pointer);
        Self::take(self.names, self.clashes, name, taker);
        let ident = format_ident!("{name}");
        let mut variants = Vec::new();
        let mut variant_names = Names::new("variant");
        let mut seen = BTreeSet::new();
        for (index, value) in values
            .iter()
            .enumerate()
            .filter(|(_, value)| !value.is_null())
        {
            let Some(text) = value.as_str() else {
                return Err(self.error(format!(
                    "{}: only string enums and consts have a Rust mapping, found {value}",
                    at.path
                )));
            };
            // A value listed twice is one variant.
            if !seen.insert(text) {
                continue;
            }
            let variant = naming::pascal(text);
            let pointer = match keyword {
                "/enum" => format!("{}/enum/{index}", at.pointer),
                _ => format!("{}{keyword}", at.pointer),
            };
            let taker = self.taker(format!("the value `{text}`"), &pointer);
            Self::take(&mut variant_names, self.clashes, &variant, taker);
            let variant_ident = format_ident!("{variant}");
            let doc = format!("`{text}`");
            variants.push(quote! {
                #[doc = #doc]
                #[serde(rename = #text)]
                #variant_ident,
            });
        }
        let doc = description(schema)
            .unwrap_or_else(|| format!("Values of {} in the {} payload.", at.path, self.subject));
        let derives = derives(&self.runtime);
        let derive_crates = derive_crates(&self.runtime);
        self.items.push(quote! {
            #[doc = #doc]
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, #derives)]
            #derive_crates
            pub enum #ident {
                #(#variants)*
            }
        });
        Ok(quote!(#ident))
    }
}

/// The constructor and setters of a generated struct: `new` takes the required properties in
/// the schema's property order (the order of the struct's fields); every optional property
/// starts as `None` and has a `with_<field>` setter that takes the value inside the `Option`.
#[derive(Default)]
struct Constructor {
    parameters: Vec<TokenStream>,
    initializers: Vec<TokenStream>,
    setters: Vec<TokenStream>,
}

impl Constructor {
    fn required(&mut self, field: &proc_macro2::Ident, ty: &TokenStream) {
        self.parameters.push(quote!(#field: #ty));
        self.initializers.push(quote!(#field));
    }

    /// `ty` is the type of the property's non-null values: the setter takes it and stores
    /// `Some`.
    fn optional(
        &mut self,
        field_name: &str,
        field: &proc_macro2::Ident,
        property: &str,
        ty: &TokenStream,
    ) {
        self.initializers
            .push(quote!(#field: ::std::option::Option::None));
        // `with_` and a snake_case name is never a keyword, so no raw identifier is needed.
        let setter = format_ident!("with_{field_name}");
        let doc = format!("Sets the optional `{property}` property.");
        self.setters.push(quote! {
            #[doc = #doc]
            #[must_use]
            pub fn #setter(mut self, value: #ty) -> Self {
                self.#field = ::std::option::Option::Some(value);
                self
            }
        });
    }

    fn tokens(self, name: &str) -> TokenStream {
        let ident = format_ident!("{name}");
        let Self {
            parameters,
            initializers,
            setters,
        } = self;
        let mut doc = if parameters.is_empty() {
            format!("A `{name}` with no property set (it has no required property).")
        } else {
            format!(
                "A `{name}` from its required properties, in the order of the schema's \
                 `properties`."
            )
        };
        if !setters.is_empty() {
            doc.push_str(
                " Every optional property starts as `None`; set it with its `with_` method.",
            );
        }
        quote! {
            impl #ident {
                #[doc = #doc]
                pub fn new(#(#parameters),*) -> Self {
                    Self {
                        #(#initializers),*
                    }
                }

                #(#setters)*
            }
        }
    }
}

/// Whether the Rust generator makes a named struct of `schema` (an object without `enum` or
/// `const`), the only kind of item a recursive `$ref` can point back to.
pub fn generates_struct(schema: &Json) -> bool {
    let Json::Object(map) = schema else {
        return false;
    };
    if map.contains_key("$ref") || map.contains_key("const") || map.contains_key("enum") {
        return false;
    }
    let types: Vec<&str> = match map.get("type") {
        Some(Json::String(single)) => vec![single.as_str()],
        Some(Json::Array(list)) => list
            .iter()
            .filter_map(Json::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => Vec::new(),
    };
    match types.as_slice() {
        ["object"] => true,
        [] => map.contains_key("properties"),
        _ => false,
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
        let Some((target, pointer)) = crate::compat::schema::resolve(root, &reference) else {
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

/// `Option<inner>` when `optional`, else `inner`.
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
