//! TaskRunner: one actor per node-level task, running its attempts and recording each one.
//!
//! A task is tried up to its policy's number of attempts, each bounded by a timeout after
//! which it counts as TIMED_OUT and is abandoned (its future is dropped, so a late answer is
//! never seen; a script's process group is killed). Attempts are spaced by exponential
//! backoff with jitter. Every attempt is written to the audit log when it ends, and when it
//! starts if it changes or waits for anything first ([`super::attempt::Opening`]); the node's
//! record its last answer taught is written with its end. A fatal error (the provider says
//! retrying cannot help) ends the task at once. A failed `confirm` is retried by deleting the
//! node's resource and creating it anew.
//!
//! Node tasks walk `plan::resource::next_step`, persisting the record `plan::answer::announce`
//! gives before every call that changes the outside world (create, delete) and the one
//! `plan::answer::learn` makes of every answer that taught us something;
//! retryable errors are retried with backoff inside the profile's `retryBudget`. A cancelled
//! task stops before its next call, never in the middle of one, so whatever an in-flight
//! create made is recorded and the delete operation will find it. Those resource steps, and
//! the moves of a create to other places, are [`super::resource_task`]'s.

use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;

use super::attempt::{AttemptOutcome, TaskSpec, open_attempt};
use super::deps::Deps;
use super::resource_task::{
    MAX_PAUSE, NodeSave, Stepped, events_note, progress_failure, recreate, replace, resource_task,
};

use crate::model::event::EventKind;
use crate::model::operation::{AttemptRecord, AttemptStatus};
use crate::model::plan::{Action, TaskKind};
use crate::model::service::ServiceRecord;
use crate::rules::plan::resource::generation;
use crate::rules::service::Happened;
use crate::store::clock::{now_f64, now_millis};
use crate::store::events;
use crate::store::keys;
use crate::store::{Read, StoreError, Table};

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOutcome {
    Done,
    Cancelled,
    Failed(String),
    /// A create found no room anywhere it may go (see [`AttemptOutcome::NoRoom`]).
    NoRoom(String),
}

/// Sent to the planner when a task ends.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct TaskDone {
    pub index: usize,
    pub outcome: TaskOutcome,
}

/// The actor running one task; it stops itself when the task ends.
#[derive(Debug)]
pub struct TaskRunner {
    deps: Deps,
    spec: Option<TaskSpec>,
    planner: Recipient<TaskDone>,
}

impl TaskRunner {
    pub fn new(deps: Deps, spec: TaskSpec, planner: Recipient<TaskDone>) -> Self {
        Self {
            deps,
            spec: Some(spec),
            planner,
        }
    }
}

impl Actor for TaskRunner {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let Some(spec) = self.spec.take() else {
            ctx.stop();
            return;
        };
        let index = spec.task.id;
        let deps = self.deps.clone();
        ctx.spawn(async move { run(&deps, &spec).await }.into_actor(self).map(
            move |outcome, act, ctx| {
                act.planner.do_send(TaskDone { index, outcome });
                ctx.stop();
            },
        ));
    }
}

/// The pause before attempt `next` (from 2): 200 ms doubling, with jitter, at most 30 s.
fn pause(next: u32) -> Duration {
    let base = Duration::from_millis(200).saturating_mul(1 << next.saturating_sub(2).min(16));
    base.min(MAX_PAUSE).mul_f64(0.5 + fastrand::f64() / 2.0)
}

