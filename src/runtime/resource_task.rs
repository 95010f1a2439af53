//! The resource steps of node tasks: create, confirm, delete, a confirm's recreate and a
//! node's replacement, each walking `plan::resource::next_step` and persisting the record
//! `plan::answer::announce` gives before every call that changes the outside world and the one
//! `plan::answer::learn` makes of every answer. A create that finds no room moves the node to
//! its next place (`rules::capacity`), the place blocked for the rest of the operation; a
//! throttled call is waited out; every call waits for the account's bucket, and a poll may be
//! answered from the cluster's shared lookup ([`super::calls`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ebb_spi::{Placement, ProvisionError, ResourceKey};

use super::attempt::{
    AttemptOutcome, RECREATED, REPLACED, TaskSpec, merge_properties, open_attempt,
};
use super::deps::Deps;

use crate::model::event::EventKind;
use crate::model::operation::OperationRecord;
use crate::model::plan::{NodePlacement, NodeRecord, ResourceStatus, TaskKind};
use crate::rules::capacity;
use crate::rules::plan::answer::{self, Answer, Progress};
use crate::rules::plan::resource::{Backoff, Step, generation, moved, next_step};
use crate::store::clock::now_millis;
use crate::store::events;
use crate::store::keys;
use crate::store::{Read, StoreError, Table};

/// The longest pause between two attempts, or after a throttled call.
pub(super) const MAX_PAUSE: Duration = Duration::from_secs(30);

pub(super) async fn events_note(
    deps: &Deps,
    spec: &TaskSpec,
    kind: EventKind,
    message: String,
) -> Result<(), StoreError> {
    note(deps, &spec.run, spec.node(), kind, &message).await
}

/// A confirm that failed (in attempt `failed`): the node's resource is deleted and created
/// anew, then confirmed. Each step persists as usual, and the new resource is marked with the
/// failed attempt (in the write of its created record), so a restart in the middle confirms
/// the replacement instead of replacing it again.
pub(super) async fn recreate(deps: &Deps, spec: &TaskSpec, failed: u32) -> Stepped {
    let key = keys::node(&spec.cluster, spec.node());
    let record = match read_node(deps, spec).await {
        Ok(r) => r,
        Err(e) => {
            let message = format!("cannot read the node: {e}");
            return (AttemptOutcome::failed(message, true), None);
        }
    };
    // A record already created anew and waiting to be confirmed is confirmed as it is.
    let mark = failed.to_string();
    let fresh = record
        .as_ref()
        .is_some_and(|r| r.properties.get(RECREATED) == Some(&mark));
    if !fresh {
        if record.is_some() {
            if let Some(ended) =
                delete_first(deps, spec, "deleting the node to create it anew").await
            {
                return (ended, None);
            }
            let k = key.clone();
            let removed = deps.store.write(move |tx| {
                tx.delete(Table::Resources, &k);
                Ok::<_, StoreError>(())
            });
            if let Err(e) = removed.await {
                return (progress_failure(e), None);
            }
        }
        // A new generation: a cloud must not answer this create with the failed resource.
        let fresh = generation(spec.op, failed);
        let marked = match resource_task(deps, spec, TaskKind::Create, fresh).await {
            (AttemptOutcome::Done { .. }, Some(mut last)) => {
                last.record.properties.insert(RECREATED.to_string(), mark);
                last.save(deps, spec).await
            }
            (AttemptOutcome::Done { .. }, None) => {
                let mark = [(RECREATED.to_string(), mark)].into();
                merge_properties(deps, &spec.cluster, spec.node(), mark).await
            }
            (
                other @ (AttemptOutcome::Cancelled
                | AttemptOutcome::Failed { .. }
                | AttemptOutcome::NoRoom(_)),
                _,
            ) => return (other, None),
        };
        // The new resource is marked, so a restart confirms it instead of replacing it again.
        if let Err(e) = marked {
            return (progress_failure(e), None);
        }
    }
    resource_task(deps, spec, TaskKind::Confirm, generation(spec.op, failed)).await
}

