//! Starting the run of a schedule's fire: the same resolution and checks as a manual start,
//! with the schedule's properties as a level of the hierarchy, and its constraints judged in
//! the same write that records the fire and its run (or that it waits or was skipped), under
//! a key derived from the fire, so it happens once.

use std::collections::BTreeMap;

use crate::model::access::Act;
use crate::model::property::Values;
use crate::model::run::{Launch, ProgramStatus, RunKey, RunRecord};
use crate::model::schedule::{
    Constraint, Fire, FireOutcome, Join, PartFire, Schedule, ScheduleStatus, StartedBy,
};
use crate::model::server::Owner;
use crate::rules::schedule::Verdict;
use crate::runtime::handle::Runtime;
use crate::service::error::ServiceError;
use crate::store::clock;
use crate::store::keys;
use crate::store::{Read, StoreError, Table, Txn};

use super::{
    Layout, MAX_START_TRIES, Recorded, Resolved, Starting, record_rejected, record_start,
    solve_outside,
};

/// A fire of a schedule, on its way to the store: what fired, and the arguments its run gets
/// beside the schedule's properties.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Firing {
    /// The schedule's key in `Schedules`.
    pub schedule: String,
    /// The schedule's `lastUpdateTime` when the fire was decided: a schedule changed since
    /// decides again.
    pub version: u64,
    pub by: StartedBy,
    /// The run's runtime arguments from the trigger (`logical.start.time`, `triggering.*`,
    /// arguments copied from the triggering run).
    pub args: Values,
    /// For a schedule whose trigger holds an `AND`: the leaf that fired, a part to join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<usize>,
}

/// What became of a fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fired {
    /// Recorded now, with this outcome.
    Recorded(FireOutcome),
    /// Recorded before (another server, or before a crash): nothing done.
    Already,
    /// The schedule is gone, suspended or changed since the fire was decided: nothing done.
    Stale,
}

/// Records the fire `f` of a schedule: its run (started or REJECTED), or that it waits for a
/// constraint or was skipped, in one write with the fire's record, whose key makes it happen
/// once. A run it records is started here. `last_run` is when the program's newest run that
/// did not fail started (for `LAST_RUN`), read before.
pub async fn fire(
    runtime: &Runtime,
    f: Firing,
    last_run: Option<u64>,
) -> Result<Fired, ServiceError> {
    let registry = runtime.deps().registry.clone();
    let store = runtime.store();
    let member = &runtime.deps().member;
    let owner = Owner {
        server: member.name.to_string(),
        lease: member.lease(),
        since: clock::now_secs(),
    };
    let mut solved: Option<(Resolved, Layout)> = None;
    for _ in 0..MAX_START_TRIES {
        let (r, f, o) = (registry.clone(), f.clone(), owner.clone());
        let outcome = store
            .write(move |tx| record_fire(tx, &r, &f, last_run, solved.clone(), &o))
            .await?;
        match outcome {
            FireRecorded::Done(fired, run) => {
                match run {
                    Some(run) => super::spawn(runtime, *run),
                    // A run recorded without starting may be queued: the dispatcher looks.
                    None if matches!(fired, Fired::Recorded(FireOutcome::Started { .. })) => {
                        runtime.deps().queue_news.queued();
                    }
                    None => {}
                }
                return Ok(fired);
            }
            FireRecorded::Unsolved(resolved) => {
                solved = Some(solve_outside(&registry, *resolved).await?);
            }
        }
    }
    Err(ServiceError::Changed(format!(
        "schedule {}: the run's profile, preferences or template kept changing while it started ({MAX_START_TRIES} tries)",
        f.schedule
    )))
}

/// What [`record_fire`] did.
enum FireRecorded {
    Done(Fired, Option<Box<RunRecord>>),
    Unsolved(Box<Resolved>),
}