/// Runs a task's attempts until one succeeds, one fails for good, or the attempts run out.
pub async fn run(deps: &Deps, spec: &TaskSpec) -> TaskOutcome {
    let (attempts, timeout) = spec.policy();
    let what = spec.task.describe();
    let mut attempt = spec.prior_attempts;
    let mut last_failure = spec.prior_failure;
    let mut queued = now_f64();
    loop {
        attempt += 1;
        if spec.cancel.load(Ordering::SeqCst) {
            return TaskOutcome::Cancelled;
        }
        let key = keys::attempt(&spec.run, spec.op, spec.task.id, attempt);
        let mut record = AttemptRecord::open(queued, now_f64());
        spec.opening.begin(key.clone(), record.clone());
        let span = tracing::info_span!(
            "task",
            run.id = %spec.run,
            operation.id = spec.op,
            node = %spec.node(),
            action = %spec.task.action,
            service = spec.task.service.as_deref().unwrap_or(""),
            attempt,
        );
        let attempt_run = tokio::time::timeout(
            timeout,
            tracing::Instrument::instrument(execute(deps, spec, last_failure), span.clone()),
        )
        .await;
        // Not written yet (the attempt ended before any write or outside call): its end
        // record is the first.
        let _ = spec.opening.take();
        let timed_out = attempt_run.is_err();
        let (outcome, last) = match attempt_run {
            Ok(stepped) => stepped,
            Err(_) => {
                let failed = AttemptOutcome::Failed {
                    message: format!(
                        "timed out after {}",
                        humantime::format_duration(Duration::from_secs(timeout.as_secs()))
                    ),
                    retry: true,
                    output: None,
                };
                (failed, None)
            }
        };
        let now = now_f64();
        let (more, note, kind) = match &outcome {
            AttemptOutcome::Done { result, output } => {
                record.result = result.clone();
                record.output = output.clone();
                record.finish(AttemptStatus::Succeeded, None, now);
                (
                    false,
                    format!("{what} done in {:.2}s", now - record.started),
                    EventKind::Task,
                )
            }
            AttemptOutcome::Cancelled => {
                record.finish(AttemptStatus::Failed, Some("cancelled".into()), now);
                (false, format!("{what} cancelled"), EventKind::Task)
            }
            AttemptOutcome::NoRoom(message) => {
                record.finish(AttemptStatus::Failed, Some(message.clone()), now);
                (false, format!("{what} failed: {message}"), EventKind::Error)
            }
            AttemptOutcome::Failed {
                message,
                retry,
                output,
            } => {
                let status = if timed_out {
                    AttemptStatus::TimedOut
                } else {
                    AttemptStatus::Failed
                };
                record.output = output.clone();
                record.finish(status, Some(message.clone()), now);
                let more = *retry && attempt < attempts;
                let next = if more { "; trying again" } else { "" };
                (
                    more,
                    format!("{what} failed (attempt {attempt} of {attempts}): {message}{next}"),
                    if more {
                        EventKind::Retry
                    } else {
                        EventKind::Error
                    },
                )
            }
        };
        count_attempt(spec, &record, matches!(outcome, AttemptOutcome::Cancelled));
        span.in_scope(|| {
            tracing::debug!(
                status = %record.status.map(|s| s.to_string()).unwrap_or_default(),
                seconds = record.duration.unwrap_or_default(),
                "task attempt ended"
            )
        });
        // The task's last word on its service: its state changes in the same write.
        let settled = match &outcome {
            AttemptOutcome::Done { .. } => Some(true),
            AttemptOutcome::Failed { .. } if !more => Some(false),
            AttemptOutcome::NoRoom(_) => Some(false),
            AttemptOutcome::Failed { .. } | AttemptOutcome::Cancelled => None,
        };
        let ended = AttemptEnd {
            key: &key,
            record: &record,
            note: (kind, note),
            node: last,
        };
        if let Err(e) = audit(deps, spec, ended, settled).await {
            return store_failure(e);
        }
        match outcome {
            AttemptOutcome::Done { .. } => return TaskOutcome::Done,
            AttemptOutcome::Cancelled => return TaskOutcome::Cancelled,
            AttemptOutcome::NoRoom(message) => {
                return TaskOutcome::NoRoom(format!("node {}: {what}: {message}", spec.node()));
            }
            AttemptOutcome::Failed { .. } if more => {
                last_failure = Some(attempt);
                tokio::time::sleep(pause(attempt + 1)).await;
                queued = now_f64();
            }
            AttemptOutcome::Failed { message, .. } => {
                if spec.node_goes && spec.task.action == Action::Stop {
                    // Tearing down: the node goes away regardless; a failed stop must not keep
                    // it alive.
                    let note = format!("{what} failed; deleting the node anyway");
                    let _ = events_note(deps, spec, EventKind::Error, note).await;
                    return TaskOutcome::Done;
                }
                return TaskOutcome::Failed(format!("node {}: {what}: {message}", spec.node()));
            }
        }
    }
}

/// What a settled task changes of its service's state on its node.
#[derive(Debug, Clone)]
struct ServiceChange {
    cluster: String,
    node: String,
    /// The service and what happened to it; `None` for a node task.
    service: Option<(String, Happened)>,
    /// The node was deleted: its services are gone with it.
    node_gone: bool,
    reason: String,
}

impl ServiceChange {
    fn of(spec: &TaskSpec, succeeded: bool) -> ServiceChange {
        let action = spec.task.action;
        let service =
            spec.task
                .service
                .clone()
                .zip(action.service_action())
                .map(|(service, kind)| {
                    let restarts_on_configure = spec
                        .template
                        .as_ref()
                        .and_then(|t| t.services.get(&service))
                        .is_some_and(|s| s.restart_on_configure);
                    let happened = Happened::Action {
                        action: kind,
                        succeeded,
                        restarts_on_configure,
                    };
                    (service, happened)
                });
        ServiceChange {
            cluster: spec.cluster.clone(),
            node: spec.node().to_string(),
            service,
            // A replaced node's services are gone with its old resource.
            node_gone: matches!(action, Action::Delete | Action::Replace) && succeeded,
            reason: format!(
                "operation {} ({}): {} {}",
                spec.op,
                spec.operation.name(),
                action.name(),
                if succeeded { "succeeded" } else { "failed" }
            ),
        }
    }

