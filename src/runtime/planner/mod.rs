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

use super::attempt::TaskSpec;
use super::deps::Deps;
use super::task::{TaskDone, TaskOutcome, TaskRunner};
use crate::model::operation::{OpOutcome, OpStatus, OperationRecord, Snapshot};
use crate::model::plan::{Action, ClusterOperation, Progress};
use crate::rules::outcome::{self, Phase};
use crate::rules::plan::cluster;
use crate::runtime::clock::now_f64;
use crate::store::keys;
use crate::store::{StoreError, Table};

mod records;
mod spec;
use records::*;
pub use records::{Prepared, prepare, resolve_context};
pub use spec::OpSpec;

/// Sent once, when the operation ends.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct OpDone {
    pub operation: ClusterOperation,
    pub outcome: OpOutcome,
}

/// Stop starting tasks and ask running ones to stop before their next call.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Cancel;

/// Counts an operation that ended, and how long it took since `created` (when known); a
/// delete is the run's deprovisioning phase.
fn count_operation(operation: ClusterOperation, outcome: &OpOutcome, created: Option<f64>) {
    use crate::model::metrics::{OPERATION_SECONDS, OPERATIONS, RUN_PHASE};
    let status = match outcome {
        OpOutcome::Done => "succeeded",
        OpOutcome::Failed(_) => "failed",
        OpOutcome::Cancelled => "cancelled",
    };
    let kind = operation.to_string();
    metrics::counter!(OPERATIONS.name, "operation" => kind.clone(), "status" => status)
        .increment(1);
    if let Some(created) = created {
        let took = (crate::runtime::clock::now_f64() - created).max(0.0);
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
            failure: None,
            phase: Phase::Forward,
            rollback: None,
            writing: false,
            report,
            reported: false,
            began: None,
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
                    Some(error) => Phase::Undoing { error },
                    None => Phase::Forward,
                };
                self.began.get_or_insert(current.op.created);
                self.span.record("operation.id", current.op.id);
                self.current = Some(*current);
                self.schedule(ctx);
            }
            Ok(Begin::Report(outcome)) => self.finish(outcome, ctx),
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
                OpOutcome::Cancelled => tracing::info!("operation cancelled"),
            }
            self.report.do_send(OpDone {
                operation: self.spec.operation,
                outcome,
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
        for index in cluster::ready(&cur.op.tasks, &cur.progress) {
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
                provisioner: Arc::clone(&self.spec.provisioner),
                context: self.spec.context_for(&cur.op.tasks[index].node),
                budget: self.spec.budget,
                cancel: Arc::clone(&self.cancel),
            };
            TaskRunner::new(self.deps.clone(), spec, ctx.address().recipient()).start();
        }
    }

    /// Nothing runs any more: the operation's end is decided by `rules::outcome`.
    fn conclude(&mut self, ctx: &mut Context<Self>) {
        if self.current.is_none() {
            return;
        }
        let settled = outcome::Event::Settled {
            failure: self.failure.take(),
            cancelled: self.cancel.load(Ordering::SeqCst),
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
        let run = self.spec.run.clone();
        let done: BTreeSet<usize> = (0..cur.progress.len())
            .filter(|i| cur.progress[*i] == Progress::Done)
            .collect();
        let op = cur.op;
        self.writing = true;
        let write = async move {
            let saved = deps
                .store
                .write(move |tx| {
                    let now = now_f64();
                    let nodes = node_records(tx, &run)?;
                    let mut op = op.clone();
                    op.status = status;
                    op.finished = Some(now);
                    op.error = error.clone();
                    op.after = Some(Snapshot::take(&nodes, &layout, &op_config(&op), now));
                    let mut next = None;
                    if rollback {
                        let undo = record_rollback(
                            tx,
                            &run,
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
            }
        }
        self.schedule(ctx);
    }
}

impl Handler<Cancel> for Planner {
    type Result = ();

    fn handle(&mut self, _: Cancel, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.cancel.store(true, Ordering::SeqCst);
        self.schedule(ctx);
    }
}
