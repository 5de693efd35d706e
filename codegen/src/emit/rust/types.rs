//! JSON Schema to Rust types: the payload type of each event major and everything it nests.
//!
//! Closed objects become structs that ignore unknown fields when read (the reader view of
//! `docs/compat.md`: a consumer built for 1.2 reads a 1.3 payload with a new optional field),
//! optional properties `Option`s, string
//! enums Rust enums with serde renames, `const` a one-variant enum, nested objects and `$defs`
//! named types (named from their path, never anonymous). Keywords that only constrain values
//! (`pattern`, `minLength`, `maximum`, ...) are left to run-time schema validation; keywords
//! that would change the shape of the type are refused by `evc check` (see
//! [`crate::payload_schema`]), so reaching one here is a bug.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use serde_json::Value as Json;

use super::super::EmitError;
use crate::naming::{self, Names};

/// Generates the types of one payload schema.
pub(super) struct TypeGen<'a> {
    root: &'a Json,
    /// Prefix of every type name (`IuBornV1`).
    base: String,
    /// What is being generated, for errors (`iu.born 1.1.0`).
    subject: String,
    /// Items generated so far.
    pub(super) items: Vec<TokenStream>,
    /// Type names generated for `$ref` targets, by reference.
    refs: BTreeMap<String, String>,
    /// `$ref` targets being generated, to box recursive references.
    in_progress: BTreeSet<String>,
    names: &'a mut Names,
}

impl<'a> TypeGen<'a> {
    /// A generator for `root`, whose types are named from `base`.
    pub(super) fn new(root: &'a Json, base: String, subject: String, names: &'a mut Names) -> Self {
        Self {
            root,
            base,
            subject,
            items: Vec::new(),
            refs: BTreeMap::new(),
            in_progress: BTreeSet::new(),
            names,
        }
    }

    fn error(&self, message: impl Into<String>) -> EmitError {
        EmitError::Rust {
            subject: self.subject.clone(),
            message: message.into(),
        }
    }

    fn take_name(&mut self, name: &str, owner: &str) -> Result<(), EmitError> {
        self.names.take(name, owner).map_err(|existing| {
            self.error(format!(
                "the type name `{name}` of {owner} is already the name of {existing}"
            ))
        })
    }

    /// Generates the root struct, named `base`.
    pub(super) fn root_struct(&mut self) -> Result<(), EmitError> {
        let name = self.base.clone();
        let root = self.root;
        self.struct_type(root, &name, "/")?;
        Ok(())
    }

    /// The Rust type for `schema`, generating named items as needed.
    fn type_for(
        &mut self,
        schema: &Json,
        name: &str,
        path: &str,
    ) -> Result<TokenStream, EmitError> {
        Ok(self.mapped(schema, name, path)?.0)
    }

