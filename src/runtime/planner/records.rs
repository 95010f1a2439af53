//! An operation's records, for its planner: the plan frozen in the audit log before any task
//! runs ([`prepare`], a new operation or one a restart interrupted), what a rollback undoes
//! and its record, and the secure context the tasks' calls get. Every function here reads or
//! writes the store; none acts on the outside world.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::spec::{OpSpec, PlanInput};
use crate::model::event::EventKind;
use crate::model::operation::{
    self, AttemptRecord, AttemptStatus, OpOutcome, OpStatus, OperationRecord, Snapshot, TaskStatus,
};
use crate::model::plan::{
    Action, ClusterOperation, ClusterTask, NodeRecord, PlanNode, Progress, ResourceStatus,
};
use crate::model::service::ServiceRecord;
use crate::model::template::Template;
use crate::rules::outcome::{self, Resume};
use crate::rules::plan::cluster;
use crate::runtime::deps::Deps;
use crate::store::audit;
use crate::store::clock::now_f64;
use crate::store::events;
use crate::store::keys;
use crate::store::{Read, StoreError, Table, Txn};

/// The error of an attempt a restart cut short.
pub(super) const INTERRUPTED: &str = "interrupted by a restart";

/// The operation being executed.
#[derive(Debug)]
pub(super) struct Current {
    pub(super) op: OperationRecord,
    pub(super) progress: Vec<Progress>,
    /// Attempts each task had before this planner started.
    pub(super) prior: Vec<u32>,
    /// The last of those that failed, per task (not counting one a restart cut short).
    pub(super) prior_failure: Vec<Option<u32>>,
    pub(super) config: serde_json::Value,
    /// When this is a rollback a restart interrupted: the operation it undoes (the planner
    /// begins in [`outcome::Phase::Undoing`]).
    pub(super) undoing: Option<outcome::Undoing>,
}

/// How a planner begins, decided before it starts (see [`prepare`]).
#[derive(Debug)]
pub struct Prepared(pub(super) Begin, pub(super) Arc<ebb_spi::Context>);

impl Prepared {
    /// The id of the operation the planner will run, if it will run one.
    pub fn operation_id(&self) -> Option<u32> {
        match &self.0 {
            Begin::Run(cur) => Some(cur.op.id),
            Begin::Report(..) => None,
        }
    }
}

/// How the planner begins.
#[derive(Debug)]
pub(super) enum Begin {
    Run(Box<Current>),
    /// How it ended, and the nodes it gave up for want of capacity.
    Report(OpOutcome, Vec<String>),
}

/// Records the rollback of `op`, which failed: the inverse plan of the tasks that completed
/// (and of every node whose resource may exist), as a new operation with `rollbackOf`.
#[allow(clippy::too_many_arguments)]
pub(super) fn record_rollback(
    tx: &mut Txn<'_>,
    (run, cluster): (&str, &str),
    op: &mut OperationRecord,
    template: Option<&Template>,
    done: &BTreeSet<usize>,
    nodes: &[NodeRecord],
    previous: serde_json::Value,
    now: f64,
) -> Result<OperationRecord, StoreError> {
    let empty = Template::default();
    let template = template.unwrap_or(&empty);
    let tasks = match op.operation {
        // What a shrink or a remove of services took away comes back: the cluster is
        // brought back to the layout it had.
        ClusterOperation::Shrink | ClusterOperation::RemoveServices => {
            restore(tx, cluster, template, op, nodes)?
        }
        ClusterOperation::Create
        | ClusterOperation::Delete
        | ClusterOperation::Expand
        | ClusterOperation::StartServices
        | ClusterOperation::StopServices
        | ClusterOperation::RestartServices
        | ClusterOperation::Configure
        | ClusterOperation::ReplaceNode
        | ClusterOperation::AddServices
        | ClusterOperation::Repair => {
            let completed = completed(op.id, &op.tasks, done, nodes);
            cluster::rollback(template, &op.tasks, &completed)
        }
    };
    let id = audit::next_id(tx, run)?;
    op.rolled_back_by = Some(id);
    let undo = OperationRecord {
        id,
        operation: op.operation,
        status: OpStatus::Running,
        rollback_of: Some(op.id),
        rolled_back_by: None,
        request: serde_json::json!({ "config": previous }),
        created: now,
        finished: None,
        error: None,
        tasks,
        before: op.after.clone(),
        after: None,
        actor: None,
        cancel: None,
        blocked: Vec::new(),
        dropped: Vec::new(),
    };
    let ended = match op.status {
        OpStatus::Cancelled => "was cancelled",
        OpStatus::Running | OpStatus::Succeeded | OpStatus::Failed => "failed",
    };
    let note = format!(
        "operation {} ({}) {ended}; rolling back as operation {id} ({} tasks)",
        op.id,
        op.operation.name(),
        undo.tasks.len()
    );
    record(tx, run, &undo, note)?;
    Ok(undo)
}

