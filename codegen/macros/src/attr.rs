//! The `#[evc(...)]` attribute of `#[derive(Event)]`: keys, each at most once.

use syn::spanned::Spanned;
use syn::{Attribute, LitStr};

/// Attribute keys `#[evc(...)]` accepts.
pub(crate) const EVENT: &str = "event";
pub(crate) const VERSION: &str = "version";
pub(crate) const CONTRACTS: &str = "contracts";
const KEYS: &[&str] = &[EVENT, VERSION, CONTRACTS];

/// The parsed `#[evc(...)]` attributes of one item.
#[derive(Default)]
pub(crate) struct EventAttr {
    pub(crate) event: Option<LitStr>,
    pub(crate) version: Option<LitStr>,
    pub(crate) contracts: Option<LitStr>,
}

/// Parses every `#[evc(...)]` attribute, collecting all errors.
pub(crate) fn parse(attrs: &[Attribute], errors: &mut Vec<syn::Error>) -> EventAttr {
    let mut parsed = EventAttr::default();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("evc")) {
        let result = attr.parse_nested_meta(|meta| {
            let Some(key) = meta.path.get_ident().map(ToString::to_string) else {
                return Err(meta.error("expected a key such as `event = \"...\"`"));
            };
            let slot = match key.as_str() {
                EVENT => &mut parsed.event,
                VERSION => &mut parsed.version,
                CONTRACTS => &mut parsed.contracts,
                _ => {
                    let hint = evc_codegen::names::suggestion(&key, KEYS.iter().copied());
                    return Err(meta.error(format!("unknown evc attribute key `{key}`; {hint}")));
                }
            };
            let value: LitStr = meta.value()?.parse()?;
            if slot.is_some() {
                errors.push(syn::Error::new(
                    meta.path.span(),
                    format!("duplicate evc attribute key `{key}`; give it once"),
                ));
            } else {
                *slot = Some(value);
            }
            Ok(())
        });
        if let Err(error) = result {
            errors.push(error);
        }
    }
    parsed
}