/// The write of [`fire`].
fn record_fire(
    tx: &mut Txn,
    registry: &crate::runtime::registry::Registry,
    f: &Firing,
    last_run: Option<u64>,
    solved: Option<(Resolved, Layout)>,
    owner: &Owner,
) -> Result<FireRecorded, ServiceError> {
    let fire_key = keys::fire(&f.schedule, &f.by.fire);
    let done = |fired| Ok(FireRecorded::Done(fired, None));
    let earlier = tx.get::<Fire>(Table::Fires, &fire_key)?;
    if earlier
        .as_ref()
        .is_some_and(|e| !matches!(e.outcome, FireOutcome::Waiting { .. }))
    {
        tx.delete(Table::WaitingFires, &fire_key);
        return done(Fired::Already);
    }
    let Some(schedule) = tx.get::<Schedule>(Table::Schedules, &f.schedule)? else {
        tx.delete(Table::WaitingFires, &fire_key);
        return done(Fired::Stale);
    };
    if schedule.status != ScheduleStatus::Scheduled
        || (earlier.is_none() && schedule.last_update_time != f.version)
    {
        if earlier.is_some() {
            // A waiting fire of a schedule suspended since: dropped, and said so.
            let reason = "the schedule was suspended while the fire waited".to_string();
            put_fire(
                tx,
                owner,
                f,
                FireOutcome::Skipped {
                    reason: reason.clone(),
                },
            )?;
            return done(Fired::Recorded(FireOutcome::Skipped { reason }));
        }
        return done(Fired::Stale);
    }
    let key = RunKey {
        namespace: schedule.namespace.clone(),
        app: schedule.application.clone(),
        program: schedule.program.program_name.clone(),
        run: crate::rules::schedule::run_id(&schedule.path(), &f.by.fire, f.by.time),
    };
    if tx.get::<RunRecord>(Table::Runs, &key.key())?.is_some() {
        return done(Fired::Already);
    }
    // Schedules that trigger each other (across namespaces, where no write could see the
    // cycle) stop at a chain's longest.
    if f.by.depth > crate::model::schedule::MAX_CHAIN {
        let reason = format!(
            "a chain of {} program-status fires, longer than {}: schedules trigger each other",
            f.by.depth,
            crate::model::schedule::MAX_CHAIN
        );
        let outcome = FireOutcome::Skipped { reason };
        put_fire(tx, owner, f, outcome.clone())?;
        return done(Fired::Recorded(outcome));
    }
    // A part of an AND joins the others; the schedule fires once they all have.
    let joined;
    let f = match f.part {
        Some(leaf) if earlier.is_none() => match join(tx, &schedule, f, leaf)? {
            Some(all) => {
                joined = all;
                &joined
            }
            None => {
                let reason = "a part of the AND; waiting for the other parts".to_string();
                let outcome = FireOutcome::Part { reason };
                put_fire(tx, owner, f, outcome.clone())?;
                return done(Fired::Recorded(outcome));
            }
        },
        _ => f,
    };
    let active = if schedule
        .constraints
        .iter()
        .any(|c| matches!(c, Constraint::Concurrency { .. }))
    {
        tx.scan::<serde_json::Value>(
            Table::Active,
            &keys::program_runs(&key.namespace, &key.app, &key.program),
        )?
        .len()
    } else {
        0
    };
    let facts = crate::rules::schedule::Facts {
        now: clock::now_millis(),
        fired: f.by.time,
        active,
        last_run,
        timeout: schedule.timeout_millis,
    };
    let mut verdict = crate::rules::schedule::judge(&schedule.constraints, &facts);
    // Fires that wait go in the order they fired: one that may go waits while an older fire
    // of the schedule still does.
    if verdict == Verdict::Go && older_waiting(tx, f, &fire_key)? {
        verdict = Verdict::Wait {
            reason: "waiting behind an older fire of the schedule".into(),
            until: facts.now + crate::rules::schedule::RECHECK,
        };
    }
    match verdict {
        Verdict::Skip { reason } => {
            let outcome = FireOutcome::Skipped { reason };
            put_fire(tx, owner, f, outcome.clone())?;
            return done(Fired::Recorded(outcome));
        }
        Verdict::Wait { .. } if earlier.is_none() && waiting(tx, f)? >= MAX_WAITING => {
            let outcome = FireOutcome::Skipped {
                reason: format!("{MAX_WAITING} fires of the schedule already wait"),
            };
            put_fire(tx, owner, f, outcome.clone())?;
            return done(Fired::Recorded(outcome));
        }
        Verdict::Wait { reason, until } => {
            let outcome = FireOutcome::Waiting { reason };
            put_fire(tx, owner, f, outcome.clone())?;
            tx.put(
                Table::WaitingFires,
                &fire_key,
                &Waiting {
                    until,
                    fire: f.clone(),
                },
            )?;
            return done(Fired::Recorded(outcome));
        }
        Verdict::Go => {}
    }
    let act = Act {
        // The schedule, and who last changed it: in the run's history and the audit log.
        actor: format!(
            "schedule:{} (last changed by {})",
            schedule.path(),
            schedule.updated_by.as_deref().unwrap_or("unknown")
        ),
        action: "run.start".into(),
        namespace: Some(key.namespace.clone()),
        target: key.run.clone(),
    };
    let mut args = schedule.properties.clone();
    args.extend(f.args.clone());
    let how = Starting {
        owner,
        act: &act,
        schedule: Some((&schedule, &f.by)),
        begun_ms: clock::now_millis(),
    };
    // The run to spawn, or one that waits in the queue (which the dispatcher starts).
    let (run, spawn) = match record_start(tx, registry, key.clone(), f.args.clone(), solved, &how) {
        Ok(Recorded::Unsolved(resolved)) => return Ok(FireRecorded::Unsolved(resolved)),
        Ok(Recorded::Started(run)) => (Some(run), true),
        Ok(Recorded::Queued(run)) => (Some(run), false),
        // A fire carries no idempotency key: its own key made it once.
        Ok(Recorded::Rejected(_) | Recorded::Replayed(_)) => (None, false),
        // What a manual start answers with an error (a disabled or missing profile, a bad
        // property) leaves a REJECTED run with the reason: nobody is there to read an error.
        Err(e @ (ServiceError::Store(_) | ServiceError::Internal(_))) => return Err(e),
        Err(e) => {
            let run = unresolved_run(tx, key.clone(), args.clone(), &f.by)?;
            record_rejected(tx, run, e.to_string(), &act)?;
            (None, false)
        }
    };
    // The run keeps the schedule's properties among its arguments, as CDAP's do.
    let run = match run {
        Some(mut run) => {
            run.args = args;
            tx.put(Table::Runs, &key.key(), &run)?;
            spawn.then_some(run)
        }
        None => None,
    };
    let outcome = FireOutcome::Started {
        run: key.run.clone(),
    };
    put_fire(tx, owner, f, outcome.clone())?;
    tx.delete(Table::WaitingFires, &fire_key);
    Ok(FireRecorded::Done(Fired::Recorded(outcome), run))
}

