//! The dispatcher of queued runs: one server of an installation at a time (an election, as
//! the scheduler's) starts QUEUED runs as their limits allow, and rejects those that waited
//! longer than their namespace's `maxQueueTime`.
//!
//! It keeps nothing the store does not: it reads the queue (`store::queue`) when it takes
//! the duty, whenever this server queued a run since, and once a second (other servers
//! queue runs too), and each round offers the runs in the order `rules::queue` gives
//! (namespaces in turn, oldest first in each). A run starts in one write that checks its limits again, takes it out of the queue
//! and records this server as its owner, so however many servers dispatch (a stale leader
//! for a moment, a restart in the middle) a run starts once and no limit is passed. A round
//! runs when a run of this server ends or is queued, when any server's run lets go of its
//! cluster (on etcd, a watch), and every second in any case.

use std::collections::BTreeMap;
use std::time::Duration;

use super::activate;
use super::limits::limit_hold;
use crate::model::access::Act;
use crate::model::metrics::{RUN_QUEUE_LAG, RUN_QUEUE_WAIT, RUNS_QUEUED};
use crate::model::run::{ProgramStatus, RunRecord};
use crate::model::server::Owner;
use crate::rules::lifecycle::{self, Event};
use crate::rules::queue::{Hold, Pass};
use crate::runtime::Runtime;
use crate::runtime::duty::Work;
use crate::runtime::membership::Duty;
use crate::runtime::transition;
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::clock;
use crate::store::queue::{self, Entry};
use crate::store::{Read, StoreError, Table, Txn};

/// The longest the dispatcher waits between two rounds.
const TICK: Duration = Duration::from_secs(1);

/// What the dispatcher keeps between rounds.
#[derive(Debug, Default)]
struct State {
    /// The namespace it started a run of last: the next round begins with the one after.
    after: Option<String>,
    /// The queue as last read, less what left it since: each namespace's runs oldest first,
    /// with their program.
    queues: BTreeMap<String, Vec<(String, Entry)>>,
    /// When the queue was last read, and how many runs this server had queued by then.
    read: Option<(std::time::Instant, u64)>,
}

impl State {
    /// Whether to read the queue again: once a tick (other servers queue runs too), and
    /// whenever this server queued one since.
    fn stale(&self, queued_here: u64) -> bool {
        self.read
            .is_none_or(|(at, seen)| at.elapsed() >= TICK || seen != queued_here)
    }
}

/// The dispatcher, as a duty (`runtime::duty` runs it).
#[derive(Debug)]
pub struct Dispatcher {
    runtime: Runtime,
    /// On etcd: any server's run that lets go of its cluster frees a slot.
    freed: Option<tokio::sync::watch::Receiver<u64>>,
    state: State,
    /// When the last wait was woken by news (rather than by the tick), if it was.
    heard: Option<std::time::Instant>,
}

impl Dispatcher {
    pub fn new(runtime: Runtime) -> Dispatcher {
        let freed = runtime.deps().store.watch_deletes(Table::Active);
        Dispatcher {
            runtime,
            freed,
            state: State::default(),
            heard: None,
        }
    }
}

impl Work for Dispatcher {
    fn duty(&self) -> Duty {
        Duty::Queue
    }

    fn idle(&self) -> Duration {
        TICK
    }

    async fn wait(&mut self, wait: Duration) {
        let news = self.runtime.deps().queue_news.clone();
        let woken = tokio::select! {
            () = news.wake.notified() => true,
            () = changed(&mut self.freed) => true,
            () = tokio::time::sleep(wait) => false,
        };
        self.heard = woken.then(std::time::Instant::now);
    }

    async fn tick(&mut self) -> Duration {
        if let Err(e) = round(&self.runtime, &mut self.state, self.heard.take()).await {
            tracing::warn!(error = %e, "starting queued runs failed; retried");
        }
        TICK
    }

