//! Planner: one actor per cluster operation, executing its plan with one TaskRunner per task.
//!
//! The plan comes from `plan::cluster::plan` and is frozen in the operation's record in the
//! audit log (`crate::model::operation`) before any task runs; which tasks may start comes from
//! `plan::cluster::ready`. A task starts as soon as its predecessors are done and its node is
//! free. When a task fails past its retries, no new task starts; once the running ones have
//! stopped, an operation that can be undone (create, expand, start, restart, configure) is
//! rolled back: `plan::cluster::rollback` builds the inverse plan from the tasks that completed
//! (and from every node whose resource may exist), recorded as a new operation with
//! `rollbackOf`, executed the same way. The cluster is snapshotted before and after each
//! operation and after a rollback.
//!
//! The planner keeps no state that matters across a crash: a new planner asked to resume
//! reads the operation's record and attempts, skips the tasks that succeeded, closes the
//! attempts the crash interrupted and carries on (with the rollback, if one was under way).
//! Those records are read and written in [`records`]; this module is the actor.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use actix::prelude::*;

use super::attempt::{Opening, TaskSpec};
use super::deps::Deps;
use super::task::{TaskDone, TaskOutcome, TaskRunner};
use crate::model::operation::{DroppedNode, OpOutcome, OpStatus, OperationRecord, Snapshot};
use crate::model::plan::{Action, ClusterOperation, NodeRecord, Progress};
use crate::rules::outcome::{self, Phase};
use crate::rules::plan::cluster;
use crate::store::clock::now_f64;
use crate::store::keys;
use crate::store::{Read as _, StoreError, Table};

mod records;
mod spec;
use records::*;
pub use records::{Prepared, node_records, plan_tasks, prepare, prepare_in, resolve_context};
pub use spec::{On, OpSpec, PlanInput};

/// Sent once, when the operation ends.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct OpDone {
    pub operation: ClusterOperation,
    pub outcome: OpOutcome,
    /// Nodes a create gave up for want of capacity (the cluster kept `minNodes`): no longer
    /// the cluster's.
    pub dropped: Vec<String>,
}

/// The run's stop: stop starting tasks and ask running ones to stop before their next call.
/// Nothing is undone (the cluster's delete follows).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Cancel;

/// An operator cancels operation `id`: recorded first (a restart carries it out), then it
/// stops as a [`Cancel`] does, and what it did is rolled back. Answers why not, if it cannot
/// be cancelled.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), String>")]
pub struct CancelBy {
    pub id: u32,
    pub act: crate::model::access::Act,
}

/// Counts an operation that ended, and how long it took since `created` (when known); a
/// delete is the run's deprovisioning phase.
fn count_operation(operation: ClusterOperation, outcome: &OpOutcome, created: Option<f64>) {
    use crate::model::metrics::{OPERATION_SECONDS, OPERATIONS, RUN_PHASE};
    let status = match outcome {
        OpOutcome::Done => "succeeded",
        OpOutcome::Failed(_) => "failed",
        OpOutcome::Cancelled => "cancelled",
        OpOutcome::RollbackFailed(_) => "rollback_failed",
    };
    let kind = operation.to_string();
    metrics::counter!(OPERATIONS.name, "operation" => kind.clone(), "status" => status)
        .increment(1);
    if let Some(created) = created {
        let took = (crate::store::clock::now_f64() - created).max(0.0);
        metrics::histogram!(OPERATION_SECONDS.name, "operation" => kind).record(took);
        if operation == ClusterOperation::Delete && matches!(outcome, OpOutcome::Done) {
            metrics::histogram!(RUN_PHASE.name, "phase" => "deprovisioning").record(took);
        }
    }
}

