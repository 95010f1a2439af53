//! Plain types and their validation: names, profiles, apps, templates, runs, operations.
pub mod builtin;
pub mod invalid;
pub mod names;
pub mod operation;
pub mod plan;
pub mod profile;
pub mod property;
pub mod run;
pub mod secure;
pub mod template;
pub mod time;
