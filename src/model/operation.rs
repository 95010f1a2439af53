//! The audit log of cluster operations: every operation on a run's cluster, its frozen plan,
//! the cluster's state before and after it, and every attempt of every task.
//!
//! An operation record (`Operations` table, `<run>/<id>`) is written when the operation
//! begins, with its plan, and again when it ends; an attempt record (`Attempts` table,
//! `<run>/<id>/<task>/<attempt>`) when the attempt starts and when it ends. Task status is
//! derived from the attempts, so it cannot disagree with them. A planner resuming after a
//! crash reads both: tasks whose last attempt succeeded are not run again, and an attempt left
//! open by the crash is closed as failed.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::plan::{Action, ClusterOperation, ClusterTask, NodeRecord, ResourceStatus};

/// How a cluster operation ended, as its planner reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpOutcome {
    Done,
    Failed(String),
    Cancelled,
    /// It failed or was cancelled, and so did its rollback: the cluster needs attention.
    RollbackFailed(String),
}

/// Where an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OpStatus {
    Running,
    Succeeded,
    Failed,
    /// Cancelled: by an operator (its work then rolled back) or by the run's stop.
    Cancelled,
}

/// An operator's request to cancel a running operation, recorded before it is answered so
/// that a restart carries it out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelRequest {
    /// The token that asked.
    pub by: String,
    /// When (epoch seconds with fractions).
    pub at: f64,
}

/// How one attempt of a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AttemptStatus {
    Succeeded,
    Failed,
    TimedOut,
}

/// A task's status, derived from its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskStatus {
    Pending,
    Running,
    Succeeded,
    Failed,
}

display_as_serde!(OpStatus, AttemptStatus, TaskStatus);

/// One node of a cluster snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotNode {
    pub name: String,
    pub status: ResourceStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    pub services: BTreeSet<String>,
}

/// The cluster's state at one moment: its live nodes and their services, and its config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Epoch seconds with fractions.
    pub taken: f64,
    pub nodes: Vec<SnapshotNode>,
    #[serde(default)]
    pub config: serde_json::Value,
}

impl Snapshot {
    /// The cluster as the store shows it now: every node whose resource may exist.
    pub fn take(
        nodes: &[NodeRecord],
        layout: &BTreeMap<String, BTreeSet<String>>,
        config: &serde_json::Value,
        now: f64,
    ) -> Self {
        Self {
            taken: now,
            nodes: nodes
                .iter()
                .filter(|n| n.may_exist())
                .map(|n| SnapshotNode {
                    name: n.node.clone(),
                    status: n.status,
                    id: n.id.clone(),
                    address: n.address.clone(),
                    services: layout.get(&n.node).cloned().unwrap_or_default(),
                })
                .collect(),
            config: config.clone(),
        }
    }
}

/// One operation on a run's cluster, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationRecord {
    pub id: u32,
    pub operation: ClusterOperation,
    pub status: OpStatus,
    /// The operation this one undoes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<u32>,
    /// The operation that undid this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_by: Option<u32>,
    /// What was asked (nodes to add or remove, a new config), as given.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub request: serde_json::Value,
    pub created: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The plan, frozen when the operation began.
    pub tasks: Vec<ClusterTask>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Snapshot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Snapshot>,
    /// The token that asked for it; none for what the run's lifecycle did on its own (the
    /// create at start, the delete at the end, a rollback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// An operator asked to cancel it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<CancelRequest>,
    /// Places a create found without room: the rest of the operation skips them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<Blocked>,
    /// Nodes a create gave up for want of capacity, the cluster still at `minNodes` or more
    /// without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedNode>,
}

/// A place (a zone on a market, or a whole region's market) a create found full.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema
)]
#[serde(rename_all = "camelCase")]
pub struct Blocked {
    /// The zone; none for the provisioner's own zone or, with `region`, every zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// `on-demand` or `spot`.
    pub market: String,
    /// The whole region was full: every zone on this market is skipped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub region: bool,
    /// The node whose create found it full, when (epoch milliseconds), and what the cloud said.
    pub node: String,
    pub at_ms: u64,
    pub error: String,
}

/// A node given up for want of capacity.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema
)]
#[serde(rename_all = "camelCase")]
pub struct DroppedNode {
    pub node: String,
    pub reason: String,
}

