//! TaskRunner: one actor per node-level task, walking one resource through its lifecycle.
//!
//! The decisions are `plan::resource::next_step`; this module makes the calls and persists the
//! record before every call that changes the outside world (create, delete) and after every
//! call that taught us something, each with an event in the run's history. Retryable errors
//! are retried with backoff inside the profile's `retryBudget`; a fatal error or a spent budget
//! fails the task. A cancelled task stops before its next call, never in the middle of one, so
//! whatever an in-flight create made is recorded and the delete operation will find it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::prelude::*;
use ebb_spi::{ProvisionError, Provisioner, Resource, ResourceKey, ResourceState};

use super::Deps;
use std::collections::{BTreeMap, BTreeSet};

use crate::plan::cluster::Action;
use crate::plan::resource::{Backoff, NodeRecord, ResourceStatus, Step, next_step};
use crate::plan::{Operation, TaskKind};
use crate::run::events::{self, EventKind};
use crate::store::{Read, StoreError, Table};
use crate::template::Template;
use crate::time::now_millis;

/// Everything a task needs.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    pub index: usize,
    pub action: Action,
    /// The service of a service task.
    pub service: Option<String>,
    pub operation: Operation,
    pub template: Option<Arc<Template>>,
    /// Every node's services.
    pub layout: BTreeMap<String, BTreeSet<String>>,
    pub run: String,
    pub node: String,
    pub provisioner: Arc<dyn Provisioner>,
    pub context: Arc<ebb_spi::Context>,
    pub budget: Duration,
    pub cancel: Arc<AtomicBool>,
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOutcome {
    Done,
    Cancelled,
    Failed(String),
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
        let index = spec.index;
        let deps = self.deps.clone();
        ctx.spawn(
            async move { execute(&deps, &spec).await }
                .into_actor(self)
                .map(move |outcome, act, ctx| {
                    act.planner.do_send(TaskDone { index, outcome });
                    ctx.stop();
                }),
        );
    }
}

fn store_failure(e: StoreError) -> TaskOutcome {
    TaskOutcome::Failed(format!("cannot record progress: {e}"))
}

/// Runs one task to its end.
pub async fn execute(deps: &Deps, spec: &TaskSpec) -> TaskOutcome {
    match spec.action {
        Action::Create => resource_task(deps, spec, TaskKind::Create).await,
        Action::Confirm => resource_task(deps, spec, TaskKind::Confirm).await,
        Action::Delete => resource_task(deps, spec, TaskKind::Delete).await,
        Action::Bootstrap => TaskOutcome::Done,
        _ => super::automator::run(deps, spec).await,
    }
}

/// Walks the node's resource through one resource step (create, confirm, delete).
async fn resource_task(deps: &Deps, spec: &TaskSpec, kind: TaskKind) -> TaskOutcome {
    let store_key = format!("{}/{}", spec.run, spec.node);
    let key = store_key.clone();
    let mut record: Option<NodeRecord> = match deps
        .store
        .read(move |r| r.get::<NodeRecord>(Table::Resources, &key))
        .await
    {
        Ok(r) => r,
        Err(e) => return store_failure(e),
    };
    let identity = ResourceKey {
        run: spec.run.clone(),
        node: spec.node.clone(),
    };
    let retries = Backoff::retries(spec.budget);
    let polls = Backoff::polls(spec.budget);
    let mut tries: u32 = 0;
    loop {
        let step = next_step(kind, record.as_ref());
        if step == Step::Done {
            return TaskOutcome::Done;
        }
        if spec.cancel.load(Ordering::SeqCst) {
            return TaskOutcome::Cancelled;
        }
        let now = now_millis();
        // Persist, then act: record that a create or delete is about to be requested.
        let before = match &step {
            Step::Create => {
                let mut r = record.clone().unwrap_or_else(|| {
                    NodeRecord::new(&spec.node, ResourceStatus::RequestingCreate, now)
                });
                r.attempts += 1;
                Some((r, (tries == 0).then_some("create requested")))
            }
            Step::Delete(_) => {
                let mut r = record.clone().expect("a delete step has a record");
                if r.status != ResourceStatus::RequestingDelete {
                    r.enter(ResourceStatus::RequestingDelete, now);
                }
                r.attempts += 1;
                Some((r, (tries == 0).then_some("delete requested")))
            }
            _ => None,
        };
        if let Some((r, note)) = before {
            let notes: Vec<(EventKind, String)> = note
                .map(|n| (EventKind::Task, n.to_string()))
                .into_iter()
                .collect();
            if let Err(e) = save(deps, &spec.run, &store_key, &r, notes).await {
                return store_failure(e);
            }
            record = Some(r);
        }
        let ctx = &spec.context;
        let outcome: Result<Progress, ProvisionError> = match &step {
            Step::Find => spec
                .provisioner
                .find(ctx, &identity)
                .await
                .map(|found| found_resource(kind, record.as_ref(), found, now_millis())),
            Step::Create => spec
                .provisioner
                .create(ctx, &identity)
                .await
                .map(|r| adopt(record.as_ref(), &r, now_millis())),
            Step::Describe(id) => spec
                .provisioner
                .describe(ctx, id)
                .await
                .map(|found| described(kind, record.as_ref(), id, found, now_millis())),
            Step::Delete(id) => spec
                .provisioner
                .delete(ctx, id)
                .await
                .map(|()| Progress::Again),
            Step::Done => unreachable!("handled above"),
        };
        match outcome {
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
                    return store_failure(e);
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
                        let _ = note(deps, &spec.run, &spec.node, EventKind::Error, &message).await;
                        return TaskOutcome::Failed(format!("node {}: {message}", spec.node));
                    }
                }
            }
            Err(e) => {
                tries += 1;
                let since = record.as_ref().map_or(now, |r| r.since_ms);
                let delay = if e.retryable {
                    retries.delay(tries, since, now_millis(), fastrand::f64())
                } else {
                    None
                };
                let step_name = step_name(&step);
                match delay {
                    Some(delay) => {
                        let message = format!(
                            "{step_name} failed (try {tries}), retrying in {}: {}",
                            humantime::format_duration(Duration::from_millis(
                                delay.as_millis() as u64
                            )),
                            e.message
                        );
                        if let Err(e) =
                            note(deps, &spec.run, &spec.node, EventKind::Retry, &message).await
                        {
                            return store_failure(e);
                        }
                        tokio::time::sleep(delay).await;
                    }
                    None => {
                        let message = if e.retryable {
                            format!(
                                "{step_name} kept failing for {} ({tries} tries): {}",
                                humantime::format_duration(spec.budget),
                                e.message
                            )
                        } else {
                            format!("{step_name} failed: {}", e.message)
                        };
                        let _ = note(deps, &spec.run, &spec.node, EventKind::Error, &message).await;
                        return TaskOutcome::Failed(format!("node {}: {message}", spec.node));
                    }
                }
            }
        }
    }
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

