//! The services: one module per resource. Each validates a request, then applies its rules
//! inside one store write, so check-then-write is atomic. Services never call each other:
//! what crosses tables (does the namespace exist, which apps does it hold, where is a profile
//! assigned) is in [`catalog`]. A run's history, operations and logs are in [`history`].
//! [`schedules`] keeps schedules; [`starts`] starts runs, by request or when a schedule fires
//! (its `scheduler`). [`error`] is the layer's error.

pub mod apps;
pub mod audit;
pub mod catalog;
pub mod error;
pub mod history;
pub mod namespaces;
pub mod overview;
pub mod preferences;
pub mod profiles;
pub mod runs;
pub mod schedules;
pub mod secure;
pub mod servers;
pub mod starts;
pub mod templates;
pub mod tokens;
pub mod upgrade;
pub mod usage;
