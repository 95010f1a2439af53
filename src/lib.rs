//! ebb: a runtime for ephemeral clusters.
//!
//! An admin defines *profiles* (a provisioner and its properties, keepalive and timeout); each
//! program run resolves its profile through a hierarchy of preferences, gets a cluster,
//! runs, and the cluster is torn down. See `DESIGN.md` for the whole picture.
//!
//! The crate is in layers; each uses only the layers below it (`tests/layers.rs` checks):
//! ```text
//! server.rs  wiring: start-up, shutdown, the serve configuration
//! ui         the web UI's pages under `/ui`, on the API's route rows, guard and errors
//! api | cli  HTTP routes per resource and the one error table | the `ebb` command line
//! service    one module per resource: validation and check-then-write rules in the store;
//!            the catalog for what crosses tables
//! runtime    actors (supervisor per run, planner per operation, task runner per node task),
//!            program launch, the janitor, the provisioner registry
//! store      one Backend trait, two backends: redb (redb/, a group-committing writer) and etcd
//!            (etcd/, optimistic transactions); tables and their keys, the audit and event
//!            logs, the secure store's cipher, copying an installation between stores
//! rules      pure decisions: profile resolution, layout solver, plans, the run lifecycle,
//!            the admission of cluster operations, an operation's outcome, cluster resizes
//! model      plain types and their validation: names, profiles, properties, templates,
//!            runs, operations, plans, events, sweeps, the views the API returns and the CLI
//!            reads, built-in files
//! ```
//! Provisioners live in their own crates under `provisioners/` (the SPI and one per plugin).

pub mod api;
pub mod cli;
pub mod model;
pub mod rules;
pub mod runtime;
pub mod server;
pub mod service;
pub mod store;
pub mod ui;
