//! The services: one module per resource. Each validates a request, then applies its rules
//! inside one store write, so check-then-write is atomic. [`error`] is the layer's error.
pub mod apps;
pub mod builtin;
pub mod error;
pub mod namespaces;
pub mod preferences;
pub mod profiles;
pub mod runs;
pub mod secure;
pub mod templates;