/// The actor executing one operation.
#[derive(Debug)]
pub struct Planner {
    deps: Deps,
    spec: OpSpec,
    current: Option<Current>,
    /// Set when the operation was prepared before the planner started.
    prepared: Option<Prepared>,
    cancel: Arc<AtomicBool>,
    /// The operator who cancelled the operation (else a set `cancel` is the run's stop).
    cancel_by: Option<String>,
    failure: Option<String>,
    /// Where the operation is, as `rules::outcome` keeps it.
    phase: Phase,
    /// The rollback recorded with the operation's end, to run next.
    rollback: Option<OperationRecord>,
    /// A write is under way; nothing is scheduled until it lands.
    writing: bool,
    report: Recipient<OpDone>,
    reported: bool,
    /// When the operation began (the first record's creation), for its duration.
    began: Option<f64>,
    /// The operation's span (its id is recorded once the operation is).
    span: tracing::Span,
    /// Nodes given up for want of capacity.
    dropped: Vec<String>,
}

impl Planner {
    pub fn new(deps: Deps, spec: OpSpec, report: Recipient<OpDone>) -> Self {
        let span = tracing::info_span!(
            "operation",
            run.id = %spec.run,
            operation = %spec.operation,
            operation.id = tracing::field::Empty,
        );
        Self {
            span,
            deps,
            spec,
            current: None,
            prepared: None,
            cancel: Arc::new(AtomicBool::new(false)),
            cancel_by: None,
            failure: None,
            phase: Phase::Forward,
            rollback: None,
            writing: false,
            report,
            reported: false,
            began: None,
            dropped: Vec::new(),
        }
    }

    /// A planner for an operation [`prepare`] already recorded.
    pub fn prepared(
        deps: Deps,
        spec: OpSpec,
        prepared: Prepared,
        report: Recipient<OpDone>,
    ) -> Self {
        let mut planner = Self::new(deps, spec, report);
        planner.prepared = Some(prepared);
        planner
    }

    fn begin(&mut self, begun: Result<Begin, StoreError>, ctx: &mut Context<Self>) {
        match begun {
            Ok(Begin::Run(mut current)) => {
                self.phase = match current.undoing.take() {
                    Some(undoing) => Phase::Undoing(undoing),
                    None => {
                        // An operator's cancel a restart interrupted is carried out.
                        if let Some(cancel) = &current.op.cancel {
                            self.cancel_by = Some(cancel.by.clone());
                            self.cancel.store(true, Ordering::SeqCst);
                        }
                        Phase::Forward
                    }
                };
                self.began.get_or_insert(current.op.created);
                if current.op.rollback_of.is_none() {
                    self.dropped = dropped_nodes(&current.op);
                    let gone = &self.dropped;
                    self.spec.nodes.retain(|n| !gone.contains(n));
                }
                self.span.record("operation.id", current.op.id);
                self.current = Some(*current);
                self.schedule(ctx);
            }
            Ok(Begin::Report(outcome, dropped)) => {
                self.dropped = dropped;
                self.finish(outcome, ctx)
            }
            Err(e) => {
                let message = format!("cannot record the operation: {e}");
                self.finish(OpOutcome::Failed(message), ctx);
            }
        }
    }

    fn finish(&mut self, outcome: OpOutcome, ctx: &mut Context<Self>) {
        if !self.reported {
            self.reported = true;
            count_operation(self.spec.operation, &outcome, self.began);
            let _span = self.span.clone().entered();
            match &outcome {
                OpOutcome::Done => tracing::info!("operation succeeded"),
                OpOutcome::Failed(error) => tracing::warn!(%error, "operation failed"),
                OpOutcome::RollbackFailed(error) => {
                    tracing::error!(%error, "operation failed and so did its rollback")
                }
                OpOutcome::Cancelled => tracing::info!("operation cancelled"),
            }
            self.report.do_send(OpDone {
                operation: self.spec.operation,
                outcome,
                dropped: std::mem::take(&mut self.dropped),
            });
        }
        ctx.stop();
    }