    fn lost(&mut self) {
        self.state = State::default();
    }
}

/// Waits until `watch` tells of a delete; forever without one.
async fn changed(watch: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    let Some(w) = watch else {
        return std::future::pending().await;
    };
    if w.changed().await.is_err() {
        // The watch ended with the store: nothing more to hear from it.
        *watch = None;
        std::future::pending::<()>().await;
    }
}

/// What one offer of a queued run came to.
enum Offer {
    /// It started: its record, to supervise.
    Started(Box<RunRecord>),
    /// A limit holds it back still.
    Held(Hold),
    /// It is no longer queued (stopped, rejected, or started by another round).
    Gone,
}

/// One round: rejects the runs that waited too long, then offers the others in turn.
async fn round(
    runtime: &Runtime,
    state: &mut State,
    mut heard: Option<std::time::Instant>,
) -> Result<(), ServiceError> {
    let store = runtime.store();
    let queued_here = runtime.deps().queue_news.queued_so_far();
    if state.stale(queued_here) {
        let read_at = std::time::Instant::now();
        let entries = store.read(|r| queue::all(r)).await?;
        state.queues.clear();
        for entry in entries {
            let program = format!(
                "{}/{}/{}",
                entry.run.namespace, entry.run.app, entry.run.program
            );
            state
                .queues
                .entry(entry.run.namespace.clone())
                .or_default()
                .push((program, entry));
        }
        state.read = Some((read_at, queued_here));
    }
    let waiting: usize = state.queues.values().map(Vec::len).sum();
    metrics::gauge!(RUNS_QUEUED.name).set(waiting as f64);
    if waiting == 0 {
        return Ok(());
    }
    let now = clock::now_millis();
    // What leaves the queue this round, by namespace and place.
    let mut left: Vec<(String, usize)> = Vec::new();
    for (ns, runs) in &state.queues {
        for (i, (_, entry)) in runs.iter().enumerate() {
            if entry.until.is_some_and(|until| until <= now) {
                let e = entry.clone();
                store.write(move |tx| expire(tx, &e, now)).await?;
                left.push((ns.clone(), i));
            }
        }
    }
    let member = &runtime.deps().member;
    let mut pass = Pass::default();
    let mut after = state.after.clone();
    for (ns, i) in Pass::order(&state.queues, state.after.as_deref()) {
        let (program, entry) = &state.queues[ns][i];
        if !pass.offers(ns, program) || left.iter().any(|(n, j)| n == ns && *j == i) {
            continue;
        }
        let owner = Owner {
            server: member.name.to_string(),
            lease: member.lease(),
            since: clock::now_secs(),
        };
        let e = entry.clone();
        match store.write(move |tx| offer(tx, &e, &owner)).await? {
            Offer::Started(run) => {
                left.push((ns.to_string(), i));
                after = Some(ns.to_string());
                if let Some(stay) = &run.queue {
                    let waited = stay
                        .admitted
                        .unwrap_or(stay.since)
                        .saturating_sub(stay.since);
                    metrics::histogram!(RUN_QUEUE_WAIT.name).record(waited as f64 / 1000.0);
                }
                // The first run a wake starts took the slot that woke it.
                if let Some(heard) = heard.take() {
                    metrics::histogram!(RUN_QUEUE_LAG.name).record(heard.elapsed().as_secs_f64());
                }
                runtime.spawn(*run);
            }
            Offer::Held(hold) => pass.held(ns, program, hold),
            Offer::Gone => left.push((ns.to_string(), i)),
        }
    }
    state.after = after;
    // What left is dropped from what was read, last first so the places hold.
    left.sort();
    for (ns, i) in left.into_iter().rev() {
        if let Some(runs) = state.queues.get_mut(&ns) {
            runs.remove(i);
            if runs.is_empty() {
                state.queues.remove(&ns);
            }
        }
    }
    Ok(())
}

