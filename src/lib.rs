//! ebb: a runtime for ephemeral clusters.
//!
//! An admin defines *profiles* (a provisioner and its properties, keepalive and timeout); each
//! program run resolves its profile through a hierarchy of preferences, gets a cluster,
//! runs, and the cluster is torn down. See `DESIGN.md` for the whole picture.
//!
//! The parts, in the order a request meets them:
//! - [`api`]: the HTTP layer (actix-web, CDAP-style `/v3` paths) and the one table that maps
//!   errors to status codes.
//! - [`namespace`], [`profile`], [`preference`], [`app`], [`run`]: the services; validation and
//!   rules, each check-then-write done atomically in the store.
//! - [`run::lifecycle`]: the pure run state machine; [`plan`]: the pure cluster-operation
//!   plans and per-resource lifecycle.
//! - [`runtime`]: the actors (a supervisor per run, a planner per operation, a task runner per
//!   node task) and the detached program launcher.
//! - [`profile::resolve`]: the pure function that picks a run's profile and properties.
//! - [`provisioner`]: the registry of built-in provisioners and their widgets.
//! - [`store`]: the redb store with its single group-committing writer.
//! - [`server`]: wiring, start-up and two-phase shutdown; [`cli`]: the `ebb` command line.
//! - [`template`]: cluster templates (services, dependencies, hardware and image types,
//!   constraints) and their validation.
//! - [`names`], [`error`]: shared name rules and the services' error type.

pub mod api;
pub mod cli;
pub mod model;
pub mod rules;
pub mod runtime;
pub mod server;
pub mod service;
pub mod store;