/// The plan that undoes `op` (a shrink, a remove of services): the cluster brought back to
/// the nodes and services it had before, from what the store knows of them now
/// ([`cluster::repair`]).
fn restore<R: Read + ?Sized>(
    r: &R,
    cluster: &str,
    template: &Template,
    op: &OperationRecord,
    nodes: &[NodeRecord],
) -> Result<Vec<ClusterTask>, StoreError> {
    let Some(change) = crate::rules::resize::Change::from_request(op.operation, &op.request) else {
        return Ok(Vec::new());
    };
    let layout = layout_nodes(&change.nodes, &change.layout);
    Ok(cluster::repair(
        template,
        &layout,
        &found(r, cluster, &layout, nodes)?,
    ))
}

/// `names` with their services in `layout`.
pub(super) fn layout_nodes(
    names: &[String],
    layout: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<PlanNode> {
    names
        .iter()
        .map(|name| PlanNode {
            name: name.clone(),
            services: layout.get(name).cloned().unwrap_or_default(),
        })
        .collect()
}

/// What the store knows of cluster `cluster`, for a repair to `layout`: how each node is
/// (from its record), each service's state, and the nodes outside the layout.
pub(super) fn found<R: Read + ?Sized>(
    r: &R,
    cluster: &str,
    layout: &[PlanNode],
    nodes: &[NodeRecord],
) -> Result<cluster::Found, StoreError> {
    use cluster::NodeCondition as C;
    let by_name: BTreeMap<&str, &NodeRecord> = nodes.iter().map(|n| (n.node.as_str(), n)).collect();
    let mut found = cluster::Found::default();
    for node in layout {
        let condition = match by_name.get(node.name.as_str()).map(|r| r.status) {
            Some(ResourceStatus::Created) => C::Whole,
            Some(ResourceStatus::RequestingDelete | ResourceStatus::PollingDelete) => C::Deleting,
            // A create that did not finish: the replace deletes what is left first.
            None
            | Some(
                ResourceStatus::Deleted
                | ResourceStatus::RequestingCreate
                | ResourceStatus::PollingCreate,
            ) => C::Gone,
        };
        found.nodes.insert(node.name.clone(), condition);
    }
    for (_, s) in r.scan::<ServiceRecord>(Table::Services, &keys::of_run(cluster))? {
        found.services.insert((s.node, s.service), s.state);
    }
    found.strays = nodes
        .iter()
        .filter(|n| n.may_exist() && !layout.iter().any(|l| l.name == n.node))
        .map(|n| n.node.clone())
        .collect();
    Ok(found)
}

/// Writes a new operation's record, with a note in the run's history.
pub(super) fn record(
    tx: &mut Txn<'_>,
    run: &str,
    op: &OperationRecord,
    note: String,
) -> Result<(), StoreError> {
    tx.put(Table::Operations, &keys::operation(run, op.id), op)?;
    events::append(tx, run, EventKind::Status, None, note)
}

pub(super) fn op_config(op: &OperationRecord) -> serde_json::Value {
    op.request
        .get("config")
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

/// What a rollback of operation `op` must undo: the tasks that completed, the creation of
/// every node whose resource may exist (a create cut short may have made one), and the
/// replacement of every node this operation began to make anew.
pub(super) fn completed(
    op: u32,
    tasks: &[ClusterTask],
    done: &BTreeSet<usize>,
    nodes: &[NodeRecord],
) -> BTreeSet<usize> {
    let exists: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| n.may_exist())
        .map(|n| n.node.as_str())
        .collect();
    let mark = op.to_string();
    let replaced: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| {
            n.may_exist() && n.properties.get(crate::runtime::attempt::REPLACED) == Some(&mark)
        })
        .map(|n| n.node.as_str())
        .collect();
    tasks
        .iter()
        .filter(|t| {
            done.contains(&t.id)
                || (t.action == Action::Create && exists.contains(t.node.as_str()))
                || (t.action == Action::Replace && replaced.contains(t.node.as_str()))
        })
        .map(|t| t.id)
        .collect()
}

