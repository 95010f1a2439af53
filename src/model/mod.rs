//! Plain types and their validation: names, namespaces, apps, preference scopes, profiles,
//! property values and secret references, templates, runs, operations, plans, secure keys, and
//! the built-in files. Validation errors are [`invalid::Invalid`].

/// `Display` as the type's serde name (`SUCCEEDED`, `install`), the one spelling the API,
/// the store and the CLI share.
macro_rules! display_as_serde {
    ($($t:ty),*) => {$(
        impl ::std::fmt::Display for $t {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let v = serde_json::to_value(self).map_err(|_| ::std::fmt::Error)?;
                f.write_str(v.as_str().unwrap_or_default())
            }
        }
    )*};
}

pub mod access;
pub mod app;
pub mod builtin;
pub mod endpoint;
pub mod event;
pub mod invalid;
pub mod metrics;
pub mod names;
pub mod namespace;
pub mod operation;
pub mod plan;
pub mod preference;
pub mod price;
pub mod profile;
pub mod property;
pub mod retry;
pub mod run;
pub mod schedule;
pub mod seconds;
pub mod secure;
pub mod server;
pub mod service;
pub mod sweep;
pub mod template;
pub mod usage;
pub mod view;
