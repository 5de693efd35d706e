//! Every name generated code uses, derived from contract names in one place.
//!
//! `iu.born` major 1 becomes `IuBornV1`; its producer `emit_iu_born_v1`; consumer
//! `worker.dot.iu_axis` becomes the trait `WorkerDotIuAxis` and the field `worker_dot_iu_axis`.
//! Nothing generated is anonymous, and [`Names`] refuses two things that map to one name.

use std::collections::BTreeMap;

use proc_macro2::Ident;
use quote::format_ident;

/// `iu.born` → `IuBorn`; `dot.command_started` → `DotCommandStarted`; `1x` → `V1x`; text without
/// ASCII letters or digits → `V`; `self` → `Self_` (`Self` is a keyword that cannot be raw).
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
    if out == "Self" {
        out.push('_');
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

/// The generated adapter that serves a consumer with an implementation of its trait
/// (`WorkerNotificationIuConsumer`).
pub fn consumer_adapter(consumer: &str) -> String {
    // `pascal` keeps `Self` from being a type name with a trailing `_`; with a suffix the
    // name is no keyword, and the underscore would break the camel case.
    format!("{}Consumer", pascal(consumer).trim_end_matches('_'))
}

/// The `Handlers` field of a consumer.
pub fn consumer_field(consumer: &str) -> String {
    snake(consumer)
}

/// What takes a generated name: a description for messages and the contract place it comes from
/// (a file of the contract directory and a JSON pointer in it), for diagnostics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taker {
    /// What it is (`iu.born 1.0.0 at /properties/state/`).
    pub what: String,
    /// The contract file (`events/iu.born.yaml`).
    pub file: String,
    /// The JSON pointer in the file (`/versions/0/schema/properties/state`).
    pub pointer: String,
}

impl Taker {
    /// A taker of a name.
    pub fn new(
        what: impl Into<String>,
        file: impl Into<String>,
        pointer: impl Into<String>,
    ) -> Self {
        Self {
            what: what.into(),
            file: file.into(),
            pointer: pointer.into(),
        }
    }
}

/// Two takers of one name in one scope of the generated code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clash {
    /// The Rust name both would get.
    pub name: String,
    /// What kind of item the name is (`type`, `field`, `variant`, ...).
    pub kind: &'static str,
    /// The first taker.
    pub first: Taker,
    /// The second taker, refused.
    pub second: Taker,
}

impl std::fmt::Display for Clash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} and {} both become the {} `{}`",
            self.first.what, self.second.what, self.kind, self.name
        )
    }
}

/// Names taken in one scope of the generated code, with what took them, so a second taker is
/// refused.
#[derive(Debug)]
pub struct Names {
    kind: &'static str,
    taken: BTreeMap<String, Taker>,
}

impl Names {
    /// An empty scope whose names are of `kind` (`type`, `field`, ...), for messages.
    pub fn new(kind: &'static str) -> Self {
        Self {
            kind,
            taken: BTreeMap::new(),
        }
    }

    /// Takes `name` for `taker`; taking it again for the same `what` is allowed.
    ///
    /// # Errors
    /// The clash with the taker that already holds the name.
    pub fn take(&mut self, name: &str, taker: Taker) -> Result<(), Box<Clash>> {
        match self.taken.get(name) {
            Some(existing) if existing.what != taker.what => Err(Box::new(Clash {
                name: name.to_owned(),
                kind: self.kind,
                first: existing.clone(),
                second: taker,
            })),
            _ => {
                self.taken.insert(name.to_owned(), taker);
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
        let taker = |what: &str| Taker::new(what, "events/x.yaml", "/event");
        let mut names = Names::new("type");
        assert!(names.take("IuBornV1", taker("iu.born 1")).is_ok());
        assert!(names.take("IuBornV1", taker("iu.born 1")).is_ok());
        let clash = names
            .take("IuBornV1", taker("iu_born 1"))
            .expect_err("a second owner");
        assert_eq!(
            clash.to_string(),
            "iu.born 1 and iu_born 1 both become the type `IuBornV1`"
        );
    }

    #[test]
    fn self_never_becomes_a_type_or_variant_name() {
        assert_eq!(pascal("self"), "Self_");
        assert_eq!(pascal("Self"), "Self_");
        assert_eq!(pascal("SELF"), "SELF");
        assert_eq!(pascal(""), "V");
        assert_eq!(pascal("!?"), "V");
        assert_eq!(pascal("_"), "V");
    }
}