/// The actor a queued run's start and rejection are recorded as.
fn dispatcher(entry: &Entry, action: &str) -> Act {
    Act {
        actor: "ebb (the admission queue)".into(),
        action: action.into(),
        namespace: Some(entry.run.namespace.clone()),
        target: entry.run.run.clone(),
    }
}

/// Reads queued run `entry` as it is now: `None` when it is no longer queued (its entry, if
/// left, is dropped).
fn queued(tx: &mut Txn, entry: &Entry) -> Result<Option<RunRecord>, StoreError> {
    let run = tx.get::<RunRecord>(Table::Runs, &entry.run.key())?;
    match run {
        Some(run) if run.status == ProgramStatus::Queued => Ok(Some(run)),
        Some(run) => {
            queue::leave(tx, &run)?;
            Ok(None)
        }
        None => Ok(None),
    }
}

/// Starts queued run `entry` under `owner` if its limits allow it now, in one write.
fn offer(tx: &mut Txn, entry: &Entry, owner: &Owner) -> Result<Offer, ServiceError> {
    let Some(run) = queued(tx, entry)? else {
        return Ok(Offer::Gone);
    };
    let key = &run.key;
    let limits = catalog::require_namespace(tx, &key.namespace).and_then(|ns| {
        let (_, program) = catalog::require_program(
            tx,
            &key.namespace,
            &key.app,
            crate::model::app::WORKFLOWS,
            &key.program,
        )?;
        Ok((ns, program.max_concurrent_runs))
    });
    let (namespace, max_concurrent_runs) = match limits {
        Ok(limits) => limits,
        Err(e @ (ServiceError::Store(_) | ServiceError::Internal(_))) => return Err(e),
        // Its program (or app) went away while it waited.
        Err(e) => {
            reject(tx, &run, entry, format!("it can no longer start: {e}"))?;
            return Ok(Offer::Gone);
        }
    };
    match limit_hold(tx, &namespace, &run, (max_concurrent_runs, None))? {
        Some((refusal, Hold::Never)) => {
            reject(tx, &run, entry, refusal.to_string())?;
            return Ok(Offer::Gone);
        }
        Some((_, hold)) => return Ok(Offer::Held(hold)),
        None => {}
    }
    let act = dispatcher(entry, "run.admit");
    let t = lifecycle::on(
        &run,
        Event::Admit {
            now_ms: clock::now_millis(),
        },
        clock::now_secs(),
    )?;
    let admitted = transition::write(tx, &run, &t, Some(&act.actor))?;
    activate(tx, &admitted, owner)?;
    Ok(Offer::Started(Box::new(admitted)))
}

/// Rejects queued run `entry` if it is still queued past its time (`now`, epoch ms).
fn expire(tx: &mut Txn, entry: &Entry, now: u64) -> Result<(), ServiceError> {
    let Some(run) = queued(tx, entry)? else {
        return Ok(());
    };
    let Some(stay) = run
        .queue
        .clone()
        .filter(|s| s.until.is_some_and(|u| u <= now))
    else {
        return Ok(());
    };
    let waited = Duration::from_millis(now.saturating_sub(stay.since));
    let waited = humantime::format_duration(Duration::from_secs(waited.as_secs()));
    reject(
        tx,
        &run,
        entry,
        format!(
            "it waited {waited} in the queue, its namespace's maxQueueTime, and still waits on: {}",
            stay.reason
        ),
    )
}

/// Records queued run `run` as REJECTED for `reason` and takes it out of the queue.
fn reject(
    tx: &mut Txn,
    run: &RunRecord,
    entry: &Entry,
    reason: String,
) -> Result<(), ServiceError> {
    let act = dispatcher(entry, "run.reject");
    let t = lifecycle::on(run, Event::Reject(reason), clock::now_secs())?;
    transition::write(tx, run, &t, Some(&act.actor))?;
    crate::store::changes::record(tx, &act)?;
    Ok(())
}