/// The records of cluster `cluster`'s nodes (its id: the run that made it).
pub fn node_records<R: Read + ?Sized>(r: &R, cluster: &str) -> Result<Vec<NodeRecord>, StoreError> {
    Ok(
        r.scan::<NodeRecord>(Table::Resources, &keys::of_run(cluster))?
            .into_iter()
            .map(|(_, n)| n)
            .collect(),
    )
}

/// Records the tasks done on the spot (one attempt each), without holding anything up: after
/// a crash they are simply done on the spot again.
pub(super) fn record_instant(deps: &Deps, run: &str, cur: &Current, instant: &[usize]) {
    let now = now_f64();
    let records: Vec<(String, AttemptRecord)> = instant
        .iter()
        .map(|i| {
            let mut a = AttemptRecord::open(now, now);
            a.finish(AttemptStatus::Succeeded, None, now);
            let key = keys::attempt(run, cur.op.id, *i, cur.prior[*i] + 1);
            (key, a)
        })
        .collect();
    // They need not be written together: a few at a time keeps each write small.
    for records in records.chunks(crate::store::SPLIT_WRITES) {
        let (store, records) = (deps.store.clone(), records.to_vec());
        actix::spawn(async move {
            let _ = store
                .write(move |tx| {
                    for (key, a) in &records {
                        tx.put(Table::Attempts, key, a)?;
                    }
                    Ok::<_, StoreError>(())
                })
                .await;
        });
    }
}

/// The nodes an operation plans over, as the store shows them now: every planned node for a
/// create or an expand (the new nodes of an expand have no resource yet); else the nodes whose
/// resource may exist (a delete also takes any the store knows that the run no longer lists),
/// with services only on those that came up.
pub(super) fn plan_nodes(spec: &PlanInput<'_>, records: &[NodeRecord]) -> Vec<PlanNode> {
    let by_name: BTreeMap<&str, &NodeRecord> =
        records.iter().map(|n| (n.node.as_str(), n)).collect();
    let services = |n: &str| spec.layout.get(n).cloned().unwrap_or_default();
    if matches!(
        spec.operation,
        ClusterOperation::Create | ClusterOperation::Expand | ClusterOperation::ReplaceNode
    ) {
        return spec
            .nodes
            .iter()
            .map(|n| PlanNode {
                name: n.clone(),
                services: services(n),
            })
            .collect();
    }
    let mut names: Vec<&str> = spec.nodes.iter().map(String::as_str).collect();
    if spec.operation == ClusterOperation::Delete {
        let extra = records
            .iter()
            .map(|r| r.node.as_str())
            .filter(|n| !spec.nodes.iter().any(|m| m == n));
        names.extend(extra.collect::<Vec<_>>());
    }
    names
        .into_iter()
        .filter_map(|n| {
            let record = by_name.get(n)?;
            if !record.may_exist() {
                return None;
            }
            let up = record.status == ResourceStatus::Created;
            Some(PlanNode {
                name: n.to_string(),
                services: if up { services(n) } else { BTreeSet::new() },
            })
        })
        .collect()
}

/// Reads the audit log and decides how to begin: carry on with an interrupted operation (or
/// its rollback), report one that already ended, or plan and record a new one.
pub async fn prepare(deps: Deps, spec: OpSpec) -> Result<Prepared, StoreError> {
    let context = match resolve_secrets(&deps, &spec).await? {
        Ok(context) => context,
        Err(message) => {
            let failed = Begin::Report(OpOutcome::Failed(message), Vec::new());
            return Ok(Prepared(failed, Arc::clone(&spec.context)));
        }
    };
    let run_id = spec.run.clone();
    let prepared = deps
        .store
        .write(move |tx| prepare_in(tx, &spec, Arc::clone(&context)))
        .await?;
    deps.notifier.notify(&run_id);
    Ok(prepared)
}