/// Joins part `f` (of leaf `leaf` of `schedule`'s trigger) with the parts that fired before
/// within the schedule's `timeoutMillis`. When the trigger is met, the parts that met it are
/// used up and the fire goes on with their arguments together (oldest first); otherwise the
/// part is kept.
fn join(
    tx: &mut Txn,
    schedule: &Schedule,
    f: &Firing,
    leaf: usize,
) -> Result<Option<Firing>, StoreError> {
    let mut state = tx
        .get::<Join>(Table::Joins, &f.schedule)?
        .filter(|j| j.version == schedule.last_update_time)
        .unwrap_or_else(|| Join {
            version: schedule.last_update_time,
            ..Join::default()
        });
    let part = state.parts.entry(leaf).or_default();
    if !part.iter().any(|p| p.id == f.by.fire) {
        part.push(PartFire {
            id: f.by.fire.clone(),
            time: f.by.time,
            args: f.args.clone(),
            triggering: f.by.triggering.clone(),
        });
    }
    let oldest = f.by.time.saturating_sub(schedule.timeout_millis);
    for fires in state.parts.values_mut() {
        fires.retain(|p| p.time >= oldest);
        // A part that fires far more often than the others keeps only its newest waiting.
        if fires.len() > crate::model::schedule::MAX_PARTS {
            fires.sort_by_key(|p| p.time);
            let extra = fires.len() - crate::model::schedule::MAX_PARTS;
            fires.drain(..extra);
        }
    }
    state.parts.retain(|_, fires| !fires.is_empty());
    let fired: std::collections::BTreeSet<usize> = state.parts.keys().copied().collect();
    let Some(used) = crate::rules::schedule::satisfied(&schedule.trigger, &fired) else {
        tx.put(Table::Joins, &f.schedule, &state)?;
        return Ok(None);
    };
    let mut parts: Vec<PartFire> = used
        .iter()
        .filter_map(|leaf| state.parts.remove(leaf))
        .flatten()
        .collect();
    parts.sort_by_key(|p| p.time);
    tx.put(Table::Joins, &f.schedule, &state)?;
    let mut all = f.clone();
    all.part = None;
    all.args = Values::new();
    for p in &parts {
        all.args.extend(p.args.clone());
        if p.triggering.is_some() {
            all.by.triggering.clone_from(&p.triggering);
        }
    }
    Ok(Some(all))
}