    fn write(&self, tx: &mut crate::store::Txn<'_>) -> Result<(), StoreError> {
        if self.node_gone {
            let prefix = format!("{}/", keys::node(&self.cluster, &self.node));
            for (key, _) in tx.scan::<ServiceRecord>(Table::Services, &prefix)? {
                tx.delete(Table::Services, &key);
            }
        }
        let Some((service, happened)) = &self.service else {
            return Ok(());
        };
        let key = keys::service(&self.cluster, &self.node, service);
        let before = tx.get::<ServiceRecord>(Table::Services, &key)?;
        let state = before.as_ref().map(|r| r.state);
        match crate::rules::service::next(state, *happened) {
            None => tx.delete(Table::Services, &key),
            // An operation's action sets the state on purpose: a check's finding is over.
            Some(after) if Some(after) == state && !before.as_ref().is_some_and(|b| b.found) => {}
            Some(after) => tx.put(
                Table::Services,
                &key,
                &ServiceRecord {
                    node: self.node.clone(),
                    service: service.clone(),
                    state: after,
                    since_ms: now_millis(),
                    reason: self.reason.clone(),
                    found: false,
                },
            )?,
        }
        Ok(())
    }
}

/// An attempt that ended: its record under its key, a note for the run's history, and the
/// node's record as the attempt's last answer left it, when not written yet.
struct AttemptEnd<'a> {
    key: &'a str,
    record: &'a AttemptRecord,
    note: (EventKind, String),
    node: Option<NodeSave>,
}

/// Writes an ended attempt's record, with a note for the run's history (after the node's
/// record and its notes, when the attempt left them to this write); when the task is
/// `settled` (it succeeded, or failed for good), the state of its service on its node changes
/// with it.
async fn audit(
    deps: &Deps,
    spec: &TaskSpec,
    ended: AttemptEnd<'_>,
    settled: Option<bool>,
) -> Result<(), StoreError> {
    let (key, record, run, node) = (
        ended.key.to_string(),
        ended.record.clone(),
        spec.run.clone(),
        spec.node().to_string(),
    );
    let ((kind, message), last) = (ended.note, ended.node);
    let change = settled.map(|succeeded| ServiceChange::of(spec, succeeded));
    deps.store
        .write(move |tx| {
            if let Some(last) = &last {
                last.write(tx, &run)?;
            }
            tx.put(Table::Attempts, &key, &record)?;
            events::append(tx, &run, kind, Some(&node), &message)?;
            if let Some(change) = &change {
                change.write(tx)?;
            }
            Ok::<_, StoreError>(())
        })
        .await?;
    deps.notifier.notify(&spec.run);
    Ok(())
}

fn store_failure(e: StoreError) -> TaskOutcome {
    TaskOutcome::Failed(format!("cannot record progress: {e}"))
}

/// One attempt of a task; `last_failure` is the attempt that last failed, if any.
async fn execute(deps: &Deps, spec: &TaskSpec, last_failure: Option<u32>) -> Stepped {
    match spec.task.action {
        Action::Create => resource_task(deps, spec, TaskKind::Create, generation(spec.op, 0)).await,
        Action::Confirm if last_failure.is_some() => {
            recreate(deps, spec, last_failure.unwrap_or_default()).await
        }
        Action::Confirm => {
            resource_task(deps, spec, TaskKind::Confirm, generation(spec.op, 0)).await
        }
        Action::Delete => resource_task(deps, spec, TaskKind::Delete, 0).await,
        Action::Bootstrap => (AttemptOutcome::done(), None),
        Action::Replace => replace(deps, spec).await,
        Action::Install
        | Action::Configure
        | Action::Initialize
        | Action::Start
        | Action::Stop
        | Action::Remove => {
            if let Err(e) = open_attempt(deps, spec).await {
                return (progress_failure(e), None);
            }
            (super::automator::run(deps, spec).await, None)
        }
    }
}

/// Counts a finished task attempt and its duration.
fn count_attempt(spec: &TaskSpec, record: &AttemptRecord, cancelled: bool) {
    use crate::model::metrics::{TASK_ATTEMPT_SECONDS, TASK_ATTEMPTS};
    let action = spec.task.action.to_string();
    let outcome = match (cancelled, record.status) {
        (true, _) => "cancelled",
        (_, Some(AttemptStatus::Succeeded)) => "succeeded",
        (_, Some(AttemptStatus::TimedOut)) => "timed_out",
        _ => "failed",
    };
    metrics::counter!(TASK_ATTEMPTS.name, "action" => action.clone(), "outcome" => outcome)
        .increment(1);
    metrics::histogram!(TASK_ATTEMPT_SECONDS.name, "action" => action)
        .record(record.duration.unwrap_or_default());
}
