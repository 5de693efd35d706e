//! `#[consumer("name")]` on an impl block: the consumer exists, every subscribed event type has
//! an `on_<event>` handler of the right shape and payload type, and no handler is for an event
//! type the consumer does not subscribe to. The block is then served: the attribute implements
//! `evc::DynHandler` (decode the payload, call the handler) and `evc::Consumer` for the type,
//! for the store its handlers' contexts name (PostgreSQL by default).

use evc_codegen::facts;
use evc_codegen::model::Consumer;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ImplItem, ImplItemFn, ItemImpl, LitStr, ReceiverKind, ReturnType, Type};

use crate::contracts;

/// One subscription as the expansion needs it.
struct Subscribed {
    event: String,
    method: String,
    /// `iu.born@^1`, for messages.
    label: String,
    versions: Vec<String>,
    majors: Vec<u64>,
}

/// A handler method of the right shape, for one subscription.
struct Handler<'a> {
    subscribed: &'a Subscribed,
    method: &'a ImplItemFn,
    context: &'a Type,
    payload: &'a Type,
    output: Span,
}

/// Checks one impl block and serves it; errors come back beside it.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let name: LitStr = match syn::parse2(args) {
        Ok(name) => name,
        Err(error) => {
            let error = syn::Error::new(
                error.span(),
                "expected the consumer's name: `#[evc::consumer(\"worker.x\")]`",
            );
            let error = error.to_compile_error();
            return quote!(#error #item);
        }
    };
    let block: ItemImpl = match syn::parse2(item.clone()) {
        Ok(block) => block,
        Err(_) => {
            let error =
                syn::Error::new_spanned(&name, "`#[evc::consumer]` goes on an `impl` block")
                    .to_compile_error();
            return quote!(#error #item);
        }
    };
    let dir = contracts::directory(None);
    let loaded = contracts::load(&dir);
    let tracking = contracts::tracking(&dir, loaded.as_ref().as_ref().ok());
    let mut errors = Vec::new();
    let mut served = TokenStream::new();
    if let Some((trait_path, _)) = &block.trait_ {
        errors.push(syn::Error::new_spanned(
            trait_path,
            "`#[evc::consumer]` goes on an inherent impl block (`impl Notifier { ... }`), not a \
             trait impl",
        ));
    } else if !block.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            &block.generics,
            "`#[evc::consumer]` serves one concrete type: the impl block cannot be generic",
        ));
    } else {
        match loaded.as_ref() {
            Err(message) => errors.push(syn::Error::new_spanned(&name, message)),
            Ok(set) => match set.consumers.get(&name.value()) {
                None => {
                    let hint = evc_codegen::names::suggestion(
                        &name.value(),
                        set.consumers.keys().map(String::as_str),
                    );
                    errors.push(syn::Error::new_spanned(
                        &name,
                        format!("`{}` is not a registered consumer; {hint}", name.value()),
                    ));
                }
                Some(consumer) => {
                    let subscribed = subscriptions(set, consumer);
                    let handlers = check(&block, consumer, &subscribed, &mut errors);
                    match store(&handlers) {
                        Ok(store) => served = serve(&block.self_ty, &name, &store, &handlers),
                        Err(error) => errors.push(error),
                    }
                }
            },
        }
    }
    let compile_errors = errors.iter().map(syn::Error::to_compile_error);
    quote! {
        #(#compile_errors)*
        #tracking
        #block
        #served
    }
}

fn subscriptions(set: &evc_codegen::ContractSet, consumer: &Consumer) -> Vec<Subscribed> {
    consumer
        .subscriptions
        .iter()
        .map(|s| {
            let (versions, majors) = match set.events.get(&s.event) {
                Some(event) => (
                    facts::subscribed_versions(event, s)
                        .iter()
                        .map(|v| v.version.to_string())
                        .collect(),
                    facts::subscribed_majors(event, s),
                ),
                None => (Vec::new(), Vec::new()),
            };
            Subscribed {
                event: s.event.clone(),
                method: evc_codegen::naming::handler_method(&s.event),
                label: format!("{}@{}", s.event, s.requirement),
                versions,
                majors,
            }
        })
        .collect()
}