/// Most fires of one schedule that wait at once; a newer one is skipped, so a schedule that
/// fires faster than its constraint lets it run cannot pile up waiting fires without bound.
pub const MAX_WAITING: usize = 100;

/// How many fires of `f`'s schedule wait.
fn waiting(tx: &Txn, f: &Firing) -> Result<usize, StoreError> {
    Ok(tx
        .scan::<serde_json::Value>(Table::WaitingFires, &format!("{}/", f.schedule))?
        .len())
}

/// Whether a fire of `f`'s schedule older than `f` (whose key is `fire_key`) waits.
fn older_waiting(tx: &Txn, f: &Firing, fire_key: &str) -> Result<bool, StoreError> {
    let mine = (f.by.time, fire_key);
    Ok(tx
        .scan::<Waiting>(Table::WaitingFires, &format!("{}/", f.schedule))?
        .iter()
        .any(|(key, w)| key != fire_key && (w.fire.by.time, key.as_str()) < mine))
}

/// A fire waiting for a constraint, in `WaitingFires`: judged again at `until`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    pub until: u64,
    pub fire: Firing,
}

/// Puts the record of fire `f` with `outcome`.
fn put_fire(
    tx: &mut Txn,
    owner: &Owner,
    f: &Firing,
    outcome: FireOutcome,
) -> Result<(), StoreError> {
    let name = f
        .schedule
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    tx.put(
        Table::Fires,
        &keys::fire(&f.schedule, &f.by.fire),
        &Fire {
            schedule: name,
            id: f.by.fire.clone(),
            time: f.by.time,
            recorded: clock::now_millis(),
            outcome,
            triggering: f.by.triggering.clone(),
            server: Some(owner.server.clone()),
        },
    )
}

/// A run record for `key` that could not be resolved, to be recorded REJECTED: what is
/// known of it (its program's command, if the program exists).
fn unresolved_run(
    r: &impl Read,
    key: RunKey,
    args: Values,
    by: &StartedBy,
) -> Result<RunRecord, StoreError> {
    let program = r
        .get::<crate::model::app::App>(Table::Apps, &keys::app(&key.namespace, &key.app))?
        .and_then(|a| a.program(&key.program).cloned());
    Ok(RunRecord {
        key,
        status: ProgramStatus::Pending,
        starting: clock::now_secs(),
        start: None,
        end: None,
        args,
        profile: String::new(),
        provisioner: String::new(),
        profile_properties: Vec::new(),
        keepalive: crate::model::profile::Keepalive::default(),
        timeout: None,
        launch: Launch {
            command: program
                .as_ref()
                .map(|p| p.launch_command())
                .unwrap_or_default(),
            engine: program.as_ref().and_then(|p| p.engine()),
            env: program.map(|p| p.env).unwrap_or_default(),
        },
        cluster: crate::model::run::ClusterState::default(),
        failure: None,
        stop: None,
        exit: None,
        template: None,
        layout: BTreeMap::new(),
        node_types: BTreeMap::new(),
        config: None,
        launcher: None,
        started_by: Some(by.clone()),
        queue: None,
        retry: None,
        attempts: Vec::new(),
        relaunch_at: None,
        reuse: None,
        application: None,
        pooled: false,
        settled: false,
        format: crate::model::run::RUN_FORMAT,
    })
}
