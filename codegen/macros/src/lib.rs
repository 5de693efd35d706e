//! evc-macros: code that emits or consumes an event the contracts do not register does not
//! compile.
//!
//! A thin shell over evc-codegen's loader, in serde_derive's stages: parse the attributes
//! ([`attr`]), load the contracts ([`contracts`]), check, expand. Every error points at the
//! offending token, all errors of one item are reported together, and on error a stub is still
//! emitted so one mistake gives one message. Use the macros through the `evc` facade crate.

mod attr;
mod consumer;
mod contracts;
mod event;
mod types;

use proc_macro::TokenStream;

/// Checks a payload struct against a registered event type and version, and implements
/// `evc::RegisteredEvent` for it.
///
/// ```ignore
/// #[derive(evc::Event, serde::Serialize)]
/// #[evc(event = "iu.born", version = "1.0.0")]
/// struct Born { iu_unit_id: uuid::Uuid, /* ... */ }
/// ```
#[proc_macro_derive(Event, attributes(evc))]
pub fn derive_event(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    event::expand(&input).into()
}

/// Serves a registered consumer with the `on_<event>` methods of an impl block: checks that
/// every subscribed event type has a handler, of the handler shape, whose payload type is of the
/// subscribed event type and majors, and implements `evc::DynHandler` and `evc::Consumer` for
/// the type (give it to `Dispatcher::serve`).
///
/// ```ignore
/// #[evc::consumer("worker.notification.iu")]
/// impl Notifier {
///     async fn on_iu_born(
///         &self,
///         cx: &mut evc::HandlerContext<'_>,
///         payload: Born, // #[derive(evc::Event)] for iu.born 1.x, or evc_generated's IuBornV1
///     ) -> Result<(), evc::HandlerError> { /* ... */ Ok(()) }
///     // ... one handler per subscribed event type
/// }
/// ```
#[proc_macro_attribute]
pub fn consumer(args: TokenStream, item: TokenStream) -> TokenStream {
    consumer::expand(args.into(), item.into()).into()
}
