//! `oneOf`/`anyOf` and type unions (`type: [string, integer]`) as Rust enums. Branches that
//! are objects sharing a required property whose schema is a string `const` make an internally
//! tagged enum (`#[serde(tag = "...")]`); any other union is untagged, tried in schema order
//! (numbers after every other branch, so an integer stays an integer). A branch that only
//! allows `null` makes the type an `Option` instead of a variant.

use std::collections::BTreeSet;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use serde_json::{Map, Value as Json};

use super::{At, Child, TypeGen, derive_crates, derives, refs, shape, type_doc, unique};
use crate::emit::EmitError;
use crate::naming;

/// One branch of a union: the schema to map, where it is, and its variant name.
struct Branch {
    schema: Json,
    child: Child,
    variant: String,
}

impl TypeGen<'_> {
    /// `oneOf`/`anyOf` (`keyword`) of `branches`, held by `schema`.
    pub(super) fn union(
        &mut self,
        schema: &Json,
        keyword: &str,
        branches: &[Json],
        name: &str,
        at: At<'_>,
    ) -> Result<(TokenStream, bool), EmitError> {
        let holder = holder_object(schema, keyword);
        let nullable = branches.iter().any(shape::is_null_only);
        let mut taken = BTreeSet::new();
        let mut kept = Vec::new();
        for (index, branch) in branches.iter().enumerate() {
            if shape::is_null_only(branch) {
                continue;
            }
            let mut child = Child::of(at, keyword, Some(&index.to_string()));
            // The properties beside `oneOf` belong to every branch.
            let schema = match &holder {
                Some(holder) if self.is_object_branch(branch) => {
                    child.in_document = false;
                    serde_json::json!({"allOf": [holder, branch]})
                }
                _ => branch.clone(),
            };
            let variant = unique(&mut taken, self.variant_name(branch, index));
            kept.push(Branch {
                schema,
                child,
                variant,
            });
        }
        if let [single] = kept.as_slice() {
            let (ty, inner_nullable) = self.mapped(&single.schema, name, single.child.at())?;
            return Ok((ty, nullable || inner_nullable));
        }
        let ty = match self.discriminator(&kept) {
            Some((tag, values)) => self.tagged(schema, &tag, &values, &kept, name, at)?,
            None => self.untagged(schema, kept, name, at)?,
        };
        Ok((ty, nullable))
    }

    /// `type: [a, b, ...]`: an untagged enum with a variant per type, each the schema read as
    /// that one type.
    pub(super) fn type_union(
        &mut self,
        schema: &Json,
        types: &[&str],
        name: &str,
        at: At<'_>,
    ) -> Result<TokenStream, EmitError> {
        let map = schema.as_object().cloned().unwrap_or_default();
        let mut taken = BTreeSet::new();
        let branches = types
            .iter()
            .map(|kind| {
                let mut one = map.clone();
                one.insert("type".to_owned(), Json::from(*kind));
                let mut child = Child::of(at, "type", None);
                child.in_document = false;
                Branch {
                    schema: Json::Object(one),
                    child,
                    variant: unique(&mut taken, naming::pascal(kind)),
                }
            })
            .collect();
        self.untagged(schema, branches, name, at)
    }

    fn untagged(
        &mut self,
        schema: &Json,
        mut branches: Vec<Branch>,
        name: &str,
        at: At<'_>,
    ) -> Result<TokenStream, EmitError> {
        self.take_type_name(name, at);
        // serde tries variants in order: a float branch first would read `1` as `1.0`, and an
        // untyped branch would take everything.
        branches.sort_by_key(|branch| untagged_rank(self.root, &branch.schema));
        let mut variants = Vec::new();
        for branch in &branches {
            let type_name = format!("{name}{}", branch.variant);
            let ty = self.type_for(&branch.schema, &type_name, branch.child.at())?;
            if !self.render {
                continue;
            }
            let ident = format_ident!("{}", branch.variant);
            let doc = type_doc(&branch.schema, &format!("A `{}` value.", branch.variant));
            variants.push(quote! {
                #doc
                #ident(#ty),
            });
        }
        let ident = format_ident!("{name}");
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
            #[derive(Debug, Clone, PartialEq, #derives)]
            #derive_crates
            #[serde(untagged)]
            pub enum #ident {
                #(#variants)*
            }
        });
        Ok(quote!(#ident))
    }

    /// An internally tagged enum: each variant the branch's object without the tag property,
    /// a unit variant when nothing else is left of a closed branch.
    fn tagged(
        &mut self,
        schema: &Json,
        tag: &str,
        values: &[String],
        branches: &[Branch],
        name: &str,
        at: At<'_>,
    ) -> Result<TokenStream, EmitError> {
        self.take_type_name(name, at);
        let mut variants = Vec::new();
        let mut taken = BTreeSet::new();
        for (branch, value) in branches.iter().zip(values) {
            let variant = unique(&mut taken, naming::pascal(value));
            let object = self.without_tag(&branch.schema, tag)?;
            let map = object.as_object().cloned().unwrap_or_default();
            let unit = !shape::has_properties(&map) && shape::is_closed(&map);
            let ty = if unit {
                None
            } else {
                let type_name = format!("{name}{variant}");
                Some(self.object(&object, &type_name, branch.child.at().built())?)
            };
            if !self.render {
                continue;
            }
            let ident = format_ident!("{variant}");
            let doc = type_doc(&branch.schema, &format!("`{tag}: {value}`."));
            let fields = ty.map(|ty| quote!((#ty)));
            variants.push(quote! {
                #doc
                #[serde(rename = #value)]
                #ident #fields,
            });
        }
        let ident = format_ident!("{name}");
        if !self.render {
            return Ok(quote!(#ident));
        }
        let doc = type_doc(
            schema,
            &format!(
                "Values of {} in the {} payload, told apart by `{tag}`.",
                at.path, self.subject
            ),
        );
        let derives = derives(&self.runtime);
        let derive_crates = derive_crates(&self.runtime);
        self.items.push(quote! {
            #doc
            #[derive(Debug, Clone, PartialEq, #derives)]
            #derive_crates
            #[serde(tag = #tag)]
            pub enum #ident {
                #(#variants)*
            }
        });
        Ok(quote!(#ident))
    }

    /// The branch as one object schema (`$ref` and `allOf` resolved) without the tag property.
    fn without_tag(&self, branch: &Json, tag: &str) -> Result<Json, EmitError> {
        let mut object = self.as_object(branch)?;
        if let Some(Json::Object(properties)) = object.get_mut("properties") {
            properties.shift_remove(tag);
        }
        if let Some(Json::Array(required)) = object.get_mut("required") {
            required.retain(|name| name != tag);
        }
        Ok(Json::Object(object))
    }

    /// `schema` as one object schema: a `$ref` followed, an `allOf` merged.
    fn as_object(&self, schema: &Json) -> Result<Map<String, Json>, EmitError> {
        let merged = self.merged_object(&serde_json::json!({"allOf": [schema]}))?;
        Ok(merged.as_object().cloned().unwrap_or_default())
    }

    /// Whether a branch is an object (inline, through `$ref` or `allOf`).
    fn is_object_branch(&self, branch: &Json) -> bool {
        let Json::Object(map) = branch else {
            return false;
        };
        shape::all_of_is_object(Some(self.root), &Map::new(), std::slice::from_ref(branch))
            && (map.contains_key("$ref") || shape::is_object(map) || map.contains_key("allOf"))
    }

    /// The property that tells the branches apart, and each branch's value of it: every
    /// branch is an object that requires it with a distinct string `const`.
    fn discriminator(&self, branches: &[Branch]) -> Option<(String, Vec<String>)> {
        let objects: Vec<Map<String, Json>> = branches
            .iter()
            .map(|branch| {
                self.is_object_branch(&branch.schema)
                    .then(|| self.as_object(&branch.schema).ok())
                    .flatten()
            })
            .collect::<Option<_>>()?;
        let first = objects.first()?;
        let candidates = first
            .get("properties")
            .and_then(Json::as_object)
            .map(|p| p.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        candidates.into_iter().find_map(|tag| {
            let values: Vec<String> = objects
                .iter()
                .map(|object| self.tag_value(object, &tag))
                .collect::<Option<_>>()?;
            let distinct: BTreeSet<&String> = values.iter().collect();
            (distinct.len() == values.len()).then_some((tag, values))
        })
    }

    /// The string `const` (or one-value `enum`) of required property `tag` of `object`.
    fn tag_value(&self, object: &Map<String, Json>, tag: &str) -> Option<String> {
        let required = object
            .get("required")
            .and_then(Json::as_array)
            .is_some_and(|r| r.iter().any(|name| name == tag));
        if !required {
            return None;
        }
        self.string_const(object.get("properties")?.get(tag)?)
    }

    /// The one string a property schema allows (`const`, one-value `enum`), through `$ref`
    /// and `allOf` parts.
    fn string_const(&self, schema: &Json) -> Option<String> {
        let mut schema = schema;
        if let Some(reference) = schema.get("$ref").and_then(Json::as_str) {
            schema = refs::resolve_alias(self.root, reference).ok()?.1;
        }
        let map = schema.as_object()?;
        if let Some(values) = shape::enum_values(map) {
            return match values.as_slice() {
                [Json::String(value)] => Some(value.clone()),
                _ => None,
            };
        }
        map.get("allOf")?
            .as_array()?
            .iter()
            .find_map(|part| self.string_const(part))
    }

    /// A branch's variant name: its `const` value, `title`, `$ref` target, or type.
    fn variant_name(&self, branch: &Json, index: usize) -> String {
        let Json::Object(map) = branch else {
            return format!("Variant{index}");
        };
        if let Some(Json::String(value)) = map.get("const") {
            return naming::pascal(value);
        }
        if let Some(Json::String(title)) = map.get("title") {
            return naming::pascal(title);
        }
        if let Some(reference) = map.get("$ref").and_then(Json::as_str) {
            let pointer = refs::resolve_alias(self.root, reference)
                .map(|(pointer, _)| pointer)
                .unwrap_or_default();
            if let Some(last) = crate::yaml::pointer_segments(&pointer).last() {
                return naming::pascal(&last);
            }
        }
        match shape::types(map).0.as_slice() {
            [single] => naming::pascal(single),
            _ if shape::is_object(map) => "Object".to_owned(),
            _ => format!("Variant{index}"),
        }
    }
}

/// The object keywords beside `oneOf`/`anyOf` (`properties`, `required`,
/// `unevaluatedProperties: false`...), which apply to every branch; `None` when there are no
/// properties there and nothing closes the branches.
fn holder_object(schema: &Json, keyword: &str) -> Option<Json> {
    let map = schema.as_object()?;
    let closes = map.get("unevaluatedProperties") == Some(&Json::Bool(false));
    if !shape::has_properties(map) && !closes {
        return None;
    }
    let mut holder = map.clone();
    for other in ["oneOf", "anyOf", keyword, "description", "title"] {
        holder.remove(other);
    }
    Some(Json::Object(holder))
}

/// The order untagged variants are tried in: typed branches, then numbers (an integer branch
/// must see `1` before a float one), then branches that take any value.
fn untagged_rank(root: &Json, schema: &Json) -> u8 {
    let resolved = match schema.get("$ref").and_then(Json::as_str) {
        Some(reference) => refs::resolve_alias(root, reference)
            .map(|(_, target)| target)
            .unwrap_or(schema),
        None => schema,
    };
    let Json::Object(map) = resolved else {
        return 2;
    };
    if !shape::has_shape(resolved) {
        return 2;
    }
    match shape::types(map).0.as_slice() {
        ["number"] => 1,
        _ => 0,
    }
}
