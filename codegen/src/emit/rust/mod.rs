//! The generated Rust crate: payload types, versions enums, producer functions, consumer traits,
//! the `Handlers` value and the static `REGISTRY`.
//!
//! Built as tokens with `quote!`, parsed into a `syn::File` and printed with prettyplease.

pub mod facts;
mod types;

pub use types::{generates_struct, resolve_alias, resolve_reference};

use std::collections::BTreeSet;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::{Artifact, EmitError, GENERATED_NOTICE, Layout};
use crate::digest;
use crate::model::{
    ConsumerMode, ContractSet, EventStatus, EventType, EventVersion, HandlerKind, Ordering,
};
use crate::naming::{self, Clash, Names, Taker};

/// The file of generated items, beside the crate root that includes it.
pub const ITEMS_FILE: &str = "src/contracts.rs";

/// Renders `<crate_dir>/src/lib.rs` and `<crate_dir>/src/contracts.rs`.
///
/// The items live in `contracts.rs`, a module file without inner attributes, so a build script
/// user can also `include!` it; `lib.rs` is a short root that rustfmt leaves as it is and that
/// keeps rustfmt away from the items (`#[rustfmt::skip]`), so `cargo fmt` never makes the
/// checked-in output drift.
pub fn render(set: &ContractSet, layout: &Layout) -> Result<Vec<Artifact>, EmitError> {
    Ok(vec![
        Artifact {
            path: layout.crate_dir.join("src/lib.rs"),
            contents: crate_root(set),
        },
        Artifact {
            path: layout.crate_dir.join(ITEMS_FILE),
            contents: items_source(set, &layout.runtime_path)?,
        },
    ])
}

fn crate_root(set: &ContractSet) -> String {
    format!(
        "// {GENERATED_NOTICE}\n\
         \n\
         //! Typed events of the `{}` contracts: payload types, producer functions, consumer\n\
         //! traits and the static registry.\n\
         //!\n\
         //! {GENERATED_NOTICE}\n\
         #![deny(warnings, missing_docs)]\n\
         \n\
         #[rustfmt::skip]\n\
         #[allow(clippy::all)]\n\
         mod contracts;\n\
         \n\
         pub use contracts::*;\n",
        set.project.name
    )
}

/// The generated items as one formatted module file with the generated-code header.
///
/// The items are built, parsed and printed as separate jobs, which two threads take from one
/// queue (tokens cannot cross threads; text can): the producers, consumers and registry in one
/// job, the payload types in chunks of [`CHUNK_EVENTS`] event types. prettyplease prints the
/// items of a module one after another with nothing between them, each printed at the same
/// indentation whatever its neighbours, so the chunks join into the text one pass would print;
/// and a chunk's tokens and syntax tree are freed before the next is built, so the memory they
/// take stays small and is reused. Names are checked by the first job, the walk
/// [`name_clashes`] makes, since each chunk only sees its own; a set whose load made that walk
/// (every set but a comparison's base) is not walked again. The first job to fail stops both
/// threads, and the error of the earliest failed job is returned.
pub fn items_source(set: &ContractSet, runtime_path: &str) -> Result<String, EmitError> {
    items_source_in_chunks(set, runtime_path, CHUNK_EVENTS)
}

/// Event types whose payload items are formatted together: enough that the per-chunk parse
/// and print are negligible, few enough that their tokens and trees stay small and that the
/// two threads finish close together.
const CHUNK_EVENTS: usize = 16;

/// One piece of the generated items, printed on its own.
#[derive(Debug, Clone, Copy)]
enum Job<'a> {
    /// The Rust name walk, for a set whose load did not make it: first, so a clash stops the
    /// render early.
    Names,
    /// The producers and consumers modules and the registry, the largest job: early.
    Rest,
    /// The payloads module's doc comment and opening.
    Opening,
    /// The payload items of these event types.
    Payloads(&'a [&'a EventType]),
    /// The enum of any payload, the last item of the payloads module.
    AnyEvent,
}

/// [`items_source`] with the payload items formatted `chunk` event types at a time.
fn items_source_in_chunks(
    set: &ContractSet,
    runtime_path: &str,
    chunk: usize,
) -> Result<String, EmitError> {
    runtime_tokens(runtime_path)?;
    let events: Vec<&EventType> = set.events.values().collect();
    let mut jobs = Vec::new();
    // Loading checked the names already, unless the set is a comparison's base.
    if !set.rust_names_checked {
        jobs.push(Job::Names);
    }
    jobs.extend([Job::Rest, Job::Opening]);
    jobs.extend(events.chunks(chunk.max(1)).map(Job::Payloads));
    jobs.push(Job::AnyEvent);

    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> Result<Vec<(usize, String)>, (usize, EmitError)> {
        let runtime = runtime_tokens(runtime_path).map_err(|error| (0, error))?;
        let mut done = Vec::new();
        loop {
            let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(job) = jobs.get(index) else {
                return Ok(done);
            };
            match print_job(*job, set, &runtime) {
                Ok(printed) => done.push((index, printed)),
                Err(error) => {
                    // No job after this one is needed: stop the other thread too.
                    next.store(jobs.len(), std::sync::atomic::Ordering::Relaxed);
                    return Err((index, error));
                }
            }
        }
    };
    let (mine, theirs) = std::thread::scope(|scope| {
        let theirs = scope.spawn(work);
        let mine = work();
        let theirs = theirs
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (mine, theirs)
    });
    let mut printed = match (mine, theirs) {
        (Ok(mut mine), Ok(theirs)) => {
            mine.extend(theirs);
            mine
        }
        (Err((_, error)), Ok(_)) | (Ok(_), Err((_, error))) => return Err(error),
        (Err(mine), Err(theirs)) => {
            return Err(std::cmp::min_by_key(mine, theirs, |(index, _)| *index).1);
        }
    };
    printed.sort_unstable_by_key(|(index, _)| *index);
    debug_assert!(
        printed
            .iter()
            .enumerate()
            .all(|(at, (index, _))| at == *index)
    );
    Ok(assemble(&jobs, &printed))
}

