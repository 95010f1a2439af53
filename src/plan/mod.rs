//! Cluster operations as plans: the node-level tasks an operation needs and their order.
//!
//! Pure functions over plain data, no IO and no actors. [`plan`] turns an operation on a list
//! of nodes into a DAG of tasks; [`ready`] says which tasks may start, given which are done
//! and which are running (a task starts when its predecessors are done, at most one task per
//! node at a time). [`resource`] is the per-resource lifecycle those tasks walk. The planner
//! issue deepens [`plan`] (services, dependency order, rollback); the actors that execute a
//! plan do not change when it does.

pub mod cluster;
pub mod resource;

use serde::{Deserialize, Serialize};

/// A cluster operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Operation {
    Create,
    Delete,
}

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

/// One task of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub kind: TaskKind,
    pub node: String,
    /// Indexes of the tasks that must be done first.
    pub after: Vec<usize>,
}

/// The tasks of `operation` over `nodes`: per node `create → confirm`, or `delete`.
pub fn plan(operation: Operation, nodes: &[String]) -> Vec<Task> {
    let mut tasks = Vec::new();
    for node in nodes {
        match operation {
            Operation::Create => {
                let create = tasks.len();
                tasks.push(Task {
                    kind: TaskKind::Create,
                    node: node.clone(),
                    after: Vec::new(),
                });
                tasks.push(Task {
                    kind: TaskKind::Confirm,
                    node: node.clone(),
                    after: vec![create],
                });
            }
            Operation::Delete => tasks.push(Task {
                kind: TaskKind::Delete,
                node: node.clone(),
                after: Vec::new(),
            }),
        }
    }
    tasks
}

/// Progress of one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Waiting,
    Running,
    Done,
}

/// The tasks that may start now: waiting, every predecessor done, and no other task of the
/// same node running.
pub fn ready(tasks: &[Task], progress: &[Progress]) -> Vec<usize> {
    let mut busy: Vec<&str> = tasks
        .iter()
        .zip(progress)
        .filter(|(_, p)| **p == Progress::Running)
        .map(|(t, _)| t.node.as_str())
        .collect();
    let mut out = Vec::new();
    for (i, task) in tasks.iter().enumerate() {
        if progress[i] == Progress::Waiting
            && task.after.iter().all(|a| progress[*a] == Progress::Done)
            && !busy.contains(&task.node.as_str())
        {
            busy.push(&task.node);
            out.push(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<String> {
        vec!["master".into(), "worker-1".into()]
    }

    #[test]
    fn create_confirms_each_node_after_creating_it() {
        let tasks = plan(Operation::Create, &nodes());
        let shape: Vec<(TaskKind, &str, Vec<usize>)> = tasks
            .iter()
            .map(|t| (t.kind, t.node.as_str(), t.after.clone()))
            .collect();
        assert_eq!(
            shape,
            vec![
                (TaskKind::Create, "master", vec![]),
                (TaskKind::Confirm, "master", vec![0]),
                (TaskKind::Create, "worker-1", vec![]),
                (TaskKind::Confirm, "worker-1", vec![2]),
            ]
        );
        assert!(plan(Operation::Delete, &[]).is_empty());
    }

    #[test]
    fn tasks_start_when_predecessors_are_done_one_per_node() {
        use Progress::*;
        let tasks = plan(Operation::Create, &nodes());
        assert_eq!(ready(&tasks, &[Waiting; 4]), vec![0, 2]);
        assert_eq!(ready(&tasks, &[Running, Waiting, Done, Waiting]), vec![3]);
        assert_eq!(ready(&tasks, &[Done, Waiting, Running, Waiting]), vec![1]);
        assert_eq!(
            ready(&tasks, &[Done, Done, Done, Done]),
            Vec::<usize>::new()
        );
    }
}
