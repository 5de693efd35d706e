//! `enum` and `const`: string values become a Rust enum with serde renames; any other values
//! (numbers, booleans, mixed, objects) an enum that converts through `serde_json::Value`, so
//! the exact JSON value of each variant is what is read and written.

use std::collections::BTreeSet;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use serde_json::Value as Json;

use super::{At, TypeGen, compact, derive_crates, derives, type_doc, unique};
use crate::emit::EmitError;
use crate::naming::{self, Names};

impl TypeGen<'_> {
    /// An enum of string values, one variant per distinct value.
    pub(super) fn string_enum(
        &mut self,
        schema: &Json,
        values: &[&Json],
        name: &str,
        at: At<'_>,
    ) -> Result<TokenStream, EmitError> {
        self.take_type_name(name, at);
        let ident = format_ident!("{name}");
        let mut variants = Vec::new();
        let mut variant_names = Names::new("variant");
        let mut seen = BTreeSet::new();
        let keyword = if schema.get("const").is_some() {
            "/const"
        } else {
            "/enum"
        };
        for (index, text) in values.iter().filter_map(|v| v.as_str()).enumerate() {
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
            if !self.render {
                continue;
            }
            let variant_ident = format_ident!("{variant}");
            let doc = format!("`{text}`");
            variants.push(quote! {
                #[doc = #doc]
                #[serde(rename = #text)]
                #variant_ident,
            });
        }
        if !self.render {
            return Ok(quote!(#ident));
        }
        let doc = type_doc(
            schema,
            &format!("Values of {} in the {} payload.", at.path, self.subject),
        );
        let derives = derives(&self.runtime);
        let derive_crates = derive_crates(&self.runtime);
        self.items.push(quote! {
            #doc
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, #derives)]
            #derive_crates
            pub enum #ident {
                #(#variants)*
            }
        });
        Ok(quote!(#ident))
    }

    /// An enum of any JSON values (not all strings): read from and written as a
    /// `serde_json::Value`, a value that equals one listed (`1` and `1.0` are different JSON
    /// texts and so different values here) is its variant.
    pub(super) fn value_enum(
        &mut self,
        schema: &Json,
        values: &[&Json],
        name: &str,
        at: At<'_>,
    ) -> Result<TokenStream, EmitError> {
        self.take_type_name(name, at);
        let ident = format_ident!("{name}");
        // Its variant names are made unique, so they never clash.
        if !self.render {
            return Ok(quote!(#ident));
        }
        let runtime = self.runtime.clone();
        let mut variants = Vec::new();
        let mut texts = Vec::new();
        let mut idents = Vec::new();
        let mut taken = BTreeSet::new();
        let mut seen = BTreeSet::new();
        for (index, value) in values.iter().enumerate() {
            let text = value.to_string();
            if !seen.insert(text.clone()) {
                continue;
            }
            let variant = unique(&mut taken, variant_name(value, index));
            let variant_ident = format_ident!("{variant}");
            let doc = format!("`{text}`");
            variants.push(quote! {
                #[doc = #doc]
                #variant_ident,
            });
            texts.push(text);
            idents.push(variant_ident);
        }
        let doc = type_doc(
            schema,
            &format!("Values of {} in the {} payload.", at.path, self.subject),
        );
        let derives = derives(&self.runtime);
        let derive_crates = derive_crates(&self.runtime);
        let value_path = format!("{}::serde_json::Value", compact(&runtime));
        let error = format!("{{}} is not a value of `{name}`");
        self.items.push(quote! {
            #doc
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, #derives)]
            #derive_crates
            #[serde(try_from = #value_path, into = #value_path)]
            pub enum #ident {
                #(#variants)*
            }

            impl #ident {
                /// Every variant with the JSON text of its value.
                const VALUES: &'static [(Self, &'static str)] = &[#((Self::#idents, #texts)),*];
            }

            impl ::std::convert::TryFrom<#runtime::serde_json::Value> for #ident {
                type Error = ::std::string::String;

                fn try_from(value: #runtime::serde_json::Value) -> ::std::result::Result<Self, Self::Error> {
                    Self::VALUES
                        .iter()
                        .find(|(_, text)| {
                            #runtime::serde_json::from_str::<#runtime::serde_json::Value>(text)
                                .is_ok_and(|known| known == value)
                        })
                        .map(|(variant, _)| *variant)
                        .ok_or_else(|| ::std::format!(#error, value))
                }
            }

            impl ::std::convert::From<#ident> for #runtime::serde_json::Value {
                fn from(variant: #ident) -> Self {
                    #ident::VALUES
                        .iter()
                        .find(|(known, _)| *known == variant)
                        .and_then(|(_, text)| #runtime::serde_json::from_str(text).ok())
                        .unwrap_or(#runtime::serde_json::Value::Null)
                }
            }
        });
        Ok(quote!(#ident))
    }
}

/// The variant name of one value: a string's PascalCase, `True`/`False`, a number spelled out
/// (`-1.5` → `Minus1Point5`), `Value<index>` for an array or object.
fn variant_name(value: &Json, index: usize) -> String {
    match value {
        Json::String(text) => naming::pascal(text),
        Json::Bool(true) => "True".to_owned(),
        Json::Bool(false) => "False".to_owned(),
        Json::Number(number) => {
            let spelled = number
                .to_string()
                .replace('-', "minus_")
                .replace('.', "_point_")
                .replace('+', "_");
            naming::pascal(&spelled)
        }
        _ => format!("Value{index}"),
    }
}