    /// Starts what may start, or ends the operation when nothing more will.
    fn schedule(&mut self, ctx: &mut Context<Self>) {
        if self.writing {
            return;
        }
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let running = cur.progress.contains(&Progress::Running);
        let stopping = self.failure.is_some() || self.cancel.load(Ordering::SeqCst);
        if stopping {
            if !running {
                self.conclude(ctx);
            }
            return;
        }
        // Bootstrap needs no outside call yet (nodes come up ready): done on the spot.
        let mut instant = Vec::new();
        loop {
            let now: Vec<usize> = cluster::ready(&cur.op.tasks, &cur.progress)
                .into_iter()
                .filter(|i| cur.op.tasks[*i].action == Action::Bootstrap)
                .collect();
            if now.is_empty() {
                break;
            }
            for i in now {
                cur.progress[i] = Progress::Done;
                instant.push(i);
            }
        }
        if !instant.is_empty() {
            record_instant(&self.deps, &self.spec.run, cur, &instant);
        }
        if cur.progress.iter().all(|p| *p == Progress::Done) {
            self.conclude(ctx);
            return;
        }
        // A cluster that may end smaller than asked (`minNodes`) makes its master first: the
        // room there is goes to the node the program runs on, never to a worker first.
        let master = self.spec.nodes.first();
        let master_pending = self.spec.operation == ClusterOperation::Create
            && crate::rules::capacity::min_nodes(
                &self.spec.context.properties,
                self.spec.nodes.len(),
            ) < self.spec.nodes.len()
            && cur.op.tasks.iter().zip(&cur.progress).any(|(t, p)| {
                Some(&t.node) == master && t.action == Action::Create && *p != Progress::Done
            });
        for index in cluster::ready(&cur.op.tasks, &cur.progress) {
            let task = &cur.op.tasks[index];
            if master_pending && task.action == Action::Create && Some(&task.node) != master {
                continue;
            }
            cur.progress[index] = Progress::Running;
            let spec = TaskSpec {
                op: cur.op.id,
                operation: cur.op.operation,
                task: cur.op.tasks[index].clone(),
                prior_attempts: cur.prior[index],
                prior_failure: cur.prior_failure[index],
                node_goes: cur
                    .op
                    .tasks
                    .iter()
                    .any(|t| t.action == Action::Delete && t.node == cur.op.tasks[index].node),
                template: self.spec.template.clone(),
                layout: self.spec.layout.clone(),
                config: cur.config.clone(),
                run: self.spec.run.clone(),
                cluster: self.spec.cluster.clone(),
                provisioner: Arc::clone(&self.spec.provisioner),
                context: self.spec.context_for(&cur.op.tasks[index].node),
                budget: self.spec.budget,
                cancel: Arc::clone(&self.cancel),
                master: self.spec.nodes.first() == Some(&cur.op.tasks[index].node),
                opening: Opening::default(),
            };
            TaskRunner::new(self.deps.clone(), spec, ctx.address().recipient()).start();
        }
    }

    /// Nothing runs any more: the operation's end is decided by `rules::outcome`.
    fn conclude(&mut self, ctx: &mut Context<Self>) {
        if self.current.is_none() {
            return;
        }
        let cancel = self
            .cancel
            .load(Ordering::SeqCst)
            .then(|| match &self.cancel_by {
                Some(by) => outcome::Cancel::By(by.clone()),
                None => outcome::Cancel::Stop,
            });
        let settled = outcome::Event::Settled {
            failure: self.failure.take(),
            cancel,
        };
        self.step(settled, ctx);
    }

    /// Feeds `event` to the operation's end rules and carries out what they say.
    fn step(&mut self, event: outcome::Event, ctx: &mut Context<Self>) {
        let phase = std::mem::replace(&mut self.phase, Phase::Ended);
        let (phase, effects) = outcome::on(self.spec.operation, phase, event);
        self.phase = phase;
        for effect in effects {
            match effect {
                outcome::Effect::Record {
                    status,
                    error,
                    rollback,
                } => self.record_end(status, error, rollback, ctx),
                outcome::Effect::RunRollback => self.run_rollback(ctx),
                outcome::Effect::Report(outcome) => self.finish(outcome, ctx),
            }
        }
    }

