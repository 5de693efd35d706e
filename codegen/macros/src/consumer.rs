//! `#[consumer("name")]` on an impl block: the consumer exists and every `on_<event>` method is
//! for an event type it subscribes to.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{ImplItem, ItemImpl, LitStr};

use crate::contracts;

/// Checks and passes through one impl block; errors come back beside it unchanged.
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
                let handlers: Vec<String> = consumer
                    .subscriptions
                    .iter()
                    .map(|s| evc_codegen::naming::handler_method(&s.event))
                    .collect();
                for item in &block.items {
                    let ImplItem::Fn(method) = item else { continue };
                    let method_name = method.sig.ident.to_string();
                    if method_name.starts_with("on_") && !handlers.contains(&method_name) {
                        let hint = evc_codegen::names::suggestion(
                            &method_name,
                            handlers.iter().map(String::as_str),
                        );
                        errors.push(syn::Error::new_spanned(
                            &method.sig.ident,
                            format!(
                                "`{method_name}` handles an event type `{}` does not subscribe to; {hint}",
                                consumer.name
                            ),
                        ));
                    }
                }
            }
        },
    }
    let compile_errors = errors.iter().map(syn::Error::to_compile_error);
    quote! {
        #(#compile_errors)*
        #tracking
        #block
    }
}
