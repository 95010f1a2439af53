//! Cluster operations as plans: the node-level tasks an operation needs and their order.
//!
//! Pure functions over plain data, no IO and no actors. [`cluster`] turns an operation on a
//! cluster (bare nodes, or a template's services on them) into a DAG of tasks, says which may
//! start (predecessors done, at most one task per node), and builds rollback plans;
//! [`resource`] is the per-resource lifecycle the node tasks walk, and [`answer`] what a
//! provider's answer changes of a resource's record.

pub mod answer;
pub mod cluster;
pub mod resource;
