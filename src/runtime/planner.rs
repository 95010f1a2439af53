//! Planner: one actor per cluster operation, executing its plan with one TaskRunner per task.
//!
//! The plan comes from `plan::cluster::plan` (bare nodes, or a template's services on them);
//! which tasks may start comes from `plan::cluster::ready`. The
//! planner keeps no state that matters across a crash: each task reads and writes its node's
//! record, so a new planner for the same operation resumes where the old one stopped. When a
//! task fails or the operation is cancelled, no new task starts; the planner waits for the
//! running ones to reach a persisted checkpoint and then reports once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::prelude::*;
use ebb_spi::Provisioner;

use super::Deps;
use super::task::{TaskDone, TaskOutcome, TaskRunner, TaskSpec};
use std::collections::{BTreeMap, BTreeSet};

use crate::plan::cluster::{self, ClusterOperation, ClusterTask, PlanNode};
use crate::plan::{Operation, Progress};
use crate::template::Template;

/// What the planner reports to whoever started it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpOutcome {
    Done,
    Failed(String),
    Cancelled,
}

/// Sent once, when the operation ends.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct OpDone {
    pub operation: Operation,
    pub outcome: OpOutcome,
}

/// Stop starting tasks and ask running ones to stop before their next call.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Cancel;

/// What an operation works on.
#[derive(Debug, Clone)]
pub struct OpSpec {
    pub operation: Operation,
    pub run: String,
    pub nodes: Vec<String>,
    pub template: Option<Arc<Template>>,
    /// Every node's services (empty without a template).
    pub layout: BTreeMap<String, BTreeSet<String>>,
    pub provisioner: Arc<dyn Provisioner>,
    pub context: Arc<ebb_spi::Context>,
    pub budget: Duration,
}

/// The actor executing one operation.
#[derive(Debug)]
pub struct Planner {
    deps: Deps,
    spec: OpSpec,
    tasks: Vec<ClusterTask>,
    progress: Vec<Progress>,
    cancel: Arc<AtomicBool>,
    failure: Option<String>,
    report: Recipient<OpDone>,
    reported: bool,
}

impl Planner {
    pub fn new(deps: Deps, spec: OpSpec, report: Recipient<OpDone>) -> Self {
        let nodes: Vec<PlanNode> = spec
            .nodes
            .iter()
            .map(|n| PlanNode {
                name: n.clone(),
                services: spec.layout.get(n).cloned().unwrap_or_default(),
            })
            .collect();
        let operation = match spec.operation {
            Operation::Create => ClusterOperation::Create,
            Operation::Delete => ClusterOperation::Delete,
        };
        let empty = Template::default();
        let template = spec.template.as_deref().unwrap_or(&empty);
        let tasks = cluster::plan(operation, template, &nodes);
        let progress = vec![Progress::Waiting; tasks.len()];
        Self {
            deps,
            spec,
            tasks,
            progress,
            cancel: Arc::new(AtomicBool::new(false)),
            failure: None,
            report,
            reported: false,
        }
    }

    fn finish(&mut self, outcome: OpOutcome, ctx: &mut Context<Self>) {
        if !self.reported {
            self.reported = true;
            self.report.do_send(OpDone {
                operation: self.spec.operation,
                outcome,
            });
        }
        ctx.stop();
    }

    /// Starts what may start, or reports when nothing more will.
    fn schedule(&mut self, ctx: &mut Context<Self>) {
        let running = self.progress.contains(&Progress::Running);
        let stopping = self.failure.is_some() || self.cancel.load(Ordering::SeqCst);
        if stopping {
            if !running {
                let outcome = match &self.failure {
                    Some(f) => OpOutcome::Failed(f.clone()),
                    None => OpOutcome::Cancelled,
                };
                self.finish(outcome, ctx);
            }
            return;
        }
        // Bootstrap needs no outside call yet (nodes come up ready): done on the spot.
        loop {
            let instant: Vec<usize> = cluster::ready(&self.tasks, &self.progress)
                .into_iter()
                .filter(|i| self.tasks[*i].action == cluster::Action::Bootstrap)
                .collect();
            if instant.is_empty() {
                break;
            }
            for i in instant {
                self.progress[i] = Progress::Done;
            }
        }
        if self.progress.iter().all(|p| *p == Progress::Done) {
            self.finish(OpOutcome::Done, ctx);
            return;
        }
        for index in cluster::ready(&self.tasks, &self.progress) {
            self.progress[index] = Progress::Running;
            let task = &self.tasks[index];
            let spec = TaskSpec {
                index,
                action: task.action,
                service: task.service.clone(),
                operation: self.spec.operation,
                template: self.spec.template.clone(),
                layout: self.spec.layout.clone(),
                run: self.spec.run.clone(),
                node: task.node.clone(),
                provisioner: Arc::clone(&self.spec.provisioner),
                context: Arc::clone(&self.spec.context),
                budget: self.spec.budget,
                cancel: Arc::clone(&self.cancel),
            };
            TaskRunner::new(self.deps.clone(), spec, ctx.address().recipient()).start();
        }
    }
}

impl Actor for Planner {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.schedule(ctx);
    }
}

impl Handler<TaskDone> for Planner {
    type Result = ();

    fn handle(&mut self, done: TaskDone, ctx: &mut Context<Self>) {
        match done.outcome {
            TaskOutcome::Done => self.progress[done.index] = Progress::Done,
            TaskOutcome::Cancelled => self.progress[done.index] = Progress::Waiting,
            TaskOutcome::Failed(message) => {
                self.progress[done.index] = Progress::Waiting;
                self.failure.get_or_insert(message);
            }
        }
        self.schedule(ctx);
    }
}

impl Handler<Cancel> for Planner {
    type Result = ();

    fn handle(&mut self, _: Cancel, ctx: &mut Context<Self>) {
        self.cancel.store(true, Ordering::SeqCst);
        self.schedule(ctx);
    }
}