/// One attempt of one task, as stored and shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptRecord {
    /// When the task became ready for this attempt (epoch seconds with fractions).
    pub queued: f64,
    pub started: f64,
    #[serde(default)]
    pub finished: Option<f64>,
    #[serde(default)]
    pub status: Option<AttemptStatus>,
    #[serde(default)]
    pub duration: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the task learnt (a provider id, an address, facts an action reported).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub result: BTreeMap<String, String>,
    /// The end of the action's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl AttemptRecord {
    /// An attempt that became ready at `queued` and started at `started`, still open.
    pub fn open(queued: f64, started: f64) -> Self {
        Self {
            queued,
            started,
            finished: None,
            status: None,
            duration: None,
            error: None,
            result: BTreeMap::new(),
            output: None,
        }
    }

    /// Closes the attempt.
    pub fn finish(&mut self, status: AttemptStatus, error: Option<String>, now: f64) {
        self.finished = Some(now);
        self.duration = Some((now - self.started).max(0.0));
        self.status = Some(status);
        self.error = error;
    }
}

/// A task's status from its attempts, given whether its operation is still running.
pub fn task_status(attempts: &[AttemptRecord], op_running: bool) -> TaskStatus {
    match attempts.last() {
        None => TaskStatus::Pending,
        Some(a) if a.finished.is_none() => TaskStatus::Running,
        Some(a) if a.status == Some(AttemptStatus::Succeeded) => TaskStatus::Succeeded,
        // Failed, with a retry to come while the operation runs.
        Some(_) if op_running => TaskStatus::Running,
        Some(_) => TaskStatus::Failed,
    }
}

/// One task of an operation, as the API shows it and the CLI reads it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    pub id: usize,
    pub node: String,
    pub action: Action,
    pub service: Option<String>,
    pub depends_on: Vec<usize>,
    pub status: TaskStatus,
    pub attempts: Vec<AttemptRecord>,
}

/// One operation, as the API shows it and the CLI reads it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationView {
    pub id: u32,
    pub operation: ClusterOperation,
    pub status: OpStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_by: Option<u32>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub request: serde_json::Value,
    pub created: f64,
    pub finished: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub tasks: Vec<TaskView>,
    pub before: Option<Snapshot>,
    pub after: Option<Snapshot>,
    /// The token that asked for it, if someone did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Who asked to cancel it, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<CancelRequest>,
    /// Places its creates found without room, skipped by the rest of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<Blocked>,
    /// Nodes it gave up for want of capacity (the cluster kept `minNodes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedNode>,
}

impl OperationView {
    pub fn new(op: OperationRecord, mut attempts: BTreeMap<usize, Vec<AttemptRecord>>) -> Self {
        let running = op.status == OpStatus::Running;
        let tasks = op
            .tasks
            .into_iter()
            .map(|t| {
                let tried = attempts.remove(&t.id).unwrap_or_default();
                TaskView {
                    status: task_status(&tried, running),
                    id: t.id,
                    node: t.node,
                    action: t.action,
                    service: t.service,
                    depends_on: t.depends_on,
                    attempts: tried,
                }
            })
            .collect();
        Self {
            id: op.id,
            operation: op.operation,
            status: op.status,
            rollback_of: op.rollback_of,
            rolled_back_by: op.rolled_back_by,
            request: op.request,
            created: op.created,
            finished: op.finished,
            error: op.error,
            tasks,
            before: op.before,
            after: op.after,
            actor: op.actor,
            cancel: op.cancel,
            blocked: op.blocked,
            dropped: op.dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(status: Option<AttemptStatus>) -> AttemptRecord {
        let mut a = AttemptRecord::open(1.0, 1.0);
        if let Some(s) = status {
            a.finish(s, None, 2.0);
        }
        a
    }

    #[test]
    fn task_status_follows_the_last_attempt() {
        use AttemptStatus::*;
        assert_eq!(task_status(&[], true), TaskStatus::Pending);
        assert_eq!(task_status(&[attempt(None)], true), TaskStatus::Running);
        let failed_then_ok = [attempt(Some(Failed)), attempt(Some(Succeeded))];
        assert_eq!(task_status(&failed_then_ok, false), TaskStatus::Succeeded);
        assert_eq!(
            task_status(&[attempt(Some(TimedOut))], true),
            TaskStatus::Running
        );
        assert_eq!(
            task_status(&[attempt(Some(TimedOut))], false),
            TaskStatus::Failed
        );
    }
}
