//! TaskRunner: one actor per node-level task, running its attempts and recording each one.
//!
//! A task is tried up to its policy's number of attempts, each bounded by a timeout after
//! which it counts as TIMED_OUT and is abandoned (its future is dropped, so a late answer is
//! never seen; a script's process group is killed). Attempts are spaced by exponential
//! backoff with jitter. Every attempt is written to the audit log when it starts and when it
//! ends. A fatal error (the provider says retrying cannot help) ends the task at once. A
//! failed `confirm` is retried by deleting the node's resource and creating it anew.
//!
//! Node tasks walk `plan::resource::next_step`, persisting the record `plan::answer::announce`
//! gives before every call that changes the outside world (create, delete) and the one
//! `plan::answer::learn` makes of every answer that taught us something;
//! retryable errors are retried with backoff inside the profile's `retryBudget`. A cancelled
//! task stops before its next call, never in the middle of one, so whatever an in-flight
//! create made is recorded and the delete operation will find it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use ebb_spi::{Placement, ProvisionError, ResourceKey};

use super::attempt::{AttemptOutcome, RECREATED, REPLACED, TaskSpec, merge_properties};
use super::deps::Deps;

use crate::model::event::EventKind;
use crate::model::operation::{AttemptRecord, AttemptStatus, OperationRecord};
use crate::model::plan::{Action, NodePlacement, NodeRecord, ResourceStatus, TaskKind};
use crate::model::service::ServiceRecord;
use crate::rules::capacity;
use crate::rules::plan::answer::{self, Answer, Progress};
use crate::rules::plan::resource::{Backoff, Step, generation, moved, next_step};
use crate::rules::service::Happened;
use crate::runtime::clock::{now_f64, now_millis};
use crate::store::events;
use crate::store::keys;
use crate::store::{Read, StoreError, Table};

