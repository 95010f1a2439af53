//! The one way a run's record changes: an event goes through the lifecycle rule
//! ([`next`]), and the transition is committed with its history and counted ([`commit`]).
//! The supervisor applies its run's events this way, its command handler too, and the
//! runtime's command path for a run without a supervisor ([`apply`]); an admin's operation
//! that ends commits the transition `rules::resize` made the same way.
//!
//! Writing a transition ([`write`]) is the only write of a run's record after its start: the
//! record, the index of active runs (with the nodes the namespace's quota counts), the queue
//! a run leaves, its end for the triggers, the notes as the run's history; [`commit`] adds who
//! asked, for a command. A queued run's start or rejection, and a start's refusal, write theirs
//! the same way inside their own writes.

use crate::model::access::Act;
use crate::model::event::EventKind;
use crate::model::plan::NodeRecord;
use crate::model::run::{ClusterStatus, ProgramStatus, RunError, RunRecord};
use crate::rules::lifecycle::{self, Effect, Event, Transition};
use crate::store::clock;
use crate::store::events;
use crate::store::keys;
use crate::store::{Read, StoreError, Table, Txn};

use super::deps::Deps;
use super::error::RuntimeError;

/// A transition on its way to the store.
#[derive(Debug, Clone)]
pub struct Next {
    pub transition: Transition,
    /// A forced deprovision: the history says what may have been left behind.
    pub leftovers: bool,
}

impl Next {
    /// A transition another rule made (an admin's operation that ended).
    pub fn of(transition: Transition) -> Self {
        Self {
            transition,
            leftovers: false,
        }
    }

    /// Whether committing it changes nothing: the same record and nothing to do.
    pub fn is_idle(&self, run: &RunRecord) -> bool {
        self.transition.run == *run && self.transition.effects.is_empty()
    }
}

/// What `event` does to `run` at `now` (epoch seconds) on server `server`, by the lifecycle
/// rule; a refusal is the command's error.
pub fn next(run: &RunRecord, event: Event, server: &str, now: u64) -> Result<Next, RunError> {
    let leftovers = event == Event::ForceDeprovision;
    let mut transition = lifecycle::on(run, event, now)?;
    if transition.effects.contains(&Effect::Launch) {
        // Recorded before the launch: another server taking the run over then knows a
        // program on this host is out of its reach.
        transition.run.launcher = Some(server.to_string());
    }
    Ok(Next {
        transition,
        leftovers,
    })
}

/// Applies `event` to `run`, for a run without a supervisor (it ended, or it waits for an
/// owner), as asked by `act`; answers with the new record.
pub async fn apply(
    deps: &Deps,
    run: &RunRecord,
    event: Event,
    act: &Act,
) -> Result<RunRecord, RuntimeError> {
    let next = next(run, event, &deps.member.name, clock::now_secs())?;
    commit(deps, run, &next, Some(act)).await?;
    Ok(next.transition.run)
}

/// Writes transition `t` of a run that was `before`, in `tx`: its record (in this build's
/// format), the index of active runs (with the nodes the namespace's quota counts), the
/// queue it leaves, its end for the program-status triggers, and its notes as history
/// events by `actor`. Who asked goes in the audit log of changes, which is the caller's.
/// Answers the record written.
pub fn write(
    tx: &mut Txn<'_>,
    before: &RunRecord,
    t: &Transition,
    actor: Option<&str>,
) -> Result<RunRecord, StoreError> {
    let mut run = t.run.clone();
    run.format = crate::model::run::RUN_FORMAT;
    let key = run.key.key();
    let idle = Some(ClusterStatus::Idle);
    if before.cluster.status == idle && run.cluster.status != idle {
        // Another run may have taken the cluster over since `before` was read: only the
        // write that finds it still IDLE goes ahead.
        let stored = tx.get::<RunRecord>(Table::Runs, &key)?;
        if stored.is_none_or(|s| s.cluster.status != idle) {
            return Err(StoreError::Fenced { run: key });
        }
        crate::store::idle::withdraw(tx, before);
    }
    if run.cluster.status == idle && before.cluster.status != idle {
        crate::store::idle::offer(tx, &run)?;
    }
    if crate::rules::usage::settles(&run) && !crate::rules::usage::settles(before) {
        // The run's use of a cluster is over: its usage is fixed, once.
        match tx.get::<RunRecord>(Table::Runs, &key)? {
            Some(stored) if stored.settled => run.settled = true,
            _ => crate::store::usage::settle(tx, &mut run, crate::store::clock::now_secs())?,
        }
    }
    tx.put(Table::Runs, &key, &run)?;
    if !run.is_active() {
        tx.delete(Table::Active, &key);
        tx.delete(Table::Owners, &key);
    } else {
        // The namespace's quota counts the nodes its live runs hold: an expand or a shrink
        // changes them. An IDLE cluster's run is not live (its nodes still count).
        let nodes = run.cluster.nodes.len();
        let is_idle = run.cluster.status == idle;
        if let Some(mut entry) = tx.get::<serde_json::Value>(Table::Active, &key)?
            && (entry.get("nodes").and_then(serde_json::Value::as_u64) != Some(nodes as u64)
                || crate::store::idle::is_idle_entry(&entry) != is_idle)
        {
            entry["nodes"] = serde_json::json!(nodes);
            match is_idle {
                true => entry["idle"] = serde_json::json!(true),
                false => {
                    if let Some(m) = entry.as_object_mut() {
                        m.remove("idle");
                    }
                }
            }
            tx.put(Table::Active, &key, &entry)?;
        }
    }
    if before.status == ProgramStatus::Queued && run.status != ProgramStatus::Queued {
        crate::store::queue::leave(tx, before)?;
    }
    if run.status.is_end() && !before.status.is_end() {
        crate::store::ends::record(tx, &run)?;
    }
    for note in &t.notes {
        events::append_by(tx, &run.key.run, EventKind::Status, None, note, actor)?;
    }
    Ok(run)
}