/// Replaces the node's resource: the old one is deleted (deleting one that is gone succeeds)
/// and a new incarnation requested; the confirm that follows waits for it. The new record
/// is written, marked with the operation, before the create is requested: a restart in the
/// middle carries on with it (looking it up by its identity first) instead of replacing the
/// node again.
pub(super) async fn replace(deps: &Deps, spec: &TaskSpec) -> Stepped {
    let key = keys::node(&spec.cluster, spec.node());
    let record = match read_node(deps, spec).await {
        Ok(r) => r,
        Err(e) => return (progress_failure(e), None),
    };
    let incarnation = generation(spec.op, 0);
    let mark = spec.op.to_string();
    let begun = record
        .as_ref()
        .is_some_and(|r| r.properties.get(REPLACED) == Some(&mark));
    if !begun {
        if record.as_ref().is_some_and(NodeRecord::may_exist)
            && let Some(ended) = delete_first(
                deps,
                spec,
                "deleting what is left of the node to replace it",
            )
            .await
        {
            return (ended, None);
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
        let fresh = NodeSave::new(key, fresh, EventKind::Task, note);
        if let Err(e) = fresh.save(deps, spec).await {
            return (progress_failure(e), None);
        }
    }
    resource_task(deps, spec, TaskKind::Create, incarnation).await
}

/// The node's stored record, if it has one.
async fn read_node(deps: &Deps, spec: &TaskSpec) -> Result<Option<NodeRecord>, StoreError> {
    let key = keys::node(&spec.cluster, spec.node());
    deps.store
        .read(move |r| r.get::<NodeRecord>(Table::Resources, &key))
        .await
}

/// Deletes the node's resource before it is made anew, saying so in the history: `None` once
/// it is gone, else how the delete ended (cancelled, failed).
async fn delete_first(deps: &Deps, spec: &TaskSpec, note: &str) -> Option<AttemptOutcome> {
    let _ = events_note(deps, spec, EventKind::Task, note.into()).await;
    let (ended, last) = resource_task(deps, spec, TaskKind::Delete, 0).await;
    if let Some(last) = last
        && let Err(e) = last.save(deps, spec).await
    {
        return Some(progress_failure(e));
    }
    match ended {
        AttemptOutcome::Done { .. } => None,
        other @ (AttemptOutcome::Cancelled
        | AttemptOutcome::Failed { .. }
        | AttemptOutcome::NoRoom(_)) => Some(other),
    }
}

/// How a resource step ended, with the node's record as the step's last answer left it when
/// that record is not written yet ([`resource_task`]).
pub(super) type Stepped = (AttemptOutcome, Option<NodeSave>);

/// Walks the node's resource through one resource step (create, confirm, delete);
/// `generation` is the incarnation a create makes ([`ResourceKey::generation`]).
///
/// The record the step's last answer teaches is not written here: it comes back with the
/// outcome, for the attempt's closing write to carry (nothing outside happens between that
/// answer and that write, so a crash between them is a crash before the answer was saved,
/// which a restart already handles by asking again). A caller with more to do writes it
/// first ([`NodeSave::save`]). Likewise the attempt's opening record is not written before a
/// call that only looks (find, describe): a step that changes something is announced first,
/// and its announcement carries the opening; a step that waits (a poll, a retry, a throttled
/// call) writes the opening before it waits, so an attempt under way shows.
pub(super) async fn resource_task(
    deps: &Deps,
    spec: &TaskSpec,
    kind: TaskKind,
    generation: u32,
) -> Stepped {
    let store_key = keys::node(&spec.cluster, spec.node());
    let mut record: Option<NodeRecord> = match read_node(deps, spec).await {
        Ok(r) => r,
        Err(e) => return (progress_failure(e), None),
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
            return (done(record.as_ref()), None);
        }
        if spec.cancel.load(Ordering::SeqCst) {
            return (AttemptOutcome::Cancelled, None);
        }
        let now = now_millis();
        // Persist, then act: record that a create or delete is about to be requested.
        let before = answer::announce(spec.node(), &step, record.as_ref(), tries, now);
        if let Some((mut r, note)) = before {
            if placing && step == Step::Create && r.placement.is_none() {
                match first_place(deps, spec, &candidates).await {
                    Ok(place) => r.placement = Some(place),
                    Err(e) => return (progress_failure(e), None),
                }
            }
            let notes = note
                .map(|n| (EventKind::Task, n.to_string()))
                .into_iter()
                .collect();
            let announced = NodeSave {
                key: store_key.clone(),
                record: r,
                notes,
            };
            if let Err(e) = announced.save(deps, spec).await {
                return (progress_failure(e), None);
            }
            record = Some(announced.record);
        }
        // A server that may have lost the run (paused past its lease) calls nothing: another
        // may have taken the run over and looked for the resource already.
        if let Err(e) = deps.store.still_owned().await {
            return (progress_failure(e), None);
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
                let learnt = NodeSave::new(store_key.clone(), r, EventKind::Task, note);
                // The step's last answer: its record goes with the outcome.
                if next_step(kind, Some(&learnt.record)) == Step::Done {
                    return (done(Some(&learnt.record)), Some(learnt));
                }
                if let Err(e) = learnt.save(deps, spec).await {
                    return (progress_failure(e), None);
                }
                record = Some(learnt.record);
            }
            Ok(Progress::Again) => tries = 0,
            Ok(Progress::Poll(what)) => {
                tries += 1;
                let since = record.as_ref().map_or(now, |r| r.since_ms);
                match polls.delay(tries, since, now_millis(), fastrand::f64()) {
                    Some(delay) => {
                        if let Err(e) = open_attempt(deps, spec).await {
                            return (progress_failure(e), None);
                        }
                        tokio::time::sleep(delay).await;
                    }
                    None => {
                        let message = format!(
                            "gave up after {}: {what}",
                            humantime::format_duration(spec.budget)
                        );
                        return (AttemptOutcome::failed(message, true), None);
                    }
                }
            }
            Ok(Progress::Gone(message)) => return (AttemptOutcome::failed(message, true), None),
            Err(e) if step == Step::Create && e.capacity_scope().is_some() => {
                let Some(current) = record.as_ref() else {
                    return (AttemptOutcome::failed(e.message, true), None);
                };
                match fail_over(deps, spec, &candidates, current, &e).await {
                    Err(stored) => return (progress_failure(stored), None),
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
                            let ended = match ended {
                                AttemptOutcome::Failed { message, .. } => {
                                    AttemptOutcome::NoRoom(message)
                                }
                                other @ (AttemptOutcome::Done { .. }
                                | AttemptOutcome::Cancelled
                                | AttemptOutcome::NoRoom(_)) => other,
                            };
                            return (ended, None);
                        }
                    }
                }
            }
            // The cloud asks us to slow down: backpressure, waited out without spending the
            // step's tries (within a bound, so a cloud that never relents still ends it).
            Err(e) if waits_out(spec, &e, record.as_ref()) => {
                throttled = throttled.saturating_add(1);
                let wait = throttled_wait(&e, throttled);
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
                if let Err(e) = open_attempt(deps, spec).await {
                    return (progress_failure(e), None);
                }
                tokio::time::sleep(wait).await;
            }
            Err(e) => {
                tries += 1;
                let since = record.as_ref().map_or(now, |r| r.since_ms);
                if let Err(ended) = retry(deps, spec, &step, e, tries, since, &retries).await {
                    return (ended, None);
                }
            }
        }
    }
}

