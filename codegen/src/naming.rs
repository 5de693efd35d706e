//! Every name generated code uses, derived from contract names in one place.
//!
//! `iu.born` major 1 becomes `IuBornV1`; its producer `emit_iu_born_v1`; consumer
//! `worker.dot.iu_axis` becomes the trait `WorkerDotIuAxis` and the field `worker_dot_iu_axis`.
//! Nothing generated is anonymous, and [`Names`] refuses two things that map to one name.

use std::collections::BTreeMap;

use proc_macro2::Ident;
use quote::format_ident;

/// `iu.born` → `IuBorn`; `dot.command_started` → `DotCommandStarted`; `1x` → `V1x`.
pub fn pascal(text: &str) -> String {
    let mut out = String::new();
    for part in text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| !p.is_empty())
    {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'V');
    }
    out
}

/// `iu.born` → `iu_born`; `partnerApiKey` → `partner_api_key`; `1st` → `n_1st`.
pub fn snake(text: &str) -> String {
    let mut out = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            if c.is_ascii_uppercase() && previous_lower {
                out.push('_');
            }
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
            out.push(c.to_ascii_lowercase());
        } else {
            if !out.ends_with('_') && !out.is_empty() {
                out.push('_');
            }
            previous_lower = false;
        }
    }
    let out = out.trim_end_matches('_').to_owned();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        format!("n_{out}")
    } else {
        out
    }
}

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "dyn", "else", "enum", "extern", "false",
    "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "static", "struct", "trait", "true", "type", "unsafe", "use", "where",
    "while", "abstract", "become", "box", "do", "final", "macro", "override", "priv", "try",
    "typeof", "unsized", "virtual", "yield",
];

/// An identifier for `name`, raw (`r#type`) when it is a keyword; `self`-like words, which
/// cannot be raw, get a trailing underscore.
pub fn ident(name: &str) -> Ident {
    match name {
        "self" | "Self" | "super" | "crate" | "_" => format_ident!("{name}_"),
        keyword if KEYWORDS.contains(&keyword) => format_ident!("r#{keyword}"),
        _ => format_ident!("{name}"),
    }
}

/// The payload type of an event type's major version.
pub fn payload_type(event: &str, major: u64) -> String {
    format!("{}V{major}", pascal(event))
}

/// The enum of all majors of an event type.
pub fn versions_enum(event: &str) -> String {
    pascal(event)
}

/// The producer function of an event type's major version.
pub fn producer_fn(event: &str, major: u64) -> String {
    format!("emit_{}_v{major}", snake(event))
}

/// The handler method for an event type in a consumer trait.
pub fn handler_method(event: &str) -> String {
    format!("on_{}", snake(event))
}

/// The trait of a consumer.
pub fn consumer_trait(consumer: &str) -> String {
    pascal(consumer)
}

/// The `Handlers` field of a consumer.
pub fn consumer_field(consumer: &str) -> String {
    snake(consumer)
}

/// Names taken in one namespace, with what took them, so a second taker is refused.
#[derive(Debug, Default)]
pub struct Names {
    taken: BTreeMap<String, String>,
}

impl Names {
    /// Takes `name` for `owner`.
    ///
    /// # Errors
    /// The owner that already holds the name.
    pub fn take(&mut self, name: &str, owner: &str) -> Result<(), String> {
        match self.taken.get(name) {
            Some(existing) if existing != owner => Err(existing.clone()),
            _ => {
                self.taken.insert(name.to_owned(), owner.to_owned());
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_names_become_rust_names() {
        assert_eq!(payload_type("iu.born", 1), "IuBornV1");
        assert_eq!(pascal("dot.command_started"), "DotCommandStarted");
        assert_eq!(pascal("depends_on"), "DependsOn");
        assert_eq!(pascal("1x"), "V1x");
        assert_eq!(
            producer_fn("iu.split_proposed", 2),
            "emit_iu_split_proposed_v2"
        );
        assert_eq!(snake("partnerApiKey"), "partner_api_key");
        assert_eq!(snake("a-b c"), "a_b_c");
        assert_eq!(snake("1st"), "n_1st");
        assert_eq!(consumer_trait("worker.dot.iu_axis"), "WorkerDotIuAxis");
        assert_eq!(ident("type").to_string(), "r#type");
        assert_eq!(ident("self").to_string(), "self_");
    }

    #[test]
    fn names_refuse_a_second_owner() {
        let mut names = Names::default();
        assert!(names.take("IuBornV1", "iu.born 1").is_ok());
        assert!(names.take("IuBornV1", "iu.born 1").is_ok());
        assert_eq!(
            names.take("IuBornV1", "iu_born 1"),
            Err("iu.born 1".to_owned())
        );
    }
}