/// The printed text of `job`. Every piece but the opening is whole lines, and the opening is
/// cut after its doc comments are mended, so each piece is mended by `space_doc_comments` on
/// the thread that printed it.
fn print_job(job: Job<'_>, set: &ContractSet, runtime: &TokenStream) -> Result<String, EmitError> {
    Ok(match job {
        Job::Rest => space_doc_comments(&format_items(other_items(set, runtime)?)?),
        Job::Names => match name_clashes(set)?.first() {
            Some(clash) => {
                return Err(EmitError::Rust {
                    subject: clash.second.file.clone(),
                    message: clash.to_string(),
                });
            }
            None => String::new(),
        },
        Job::Opening => {
            let printed = space_doc_comments(&format_items(quote! {
                /// Payload types: one struct per event type and major version, one enum per event type.
                pub mod payloads {}
            })?);
            module_parts(&printed)?.0.to_owned()
        }
        Job::Payloads(events) => {
            let items = payload_items(events, runtime)?;
            module_items(quote!(#(#items)*))?
        }
        Job::AnyEvent => module_items(any_event_item(set, runtime))?,
    })
}

/// The generated file from the printed pieces of `jobs`, in job order.
fn assemble(jobs: &[Job<'_>], printed: &[(usize, String)]) -> String {
    let pieces = || {
        jobs.iter()
            .zip(printed.iter().map(|(_, text)| text.as_str()))
    };
    let (mut opening, mut rest, mut items) = ("", "", 0);
    for (job, text) in pieces() {
        match job {
            Job::Rest => rest = text,
            Job::Names => {}
            Job::Opening => opening = text,
            Job::Payloads(_) | Job::AnyEvent => items += text.len(),
        }
    }
    let header = format!("// {GENERATED_NOTICE}\n\n");
    let mut text = String::with_capacity(header.len() + opening.len() + items + rest.len() + 8);
    text.push_str(&header);
    text.push_str(opening);
    if items == 0 {
        text.push_str(" {}\n");
    } else {
        text.push_str(" {\n");
        for (job, piece) in pieces() {
            if matches!(job, Job::Payloads(_) | Job::AnyEvent) {
                text.push_str(piece);
            }
        }
        text.push_str("}\n");
    }
    text.push_str(rest);
    text
}

/// `items` printed as the items of the module `pub mod payloads`, at its indentation.
fn module_items(items: TokenStream) -> Result<String, EmitError> {
    let printed = space_doc_comments(&format_items(quote! {
        pub mod payloads {
            #items
        }
    })?);
    Ok(module_parts(&printed)?.1.to_owned())
}

fn runtime_tokens(runtime_path: &str) -> Result<TokenStream, EmitError> {
    runtime_path.parse().map_err(|_| EmitError::Rust {
        subject: "the runtime path".to_owned(),
        message: format!("`{runtime_path}` is not a Rust path"),
    })
}

/// The payload items of `events`. Names are not checked here (see [`items_source`]).
fn payload_items(
    events: &[&EventType],
    runtime: &TokenStream,
) -> Result<Vec<TokenStream>, EmitError> {
    let (mut names, mut clashes) = (Names::new("type"), Vec::new());
    events
        .iter()
        .map(|event| event_payloads(event, runtime, true, &mut names, &mut clashes))
        .collect()
}

/// The producers and consumers modules and the registry. Names are not checked here (see
/// [`items_source`]).
fn other_items(set: &ContractSet, runtime: &TokenStream) -> Result<TokenStream, EmitError> {
    let (mut names, mut functions, mut clashes) =
        (Names::new("type"), Names::new("function"), Vec::new());
    let producers: Vec<TokenStream> = set
        .events
        .values()
        .flat_map(|event| event_producers(event, runtime, true, &mut functions, &mut clashes))
        .collect();
    let consumers = consumer_items(set, runtime, true, &mut names, &mut clashes)?;
    // An unused glob import is a warning, and the generated crate denies warnings.
    let payloads_use = |used: bool| {
        used.then(|| {
            quote!(
                use super::payloads::*;
            )
        })
    };
    let producers_use = payloads_use(!producers.is_empty());
    let consumers_use = payloads_use(set.consumers.values().any(|c| c.mode != ConsumerMode::Off));
    let registry = registry_item(set, runtime)?;
    Ok(quote! {
        /// Producer functions: append a typed event in the caller's transaction.
        pub mod producers {
            #producers_use
            #(#producers)*
        }

        /// Consumer traits and the `Handlers` value that routes deliveries to them.
        pub mod consumers {
            #consumers_use
            #consumers
        }

        #registry
    })
}

/// Splits the printed items `text`, which end in the module `pub mod payloads`, into what comes
/// before the module's brace and the printed items inside it.
fn module_parts(text: &str) -> Result<(&str, &str), EmitError> {
    const OPENING: &str = "pub mod payloads";
    let unexpected = || EmitError::Rust {
        subject: "the generated crate".to_owned(),
        message: "the payloads module did not print as expected".to_owned(),
    };
    // The module's line is the first that starts with it: its items are indented.
    let line = if text.starts_with(OPENING) {
        0
    } else {
        text.find(&format!("\n{OPENING}")).ok_or_else(unexpected)? + 1
    };
    let start = line + OPENING.len();
    let (opening, module) = text.split_at(start);
    if module == " {}\n" {
        return Ok((opening, ""));
    }
    let items = module
        .strip_prefix(" {\n")
        .and_then(|rest| rest.strip_suffix("}\n"))
        .ok_or_else(unexpected)?;
    Ok((opening, items))
}

/// Every pair of contract names that would become one Rust name in one scope of the generated
/// crate (`evc check` reports them as `RUST_NAME_COLLISION`). The names are taken by the walk
/// [`render`] makes, in its order, without building the items.
///
/// # Errors
/// Any other reason the crate cannot be rendered (an [`EmitError`], which `evc check` reports
/// too).
pub fn name_clashes(set: &ContractSet) -> Result<Vec<Clash>, EmitError> {
    let mut clashes = Vec::new();
    // The items are neither built nor parsed here: `generate` builds them and parses them to
    // print them, and the fixture, property and corpus tests compile what it prints.
    take_names(set, &quote!(::evc), &mut clashes)?;
    Ok(clashes)
}

/// Parses `tokens` as the items of a file and prints them.
fn format_items(tokens: TokenStream) -> Result<String, EmitError> {
    let file: syn::File = syn::parse2(tokens).map_err(|error| EmitError::Rust {
        subject: "the generated crate".to_owned(),
        message: error.to_string(),
    })?;
    Ok(prettyplease::unparse(&file))
}

/// prettyplease prints `#[doc = "Text"]` as `///Text`; rustfmt style is `/// Text`.
fn space_doc_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 20);
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        match ["///", "//!"]
            .iter()
            .find(|marker| trimmed.starts_with(**marker))
        {
            Some(marker) => {
                let rest = &trimmed[marker.len()..];
                out.push_str(indent);
                out.push_str(marker);
                if !rest.is_empty() && !rest.starts_with(' ') {
                    out.push(' ');
                }
                out.push_str(rest);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Names the generated crate defines whatever the contracts say, in the scope of payload types and
/// consumer traits.
const RESERVED_TYPE_NAMES: &[(&str, &str)] = &[
    ("Event", "the generated enum `Event` of all payloads"),
    (
        "Handlers",
        "the generated struct `Handlers` of all consumers",
    ),
];

/// Takes every name the generated items define, in the order they are built, without building
/// them; a clash goes to `clashes`.
///
/// On the caller's thread only: loading runs this walk, the macros load contracts inside the
/// compiler, and there tokens can only be made on the macro's own thread.
fn take_names(
    set: &ContractSet,
    runtime: &TokenStream,
    clashes: &mut Vec<Clash>,
) -> Result<(), EmitError> {
    let mut names = Names::new("type");
    for (name, what) in RESERVED_TYPE_NAMES {
        take(&mut names, clashes, name, Taker::new(*what, "", ""));
    }
    let mut functions = Names::new("function");
    for event in set.events.values() {
        event_payloads(event, runtime, false, &mut names, clashes)?;
        event_producers(event, runtime, false, &mut functions, clashes);
    }
    // The registry and `Event` take no names, and what could fail in them (the registry
    // digest serializes plain data with string keys) does not.
    consumer_items(set, runtime, false, &mut names, clashes)?;
    Ok(())
}

/// Takes `name` in `names`, recording a clash.
fn take(names: &mut Names, clashes: &mut Vec<Clash>, name: &str, taker: Taker) {
    if let Err(clash) = names.take(name, taker) {
        clashes.push(*clash);
    }
}

/// The payload structs of every major, the versions enum and their constants (only their names
/// without `render`).
fn event_payloads(
    event: &EventType,
    runtime: &TokenStream,
    render: bool,
    names: &mut Names,
    clashes: &mut Vec<Clash>,
) -> Result<TokenStream, EmitError> {
    let mut items = Vec::new();
    let mut variants = Vec::new();
    let mut decode_arms = Vec::new();
    for version in event.latest_per_major() {
        let major = version.version.major;
        let major_literal = proc_macro2::Literal::u64_unsuffixed(major);
        let type_name = naming::payload_type(&event.name, major);
        let subject = format!("{} {}", event.name, version.version);
        let mut generator = types::TypeGen::new(
            &version.schema,
            type_name.clone(),
            subject,
            (event.file.clone(), format!("{}/schema", version.pointer)),
            names,
            clashes,
            runtime,
        );
        if !render {
            generator = generator.names_only();
        }
        generator.root_type()?;
        if !render {
            continue;
        }
        let order_key = order_key_body(event, generator.struct_fields.get(&type_name), runtime);
        items.extend(generator.items);
        let ident = format_ident!("{type_name}");
        let event_name = &event.name;
        let version_text = version.version.to_string();
        items.push(quote! {
            impl #ident {
                /// The event type.
                pub const EVENT_TYPE: &'static str = #event_name;
                /// The contract version this type was generated from (the newest of its major).
                pub const VERSION: &'static str = #version_text;
                /// The major version.
                pub const MAJOR: u64 = #major_literal;
            }

            impl #runtime::RegisteredEvent for #ident {
                const EVENT_TYPE: &'static str = #event_name;
                const VERSION: &'static str = #version_text;

                fn order_key(&self) -> ::std::option::Option<::std::string::String> {
                    #order_key
                }
            }
        });
        let variant = format_ident!("V{major}");
        let variant_doc = format!("Major version {major} ({version_text}).");
        variants.push(quote! {
            #[doc = #variant_doc]
            #variant(#ident),
        });
        decode_arms.push(quote! {
            #major_literal => #runtime::serde_json::from_value(payload).map(Self::#variant),
        });
    }
    let enum_name = naming::versions_enum(&event.name);
    let taker = Taker::new(
        format!("the versions enum of `{}`", event.name),
        &event.file,
        "/event",
    );
    take(names, clashes, &enum_name, taker);
    if !render {
        return Ok(TokenStream::new());
    }
    let enum_ident = format_ident!("{enum_name}");
    let enum_doc = format!("`{}`: {}", event.name, event.description.trim());
    let event_name = &event.name;
    let deprecated = (event.status == EventStatus::Deprecated)
        .then(|| quote!(#[deprecated(note = "the event type is deprecated in the contracts")]));
    let serde_crate = types::serde_crate(runtime);
    items.push(quote! {
        #[doc = #enum_doc]
        #deprecated
        #[derive(Debug, Clone, PartialEq, #runtime::serde::Serialize)]
        #serde_crate
        #[serde(untagged)]
        #[non_exhaustive]
        pub enum #enum_ident {
            #(#variants)*
        }

        #[allow(deprecated)]
        impl #enum_ident {
            /// The event type.
            pub const EVENT_TYPE: &'static str = #event_name;

            /// Decodes a payload produced under major version `major`.
            ///
            /// # Errors
            /// When the major is not registered or the payload does not fit its type.
            pub fn from_json(major: u64, payload: #runtime::serde_json::Value) -> ::std::result::Result<Self, #runtime::serde_json::Error> {
                match major {
                    #(#decode_arms)*
                    other => ::std::result::Result::Err(<#runtime::serde_json::Error as #runtime::serde::de::Error>::custom(
                        ::std::format!("{} has no major version {}", #event_name, other),
                    )),
                }
            }
        }
    });
    Ok(quote!(#(#items)*))
}

/// `Event`: any registered payload, decoded by event type and major version.
fn any_event_item(set: &ContractSet, runtime: &TokenStream) -> TokenStream {
    let mut variants = Vec::new();
    let mut arms = Vec::new();
    for event in set.events.values() {
        let ident = format_ident!("{}", naming::versions_enum(&event.name));
        let name = &event.name;
        let doc = format!("`{name}`.");
        let deprecated =
            (event.status == EventStatus::Deprecated).then(|| quote!(#[allow(deprecated)]));
        variants.push(quote! {
            #[doc = #doc]
            #deprecated
            #ident(#ident),
        });
        arms.push(quote! {
            #name => #ident::from_json(major, payload).map(Self::#ident),
        });
    }
    let serde_crate = types::serde_crate(runtime);
    quote! {
        /// Any registered event payload.
        #[derive(Debug, Clone, PartialEq, #runtime::serde::Serialize)]
        #serde_crate
        #[serde(untagged)]
        #[non_exhaustive]
        #[allow(deprecated)]
        pub enum Event {
            #(#variants)*
        }

        #[allow(deprecated)]
        impl Event {
            /// Decodes a payload of `event_type` produced under major version `major`.
            ///
            /// # Errors
            /// When the event type or major is not registered, or the payload does not fit.
            pub fn from_json(event_type: &str, major: u64, payload: #runtime::serde_json::Value) -> ::std::result::Result<Self, #runtime::serde_json::Error> {
                match event_type {
                    #(#arms)*
                    other => ::std::result::Result::Err(<#runtime::serde_json::Error as #runtime::serde::de::Error>::custom(
                        ::std::format!("{} is not a registered event type", other),
                    )),
                }
            }
        }
    }
}

/// The body of `RegisteredEvent::order_key`: the order key properties of the payload, joined
/// with `/`. A payload struct (`fields`: property → field name) reads its fields; any other
/// payload type (an enum, a newtype) reads the properties of its JSON form, which `evc check`
/// makes every version require.
fn order_key_body(
    event: &EventType,
    fields: Option<&std::collections::BTreeMap<String, String>>,
    runtime: &TokenStream,
) -> TokenStream {
    if event.order_key.is_empty() {
        return quote!(::std::option::Option::None);
    }
    let field_of = |property: &String| fields.and_then(|fields| fields.get(property));
    if let Some(idents) = event
        .order_key
        .iter()
        .map(|property| field_of(property).map(|field| naming::ident(field)))
        .collect::<Option<Vec<_>>>()
    {
        return quote! {
            let parts: ::std::vec::Vec<::std::string::String> = ::std::vec![#(#runtime::order_key_part(&self.#idents)),*];
            ::std::option::Option::Some(parts.join("/"))
        };
    }
    let properties = &event.order_key;
    quote! {
        let payload = #runtime::serde_json::to_value(self).unwrap_or_default();
        let parts: ::std::vec::Vec<::std::string::String> = ::std::vec![#(#runtime::order_key_part(&payload[#properties])),*];
        ::std::option::Option::Some(parts.join("/"))
    }
}

/// The producer function of every major (only their names without `render`).
fn event_producers(
    event: &EventType,
    runtime: &TokenStream,
    render: bool,
    functions: &mut Names,
    clashes: &mut Vec<Clash>,
) -> Vec<TokenStream> {
    event
        .latest_per_major()
        .into_iter()
        .filter_map(|version| {
            let major = version.version.major;
            let fn_name = naming::producer_fn(&event.name, major);
            let taker = Taker::new(
                format!("the producer of `{}` major {major}", event.name),
                &event.file,
                "/event",
            );
            take(functions, clashes, &fn_name, taker);
            if !render {
                return None;
            }
            let fn_ident = format_ident!("{fn_name}");
            let type_ident = format_ident!("{}", naming::payload_type(&event.name, major));
            let doc = format!(
                "Appends a `{}` event ({}, major {major}) in the caller's transaction.",
                event.name, version.version
            );
            let deprecated = (event.status == EventStatus::Deprecated).then(
                || quote!(#[deprecated(note = "the event type is deprecated in the contracts")]),
            );
            Some(quote! {
                #[doc = #doc]
                ///
                /// # Errors
                /// When the payload does not serialize or the publisher refuses the event.
                #deprecated
                pub async fn #fn_ident<P: #runtime::Publish>(
                    publisher: &mut P,
                    trace: &#runtime::TraceContext,
                    payload: &#type_ident,
                ) -> ::std::result::Result<P::Receipt, P::Error> {
                    let event = #runtime::OutgoingEvent::new(
                        #type_ident::EVENT_TYPE,
                        #type_ident::VERSION,
                        #runtime::RegisteredEvent::order_key(payload),
                        trace,
                        payload,
                    )?;
                    publisher.publish(event).await
                }
            })
        })
        .collect()
}

/// The versions of `event` a requirement matches, and their distinct majors.
fn matched<'a>(
    event: &'a EventType,
    requirement: &semver::VersionReq,
) -> (Vec<&'a EventVersion>, BTreeSet<u64>) {
    let versions: Vec<&EventVersion> = event
        .versions
        .iter()
        .filter(|v| requirement.matches(&v.version))
        .collect();
    let majors = versions.iter().map(|v| v.version.major).collect();
    (versions, majors)
}

/// The consumer traits, their adapters and `Handlers` (only their names without `render`).
fn consumer_items(
    set: &ContractSet,
    runtime: &TokenStream,
    render: bool,
    names: &mut Names,
    clashes: &mut Vec<Clash>,
) -> Result<TokenStream, EmitError> {
    let mut field_names = Names::new("field of `Handlers`");
    let mut traits = Vec::new();
    let mut generics = Vec::new();
    let mut fields = Vec::new();
    let mut serves = Vec::new();
    for consumer in set
        .consumers
        .values()
        .filter(|c| c.mode != ConsumerMode::Off)
    {
        let trait_name = naming::consumer_trait(&consumer.name);
        let at = |what: &str| {
            Taker::new(
                format!("{what} `{}`", consumer.name),
                &consumer.file,
                "/consumer",
            )
        };
        take(names, clashes, &trait_name, at("the trait of consumer"));
        let trait_ident = format_ident!("{trait_name}");
        let adapter_name = naming::consumer_adapter(&consumer.name);
        take(names, clashes, &adapter_name, at("the adapter of consumer"));
        let adapter_ident = format_ident!("{adapter_name}");
        let mut arms = Vec::new();
        let mut methods = Vec::new();
        let field_name = naming::consumer_field(&consumer.name);
        take(&mut field_names, clashes, &field_name, at("the consumer"));
        let field_ident = naming::ident(&field_name);
        // The generic parameter is in scope beside the traits and payload types it names.
        let generic_name = format!("H{trait_name}");
        take(
            names,
            clashes,
            &generic_name,
            at("the handler parameter of consumer"),
        );
        let generic = format_ident!("{generic_name}");
        let mut method_names = Names::new("handler method");
        let mut forwards = Vec::new();
        for (index, subscription) in consumer.subscriptions.iter().enumerate() {
            let event = &set.events[&subscription.event];
            let method_name = naming::handler_method(&event.name);
            let taker = Taker::new(
                format!(
                    "the subscription of `{}` to `{}`",
                    consumer.name, event.name
                ),
                &consumer.file,
                format!("/subscribes/{index}"),
            );
            take(&mut method_names, clashes, &method_name, taker);
            if !render {
                continue;
            }
            let (versions, majors) = matched(event, &subscription.requirement);
            let method = format_ident!("{method_name}");
            let payload_type = match majors.iter().collect::<Vec<_>>().as_slice() {
                [major] => {
                    let ident = format_ident!("{}", naming::payload_type(&event.name, **major));
                    quote!(#ident)
                }
                _ => {
                    let ident = format_ident!("{}", naming::versions_enum(&event.name));
                    quote!(#ident)
                }
            };
            let doc = format!(
                "Handles `{}` deliveries ({}: {}).",
                event.name,
                subscription.requirement,
                versions
                    .iter()
                    .map(|v| v.version.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            methods.push(quote! {
                #[doc = #doc]
                fn #method(
                    &self,
                    cx: &mut #runtime::HandlerContext<'_, EvcStore>,
                    payload: #payload_type,
                ) -> impl ::std::future::Future<Output = ::std::result::Result<(), #runtime::HandlerError>> + Send;
            });
            forwards.push(quote! {
                fn #method(
                    &self,
                    cx: &mut #runtime::HandlerContext<'_, EvcStore>,
                    payload: #payload_type,
                ) -> impl ::std::future::Future<Output = ::std::result::Result<(), #runtime::HandlerError>> + Send {
                    #generic::#method(self, cx, payload)
                }
            });
            let event_name = &event.name;
            let version_texts: Vec<String> =
                versions.iter().map(|v| v.version.to_string()).collect();
            let decode = if majors.len() == 1 {
                quote! {
                    #runtime::serde_json::from_value::<#payload_type>(claimed.payload.clone())
                }
            } else {
                quote! {
                    #payload_type::from_json(delivery.major().unwrap_or_default(), claimed.payload.clone())
                }
            };
            arms.push(quote! {
                #event_name => {
                    if ![#(#version_texts),*].contains(&delivery.version.as_str()) {
                        return ::std::result::Result::Err(#runtime::HandlerError::new(
                            #runtime::FailureClass::Scope,
                            "version_not_subscribed",
                        ));
                    }
                    let payload = #decode.map_err(|_| #runtime::HandlerError::new(
                        #runtime::FailureClass::Schema,
                        "payload_does_not_match_type",
                    ))?;
                    self.0.#method(&mut context, payload).await
                }
            });
        }
        if !render {
            continue;
        }
        let doc = format!(
            "Handler of the consumer `{}`: {}",
            consumer.name,
            consumer.description.trim()
        );
        let store_doc = format!(
            "`EvcStore` is the store the dispatcher runs on: PostgreSQL unless the \
             implementation names another (`impl {trait_name}<SqliteStore>`) or serves any \
             (`impl<S: evc::Store> {trait_name}<S>`)."
        );
        let deprecated_use = consumer
            .subscriptions
            .iter()
            .any(|s| set.events[&s.event].status == EventStatus::Deprecated)
            .then(|| quote!(#[allow(deprecated)]));
        let consumer_name = &consumer.name;
        let adapter_doc = format!(
            "Serves `{}` with a [`{trait_name}`] implementation: decodes each delivery's payload \
             into the type the consumer subscribed to and calls its handler method. Give it to \
             `Dispatcher::serve`.",
            consumer.name
        );
        traits.push(quote! {
            #[doc = #doc]
            #[doc = ""]
            #[doc = #store_doc]
            #deprecated_use
            pub trait #trait_ident<EvcStore: #runtime::Store = #runtime::PgStore>: Send + Sync + 'static {
                #(#methods)*
            }

            /// A shared handler is a handler: the application keeps a clone of the `Arc`.
            #deprecated_use
            impl<EvcStore: #runtime::Store, #generic: #trait_ident<EvcStore>> #trait_ident<EvcStore>
                for ::std::sync::Arc<#generic>
            {
                #(#forwards)*
            }

            #[doc = #adapter_doc]
            #[derive(Debug, Clone, Default)]
            pub struct #adapter_ident<#generic>(pub #generic);

            #deprecated_use
            impl<EvcStore: #runtime::Store, #generic: #trait_ident<EvcStore>>
                #runtime::DynHandler<EvcStore> for #adapter_ident<#generic>
            {
                fn handle<'a>(
                    &'a self,
                    mut context: #runtime::HandlerContext<'a, EvcStore>,
                ) -> #runtime::BoxFuture<'a, ::std::result::Result<(), #runtime::HandlerError>> {
                    ::std::boxed::Box::pin(async move {
                        let claimed = context.claimed;
                        let delivery = &claimed.delivery;
                        match delivery.event_type.as_str() {
                            #(#arms)*
                            _ => ::std::result::Result::Err(#runtime::HandlerError::new(
                                #runtime::FailureClass::Scope,
                                "event_not_subscribed",
                            )),
                        }
                    })
                }
            }

            impl<EvcStore: #runtime::Store, #generic: #trait_ident<EvcStore>>
                #runtime::Consumer<EvcStore> for #adapter_ident<#generic>
            {
                const NAME: &'static str = #consumer_name;
            }
        });
        serves.push(quote! {
            let dispatcher = dispatcher.serve(#adapter_ident(self.#field_ident))?;
        });
        generics.push(quote!(#generic: #trait_ident<EvcStore>));
        let field_doc = format!("The handler of `{}`.", consumer.name);
        fields.push(quote! {
            #[doc = #field_doc]
            pub #field_ident: #generic,
        });
    }
    if !render {
        return Ok(TokenStream::new());
    }
    let generic_names: Vec<TokenStream> = generics
        .iter()
        .map(|g| {
            let name = g.clone().into_iter().next();
            quote!(#name)
        })
        .collect();
    Ok(quote! {
        #(#traits)*

        /// One handler per consumer that receives deliveries (mode `live` or `shadow`); leaving
        /// one out does not compile.
        pub struct Handlers<#(#generic_names),*> {
            #(#fields)*
        }

        impl<#(#generic_names),*> Handlers<#(#generic_names),*> {
            /// Serves every consumer with its handler on `dispatcher` (of any store), each with
            /// its registry settings.
            ///
            /// # Errors
            /// When the dispatcher's registry does not register a consumer
            /// (`Dispatcher::serve`).
            pub fn serve<EvcStore: #runtime::Store>(
                self,
                dispatcher: #runtime::Dispatcher<EvcStore>,
            ) -> ::std::result::Result<#runtime::Dispatcher<EvcStore>, #runtime::DispatchError>
            where
                #(#generics),*
            {
                #(#serves)*
                ::std::result::Result::Ok(dispatcher)
            }
        }
    })
}

fn registry_item(set: &ContractSet, runtime: &TokenStream) -> Result<TokenStream, EmitError> {
    let events = set.events.values().map(|event| {
        let name = &event.name;
        let description = event.description.trim();
        let producer_class = &event.producer_class;
        let order_key = &event.order_key;
        let deprecated = event.status == EventStatus::Deprecated;
        let max = proc_macro2::Literal::u32_unsuffixed(event.max_payload_bytes);
        let versions = event.versions.iter().map(|version| {
            let text = version.version.to_string();
            let major = proc_macro2::Literal::u64_unsuffixed(version.version.major);
            let schema = digest::canonical_json(&version.schema);
            let schema_digest = digest::sha256_hex(&schema);
            quote! {
                #runtime::VersionDescriptor {
                    version: #text,
                    major: #major,
                    schema: #schema,
                    schema_digest: #schema_digest,
                }
            }
        });
        quote! {
            #runtime::EventDescriptor {
                name: #name,
                description: #description,
                producer_class: #producer_class,
                order_key: &[#(#order_key),*],
                deprecated: #deprecated,
                max_payload_bytes: #max,
                versions: &[#(#versions),*],
            }
        }
    });
    let consumers = set.consumers.values().map(|consumer| {
        let name = &consumer.name;
        let handler = match consumer.handler {
            HandlerKind::Transactional => quote!(#runtime::HandlerKind::Transactional),
            HandlerKind::Leased => quote!(#runtime::HandlerKind::Leased),
        };
        let mode = match consumer.mode {
            ConsumerMode::Off => quote!(#runtime::ConsumerMode::Off),
            ConsumerMode::Shadow => quote!(#runtime::ConsumerMode::Shadow),
            ConsumerMode::Live => quote!(#runtime::ConsumerMode::Live),
        };
        let per_key = consumer.ordering == Ordering::PerKey;
        let policy = &consumer.retry_policy;
        let heartbeat = proc_macro2::Literal::u64_unsuffixed(
            u64::try_from(consumer.heartbeat_threshold.as_millis()).unwrap_or(u64::MAX),
        );
        let handler_timeout = match consumer.handler_timeout {
            Some(timeout) => {
                let timeout = proc_macro2::Literal::u64_unsuffixed(
                    u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                );
                quote!(::std::option::Option::Some(#timeout))
            }
            None => quote!(::std::option::Option::None),
        };
        let executor_class = match &consumer.executor_class {
            Some(class) => quote!(::std::option::Option::Some(#class)),
            None => quote!(::std::option::Option::None),
        };
        let subscriptions = consumer.subscriptions.iter().map(|subscription| {
            let event = &subscription.event;
            let requirement = subscription.requirement.to_string();
            let (versions, _) = matched(&set.events[event], &subscription.requirement);
            let versions = versions.iter().map(|v| v.version.to_string());
            quote! {
                #runtime::SubscriptionDescriptor {
                    event: #event,
                    requirement: #requirement,
                    versions: &[#(#versions),*],
                }
            }
        });
        quote! {
            #runtime::ConsumerDescriptor {
                name: #name,
                handler: #handler,
                mode: #mode,
                per_key_ordering: #per_key,
                retry_policy: #policy,
                heartbeat_threshold_ms: #heartbeat,
                handler_timeout_ms: #handler_timeout,
                executor_class: #executor_class,
                subscriptions: &[#(#subscriptions),*],
            }
        }
    });
    let policies = set.retry_policies.values().map(|policy| {
        let name = &policy.name;
        let kind = crate::format::keyword(&policy.kind);
        let base = proc_macro2::Literal::u64_unsuffixed(
            u64::try_from(policy.base_delay.as_millis()).unwrap_or(u64::MAX),
        );
        let max_delay = match policy.max_delay {
            Some(max) => {
                let max = proc_macro2::Literal::u64_unsuffixed(
                    u64::try_from(max.as_millis()).unwrap_or(u64::MAX),
                );
                quote!(::std::option::Option::Some(#max))
            }
            None => quote!(::std::option::Option::None),
        };
        let attempts = proc_macro2::Literal::u32_unsuffixed(policy.max_attempts);
        let jitter = crate::format::keyword(&policy.jitter);
        let retry_on = policy.retry_on.iter().map(crate::format::keyword);
        quote! {
            #runtime::RetryPolicyDescriptor {
                name: #name,
                kind: #kind,
                base_delay_ms: #base,
                max_delay_ms: #max_delay,
                max_attempts: #attempts,
                jitter: #jitter,
                retry_on: &[#(#retry_on),*],
            }
        }
    });
    let classes = set.executor_classes.values().map(|class| {
        let name = &class.name;
        let mutating = class.mutating;
        let namespace = &class.idempotency_namespace;
        let owner = &class.heartbeat_owner;
        let active = class.active;
        quote! {
            #runtime::ExecutorClassDescriptor {
                name: #name,
                mutating: #mutating,
                idempotency_namespace: #namespace,
                heartbeat_owner: #owner,
                active: #active,
            }
        }
    });
    let schedules = set.schedules.values().map(|schedule| {
        let name = &schedule.name;
        let cron = &schedule.cron;
        let event = &schedule.event;
        let missed = match schedule.missed {
            crate::format::Missed::Skip => quote! { #runtime::MissedSlots::Skip },
            crate::format::Missed::CatchUp => quote! { #runtime::MissedSlots::CatchUp },
        };
        let limit = proc_macro2::Literal::u32_unsuffixed(schedule.catch_up_limit);
        let tenant = match &schedule.tenant_scope {
            Some(tenant) => quote! { Some(#tenant) },
            None => quote! { None },
        };
        quote! {
            #runtime::ScheduleDescriptor {
                name: #name,
                cron: #cron,
                event: #event,
                missed: #missed,
                catch_up_limit: #limit,
                tenant_scope: #tenant,
            }
        }
    });
    let thresholds = set.consumers.values().flat_map(|consumer| {
        consumer
            .lag_thresholds
            .iter()
            .map(move |(producer_class, threshold)| {
                let consumer = &consumer.name;
                let ms = proc_macro2::Literal::u64_unsuffixed(
                    u64::try_from(threshold.as_millis()).unwrap_or(u64::MAX),
                );
                quote! {
                    #runtime::LagThresholdDescriptor {
                        consumer: #consumer,
                        producer_class: #producer_class,
                        threshold_ms: #ms,
                    }
                }
            })
    });
    let gates = set.consumers.values().filter_map(|consumer| {
        let gate = consumer.cutover_gate?;
        let name = &consumer.name;
        let min_reconciled = proc_macro2::Literal::u32_unsuffixed(gate.min_reconciled);
        let min_span = proc_macro2::Literal::u64_unsuffixed(
            u64::try_from(gate.min_span.as_millis()).unwrap_or(u64::MAX),
        );
        let max_unexplained = proc_macro2::Literal::u32_unsuffixed(gate.max_unexplained);
        Some(quote! {
            #runtime::CutoverGateDescriptor {
                consumer: #name,
                min_reconciled: #min_reconciled,
                min_span_ms: #min_span,
                max_unexplained: #max_unexplained,
            }
        })
    });
    let inventory_rules = set
        .consumers
        .values()
        .filter(|consumer| consumer.inventory.is_declared())
        .map(|consumer| {
            let name = &consumer.name;
            let max_age = match consumer.inventory.max_age {
                Some(age) => {
                    let ms = proc_macro2::Literal::u64_unsuffixed(
                        u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
                    );
                    quote! { Some(#ms) }
                }
                None => quote! { None },
            };
            let repair = match consumer.inventory.repair {
                crate::model::InventoryRepair::None => quote! { #runtime::InventoryRepair::None },
                crate::model::InventoryRepair::Conform => {
                    quote! { #runtime::InventoryRepair::Conform }
                }
            };
            quote! {
                #runtime::InventoryRulesDescriptor {
                    consumer: #name,
                    max_age_ms: #max_age,
                    repair: #repair,
                }
            }
        });
    let project = &set.project.name;
    let registry_digest = super::manifest::registry_digest(set)?;
    let millis = |duration: std::time::Duration| {
        proc_macro2::Literal::u64_unsuffixed(
            u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        )
    };
    let retention = retention_descriptor(set, runtime, millis);
    let evidence = match set.project.evidence {
        Some(evidence) => {
            let every = millis(evidence.every);
            let keep = millis(evidence.keep);
            let window = millis(evidence.window);
            let correlation = millis(evidence.correlation);
            let min_count = proc_macro2::Literal::u32_unsuffixed(evidence.min_count);
            quote! {
                Some(#runtime::EvidenceRecordingDescriptor {
                    every_ms: #every,
                    keep_ms: #keep,
                    window_ms: #window,
                    correlation_ms: #correlation,
                    min_count: #min_count,
                })
            }
        }
        None => quote! { None },
    };
    let payload = &set.project.payload_policy;
    let denied = &payload.denied_keys;
    let credential = &payload.credential_key_names;
    let default_max = proc_macro2::Literal::u32_unsuffixed(payload.default_max_bytes);
    let hard_max = proc_macro2::Literal::u32_unsuffixed(payload.hard_max_bytes);
    let require_tenant = set.project.require_tenant_scope;
    let dispatcher = &set.project.dispatcher;
    let batch_size = proc_macro2::Literal::u32_unsuffixed(dispatcher.batch_size);
    let lease = millis(dispatcher.lease);
    let heartbeat = millis(dispatcher.heartbeat);
    let dispatcher_attempts = proc_macro2::Literal::u32_unsuffixed(dispatcher.max_attempts);
    let backoff_ceiling = millis(dispatcher.backoff_ceiling);
    Ok(quote! {
        /// Every event type, consumer, retry policy, executor class and schedule of the
        /// contracts, and the project's runtime settings.
        pub static REGISTRY: #runtime::Registry = #runtime::Registry {
            project: #project,
            digest: #registry_digest,
            events: &[#(#events),*],
            consumers: &[#(#consumers),*],
            retry_policies: &[#(#policies),*],
            executor_classes: &[#(#classes),*],
            schedules: &[#(#schedules),*],
            lag_thresholds: &[#(#thresholds),*],
            cutover_gates: &[#(#gates),*],
            retention: #retention,
            inventory_rules: &[#(#inventory_rules),*],
            evidence_recording: #evidence,
            payload_policy: #runtime::PayloadPolicyDescriptor {
                denied_keys: &[#(#denied),*],
                credential_key_names: &[#(#credential),*],
                default_max_bytes: #default_max,
                hard_max_bytes: #hard_max,
            },
            require_tenant_scope: #require_tenant,
            dispatcher: #runtime::DispatcherDescriptor {
                batch_size: #batch_size,
                lease_ms: #lease,
                heartbeat_ms: #heartbeat,
                max_attempts: #dispatcher_attempts,
                backoff_ceiling_ms: #backoff_ceiling,
            },
        };
    })
}

/// The registry's retention: `KEEP` when the contracts declare none, so most registries read
/// as they did.
fn retention_descriptor(
    set: &ContractSet,
    runtime: &TokenStream,
    millis: impl Fn(std::time::Duration) -> proc_macro2::Literal,
) -> TokenStream {
    if !set.declares_retention() {
        return quote! { #runtime::RetentionDescriptor::KEEP };
    }
    let retention = &set.project.retention;
    let events: Vec<TokenStream> = set
        .events
        .values()
        .filter_map(|event| {
            let name = &event.name;
            let ms = millis(event.retention?);
            Some(quote! { #runtime::EventRetention { event_type: #name, ms: #ms } })
        })
        .collect();
    let period = |value: Option<std::time::Duration>| match value {
        Some(value) => {
            let ms = millis(value);
            quote! { Some(#ms) }
        }
        None => quote! { None },
    };
    let (attempts, reconciliations, rejects, effects) = (
        period(retention.attempts),
        period(retention.reconciliations),
        period(retention.rejects),
        period(retention.effects),
    );
    quote! {
        #runtime::RetentionDescriptor {
            events: &[#(#events),*],
            attempts_ms: #attempts,
            reconciliations_ms: #reconciliations,
            rejects_ms: #rejects,
            effects_ms: #effects,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::cache::LoadCache;

    /// The generated items printed in one pass: one token stream, parsed and printed once.
    fn one_pass(set: &ContractSet) -> String {
        let runtime = runtime_tokens("::evc").expect("a path");
        let events: Vec<&EventType> = set.events.values().collect();
        let payloads = payload_items(&events, &runtime).expect("payloads build");
        let any_event = any_event_item(set, &runtime);
        let rest = other_items(set, &runtime).expect("the other items build");
        let printed = format_items(quote! {
            /// Payload types: one struct per event type and major version, one enum per event type.
            pub mod payloads {
                #(#payloads)*
                #any_event
            }
            #rest
        })
        .expect("prints");
        format!("// {GENERATED_NOTICE}\n\n{}", space_doc_comments(&printed))
    }

    /// The pieces join into the text one pass prints, on the repository's contracts and the
    /// example application's, loaded as for `generate` and as a comparison's base (which adds
    /// the name walk to the jobs), in chunks of every size up to all at once.
    #[test]
    fn printed_pieces_join_into_the_text_of_one_pass() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for dir in ["contracts", "examples/shop/contracts"] {
            let loaded = ContractSet::load(root.join(dir))
                .expect("the contracts load")
                .contracts;
            let base = ContractSet::load_base_with(root.join(dir), &LoadCache::new())
                .expect("the contracts load")
                .contracts;
            assert!(loaded.events.len() > 2, "{dir} has several event types");
            assert!(
                !base.rust_names_checked,
                "a base's load leaves out the name walk"
            );
            let expected = one_pass(&loaded);
            for set in [&loaded, &base] {
                for chunk in [1, 2, CHUNK_EVENTS, usize::MAX] {
                    let printed = items_source_in_chunks(set, "::evc", chunk).expect("renders");
                    assert!(
                        printed == expected,
                        "{dir}: chunks of {chunk} print other text"
                    );
                }
            }
        }
    }
}