/// The handlers of `block` for `subscribed`; every other `on_` method, every ill-shaped handler
/// and the missing ones are errors.
fn check<'a>(
    block: &'a ItemImpl,
    consumer: &Consumer,
    subscribed: &'a [Subscribed],
    errors: &mut Vec<syn::Error>,
) -> Vec<Handler<'a>> {
    let mut handlers = Vec::new();
    let mut present = vec![false; subscribed.len()];
    for item in &block.items {
        let ImplItem::Fn(method) = item else { continue };
        let method_name = method.sig.ident.to_string();
        if !method_name.starts_with("on_") {
            continue;
        }
        let Some(index) = subscribed.iter().position(|s| s.method == method_name) else {
            let hint = evc_codegen::names::suggestion(
                &method_name,
                subscribed.iter().map(|s| s.method.as_str()),
            );
            errors.push(syn::Error::new_spanned(
                &method.sig.ident,
                format!(
                    "`{method_name}` handles an event type `{}` does not subscribe to; {hint}",
                    consumer.name
                ),
            ));
            continue;
        };
        present[index] = true;
        match shape(method, &subscribed[index]) {
            Ok(handler) => handlers.push(handler),
            Err(error) => errors.push(error),
        }
    }
    let missing: Vec<&Subscribed> = subscribed
        .iter()
        .zip(&present)
        .filter(|(_, present)| !**present)
        .map(|(s, _)| s)
        .collect();
    if !missing.is_empty() {
        let list: Vec<String> = missing
            .iter()
            .map(|s| format!("`{}` ({})", s.method, s.label))
            .collect();
        errors.push(syn::Error::new_spanned(
            &block.self_ty,
            format!(
                "`{}` subscribes to events this impl has no handler for: add {}; a handler is \
                 `async fn on_<event>(&self, cx: &mut evc::HandlerContext<'_>, payload: P) -> \
                 Result<(), evc::HandlerError>`, P a payload type of the event",
                consumer.name,
                list.join(", ")
            ),
        ));
    }
    handlers
}

/// The method as a handler, or an error at the part of its signature that is wrong.
fn shape<'a>(
    method: &'a ImplItemFn,
    subscribed: &'a Subscribed,
) -> Result<Handler<'a>, syn::Error> {
    let sig = &method.sig;
    let name = &subscribed.method;
    let expected = format!(
        "`async fn {name}(&self, cx: &mut evc::HandlerContext<'_>, payload: P) -> Result<(), \
         evc::HandlerError>`, P a payload type of {}",
        subscribed.label
    );
    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            format!("handler `{name}` must be an `async fn`: {expected}"),
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            format!("handler `{name}` cannot be generic: {expected}"),
        ));
    }
    let receiver_ok = matches!(
        sig.inputs.first(),
        Some(FnArg::Receiver(receiver))
            if matches!(receiver.kind, ReceiverKind::Reference(_, _, None))
    );
    if !receiver_ok {
        let error = match sig.inputs.first() {
            Some(first) => syn::Error::new_spanned(first, "a handler takes `&self`"),
            None => syn::Error::new_spanned(&sig.ident, "a handler takes `&self`"),
        };
        return Err(syn::Error::new(
            error.span(),
            format!("handler `{name}` must take `&self` first: {expected}"),
        ));
    }
    let typed: Vec<&Type> = sig
        .inputs
        .iter()
        .skip(1)
        .filter_map(|input| match input {
            FnArg::Typed(typed) => Some(&*typed.ty),
            FnArg::Receiver(_) => None,
        })
        .collect();
    let [context, payload] = typed[..] else {
        // At the first argument too many, or at the lone one that stands for two.
        let span = match typed.len() {
            0 => sig.ident.span(),
            1 => typed[0].span(),
            _ => typed[2].span(),
        };
        return Err(syn::Error::new(
            span,
            format!(
                "handler `{name}` takes the handler context and the payload after `&self`: \
                 {expected}"
            ),
        ));
    };
    let output = match &sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => {
            return Err(syn::Error::new(
                sig.paren_token.span.close(),
                format!("handler `{name}` must return `Result<(), evc::HandlerError>`: {expected}"),
            ));
        }
    };
    Ok(Handler {
        subscribed,
        method,
        context,
        payload,
        output,
    })
}