/// The longest pause between two attempts.
const MAX_PAUSE: Duration = Duration::from_secs(30);

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
        if let Err(e) = audit(deps, spec, &key, &record, None, None).await {
            return store_failure(e);
        }
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
        let timed_out = attempt_run.is_err();
        let outcome = match attempt_run {
            Ok(outcome) => outcome,
            Err(_) => AttemptOutcome::Failed {
                message: format!(
                    "timed out after {}",
                    humantime::format_duration(Duration::from_secs(timeout.as_secs()))
                ),
                retry: true,
                output: None,
            },
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
        if let Err(e) = audit(deps, spec, &key, &record, Some((kind, note)), settled).await {
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

/// Writes an attempt record, with a note for the run's history; when the task is `settled`
/// (it succeeded, or failed for good), the state of its service on its node changes with it.
async fn audit(
    deps: &Deps,
    spec: &TaskSpec,
    key: &str,
    record: &AttemptRecord,
    note: Option<(EventKind, String)>,
    settled: Option<bool>,
) -> Result<(), StoreError> {
    let (key, record, run, node) = (
        key.to_string(),
        record.clone(),
        spec.run.clone(),
        spec.node().to_string(),
    );
    let change = settled.map(|succeeded| ServiceChange::of(spec, succeeded));
    deps.store
        .write(move |tx| {
            tx.put(Table::Attempts, &key, &record)?;
            if let Some((kind, message)) = &note {
                events::append(tx, &run, *kind, Some(&node), message)?;
            }
            if let Some(change) = &change {
                change.write(tx)?;
            }
            Ok::<_, StoreError>(())
        })
        .await?;
    deps.notifier.notify(&spec.run);
    Ok(())
}

async fn events_note(
    deps: &Deps,
    spec: &TaskSpec,
    kind: EventKind,
    message: String,
) -> Result<(), StoreError> {
    note(deps, &spec.run, spec.node(), kind, &message).await
}

fn store_failure(e: StoreError) -> TaskOutcome {
    TaskOutcome::Failed(format!("cannot record progress: {e}"))
}

/// One attempt of a task; `last_failure` is the attempt that last failed, if any.
async fn execute(deps: &Deps, spec: &TaskSpec, last_failure: Option<u32>) -> AttemptOutcome {
    match spec.task.action {
        Action::Create => resource_task(deps, spec, TaskKind::Create, generation(spec.op, 0)).await,
        Action::Confirm if last_failure.is_some() => {
            recreate(deps, spec, last_failure.unwrap_or_default()).await
        }
        Action::Confirm => {
            resource_task(deps, spec, TaskKind::Confirm, generation(spec.op, 0)).await
        }
        Action::Delete => resource_task(deps, spec, TaskKind::Delete, 0).await,
        Action::Bootstrap => AttemptOutcome::done(),
        Action::Replace => replace(deps, spec).await,
        Action::Install
        | Action::Configure
        | Action::Initialize
        | Action::Start
        | Action::Stop
        | Action::Remove => super::automator::run(deps, spec).await,
    }
}

/// A confirm that failed (in attempt `failed`): the node's resource is deleted and created
/// anew, then confirmed. Each step persists as usual, and the new resource is marked with the
/// failed attempt, so a restart in the middle confirms the replacement instead of replacing it
/// again.
async fn recreate(deps: &Deps, spec: &TaskSpec, failed: u32) -> AttemptOutcome {
    let key = keys::node(&spec.cluster, spec.node());
    let k = key.clone();
    let record = match deps
        .store
        .read(move |r| r.get::<NodeRecord>(Table::Resources, &k))
        .await
    {
        Ok(r) => r,
        Err(e) => return AttemptOutcome::failed(format!("cannot read the node: {e}"), true),
    };
    // A record already created anew and waiting to be confirmed is confirmed as it is.
    let mark = failed.to_string();
    let fresh = record
        .as_ref()
        .is_some_and(|r| r.properties.get(RECREATED) == Some(&mark));
    if !fresh {
        if record.is_some() {
            let _ = events_note(
                deps,
                spec,
                EventKind::Task,
                "deleting the node to create it anew".into(),
            )
            .await;
            match resource_task(deps, spec, TaskKind::Delete, 0).await {
                AttemptOutcome::Done { .. } => {}
                other @ (AttemptOutcome::Cancelled
                | AttemptOutcome::Failed { .. }
                | AttemptOutcome::NoRoom(_)) => {
                    return other;
                }
            }
            let k = key.clone();
            let removed = deps.store.write(move |tx| {
                tx.delete(Table::Resources, &k);
                Ok::<_, StoreError>(())
            });
            if let Err(e) = removed.await {
                return progress_failure(e);
            }
        }
        // A new generation: a cloud must not answer this create with the failed resource.
        let fresh = generation(spec.op, failed);
        match resource_task(deps, spec, TaskKind::Create, fresh).await {
            AttemptOutcome::Done { .. } => {}
            other @ (AttemptOutcome::Cancelled
            | AttemptOutcome::Failed { .. }
            | AttemptOutcome::NoRoom(_)) => return other,
        }
        // Mark the new resource, so a restart confirms it instead of replacing it again.
        let mark = [(RECREATED.to_string(), mark)].into();
        if let Err(e) = merge_properties(deps, &spec.cluster, spec.node(), mark).await {
            return progress_failure(e);
        }
    }
    resource_task(deps, spec, TaskKind::Confirm, generation(spec.op, failed)).await
}

/// Replaces the node's resource: the old one is deleted (deleting one that is gone succeeds)
/// and a new incarnation requested; the confirm that follows waits for it. The new record
/// is written, marked with the operation, before the create is requested: a restart in the
/// middle carries on with it (looking it up by its identity first) instead of replacing the
/// node again.
async fn replace(deps: &Deps, spec: &TaskSpec) -> AttemptOutcome {
    let key = keys::node(&spec.cluster, spec.node());
    let k = key.clone();
    let record = match deps
        .store
        .read(move |r| r.get::<NodeRecord>(Table::Resources, &k))
        .await
    {
        Ok(r) => r,
        Err(e) => return progress_failure(e),
    };
    let incarnation = generation(spec.op, 0);
    let mark = spec.op.to_string();
    let begun = record
        .as_ref()
        .is_some_and(|r| r.properties.get(REPLACED) == Some(&mark));
    if !begun {
        if record.as_ref().is_some_and(NodeRecord::may_exist) {
            let _ = events_note(
                deps,
                spec,
                EventKind::Task,
                "deleting what is left of the node to replace it".into(),
            )
            .await;
            match resource_task(deps, spec, TaskKind::Delete, 0).await {
                AttemptOutcome::Done { .. } => {}
                other @ (AttemptOutcome::Cancelled
                | AttemptOutcome::Failed { .. }
                | AttemptOutcome::NoRoom(_)) => {
                    return other;
                }
            }
        }
        let mut fresh =
            NodeRecord::new(spec.node(), ResourceStatus::RequestingCreate, now_millis());
        fresh.properties.insert(REPLACED.to_string(), mark);
        // The count of reclaims stays with the node (after `spotRetries`, on-demand).
        fresh.reclaims = record.as_ref().map_or(0, |r| r.reclaims);
        let note = format!(
            "replacing the node: a new resource for operation {}",
            spec.op
        );
        if let Err(e) = save(deps, &spec.run, &key, &fresh, vec![(EventKind::Task, note)]).await {
            return progress_failure(e);
        }
    }
    resource_task(deps, spec, TaskKind::Create, incarnation).await
}

/// Walks the node's resource through one resource step (create, confirm, delete);
/// `generation` is the incarnation a create makes ([`ResourceKey::generation`]).
async fn resource_task(
    deps: &Deps,
    spec: &TaskSpec,
    kind: TaskKind,
    generation: u32,
) -> AttemptOutcome {
    let store_key = keys::node(&spec.cluster, spec.node());
    let key = store_key.clone();
    let mut record: Option<NodeRecord> = match deps
        .store
        .read(move |r| r.get::<NodeRecord>(Table::Resources, &key))
        .await
    {
        Ok(r) => r,
        Err(e) => return progress_failure(e),
    };
    // Where a create may go, in order: a provisioner that places nodes has more than the one
    // default place.
    let candidates = match kind {
        TaskKind::Create => capacity::after_reclaims(
            spec.provisioner
                .placements(&spec.context.properties, spec.master),
            &spec.context.properties,
            record.as_ref().map_or(0, |r| r.reclaims),
        ),
        TaskKind::Confirm | TaskKind::Delete => Vec::new(),
    };
    let placing = candidates.len() > 1 || candidates.iter().any(|c| *c != Placement::default());
    let retries = Backoff::retries(spec.budget);
    let polls = Backoff::polls(spec.budget);
    let mut tries: u32 = 0;
    let mut throttled: u32 = 0;
    loop {
        let step = next_step(kind, record.as_ref());
        if step == Step::Done {
            return AttemptOutcome::Done {
                result: answer::facts(record.as_ref()),
                output: None,
            };
        }
        if spec.cancel.load(Ordering::SeqCst) {
            return AttemptOutcome::Cancelled;
        }
        let now = now_millis();
        // Persist, then act: record that a create or delete is about to be requested.
        let before = answer::announce(spec.node(), &step, record.as_ref(), tries, now);
        if let Some((mut r, note)) = before {
            if placing && step == Step::Create && r.placement.is_none() {
                match first_place(deps, spec, &candidates).await {
                    Ok(place) => r.placement = Some(place),
                    Err(e) => return progress_failure(e),
                }
            }
            let notes: Vec<(EventKind, String)> = note
                .map(|n| (EventKind::Task, n.to_string()))
                .into_iter()
                .collect();
            if let Err(e) = save(deps, &spec.run, &store_key, &r, notes).await {
                return progress_failure(e);
            }
            record = Some(r);
        }
        // A server that may have lost the run (paused past its lease) calls nothing: another
        // may have taken the run over and looked for the resource already.
        if let Err(e) = deps.store.still_owned().await {
            return progress_failure(e);
        }
        let placement = record.as_ref().and_then(|r| r.placement.as_ref());
        let identity = ResourceKey {
            generation: moved(generation, placement.map_or(0, |p| p.moves)),
            ..ResourceKey::new(&spec.cluster, spec.node())
        };
        let placed;
        let ctx = match placement {
            Some(p) if step == Step::Create => {
                let mut c = (*spec.context).clone();
                c.placement = p.at.clone();
                placed = c;
                &placed
            }
            Some(_) | None => &*spec.context,
        };
        let called = std::time::Instant::now();
        let outcome = call(deps, spec, ctx, &identity, &step).await;
        count_call(spec, &step, &outcome, called.elapsed());
        let learnt =
            outcome.map(|a| answer::learn(spec.node(), kind, record.as_ref(), a, now_millis()));
        match learnt {
            Ok(Progress::Save(r, note)) => {
                tries = 0;
                if let Err(e) = save(
                    deps,
                    &spec.run,
                    &store_key,
                    &r,
                    vec![(EventKind::Task, note)],
                )
                .await
                {
                    return progress_failure(e);
                }
                record = Some(r);
            }
            Ok(Progress::Again) => tries = 0,
            Ok(Progress::Poll(what)) => {
                tries += 1;
                let since = record.as_ref().map_or(now, |r| r.since_ms);
                match polls.delay(tries, since, now_millis(), fastrand::f64()) {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => {
                        let message = format!(
                            "gave up after {}: {what}",
                            humantime::format_duration(spec.budget)
                        );
                        return AttemptOutcome::failed(message, true);
                    }
                }
            }
            Ok(Progress::Gone(message)) => return AttemptOutcome::failed(message, true),
            Err(e) if step == Step::Create && e.capacity_scope().is_some() => {
                let Some(current) = record.as_ref() else {
                    return AttemptOutcome::failed(e.message, true);
                };
                match fail_over(deps, spec, &candidates, current, &e).await {
                    Err(stored) => return progress_failure(stored),
                    Ok((r, Some(_))) => {
                        tries = 0;
                        record = Some(r);
                    }
                    Ok((r, None)) => {
                        // Every place is full: a backoff inside the budget, then a new walk.
                        tries += 1;
                        let since = r.since_ms;
                        record = Some(r);
                        let full = ProvisionError {
                            message: format!("no room in any of its places: {}", e.message),
                            ..e
                        };
                        if let Err(ended) =
                            retry(deps, spec, &step, full, tries, since, &retries).await
                        {
                            return match ended {
                                AttemptOutcome::Failed { message, .. } => {
                                    AttemptOutcome::NoRoom(message)
                                }
                                other @ (AttemptOutcome::Done { .. }
                                | AttemptOutcome::Cancelled
                                | AttemptOutcome::NoRoom(_)) => other,
                            };
                        }
                    }
                }
            }
            // The cloud asks us to slow down: backpressure, waited out without spending the
            // step's tries (within a bound, so a cloud that never relents still ends it).
            Err(e) if throttled_wait(spec, &e, record.as_ref(), &mut throttled).is_some() => {
                let wait = throttled_wait(spec, &e, record.as_ref(), &mut throttled);
                metrics::counter!(
                    crate::model::metrics::THROTTLED.name,
                    "provisioner" => spec.provisioner.spec().name,
                    "call" => step_name(&step),
                )
                .increment(1);
                tracing::debug!(node = spec.node(), error = %spec.context.redact(&e.message), "throttled by the cloud");
                // A throttled request was refused whole: nothing of it to look for (a restart
                // that reads the persisted try looks anyway).
                if let Some(r) = record.as_mut().filter(|_| step == Step::Create) {
                    r.attempts = r.attempts.saturating_sub(1);
                }
                tokio::time::sleep(wait.unwrap_or_default()).await;
            }
            Err(e) => {
                tries += 1;
                let since = record.as_ref().map_or(now, |r| r.since_ms);
                if let Err(ended) = retry(deps, spec, &step, e, tries, since, &retries).await {
                    return ended;
                }
            }
        }
    }
}

/// How many times longer than the retry budget a step may be throttled before the throttling
/// counts as a failure.
const THROTTLED_BUDGETS: u32 = 4;

/// How long to wait after a throttled call (`e`), the `throttled`-th in a row; `None` when
/// `e` is no throttling or the step has been throttled for too long.
fn throttled_wait(
    spec: &TaskSpec,
    e: &ProvisionError,
    record: Option<&NodeRecord>,
    throttled: &mut u32,
) -> Option<Duration> {
    let ebb_spi::ErrorKind::Throttled(after) = e.kind else {
        return None;
    };
    let since = record.map_or_else(now_millis, |r| r.since_ms);
    let spent = Duration::from_millis(now_millis().saturating_sub(since));
    if spent > spec.budget.saturating_mul(THROTTLED_BUDGETS) {
        return None;
    }
    *throttled = throttled.saturating_add(1);
    let backoff = Backoff::retries(Duration::MAX).delay(*throttled, 0, 0, fastrand::f64());
    Some(after.or(backoff).unwrap_or(MAX_PAUSE).min(MAX_PAUSE))
}

/// Where a node's first create goes: its first place the operation has not found full.
async fn first_place(
    deps: &Deps,
    spec: &TaskSpec,
    candidates: &[Placement],
) -> Result<NodePlacement, StoreError> {
    let key = keys::operation(&spec.run, spec.op);
    let op = deps
        .store
        .read(move |r| r.get::<OperationRecord>(Table::Operations, &key))
        .await?;
    let blocked = op.map(|o| o.blocked).unwrap_or_default();
    let at = capacity::next_placement(candidates, &blocked, 0)
        .or_else(|| candidates.first().cloned())
        .unwrap_or_default();
    Ok(NodePlacement {
        at,
        moves: 0,
        round_ms: 0,
    })
}

/// A create at `current`'s place found no room (`e`): the place is blocked for the rest of
/// the operation and the node moves on, both in one write with a note for the run's
/// history. Answers the node's new record, and its next place (none: every place is full,
/// a new walk begins after a backoff).
async fn fail_over(
    deps: &Deps,
    spec: &TaskSpec,
    candidates: &[Placement],
    current: &NodeRecord,
    e: &ProvisionError,
) -> Result<(NodeRecord, Option<NodePlacement>), StoreError> {
    let (op_key, node_key) = (
        keys::operation(&spec.run, spec.op),
        keys::node(&spec.cluster, spec.node()),
    );
    let (run, node, candidates) = (
        spec.run.clone(),
        spec.node().to_string(),
        candidates.to_vec(),
    );
    let scope = e.capacity_scope().unwrap_or(ebb_spi::CapacityScope::Zone);
    let error = spec.context.redact(&e.message);
    let before = current.clone();
    let placed = deps
        .store
        .write(move |tx| {
            let now = now_millis();
            let mut record = before.clone();
            let here = record.placement.clone().unwrap_or(NodePlacement {
                at: candidates.first().cloned().unwrap_or_default(),
                moves: 0,
                round_ms: 0,
            });
            let mut blocked = Vec::new();
            if let Some(mut op) = tx.get::<OperationRecord>(Table::Operations, &op_key)? {
                capacity::block(&mut op.blocked, &here.at, scope, &node, &error, now);
                blocked = op.blocked.clone();
                tx.put(Table::Operations, &op_key, &op)?;
            }
            let (next, moved_to) = capacity::after_full(&candidates, &blocked, &here, now);
            let note = match &next {
                Some(n) => format!(
                    "no room in {}: {error}; trying {}",
                    here.at.describe(),
                    n.at.describe()
                ),
                None => format!(
                    "no room in {} nor anywhere else it may go ({}): {error}",
                    here.at.describe(),
                    capacity::describe(&blocked)
                ),
            };
            // The cloud made nothing: the next create is a new request, not a lookup.
            record.placement = Some(moved_to);
            record.attempts = 0;
            tx.put(Table::Resources, &node_key, &record)?;
            events::append(tx, &run, EventKind::Retry, Some(&node), note)?;
            Ok::<_, StoreError>((record, next))
        })
        .await?;
    let market = current
        .placement
        .as_ref()
        .map_or("on-demand", |p| p.at.market.as_str());
    metrics::counter!(
        crate::model::metrics::PLACEMENT_FULL.name,
        "provisioner" => spec.provisioner.spec().name,
        "market" => market,
        "scope" => match scope {
            ebb_spi::CapacityScope::Zone => "zone",
            ebb_spi::CapacityScope::Region => "region",
        },
    )
    .increment(1);
    deps.notifier.notify(&spec.run);
    Ok(placed)
}

/// Makes the provider call `step` asks for, with `ctx` (the task's, placed for a create),
/// once the account's bucket lets it; a poll is answered from the cluster's shared lookup when
/// the provisioner offers one.
async fn call(
    deps: &Deps,
    spec: &TaskSpec,
    ctx: &ebb_spi::Context,
    identity: &ResourceKey,
    step: &Step,
) -> Result<Answer, ProvisionError> {
    use crate::runtime::calls::Kind;
    let provisioner = &spec.provisioner;
    let kind = match step {
        Step::Create => Kind::Create,
        Step::Delete(_) => Kind::Delete,
        Step::Find | Step::Describe(_) | Step::Done => Kind::Read,
    };
    let shared = matches!(step, Step::Describe(_)) && provisioner.batches_lookups();
    if !shared && *step != Step::Done {
        deps.calls.admit(provisioner.as_ref(), ctx, kind).await;
    }
    match step {
        Step::Find => provisioner.find(ctx, identity).await.map(Answer::Found),
        Step::Create => provisioner.create(ctx, identity).await.map(Answer::Created),
        Step::Describe(id) if shared => deps
            .calls
            .describe(
                Arc::clone(provisioner),
                Arc::clone(&spec.context),
                &spec.cluster,
                id,
            )
            .await
            .map(|found| Answer::Described {
                id: id.clone(),
                found,
            }),
        Step::Describe(id) => provisioner
            .describe(ctx, id)
            .await
            .map(|found| Answer::Described {
                id: id.clone(),
                found,
            }),
        Step::Delete(id) => provisioner
            .delete(ctx, id)
            .await
            .map(|()| Answer::DeleteAccepted),
        // `next_step` said there is nothing to do: nothing is called.
        Step::Done => Ok(Answer::DeleteAccepted),
    }
}

/// After the `tries`-th failed call of `step`: waits its backoff (noting the retry in the
/// run's history), or ends the attempt when the error is fatal or the budget is spent.
async fn retry(
    deps: &Deps,
    spec: &TaskSpec,
    step: &Step,
    e: ProvisionError,
    tries: u32,
    since: u64,
    retries: &Backoff,
) -> Result<(), AttemptOutcome> {
    // A provider's message may quote what it was given: never keep a secret.
    let e = ProvisionError {
        message: spec.context.redact(&e.message),
        ..e
    };
    let delay = if e.retryable {
        retries.delay(tries, since, now_millis(), fastrand::f64())
    } else {
        None
    };
    let step_name = step_name(step);
    let Some(delay) = delay else {
        let message = if e.retryable {
            format!(
                "{step_name} kept failing for {} ({tries} tries): {}",
                humantime::format_duration(spec.budget),
                e.message
            )
        } else {
            format!("{step_name} failed: {}", e.message)
        };
        // A spent budget may pass; a fatal error will not.
        return Err(AttemptOutcome::failed(message, e.retryable));
    };
    let message = format!(
        "{step_name} failed (try {tries}), retrying in {}: {}",
        humantime::format_duration(Duration::from_millis(delay.as_millis() as u64)),
        e.message
    );
    note(deps, &spec.run, spec.node(), EventKind::Retry, &message)
        .await
        .map_err(progress_failure)?;
    metrics::counter!(
        crate::model::metrics::RETRIES.name,
        "provisioner" => spec.provisioner.spec().name,
        "call" => step_name,
    )
    .increment(1);
    tokio::time::sleep(delay).await;
    Ok(())
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

/// Counts a provisioner call and its latency (`Step::Done` calls nothing).
fn count_call(
    spec: &TaskSpec,
    step: &Step,
    outcome: &Result<Answer, ProvisionError>,
    took: Duration,
) {
    use crate::model::metrics::{PROVISIONER_CALL_SECONDS, PROVISIONER_CALLS};
    if matches!(step, Step::Done) {
        return;
    }
    let provisioner = spec.provisioner.spec().name;
    let call = step_name(step);
    let result = match outcome {
        Ok(_) => "ok",
        Err(e) if e.retryable => "retryable",
        Err(_) => "fatal",
    };
    metrics::counter!(PROVISIONER_CALLS.name, "provisioner" => provisioner, "call" => call, "outcome" => result)
        .increment(1);
    metrics::histogram!(PROVISIONER_CALL_SECONDS.name, "provisioner" => provisioner, "call" => call)
        .record(took.as_secs_f64());
}

fn step_name(step: &Step) -> &'static str {
    match step {
        Step::Find => "find",
        Step::Create => "create",
        Step::Describe(_) => "describe",
        Step::Delete(_) => "delete",
        Step::Done => "done",
    }
}

fn progress_failure(e: StoreError) -> AttemptOutcome {
    AttemptOutcome::failed(format!("cannot record progress: {e}"), true)
}

async fn save(
    deps: &Deps,
    run: &str,
    key: &str,
    record: &NodeRecord,
    notes: Vec<(EventKind, String)>,
) -> Result<(), StoreError> {
    let (run_id, key, record) = (run.to_string(), key.to_string(), record.clone());
    deps.store
        .write(move |tx| {
            tx.put(Table::Resources, &key, &record)?;
            for (kind, message) in &notes {
                events::append(tx, &run_id, *kind, Some(&record.node), message)?;
            }
            Ok::<_, StoreError>(())
        })
        .await?;
    deps.notifier.notify(run);
    Ok(())
}

async fn note(
    deps: &Deps,
    run: &str,
    node: &str,
    kind: EventKind,
    message: &str,
) -> Result<(), StoreError> {
    let (run_id, node, message) = (run.to_string(), node.to_string(), message.to_string());
    deps.store
        .write(move |tx| events::append(tx, &run_id, kind, Some(&node), &message))
        .await?;
    deps.notifier.notify(run);
    Ok(())
}
