//! Plain types and their validation: names, namespaces, apps, preference scopes, profiles,
//! property values and secret references, templates, runs, operations, plans, secure keys, and
//! the built-in files. Validation errors are [`invalid::Invalid`].

pub mod app;
pub mod builtin;
pub mod invalid;
pub mod names;
pub mod namespace;
pub mod operation;
pub mod plan;
pub mod preference;
pub mod profile;
pub mod property;
pub mod run;
pub mod secure;
pub mod template;
pub mod time;
pub mod view;
