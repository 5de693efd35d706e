//! `#[derive(Event)]`: the struct must match a registered event type and version.

use std::collections::BTreeSet;

use evc_codegen::{ContractSet, facts};
use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput, Fields, LitStr};

use crate::types;
use crate::{attr, contracts};

/// Checks and expands one derive input; errors come back as `compile_error!`s beside a stub
/// implementation, so one mistake gives one message.
pub(crate) fn expand(input: &DeriveInput) -> TokenStream {
    let mut errors = Vec::new();
    let attr = attr::parse(&input.attrs, &mut errors);
    // A malformed attribute already has its message; a "missing key" on top would repeat it.
    let attribute_ok = errors.is_empty();
    let dir = contracts::directory(attr.contracts.as_ref().map(LitStr::value).as_deref());
    let loaded = contracts::load(&dir);
    let tracking = contracts::tracking(&dir, loaded.as_ref().as_ref().ok());

    let event = require(&attr.event, attr::EVENT, input, attribute_ok, &mut errors);
    let version = require(
        &attr.version,
        attr::VERSION,
        input,
        attribute_ok,
        &mut errors,
    );
    let mut order_key = Vec::new();
    if let (Some(event), Some(version)) = (event, version) {
        match loaded.as_ref() {
            Ok(set) => {
                check(input, set, event, version, &mut errors);
                if let Some(event_type) = set.events.get(&event.value()) {
                    order_key = order_key_fields(input, &event_type.order_key, &mut errors);
                }
            }
            Err(message) => errors.push(syn::Error::new_spanned(event, message)),
        }
    }
    let order_key_body = if order_key.is_empty() {
        quote!(::std::option::Option::None)
    } else {
        quote! {
            let parts: ::std::vec::Vec<::std::string::String> = ::std::vec![
                #(::evc::order_key_part(&self.#order_key)),*
            ];
            ::std::option::Option::Some(parts.join("/"))
        }
    };

    let ident = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    let event_text = event.map(LitStr::value).unwrap_or_default();
    let version_text = version.map(LitStr::value).unwrap_or_default();
    let compile_errors = errors.iter().map(syn::Error::to_compile_error);
    quote! {
        #(#compile_errors)*
        #tracking
        impl #impl_generics ::evc::RegisteredEvent for #ident #type_generics #where_clause {
            const EVENT_TYPE: &'static str = #event_text;
            const VERSION: &'static str = #version_text;

            fn order_key(&self) -> ::std::option::Option<::std::string::String> {
                #order_key_body
            }
        }
    }
}

/// The struct fields that hold the contract's `order_key` properties, in the contract's order.
/// Validation makes every order key a required property, so [`check`] has already reported a
/// missing one (as the order key); the error here only stands when nothing else was reported.
fn order_key_fields(
    input: &DeriveInput,
    properties: &[String],
    errors: &mut Vec<syn::Error>,
) -> Vec<syn::Ident> {
    let Data::Struct(data) = &input.data else {
        return Vec::new();
    };
    let Fields::Named(fields) = &data.fields else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for property in properties {
        let field = fields.named.iter().find_map(|field| {
            let ident = field.ident.as_ref()?;
            (property_name(field, ident) == *property).then(|| ident.clone())
        });
        match field {
            Some(ident) => found.push(ident),
            None if errors.is_empty() => errors.push(syn::Error::new_spanned(
                &input.ident,
                format!(
                    "the contract orders these events by `{property}` (order_key); add the field \
                     to `{}`",
                    input.ident
                ),
            )),
            None => {}
        }
    }
    found
}

/// The property a field stands for: its serde `rename`, else its name (raw prefix dropped).
fn property_name(field: &syn::Field, ident: &syn::Ident) -> String {
    serde_rename(field).unwrap_or_else(|| ident.to_string().trim_start_matches("r#").to_owned())
}

fn require<'a>(
    value: &'a Option<LitStr>,
    key: &str,
    input: &DeriveInput,
    report: bool,
    errors: &mut Vec<syn::Error>,
) -> Option<&'a LitStr> {
    if value.is_none() && report {
        errors.push(syn::Error::new_spanned(
            &input.ident,
            format!("`#[derive(Event)]` needs `#[evc({key} = \"...\")]`"),
        ));
    }
    value.as_ref()
}