    /// Records the end of the current operation and, with `rollback`, its rollback (kept
    /// for [`Self::run_rollback`]); then tells the rules how the write went.
    fn record_end(
        &mut self,
        status: OpStatus,
        error: Option<String>,
        rollback: bool,
        ctx: &mut Context<Self>,
    ) {
        let Some(cur) = self.current.take() else {
            return;
        };
        let deps = self.deps.clone();
        let (layout, template) = (self.spec.layout.clone(), self.spec.template.clone());
        let previous = self.spec.previous_config.clone();
        let (run, cluster) = (self.spec.run.clone(), self.spec.cluster.clone());
        // A node given up made nothing: nothing of it to undo.
        let done: BTreeSet<usize> = (0..cur.progress.len())
            .filter(|i| cur.progress[*i] == Progress::Done)
            .filter(|i| !self.dropped.contains(&cur.op.tasks[*i].node))
            .collect();
        let op = cur.op;
        self.writing = true;
        let write = async move {
            let saved = deps
                .store
                .write(move |tx| {
                    let now = now_f64();
                    let nodes = node_records(tx, &cluster)?;
                    let mut op = op.clone();
                    // What its tasks recorded while it ran (full places, nodes given up).
                    let key = keys::operation(&run, op.id);
                    if let Some(stored) = tx.get::<OperationRecord>(Table::Operations, &key)? {
                        op.blocked = stored.blocked;
                        op.dropped = stored.dropped;
                    }
                    op.status = status;
                    op.finished = Some(now);
                    op.error = error.clone();
                    op.after = Some(Snapshot::take(&nodes, &layout, &op_config(&op), now));
                    let mut next = None;
                    if rollback {
                        let undo = record_rollback(
                            tx,
                            (&run, &cluster),
                            &mut op,
                            template.as_deref(),
                            &done,
                            &nodes,
                            previous.clone(),
                            now,
                        )?;
                        next = Some(undo);
                    }
                    tx.put(Table::Operations, &keys::operation(&run, op.id), &op)?;
                    Ok::<_, StoreError>((op.id, next))
                })
                .await;
            (saved, deps)
        };
        ctx.wait(write.into_actor(self).map(move |(saved, deps), act, ctx| {
            act.writing = false;
            deps.notifier.notify(&act.spec.run);
            let event = match saved {
                Ok((id, next)) => {
                    act.rollback = next;
                    outcome::Event::Recorded { id }
                }
                Err(e) => outcome::Event::NotRecorded(e.to_string()),
            };
            act.step(event, ctx);
        }));
    }

    /// Runs the rollback [`Self::record_end`] recorded.
    fn run_rollback(&mut self, ctx: &mut Context<Self>) {
        let Some(undo) = self.rollback.take() else {
            return;
        };
        let size = undo.tasks.len();
        // An operator's cancel stopped the operation; its rollback runs in full (a stop
        // arriving from now on stops it).
        self.cancel = Arc::new(AtomicBool::new(false));
        self.cancel_by = None;
        self.current = Some(Current {
            op: undo,
            progress: vec![Progress::Waiting; size],
            prior: vec![0; size],
            prior_failure: vec![None; size],
            config: self.spec.previous_config.clone(),
            undoing: None,
        });
        self.schedule(ctx);
    }
}

impl Planner {
    /// Whether `node`, which found no room anywhere, may be given up: only by the cluster's
    /// create, never its master, and only while the cluster keeps `minNodes`.
    fn may_drop(&self, node: &str) -> bool {
        let stopping = self.failure.is_some() || self.cancel.load(Ordering::SeqCst);
        if stopping
            || self.spec.operation != ClusterOperation::Create
            || !matches!(self.phase, Phase::Forward)
        {
            return false;
        }
        let nodes = &self.spec.nodes;
        let min = crate::rules::capacity::min_nodes(&self.spec.context.properties, nodes.len());
        let master = nodes.first().is_some_and(|m| m == node);
        crate::rules::capacity::may_drop(master, nodes.len().saturating_sub(1), min)
    }