/// The store the block serves: the one its handlers' contexts name
/// (`&mut evc::HandlerContext<'_, SqliteStore>`), PostgreSQL when they name none (the
/// context's default). Handlers naming different stores are an error at the second.
fn store(handlers: &[Handler<'_>]) -> syn::Result<Type> {
    let mut named: Option<&Type> = None;
    for handler in handlers {
        let Some(store) = context_store(handler.context) else {
            continue;
        };
        match named {
            Some(first) if quote!(#first).to_string() != quote!(#store).to_string() => {
                return Err(syn::Error::new_spanned(
                    store,
                    format!(
                        "the handlers of one `#[evc::consumer]` block serve one store: `{}` \
                         here, `{}` in an earlier handler",
                        quote!(#store),
                        quote!(#first)
                    ),
                ));
            }
            _ => named = Some(store),
        }
    }
    Ok(named
        .cloned()
        .unwrap_or_else(|| syn::parse_quote!(::evc::PgStore)))
}

/// The store argument of a handler context type (`&mut HandlerContext<'_, S>` gives `S`).
fn context_store(context: &Type) -> Option<&Type> {
    let Type::Reference(reference) = context else {
        return None;
    };
    let Type::Path(path) = &*reference.elem else {
        return None;
    };
    let syn::PathArguments::AngleBracketed(arguments) = &path.path.segments.last()?.arguments
    else {
        return None;
    };
    arguments.args.iter().find_map(|argument| match argument {
        syn::GenericArgument::Type(store) => Some(store),
        _ => None,
    })
}

/// The `evc::DynHandler` and `evc::Consumer` impls for `store`, and one constant per handler
/// that fails to evaluate when the payload type is not of the subscribed event type and
/// majors.
fn serve(self_ty: &Type, name: &LitStr, store: &Type, handlers: &[Handler<'_>]) -> TokenStream {
    let mut assertions = Vec::new();
    let mut arms = Vec::new();
    for handler in handlers {
        let Handler {
            subscribed,
            method,
            context,
            payload,
            output,
        } = handler;
        let event = &subscribed.event;
        let majors = &subscribed.majors;
        let versions = &subscribed.versions;
        let method_ident = &method.sig.ident;
        let wrong_event = format!(
            "the payload type of `{}` is not an `{event}` event: `{}` subscribes to {}; use a \
             `#[derive(evc::Event)]` struct with `event = \"{event}\"` or the generated payload \
             type",
            subscribed.method,
            name.value(),
            subscribed.label
        );
        let wrong_major = format!(
            "the payload type of `{}` has a major version `{}` does not subscribe to: {} admits \
             major {}",
            subscribed.method,
            name.value(),
            subscribed.label,
            majors
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        assertions.push(quote_spanned! {payload.span()=>
            const _: () = {
                ::std::assert!(
                    ::evc::__private::same_str(
                        <#payload as ::evc::RegisteredEvent>::EVENT_TYPE,
                        #event,
                    ),
                    #wrong_event
                );
                ::std::assert!(
                    ::evc::__private::major_in(
                        <#payload as ::evc::RegisteredEvent>::VERSION,
                        &[#(#majors),*],
                    ),
                    #wrong_major
                );
            };
        });
        let handled_version = quote_spanned! {payload.span()=>
            <#payload as ::evc::RegisteredEvent>::VERSION
        };
        let decode = quote_spanned! {payload.span()=>
            ::evc::__private::decode::<#payload>(&claimed.payload)?
        };
        let context_arg = quote_spanned!(context.span()=> &mut context);
        // Spanned at the return type: a handler returning something else is a type mismatch
        // there.
        let call = quote_spanned! {*output=>
            ::evc::__private::handled(self.#method_ident(#context_arg, payload).await)
        };
        arms.push(quote! {
            #event => {
                if !::evc::__private::accepts(
                    &delivery.version,
                    &[#(#versions),*],
                    #handled_version,
                ) {
                    return ::std::result::Result::Err(::evc::HandlerError::new(
                        ::evc::FailureClass::Scope,
                        "version_not_subscribed",
                    ));
                }
                let payload = #decode;
                #call
            }
        });
    }
    quote! {
        #(#assertions)*

        impl ::evc::DynHandler<#store> for #self_ty {
            fn handle<'a>(
                &'a self,
                mut context: ::evc::HandlerContext<'a, #store>,
            ) -> ::evc::BoxFuture<'a, ::std::result::Result<(), ::evc::HandlerError>> {
                ::std::boxed::Box::pin(async move {
                    let claimed = context.claimed;
                    let delivery = &claimed.delivery;
                    match delivery.event_type.as_str() {
                        #(#arms)*
                        _ => ::std::result::Result::Err(::evc::HandlerError::new(
                            ::evc::FailureClass::Scope,
                            "event_not_subscribed",
                        )),
                    }
                })
            }
        }

        impl ::evc::Consumer<#store> for #self_ty {
            const NAME: &'static str = #name;
        }
    }
}