/// Commits transition `next` of a run that was `before` ([`write`]), and, for a command
/// someone asked for (`act`), who asked, in the events and the audit log of changes. Then
/// counts what it changed.
pub async fn commit(
    deps: &Deps,
    before: &RunRecord,
    next: &Next,
    act: Option<&Act>,
) -> Result<(), StoreError> {
    commit_with(deps, before, next, act, |_| Ok(())).await
}

/// [`commit`], with what `also` writes in the same write (the operation the transition
/// starts, recorded with it: one write where there were two, one after the other); answers
/// what `also` answered.
pub async fn commit_with<R, F>(
    deps: &Deps,
    before: &RunRecord,
    next: &Next,
    act: Option<&Act>,
    also: F,
) -> Result<R, StoreError>
where
    F: Fn(&mut Txn<'_>) -> Result<R, StoreError> + Send + 'static,
    R: Send + 'static,
{
    let (t, leftovers) = (&next.transition, next.leftovers);
    let (act, earlier, transition) = (act.cloned(), before.clone(), t.clone());
    let answer = deps
        .store
        .write(move |tx| {
            let actor = act.as_ref().map(|a| a.actor.as_str());
            let run = write(tx, &earlier, &transition, actor)?;
            if let Some(act) = &act {
                crate::store::changes::record(tx, act)?;
            }
            if leftovers {
                let left: Vec<String> = tx
                    .scan::<NodeRecord>(Table::Resources, &keys::of_run(run.cluster_id()))?
                    .into_iter()
                    .map(|(_, n)| n)
                    .filter(NodeRecord::may_exist)
                    .map(|n| {
                        format!(
                            "{} ({}, {:?})",
                            n.node,
                            n.id.as_deref().unwrap_or("id unknown"),
                            n.status
                        )
                    })
                    .collect();
                let message = if left.is_empty() {
                    "no resource was left behind".to_string()
                } else {
                    format!(
                        "resources that may have been left behind: {}",
                        left.join(", ")
                    )
                };
                events::append(tx, &run.key.run, EventKind::Error, None, message)?;
            }
            also(tx)
        })
        .await?;
    deps.notifier.notify(&t.run.key.run);
    if before.is_active() && !t.run.is_active() {
        // A slot a limit counts is free: a queued run may take it.
        deps.queue_news.freed();
    }
    count(before, &t.run);
    Ok(answer)
}

/// Applies `event` (a stop) to run `key` if it is still QUEUED, in one write that also takes
/// it out of the queue, so the dispatcher cannot start it meanwhile; answers the new record,
/// or `None` when the run is not queued (any more).
pub async fn withdraw(
    deps: &Deps,
    key: &crate::model::run::RunKey,
    event: Event,
    act: &Act,
) -> Result<Option<RunRecord>, RuntimeError> {
    let (k, act) = (key.key(), act.clone());
    let changed = deps
        .store
        .write(move |tx| {
            let Some(run) = tx.get::<RunRecord>(Table::Runs, &k)? else {
                return Ok(None);
            };
            if run.status != ProgramStatus::Queued {
                return Ok(None);
            }
            let t = lifecycle::on(&run, event.clone(), clock::now_secs())?;
            let after = write(tx, &run, &t, Some(&act.actor))?;
            crate::store::changes::record(tx, &act)?;
            Ok::<_, RuntimeError>(Some((run, after)))
        })
        .await?;
    Ok(changed.map(|(before, after)| {
        deps.notifier.notify(&after.key.run);
        count(&before, &after);
        after
    }))
}

/// Counts what a committed transition from `before` to `after` changed: the statuses
/// entered, and the provisioning and running phases that ended.
pub(super) fn count(before: &RunRecord, after: &RunRecord) {
    use crate::model::metrics::{CLUSTER_STATUS, RUN_PHASE, RUN_STATUS};
    if before.status != after.status {
        metrics::counter!(RUN_STATUS.name, "status" => after.status.to_string()).increment(1);
        if after.status == crate::model::run::ProgramStatus::Running
            && let Some(start) = after.start
        {
            metrics::histogram!(RUN_PHASE.name, "phase" => "provisioning")
                .record(start.saturating_sub(after.began()) as f64);
        }
        if after.status.is_end()
            && let (Some(start), Some(end)) = (before.start.or(after.start), after.end)
        {
            metrics::histogram!(RUN_PHASE.name, "phase" => "running")
                .record(end.saturating_sub(start) as f64);
        }
    }
    if after.attempts.len() > before.attempts.len()
        && let Some(a) = after.attempts.last()
    {
        metrics::counter!(crate::model::metrics::PROGRAM_RETRIES.name, "kind" => a.failure.kind.to_string())
            .increment(1);
    }
    if before.cluster.status != after.cluster.status
        && let Some(status) = after.cluster.status
    {
        metrics::counter!(CLUSTER_STATUS.name, "status" => status.to_string()).increment(1);
    }
}
