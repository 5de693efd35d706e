//! Objects: structs with a constructor and setters, maps for open objects without properties,
//! the flattened map of unknown keys of an open struct, and `allOf` merged into one struct.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use serde_json::{Map, Value as Json};

use super::{At, Child, TypeGen, derive_crates, derives, optional_if, refs, shape, type_doc};
use crate::emit::EmitError;
use crate::naming::{self, Names};

/// Field names tried, in order, for the map of keys an open object does not list: the first
/// that no property takes.
const EXTRA_FIELD_NAMES: &[&str] = &["extra", "extra_properties", "unlisted_properties"];

impl TypeGen<'_> {
    /// An object schema: a struct when it lists properties or is closed, else a map of its
    /// values.
    pub(super) fn object(
        &mut self,
        schema: &Json,
        name: &str,
        at: At<'_>,
    ) -> Result<TokenStream, EmitError> {
        let empty = Map::new();
        let map = schema.as_object().unwrap_or(&empty);
        let extra = if shape::is_closed(map) {
            None
        } else {
            Some(self.extra_value_type(map, name, at)?)
        };
        match extra {
            Some(value) if !shape::has_properties(map) => {
                Ok(quote!(::std::collections::BTreeMap<::std::string::String, #value>))
            }
            extra => self.struct_type(schema, name, at, extra),
        }
    }

    /// The type of the values of keys an open object does not list: the `additionalProperties`
    /// schema's type, or any JSON value.
    fn extra_value_type(
        &mut self,
        map: &Map<String, Json>,
        name: &str,
        at: At<'_>,
    ) -> Result<TokenStream, EmitError> {
        let runtime = self.runtime.clone();
        match map.get("additionalProperties") {
            Some(additional @ Json::Object(_)) if !map.contains_key("patternProperties") => {
                let child = Child::of(at, "additionalProperties", None);
                self.type_for(additional, &format!("{name}Value"), child.at())
            }
            _ => Ok(quote!(#runtime::serde_json::Value)),
        }
    }

    fn struct_type(
        &mut self,
        schema: &Json,
        name: &str,
        at: At<'_>,
        extra: Option<TokenStream>,
    ) -> Result<TokenStream, EmitError> {
        self.take_type_name(name, at);
        let ident = format_ident!("{name}");
        let required: BTreeSet<&str> = schema
            .get("required")
            .and_then(Json::as_array)
            .map(|r| r.iter().filter_map(Json::as_str).collect())
            .unwrap_or_default();
        let mut fields = Vec::new();
        let mut constructor = Constructor::default();
        let mut field_names = Names::new("field");
        let mut taken = BTreeSet::new();
        let mut field_of = BTreeMap::new();
        if let Some(Json::Object(properties)) = schema.get("properties") {
            for (property, property_schema) in properties {
                let field_name = naming::snake(property);
                let child = Child::of(at, "properties", Some(property));
                let taker = self.taker(format!("the property `{property}`"), &child.pointer);
                Self::take(&mut field_names, self.clashes, &field_name, taker);
                taken.insert(field_name.clone());
                field_of.insert(property.clone(), field_name.clone());
                let type_name = format!("{name}{}", naming::pascal(property));
                let (inner, nullable) = self.mapped(property_schema, &type_name, child.at())?;
                if !self.render {
                    continue;
                }
                let field_ident = naming::ident(&field_name);
                let doc = field_doc(property_schema, property);
                let rename = (field_name != *property).then(|| quote!(rename = #property,));
                let field = if required.contains(property.as_str()) {
                    let serde = rename.map(|rename| quote!(#[serde(#rename)]));
                    let ty = optional_if(nullable, inner);
                    constructor.required(&field_ident, &ty);
                    quote! {
                        #doc
                        #serde
                        pub #field_ident: #ty,
                    }
                } else {
                    constructor.optional(&field_name, &field_ident, property, &inner);
                    // Absent and `null` both read as `None`; `None` is written as absent.
                    let ty = quote!(::std::option::Option<#inner>);
                    quote! {
                        #doc
                        #[serde(#rename default, skip_serializing_if = "::std::option::Option::is_none")]
                        pub #field_ident: #ty,
                    }
                };
                fields.push(field);
            }
        }
        if let Some(value) = extra {
            let field_name = EXTRA_FIELD_NAMES
                .iter()
                .find(|candidate| !taken.contains(**candidate))
                .map_or_else(|| format!("{}_", EXTRA_FIELD_NAMES[0]), |n| (*n).to_owned());
            let taker = self.taker("the keys the object does not list".to_owned(), at.pointer);
            Self::take(&mut field_names, self.clashes, &field_name, taker);
            let field_ident = naming::ident(&field_name);
            let map = quote!(::std::collections::BTreeMap<::std::string::String, #value>);
            constructor.defaulted(&field_ident);
            fields.push(quote! {
                /// The keys the schema does not list, with their values: the object is open, so
                /// a payload read and written again keeps them.
                #[serde(flatten)]
                pub #field_ident: #map,
            });
        }
        self.struct_fields.insert(name.to_owned(), field_of);
        if !self.render {
            return Ok(quote!(#ident));
        }
        let doc = type_doc(schema, &format!("Part of the {} payload.", self.subject));
        let constructor = constructor.tokens(name);
        let derives = derives(&self.runtime);
        let derive_crates = derive_crates(&self.runtime);
        // `non_exhaustive`: outside the generated crate a struct literal does not compile, so
        // the constructor and setters are the one way to build a payload, and a new optional
        // property in a minor version breaks no caller (docs/codegen.md).
        self.items.push(quote! {
            #doc
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

    /// `allOf`: one struct of every part's properties when the parts are objects; otherwise the
    /// type of the schema beside `allOf`, or of the first part with a shape (the other parts
    /// only constrain).
    pub(super) fn all_of(
        &mut self,
        schema: &Json,
        parts: &[Json],
        name: &str,
        at: At<'_>,
    ) -> Result<(TokenStream, bool), EmitError> {
        let map = schema.as_object().cloned().unwrap_or_default();
        if shape::all_of_is_object(Some(self.root), &map, parts) {
            let merged = self.merged_object(schema)?;
            return Ok((self.object(&merged, name, at.built())?, false));
        }
        let mut holder = map.clone();
        holder.remove("allOf");
        let holder = Json::Object(holder);
        if shape::has_shape(&holder) {
            return self.mapped(&holder, name, at.built());
        }
        let (index, part) = parts
            .iter()
            .enumerate()
            .find(|(_, part)| shape::has_shape(part))
            .ok_or_else(|| self.error(format!("{}: `allOf` has no part with a type", at.path)))?;
        let child = Child::of(at, "allOf", Some(&index.to_string()));
        self.mapped(part, name, child.at())
    }

    /// One object schema with the properties, `required`, closedness and value schema of
    /// `schema` and of every `allOf` part in it (nested, and through `$ref`).
    pub(super) fn merged_object(&self, schema: &Json) -> Result<Json, EmitError> {
        let mut parts = Vec::new();
        self.object_parts(schema, &mut BTreeSet::new(), &mut parts)?;
        let mut properties = Map::new();
        let mut required: Vec<Json> = Vec::new();
        let mut closed = false;
        let mut additional = None;
        let mut merged = Map::new();
        merged.insert("type".to_owned(), Json::from("object"));
        for part in &parts {
            if let Some(Json::Object(part_properties)) = part.get("properties") {
                for (property, property_schema) in part_properties {
                    match properties.get_mut(property) {
                        None => {
                            properties.insert(property.clone(), property_schema.clone());
                        }
                        Some(existing) if existing == property_schema => {}
                        // Both schemas apply: map them as an `allOf` of the two.
                        Some(existing) => {
                            *existing = serde_json::json!({
                                "allOf": [existing.clone(), property_schema.clone()]
                            });
                        }
                    }
                }
            }
            for name in part
                .get("required")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                if !required.contains(name) {
                    required.push(name.clone());
                }
            }
            closed |= shape::is_closed(part);
            if let Some(value @ Json::Object(_)) = part.get("additionalProperties") {
                additional.get_or_insert_with(|| value.clone());
            }
            for keyword in ["description", "title"] {
                if let Some(text) = part.get(keyword)
                    && !merged.contains_key(keyword)
                {
                    merged.insert(keyword.to_owned(), text.clone());
                }
            }
        }
        merged.insert("properties".to_owned(), Json::Object(properties));
        merged.insert("required".to_owned(), Json::Array(required));
        if closed {
            merged.insert("additionalProperties".to_owned(), Json::Bool(false));
        } else if let Some(additional) = additional {
            merged.insert("additionalProperties".to_owned(), additional);
        }
        Ok(Json::Object(merged))
    }

    /// `schema` without `allOf`, then its `allOf` parts the same way, following `$ref`s.
    fn object_parts(
        &self,
        schema: &Json,
        followed: &mut BTreeSet<String>,
        parts: &mut Vec<Map<String, Json>>,
    ) -> Result<(), EmitError> {
        let Json::Object(map) = schema else {
            return Ok(());
        };
        if let Some(reference) = map.get("$ref").and_then(Json::as_str) {
            let (pointer, target) = refs::resolve_alias(self.root, reference)
                .map_err(|problem| self.error(format!("`$ref: {reference}` {problem}")))?;
            if !followed.insert(pointer.clone()) {
                return Err(self.error(format!("`allOf` includes #{pointer} in itself")));
            }
            return self.object_parts(target, followed, parts);
        }
        let mut own = map.clone();
        let nested = own.remove("allOf");
        parts.push(own);
        if let Some(Json::Array(nested)) = nested {
            for part in &nested {
                self.object_parts(part, followed, parts)?;
            }
        }
        Ok(())
    }
}

/// The doc attributes of a field: the property's `description` (or a default), then a line
/// naming the keywords checked at run time only.
fn field_doc(schema: &Json, property: &str) -> TokenStream {
    type_doc(schema, &format!("The `{property}` property."))
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

    /// A field that starts empty (the map of unlisted keys).
    fn defaulted(&mut self, field: &proc_macro2::Ident) {
        self.initializers
            .push(quote!(#field: ::std::default::Default::default()));
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