    /// Gives `node` up: recorded with the operation (its record, which names no resource,
    /// removed), its tasks over; the rest of the cluster goes on.
    fn drop_node(&mut self, node: String, reason: String, ctx: &mut Context<Self>) {
        let Some(cur) = self.current.as_ref() else {
            return;
        };
        let (deps, run, cluster, id) = (
            self.deps.clone(),
            self.spec.run.clone(),
            self.spec.cluster.clone(),
            cur.op.id,
        );
        let left = self.spec.nodes.len().saturating_sub(1);
        let asked = cur
            .op
            .tasks
            .iter()
            .map(|t| t.node.as_str())
            .collect::<BTreeSet<_>>()
            .len();
        let who = node.clone();
        self.writing = true;
        let write = async move {
            deps.store
                .write(move |tx| {
                    let node_key = keys::node(&cluster, &who);
                    if let Some(r) = tx.get::<NodeRecord>(Table::Resources, &node_key)? {
                        // Only a node whose create the cloud refused each time is given up.
                        if r.attempts > 0 || r.id.is_some() {
                            return Ok(false);
                        }
                        tx.delete(Table::Resources, &node_key);
                    }
                    let key = keys::operation(&run, id);
                    if let Some(mut op) = tx.get::<OperationRecord>(Table::Operations, &key)? {
                        op.dropped.push(DroppedNode {
                            node: who.clone(),
                            reason: reason.clone(),
                        });
                        tx.put(Table::Operations, &key, &op)?;
                    }
                    let note = format!(
                        "{who} given up: {reason}; the cluster goes on with {left} of {asked} nodes (minNodes)"
                    );
                    crate::store::events::append(
                        tx,
                        &run,
                        crate::model::event::EventKind::Status,
                        Some(&who),
                        note,
                    )?;
                    Ok::<_, StoreError>(true)
                })
                .await
        };
        ctx.wait(write.into_actor(self).map(move |dropped, act, ctx| {
            act.writing = false;
            act.deps.notifier.notify(&act.spec.run);
            match dropped {
                Ok(true) => {
                    metrics::counter!(
                        crate::model::metrics::NODES_DROPPED.name,
                        "provisioner" => act.spec.provisioner.spec().name,
                    )
                    .increment(1);
                    act.spec.nodes.retain(|n| *n != node);
                    act.spec.layout.remove(&node);
                    if let Some(cur) = act.current.as_mut() {
                        for (task, progress) in cur.op.tasks.iter().zip(cur.progress.iter_mut()) {
                            if task.node == node {
                                *progress = Progress::Done;
                            }
                        }
                    }
                    act.dropped.push(node);
                }
                Ok(false) => {
                    act.failure
                        .get_or_insert(format!("node {node}: no room for it anywhere"));
                }
                Err(e) => {
                    act.failure
                        .get_or_insert(format!("node {node} could not be given up: {e}"));
                }
            }
            act.schedule(ctx);
        }));
    }
}

impl Actor for Planner {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        if let Some(Prepared(begun, context)) = self.prepared.take() {
            self.spec.context = context;
            return self.begin(Ok(begun), ctx);
        }
        self.writing = true;
        let (deps, spec) = (self.deps.clone(), self.spec.clone());
        ctx.wait(
            async move { prepare(deps, spec).await }
                .into_actor(self)
                .map(|begun, act, ctx| {
                    act.writing = false;
                    act.deps.notifier.notify(&act.spec.run);
                    let begun = begun.map(|Prepared(begun, context)| {
                        act.spec.context = context;
                        begun
                    });
                    act.begin(begun, ctx);
                }),
        );
    }
}