/// What [`prepare`] writes, in `tx`, for a caller that makes it part of its own write (the
/// supervisor's transition that starts the operation): `context` is `spec`'s with its secure
/// references resolved ([`resolve_context`]).
pub fn prepare_in(
    tx: &mut Txn<'_>,
    spec: &OpSpec,
    context: Arc<ebb_spi::Context>,
) -> Result<Prepared, StoreError> {
    if spec.resume
        && let Some(begin) = resume(tx, &spec.run, spec)?
    {
        return Ok(Prepared(begin, context));
    }
    Ok(Prepared(plan_new(tx, &spec.run, spec.clone())?, context))
}

/// The nodes operation `op` gave up for want of capacity.
pub(super) fn dropped_nodes(op: &OperationRecord) -> Vec<String> {
    op.dropped.iter().map(|d| d.node.clone()).collect()
}

/// How a restarted server takes up `spec`'s operation, if it was begun before: carry it (or
/// its rollback) on, or report how it ended. `None`: plan it anew.
pub(super) fn resume(
    tx: &mut Txn<'_>,
    run: &str,
    spec: &OpSpec,
) -> Result<Option<Begin>, StoreError> {
    let ops = audit::operations(tx, run)?;
    let Some(op) = ops
        .iter()
        .rev()
        .find(|o| o.operation == spec.operation && o.rollback_of.is_none())
    else {
        return Ok(None);
    };
    let undo = op
        .rolled_back_by
        .and_then(|id| ops.iter().find(|o| o.id == id));
    let how = outcome::resume(
        spec.operation,
        op.status,
        undo.map(|u| u.status),
        op.error.as_deref(),
    );
    Ok(match (how, undo) {
        (Resume::CarryOn, _) => {
            let cur = carry_on(tx, run, op, spec.config.clone(), None)?;
            Some(Begin::Run(Box::new(cur)))
        }
        (Resume::CarryOnRollback, Some(undo)) => {
            let previous = spec.previous_config.clone();
            let undoing = outcome::Undoing {
                error: op.error.clone().unwrap_or_default(),
                cancelled: op.status == OpStatus::Cancelled,
            };
            let cur = carry_on(tx, run, undo, previous, Some(undoing))?;
            Some(Begin::Run(Box::new(cur)))
        }
        (Resume::Report(outcome), _) => Some(Begin::Report(outcome, dropped_nodes(op))),
        (Resume::Start | Resume::CarryOnRollback, _) => None,
    })
}

/// The plan of the operation `input` describes on cluster `cluster`, whose node records are
/// `nodes`: from the template and the nodes it plans over, or, for a repair, from what the
/// store knows of every node and service. Touches nothing: a dry run plans with it too.
pub fn plan_tasks<R: Read + ?Sized>(
    r: &R,
    cluster: &str,
    input: &PlanInput<'_>,
    nodes: &[NodeRecord],
) -> Result<Vec<ClusterTask>, StoreError> {
    let empty = Template::default();
    let template = input.template.unwrap_or(&empty);
    Ok(if input.operation == ClusterOperation::Repair {
        let layout = layout_nodes(input.nodes, input.layout);
        cluster::repair(template, &layout, &found(r, cluster, &layout, nodes)?)
    } else {
        cluster::plan_selected(
            input.operation,
            template,
            &plan_nodes(input, nodes),
            input.changed,
            input.selection,
        )
    })
}

