//! evc-runtime: what running code needs from the contracts.
//!
//! Generated code (`evc generate`) fills the `'static` registry descriptors of [`registry`],
//! builds [`OutgoingEvent`]s in its producer functions and routes deliveries to consumer
//! handlers that answer with a [`HandlerError`] when they fail. This crate depends on neither
//! evc-codegen nor any code-generation crate.

pub mod handler;
pub mod publish;
pub mod registry;
pub mod trace;

pub use handler::{Delivery, FailureClass, HandlerError};
pub use publish::{OutgoingEvent, PayloadError, Publish};
pub use registry::{
    ConsumerDescriptor, ConsumerMode, EventDescriptor, HandlerKind, Registry,
    RetryPolicyDescriptor, SubscriptionDescriptor, VersionDescriptor,
};
pub use trace::{TraceContext, TraceContextError};

/// A user type that `#[derive(evc::Event)]` checked against a registered event type and version.
pub trait RegisteredEvent {
    /// The event type (`iu.born`).
    const EVENT_TYPE: &'static str;
    /// The exact contract version the type was checked against.
    const VERSION: &'static str;
}