/// How many times longer than the retry budget a step may be throttled before the throttling
/// counts as a failure.
const THROTTLED_BUDGETS: u32 = 4;

/// Whether `e` is the cloud throttling a step that has not been throttled for too long (four
/// times its budget, counted from when the step began): then it is waited out.
fn waits_out(spec: &TaskSpec, e: &ProvisionError, record: Option<&NodeRecord>) -> bool {
    let throttled = matches!(e.kind, ebb_spi::ErrorKind::Throttled(_));
    let since = record.map_or_else(now_millis, |r| r.since_ms);
    let spent = Duration::from_millis(now_millis().saturating_sub(since));
    throttled && spent <= spec.budget.saturating_mul(THROTTLED_BUDGETS)
}

/// How long to wait after the `n`-th throttled call `e` in a row: the cloud's `Retry-After`,
/// else a backoff, at most [`MAX_PAUSE`].
fn throttled_wait(e: &ProvisionError, n: u32) -> Duration {
    let after = match e.kind {
        ebb_spi::ErrorKind::Throttled(after) => after,
        ebb_spi::ErrorKind::Other | ebb_spi::ErrorKind::Quota | ebb_spi::ErrorKind::Capacity(_) => {
            None
        }
    };
    let backoff = Backoff::retries(Duration::MAX).delay(n, 0, 0, fastrand::f64());
    after.or(backoff).unwrap_or(MAX_PAUSE).min(MAX_PAUSE)
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
    // The attempt is under way: it shows before it waits.
    open_attempt(deps, spec).await.map_err(progress_failure)?;
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

pub(super) fn progress_failure(e: StoreError) -> AttemptOutcome {
    AttemptOutcome::failed(format!("cannot record progress: {e}"), true)
}

/// A node's record with notes for the run's history, written in one transaction.
#[derive(Debug, Clone)]
pub(super) struct NodeSave {
    key: String,
    record: NodeRecord,
    notes: Vec<(EventKind, String)>,
}

impl NodeSave {
    fn new(key: String, record: NodeRecord, kind: EventKind, note: String) -> Self {
        Self {
            key,
            record,
            notes: vec![(kind, note)],
        }
    }

    /// Puts the record and appends the notes to run `run`'s history, in `tx`.
    pub(super) fn write(
        &self,
        tx: &mut crate::store::Txn<'_>,
        run: &str,
    ) -> Result<(), StoreError> {
        tx.put(Table::Resources, &self.key, &self.record)?;
        for (kind, message) in &self.notes {
            events::append(tx, run, *kind, Some(&self.record.node), message)?;
        }
        Ok(())
    }

    /// Writes the record and its notes, with the opening record of `spec`'s attempt when it
    /// is not written yet.
    async fn save(&self, deps: &Deps, spec: &TaskSpec) -> Result<(), StoreError> {
        let (run, this) = (spec.run.clone(), self.clone());
        let opening = spec.opening.take();
        deps.store
            .write(move |tx| {
                if let Some((key, attempt)) = &opening {
                    tx.put(Table::Attempts, key, attempt)?;
                }
                this.write(tx, &run)
            })
            .await?;
        deps.notifier.notify(&spec.run);
        Ok(())
    }
}

/// A step that is done, with what the node's record tells later tasks.
fn done(record: Option<&NodeRecord>) -> AttemptOutcome {
    AttemptOutcome::Done {
        result: answer::facts(record),
        output: None,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttled_call_waits_what_the_cloud_asks_else_a_growing_backoff_within_bounds() {
        let asked = ProvisionError::throttled(Some(Duration::from_secs(3)), "slow down");
        assert_eq!(throttled_wait(&asked, 1), Duration::from_secs(3));
        let huge = ProvisionError::throttled(Some(Duration::from_secs(3600)), "slow down");
        assert_eq!(throttled_wait(&huge, 1), MAX_PAUSE);
        let plain = ProvisionError::throttled(None, "RequestLimitExceeded");
        assert!(throttled_wait(&plain, 1) <= Duration::from_millis(100));
        assert!(throttled_wait(&plain, 6) > throttled_wait(&plain, 1));
        assert!(throttled_wait(&plain, 60) <= MAX_PAUSE);
    }
}
