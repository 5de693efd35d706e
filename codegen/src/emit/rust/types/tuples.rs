//! `prefixItems`: a Rust tuple when the array has exactly as many items as `prefixItems` lists
//! (`items: false` or `maxItems` equal to the length, and `minItems` equal to it too). serde
//! reads and writes a tuple as an array of exactly its length, so any other array (shorter, or
//! with more items) is a `Vec`: of the items' type when every position has the same schema, of
//! `serde_json::Value` otherwise. Nothing is lost either way; the positions' schemas are then
//! checked at run time only.

use proc_macro2::TokenStream;
use quote::quote;
use serde_json::Value as Json;

use super::{At, Child, TypeGen};
use crate::emit::EmitError;

impl TypeGen<'_> {
    /// The Rust type of an array schema with `prefixItems`.
    pub(super) fn tuple(
        &mut self,
        schema: &Json,
        name: &str,
        at: At<'_>,
    ) -> Result<TokenStream, EmitError> {
        let runtime = self.runtime.clone();
        let prefix: &[Json] = schema
            .get("prefixItems")
            .and_then(Json::as_array)
            .map_or(&[], Vec::as_slice);
        let count = |keyword: &str| schema.get(keyword).and_then(Json::as_u64);
        let length = prefix.len() as u64;
        let rest = schema.get("items");
        let closed = rest == Some(&Json::Bool(false)) || count("maxItems") == Some(length);
        let full = count("minItems").is_some_and(|min| min >= length);
        if closed && full && !prefix.is_empty() {
            let mut elements = Vec::new();
            for (index, element) in prefix.iter().enumerate() {
                let child = Child::of(at, "prefixItems", Some(&index.to_string()));
                elements.push(self.type_for(element, &format!("{name}Item{index}"), child.at())?);
            }
            return Ok(quote!((#(#elements,)*)));
        }
        let mut positions: Vec<&Json> = prefix.iter().collect();
        if let Some(rest) = rest.filter(|rest| **rest != Json::Bool(false)) {
            positions.push(rest);
        }
        let item = match positions.split_first() {
            Some((first, others)) if others.iter().all(|other| other == first) => {
                let child = Child::of(at, "prefixItems", Some("0"));
                self.type_for(first, &format!("{name}Item"), child.at())?
            }
            _ => quote!(#runtime::serde_json::Value),
        };
        Ok(quote!(::std::vec::Vec<#item>))
    }
}