impl Handler<TaskDone> for Planner {
    type Result = ();

    fn handle(&mut self, done: TaskDone, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        if let Some(cur) = self.current.as_mut() {
            match done.outcome {
                TaskOutcome::Done => cur.progress[done.index] = Progress::Done,
                TaskOutcome::Cancelled => cur.progress[done.index] = Progress::Waiting,
                TaskOutcome::Failed(message) => {
                    cur.progress[done.index] = Progress::Waiting;
                    self.failure.get_or_insert(message);
                }
                TaskOutcome::NoRoom(message) => {
                    cur.progress[done.index] = Progress::Waiting;
                    let node = cur.op.tasks[done.index].node.clone();
                    if self.may_drop(&node) {
                        return self.drop_node(node, message, ctx);
                    }
                    self.failure.get_or_insert(message);
                }
            }
        }
        self.schedule(ctx);
    }
}

impl Handler<Cancel> for Planner {
    type Result = ();

    fn handle(&mut self, _: Cancel, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        // The run's stop wins over an operator's cancel: the delete follows, nothing is undone.
        self.cancel_by = None;
        self.cancel.store(true, Ordering::SeqCst);
        self.schedule(ctx);
    }
}

impl Handler<CancelBy> for Planner {
    type Result = ResponseActFuture<Self, Result<(), String>>;

    fn handle(&mut self, CancelBy { id, act }: CancelBy, _: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        let refuse = |reason: String| -> Self::Result { Box::pin(fut::ready(Err(reason))) };
        let operation = self.spec.operation;
        if operation.is_lifecycle() {
            return refuse(format!(
                "it is the run's own {}; stop or deprovision the run to end it",
                operation.name()
            ));
        }
        let Some(cur) = self.current.as_ref().filter(|c| c.op.id == id) else {
            return refuse("it is not running".into());
        };
        if cur.op.rollback_of.is_some() || !matches!(self.phase, Phase::Forward) {
            return refuse("it is a rollback, which runs to its end".into());
        }
        if self.cancel_by.is_some() {
            return Box::pin(fut::ready(Ok(())));
        }
        if self.cancel.load(Ordering::SeqCst) || self.failure.is_some() {
            return refuse("it is already stopping".into());
        }
        let (deps, run) = (self.deps.clone(), self.spec.run.clone());
        let name = operation.name();
        self.writing = true;
        let write = async move {
            deps.store
                .write(move |tx| {
                    let key = keys::operation(&run, id);
                    let Some(mut op) = tx.get::<OperationRecord>(Table::Operations, &key)? else {
                        return Ok(None);
                    };
                    let cancel = crate::model::operation::CancelRequest {
                        by: act.actor.clone(),
                        at: now_f64(),
                    };
                    op.cancel = Some(cancel.clone());
                    tx.put(Table::Operations, &key, &op)?;
                    crate::store::changes::record(tx, &act)?;
                    let note = format!(
                        "operation {id} ({name}) cancelled by {}: its tasks stop, then what it did is undone",
                        act.actor
                    );
                    crate::store::events::append(
                        tx,
                        &run,
                        crate::model::event::EventKind::Status,
                        None,
                        note,
                    )?;
                    Ok::<_, StoreError>(Some(cancel))
                })
                .await
        };
        Box::pin(write.into_actor(self).map(move |saved, act, ctx| {
            act.writing = false;
            act.deps.notifier.notify(&act.spec.run);
            let answer = match saved {
                Ok(Some(cancel)) => {
                    if let Some(cur) = act.current.as_mut() {
                        cur.op.cancel = Some(cancel.clone());
                    }
                    act.cancel_by = Some(cancel.by);
                    act.cancel.store(true, Ordering::SeqCst);
                    Ok(())
                }
                Ok(None) => Err("it is not recorded".to_string()),
                Err(e) => Err(format!("the cancel could not be recorded: {e}")),
            };
            act.schedule(ctx);
            answer
        }))
    }
}
