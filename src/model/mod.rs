//! Plain types and their validation: names, profiles, apps, templates, runs, operations.
pub mod names;
pub mod operation;
pub mod profile;
pub mod run;
pub mod template;
pub mod time;