/// What a call taught us.
enum Progress {
    /// A new record to persist, with a note for the history.
    Save(NodeRecord, String),
    /// Decide again right away (a delete was accepted: look at the resource now).
    Again,
    /// Not there yet; poll again after a pause.
    Poll(String),
}

fn describe_resource(r: &Resource) -> String {
    match &r.address {
        Some(a) => format!("{} at {a}", r.id),
        None => r.id.clone(),
    }
}

fn adopt(record: Option<&NodeRecord>, resource: &Resource, now: u64) -> Progress {
    let mut r = record
        .cloned()
        .unwrap_or_else(|| NodeRecord::new("", ResourceStatus::RequestingCreate, now));
    r.adopt(resource, now);
    let note = match r.status {
        ResourceStatus::Created => format!("created {}", describe_resource(resource)),
        _ => format!("create accepted: {} is pending", resource.id),
    };
    Progress::Save(r, note)
}

fn found_resource(
    kind: TaskKind,
    record: Option<&NodeRecord>,
    found: Option<Resource>,
    now: u64,
) -> Progress {
    let Some(record) = record else {
        return Progress::Again;
    };
    match found {
        Some(resource) => {
            let Progress::Save(r, _) = adopt(Some(record), &resource, now) else {
                unreachable!("adopt always saves")
            };
            Progress::Save(
                r,
                format!("found {} made by an earlier create", resource.id),
            )
        }
        None => {
            let mut r = record.clone();
            match kind {
                // Nothing was made: the next step creates (once more).
                TaskKind::Create | TaskKind::Confirm => {
                    r.attempts = 0;
                    Progress::Save(r, "no resource from the earlier create; creating".into())
                }
                TaskKind::Delete => {
                    r.enter(ResourceStatus::Deleted, now);
                    r.delete_time = Some(now / 1000);
                    Progress::Save(r, "nothing was created; nothing to delete".into())
                }
            }
        }
    }
}

fn described(
    kind: TaskKind,
    record: Option<&NodeRecord>,
    id: &str,
    found: Option<Resource>,
    now: u64,
) -> Progress {
    let Some(record) = record else {
        return Progress::Again;
    };
    let mut r = record.clone();
    match (kind, found) {
        (TaskKind::Confirm, Some(res)) if res.state == ResourceState::Running => {
            r.adopt(&res, now);
            Progress::Save(r, format!("ready: {}", describe_resource(&res)))
        }
        (TaskKind::Confirm, Some(res)) => {
            Progress::Poll(format!("{} is still {:?}", res.id, res.state))
        }
        (TaskKind::Confirm, None) => Progress::Poll(format!("{id} is not visible")),
        (_, None) => {
            r.enter(ResourceStatus::Deleted, now);
            r.delete_time = Some(now / 1000);
            Progress::Save(r, format!("deleted {id}"))
        }
        (_, Some(res)) if res.state == ResourceState::Deleting => {
            if r.status == ResourceStatus::PollingDelete {
                Progress::Poll(format!("{id} is still being deleted"))
            } else {
                r.enter(ResourceStatus::PollingDelete, now);
                Progress::Save(r, format!("{id} is being deleted"))
            }
        }
        // Still there and not being deleted: the delete request did not land; ask again.
        (_, Some(_)) => {
            r.enter(ResourceStatus::RequestingDelete, now);
            Progress::Save(r, format!("{id} is not being deleted; requesting again"))
        }
    }
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
            for (kind, message) in notes {
                events::append(tx, &run_id, kind, Some(&record.node), message)?;
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
        .write(move |tx| events::append(tx, &run_id, kind, Some(&node), message))
        .await?;
    deps.notifier.notify(run);
    Ok(())
}