fn check(
    input: &DeriveInput,
    set: &ContractSet,
    event: &LitStr,
    version: &LitStr,
    errors: &mut Vec<syn::Error>,
) {
    let name = event.value();
    let Some(event_type) = set.events.get(&name) else {
        let hint = evc_codegen::names::suggestion(&name, set.events.keys().map(String::as_str));
        errors.push(syn::Error::new_spanned(
            event,
            format!("`{name}` is not a registered event type; {hint}"),
        ));
        return;
    };
    let wanted = version.value();
    let Some(registered) = event_type
        .versions
        .iter()
        .find(|v| v.version.to_string() == wanted)
    else {
        let versions: Vec<String> = event_type
            .versions
            .iter()
            .map(|v| v.version.to_string())
            .collect();
        errors.push(syn::Error::new_spanned(
            version,
            format!(
                "`{name}` has no version `{wanted}`; registered versions: {}",
                versions.join(", ")
            ),
        ));
        return;
    };
    let subject = format!("{name} {wanted}");
    let Data::Struct(data) = &input.data else {
        errors.push(syn::Error::new_spanned(
            &input.ident,
            "`#[derive(Event)]` supports structs with named fields",
        ));
        return;
    };
    let Fields::Named(fields) = &data.fields else {
        errors.push(syn::Error::new_spanned(
            &input.ident,
            "`#[derive(Event)]` supports structs with named fields",
        ));
        return;
    };
    let schema = &registered.schema;
    let required = facts::required(schema);
    let mut seen = BTreeSet::new();
    for field in &fields.named {
        let Some(ident) = &field.ident else { continue };
        let property = property_name(field, ident);
        let Some(property_schema) = facts::property(schema, &property) else {
            let hint = evc_codegen::names::suggestion(&property, facts::properties(schema));
            errors.push(syn::Error::new_spanned(
                ident,
                format!("`{property}` is not a property of {subject}; {hint}"),
            ));
            continue;
        };
        seen.insert(property.clone());
        check_type(
            field,
            &property,
            facts::property_types(property_schema, schema).as_ref(),
            required.contains(&property.as_str()),
            &subject,
            errors,
        );
    }
    let missing: Vec<String> = required
        .iter()
        .filter(|p| !seen.contains(**p))
        .map(|p| {
            if event_type.order_key.iter().any(|key| key == p) {
                format!("`{p}` (its order key)")
            } else {
                format!("`{p}`")
            }
        })
        .collect();
    if !missing.is_empty() {
        errors.push(syn::Error::new_spanned(
            &input.ident,
            format!(
                "{subject} requires {}; add {} to `{}`",
                missing.join(", "),
                if missing.len() == 1 {
                    "the field"
                } else {
                    "the fields"
                },
                input.ident
            ),
        ));
    }
}

fn check_type(
    field: &syn::Field,
    property: &str,
    types: Option<&facts::PropertyTypes>,
    required: bool,
    subject: &str,
    errors: &mut Vec<syn::Error>,
) {
    let Some(types) = types else { return };
    let field_type = types::classify(&field.ty);
    if let Some(kind) = field_type.kind
        && !types.types.iter().any(|t| facts::agrees(kind, t))
    {
        errors.push(syn::Error::new_spanned(
            field_type.inner,
            format!(
                "`{property}` is {} in {subject}, but this type serializes as {}",
                types
                    .types
                    .iter()
                    .map(|t| with_article(t))
                    .collect::<Vec<_>>()
                    .join(" or "),
                with_article(kind.name())
            ),
        ));
    }
    let must_be_option = facts::must_be_optional(required, Some(types));
    if must_be_option && !field_type.optional {
        let why = if required {
            "may be null"
        } else {
            "is optional"
        };
        errors.push(syn::Error::new_spanned(
            &field.ty,
            format!("`{property}` {why} in {subject}; make the field an `Option<...>`"),
        ));
    } else if !must_be_option && field_type.optional {
        errors.push(syn::Error::new_spanned(
            &field.ty,
            format!("`{property}` is required and not nullable in {subject}; the field cannot be an `Option`"),
        ));
    }
}

fn with_article(json_type: &str) -> String {
    match json_type {
        "integer" | "object" | "array" => format!("an {json_type}"),
        other => format!("a {other}"),
    }
}

/// The name serde uses for a field: its `#[serde(rename = "...")]`, if any.
fn serde_rename(field: &syn::Field) -> Option<String> {
    let mut rename = None;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                let value: LitStr = meta.value()?.parse()?;
                rename = Some(value.value());
            } else if meta.input.peek(syn::Token![=]) {
                let _: syn::Expr = meta.value()?.parse()?;
            }
            Ok(())
        });
    }
    rename
}
