//! The HTTP API: CDAP-style `/v3` paths over the services.
//!
//! Handlers are thin: extract, call a service, serialize. They never touch the store directly.
//! Unknown paths answer a JSON 404 and known paths with a wrong method a JSON 405; every error
//! goes through [`error::ApiError`]. Every path but `/v3/health` needs
//! `Authorization: Bearer <token>` and the right its row of the route table names.
//!
//! - [`routes`]: the route table; one file of handlers per resource ([`namespaces`],
//!   [`profiles`], [`preferences`], [`apps`], [`runs`], [`clusters`], [`templates`],
//!   [`securekeys`], [`system`]);
//! - [`state`]: what handlers reach; [`body`]: request bodies; [`error`]: the one error table;
//! - [`guard`]: who calls and whether it may; [`middleware`] and [`origin`]: the origin
//!   guard, the request log; [`forward`]: commands for a run another server owns;
//!   [`bodies`]: each address's share of requests; [`streams`]: the live event streams' share.
//!
//! The web UI (`crate::ui`) is served beside it, on the same route rows, guard and errors.

pub mod apps;
pub mod bodies;
pub mod body;
pub mod clusters;
pub mod contract;
pub mod error;
pub mod forward;
pub mod guard;
pub mod middleware;
pub mod namespaces;
pub mod openapi;
pub mod origin;
pub mod pattern;
pub mod preferences;
pub mod profiles;
pub mod route;
pub mod routes;
pub mod runs;
pub mod schedules;
pub mod securekeys;
pub mod state;
pub mod streams;
pub mod system;
pub mod templates;
pub mod tls;
pub mod tokens;
pub mod usage;

pub use middleware::{guard_origin, log_request};
pub use routes::configure;
pub use state::AppState;