    /// The Rust type for `schema`, and whether it is already an `Option` because the schema
    /// allows `null` (an optional field of that type needs no second `Option`).
    fn mapped(
        &mut self,
        schema: &Json,
        name: &str,
        path: &str,
    ) -> Result<(TokenStream, bool), EmitError> {
        let Json::Object(map) = schema else {
            return Ok((quote!(::serde_json::Value), false));
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
            self.string_enum(schema, std::slice::from_ref(constant), name, path)?
        } else if let Some(Json::Array(values)) = map.get("enum") {
            self.string_enum(schema, values, name, path)?
        } else {
            match types.as_slice() {
                ["object"] => self.struct_type(schema, name, path)?,
                ["string"] => match map.get("format").and_then(Json::as_str) {
                    Some("uuid") => quote!(::uuid::Uuid),
                    Some("date-time") => quote!(::chrono::DateTime<::chrono::Utc>),
                    _ => quote!(::std::string::String),
                },
                ["integer"] => integer_type(map),
                ["number"] => quote!(f64),
                ["boolean"] => quote!(bool),
                ["array"] => {
                    let item = match map.get("items") {
                        Some(items) => {
                            self.type_for(items, &format!("{name}Item"), &format!("{path}items/"))?
                        }
                        None => quote!(::serde_json::Value),
                    };
                    quote!(::std::vec::Vec<#item>)
                }
                [] if map.contains_key("properties") => self.struct_type(schema, name, path)?,
                [] => quote!(::serde_json::Value),
                other => {
                    return Err(self.error(format!(
                        "{path}: the type union {other:?} has no Rust mapping"
                    )));
                }
            }
        };
        Ok(if nullable {
            (quote!(::std::option::Option<#inner>), true)
        } else {
            (inner, false)
        })
    }

    fn reference(&mut self, reference: &str) -> Result<TokenStream, EmitError> {
        if let Some(name) = self.refs.get(reference) {
            let ident = format_ident!("{name}");
            return Ok(if self.in_progress.contains(reference) {
                quote!(::std::boxed::Box<#ident>)
            } else {
                quote!(#ident)
            });
        }
        let Some(target) = reference
            .strip_prefix('#')
            .and_then(|pointer| self.root.pointer(pointer))
        else {
            return Err(self.error(format!(
                "`$ref: {reference}` does not resolve inside the schema"
            )));
        };
        let last = reference.rsplit('/').next().unwrap_or_default();
        let name = format!("{}{}", self.base, naming::pascal(last));
        self.refs.insert(reference.to_owned(), name.clone());
        self.in_progress.insert(reference.to_owned());
        let generated = self.type_for(target, &name, &format!("{reference}/"));
        self.in_progress.remove(reference);
        generated
    }

    fn struct_type(
        &mut self,
        schema: &Json,
        name: &str,
        path: &str,
    ) -> Result<TokenStream, EmitError> {
        let owner = format!("{} at {path}", self.subject);
        self.take_name(name, &owner)?;
        let ident = format_ident!("{name}");
        let required: BTreeSet<&str> = schema
            .get("required")
            .and_then(Json::as_array)
            .map(|r| r.iter().filter_map(Json::as_str).collect())
            .unwrap_or_default();
        let mut fields = Vec::new();
        let mut field_names = Names::default();
        if let Some(Json::Object(properties)) = schema.get("properties") {
            for (property, property_schema) in properties {
                let field_name = naming::snake(property);
                field_names
                    .take(&field_name, property)
                    .map_err(|other| self.error(format!("{path}: properties `{property}` and `{other}` both become the field `{field_name}`")))?;
                let field_ident = naming::ident(&field_name);
                let type_name = format!("{name}{}", naming::pascal(property));
                let (ty, nullable) = self.mapped(
                    property_schema,
                    &type_name,
                    &format!("{path}properties/{property}/"),
                )?;
                let doc = description(property_schema)
                    .unwrap_or_else(|| format!("The `{property}` property."));
                let rename = (field_name != *property).then(|| quote!(rename = #property,));
                let field = if required.contains(property.as_str()) {
                    let serde = rename.map(|rename| quote!(#[serde(#rename)]));
                    quote! {
                        #[doc = #doc]
                        #serde
                        pub #field_ident: #ty,
                    }
                } else {
                    // Absent and `null` both read as `None`; `None` is written as absent.
                    let ty = if nullable {
                        ty
                    } else {
                        quote!(::std::option::Option<#ty>)
                    };
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
        self.items.push(quote! {
            #[doc = #doc]
            #[derive(Debug, Clone, PartialEq, ::serde::Serialize, ::serde::Deserialize, ::schemars::JsonSchema)]
            pub struct #ident {
                #(#fields)*
            }
        });
        Ok(quote!(#ident))
    }

    fn string_enum(
        &mut self,
        schema: &Json,
        values: &[Json],
        name: &str,
        path: &str,
    ) -> Result<TokenStream, EmitError> {
        let owner = format!("{} at {path}", self.subject);
        self.take_name(name, &owner)?;
        let ident = format_ident!("{name}");
        let mut variants = Vec::new();
        let mut variant_names = Names::default();
        for value in values.iter().filter(|value| !value.is_null()) {
            let Some(text) = value.as_str() else {
                return Err(self.error(format!(
                    "{path}: only string enums and consts have a Rust mapping, found {value}"
                )));
            };
            let variant = naming::pascal(text);
            variant_names.take(&variant, text).map_err(|other| {
                self.error(format!(
                    "{path}: the values `{text}` and `{other}` both become the variant `{variant}`"
                ))
            })?;
            let variant_ident = format_ident!("{variant}");
            let doc = format!("`{text}`");
            variants.push(quote! {
                #[doc = #doc]
                #[serde(rename = #text)]
                #variant_ident,
            });
        }
        let doc = description(schema)
            .unwrap_or_else(|| format!("Values of {path} in the {} payload.", self.subject));
        self.items.push(quote! {
            #[doc = #doc]
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ::serde::Serialize, ::serde::Deserialize, ::schemars::JsonSchema)]
            pub enum #ident {
                #(#variants)*
            }
        });
        Ok(quote!(#ident))
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