/// Plans `spec`'s operation over the run's nodes and records it as running.
pub(super) fn plan_new(tx: &mut Txn<'_>, run: &str, spec: OpSpec) -> Result<Begin, StoreError> {
    let nodes = node_records(tx, &spec.cluster)?;
    let tasks = plan_tasks(tx, &spec.cluster, &spec.plan_input(), &nodes)?;
    let now = now_f64();
    let id = audit::next_id(tx, run)?;
    let mut request = spec.request.clone();
    if let serde_json::Value::Object(m) = &mut request {
        m.insert("config".into(), spec.config.clone());
    } else if request.is_null() {
        request = serde_json::json!({ "config": spec.config });
    }
    let op = OperationRecord {
        id,
        operation: spec.operation,
        status: OpStatus::Running,
        rollback_of: None,
        rolled_back_by: None,
        request,
        created: now,
        finished: None,
        error: None,
        before: Some(Snapshot::take(
            &nodes,
            &spec.layout,
            &spec.previous_config,
            now,
        )),
        after: None,
        tasks,
        actor: spec.act.as_ref().map(|a| a.actor.clone()),
        cancel: None,
        blocked: Vec::new(),
        dropped: Vec::new(),
    };
    if let Some(act) = &spec.act {
        crate::store::changes::record(tx, act)?;
    }
    let note = format!(
        "operation {id} ({}) planned: {} tasks",
        op.operation.name(),
        op.tasks.len()
    );
    record(tx, run, &op, note)?;
    let size = op.tasks.len();
    Ok(Begin::Run(Box::new(Current {
        op,
        progress: vec![Progress::Waiting; size],
        prior: vec![0; size],
        prior_failure: vec![None; size],
        config: spec.config,
        undoing: None,
    })))
}

/// The operation's context with its `${secure(name)}` properties resolved in the run's
/// namespace, or why they cannot be.
pub(super) async fn resolve_secrets(
    deps: &Deps,
    spec: &OpSpec,
) -> Result<Result<Arc<ebb_spi::Context>, String>, StoreError> {
    resolve_context(deps, &spec.namespace, Arc::clone(&spec.context)).await
}

/// `context` with its `${secure(name)}` properties resolved in `namespace`, or why they
/// cannot be.
pub async fn resolve_context(
    deps: &Deps,
    namespace: &str,
    context: Arc<ebb_spi::Context>,
) -> Result<Result<Arc<ebb_spi::Context>, String>, StoreError> {
    let cipher = Arc::clone(&deps.cipher);
    let namespace = namespace.to_string();
    deps.store
        .read(move |r| {
            let resolved =
                crate::store::secure::resolve(r, &cipher, &namespace, &context.properties);
            Ok(resolved.map(|res| Arc::new(res.into_context((*context).clone()))))
        })
        .await
}

/// Picks up operation `op` where a restart left it: tasks whose last attempt succeeded are
/// done; an attempt the restart cut short is closed as failed.
pub(super) fn carry_on(
    tx: &mut Txn<'_>,
    run: &str,
    op: &OperationRecord,
    config: serde_json::Value,
    undoing: Option<outcome::Undoing>,
) -> Result<Current, StoreError> {
    let attempts = audit::attempts(tx, run, op.id)?;
    let now = now_f64();
    let mut progress = vec![Progress::Waiting; op.tasks.len()];
    let mut prior = vec![0; op.tasks.len()];
    let mut prior_failure = vec![None; op.tasks.len()];
    for (task, tried) in &attempts {
        let Some(slot) = progress.get_mut(*task) else {
            continue;
        };
        prior[*task] = tried.len() as u32;
        prior_failure[*task] = tried
            .iter()
            .enumerate()
            .rev()
            .find(|(_, a)| {
                matches!(
                    a.status,
                    Some(AttemptStatus::Failed | AttemptStatus::TimedOut)
                ) && a.error.as_deref() != Some(INTERRUPTED)
            })
            .map(|(i, _)| i as u32 + 1);
        if operation::task_status(tried, true) == TaskStatus::Succeeded {
            *slot = Progress::Done;
        }
        if let Some(last) = tried.last()
            && last.finished.is_none()
        {
            let mut closed = last.clone();
            closed.finish(AttemptStatus::Failed, Some(INTERRUPTED.into()), now);
            let key = keys::attempt(run, op.id, *task, tried.len() as u32);
            tx.put(Table::Attempts, &key, &closed)?;
        }
    }
    // The tasks of a node given up for want of capacity are over.
    for (task, slot) in op.tasks.iter().zip(progress.iter_mut()) {
        if op.dropped.iter().any(|d| d.node == task.node) {
            *slot = Progress::Done;
        }
    }
    let skipped = progress.iter().filter(|p| **p == Progress::Done).count();
    events::append(
        tx,
        run,
        EventKind::Status,
        None,
        format!(
            "operation {} ({}) resumed: {skipped} of {} tasks already done",
            op.id,
            op.operation.name(),
            op.tasks.len()
        ),
    )?;
    Ok(Current {
        op: op.clone(),
        progress,
        prior,
        prior_failure,
        config,
        undoing,
    })
}
