//! Pure decisions over plain data, no IO: profile resolution ([`resolve`]), who may run
//! something on the server's [`host`], the layout
//! [`solver`] (and the [`placement`] of services added to a live cluster), cluster
//! operation [`plan`]s and the per-resource lifecycle, the run
//! [`lifecycle`], the [`admission`] of cluster operations, an operation's [`outcome`] (and
//! rollback), cluster [`resize`]s, what a [`schedule`] fires and when, a [`service`]'s
//! state on a node and its heals, where a node's create goes when places are full
//! ([`capacity`]), the [`queue`] of runs waiting for a limit, and which runs a server [`claim`]s when several share the
//! store.

pub mod admission;
pub mod capacity;
pub mod claim;
pub mod host;
pub mod lifecycle;
pub mod outcome;
pub mod placement;
pub mod plan;
pub mod pool;
pub mod queue;
pub mod resize;
pub mod resolve;
pub mod reuse;
pub mod schedule;
pub mod service;
pub mod solver;
pub mod usage;
