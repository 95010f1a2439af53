//! Cluster operations as plans: the node-level tasks an operation needs and their order.
//!
//! Pure functions over plain data, no IO and no actors. [`cluster`] turns an operation on a
//! cluster (bare nodes, or a template's services on them) into a DAG of tasks, says which may
//! start (predecessors done, at most one task per node), and builds rollback plans;
//! [`resource`] is the per-resource lifecycle the node tasks walk.

pub mod cluster;
pub mod resource;

use serde::{Deserialize, Serialize};

/// What one task does to one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TaskKind {
    /// Request the node's resource (or adopt the one an earlier attempt made).
    Create,
    /// Wait until the resource is ready and record its address.
    Confirm,
    /// Delete the resource and wait until it is gone.
    Delete,
}

/// Progress of one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Waiting,
    Running,
    Done,
}
