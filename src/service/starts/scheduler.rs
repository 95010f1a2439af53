//! The scheduler: fires schedules. One server of an installation does it at a time (an
//! election, as the janitor's), and it keeps nothing the store does not: its schedules, the
//! last time each fired, the run ends not yet offered to program-status triggers and the fires
//! waiting for a constraint are all read from the store when it takes the duty, so a restart
//! or another server carries on where it stopped.
//!
//! Each tick (at the next fire time, at least every second) it
//! - reads again the schedules of the namespaces where any changed (a counter in `Meta`
//!   moves with each change, and one of each namespace), and only those;
//! - fires every cron time due since a schedule last fired: a time later than the grace is on
//!   time; older ones were missed and follow the schedule's `catchUp`;
//! - offers every recorded run end to the program-status triggers, and forgets it once its
//!   fires are recorded;
//! - judges again the fires waiting for a constraint whose time has come.
//!
//! A fire is recorded under an identity derived from what fired, in the same write as its
//! run ([`fire::fire`]): however often a crash or a second scheduler repeats one, it happens
//! once.
//!
//! No tenant can take the scheduler for itself: each schedule and each namespace fires at
//! most at its rate (token buckets, [`Rates`]); a fire held back waits for the next tick (a
//! cron time that waits past the grace is missed, as the schedule's `catchUp` says, a run end
//! is offered again), and each tick reads every namespace's run ends as a share of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::time::Duration;

use futures_util::StreamExt;

use super::fire::{self, Fired, Firing, Waiting};
use crate::model::property::Values;
use crate::model::run::RunRecord;
use crate::model::schedule::{
    self, Fire, FireOutcome, RunEnd, Schedule, ScheduleStatus, StartedBy,
};
use crate::rules::schedule::{self as rule, Cron};
use crate::runtime::Runtime;
use crate::runtime::duty::Work;
use crate::runtime::membership::Duty;
use crate::service::catalog::{self, SCHEDULES_CHANGED};
use crate::service::error::ServiceError;
use crate::store::clock;
use crate::store::{Read, Reader, StoreError, Table, keys};

/// How the scheduler behaves.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How late a cron time may be fired and still count as on time; older ones were missed
    /// and follow the schedule's `catchUp`. (Quartz calls it the misfire threshold.)
    pub grace: Duration,
    /// How many fires a second the schedules of one namespace make at most, in bursts of ten
    /// seconds' worth.
    pub namespace_rate: NonZeroU32,
}

/// How many fires a second one schedule makes at most (a cron with seconds fires once a
/// second), in bursts of [`SCHEDULE_BURST`].
const SCHEDULE_RATE: NonZeroU32 = NonZeroU32::MIN;
/// The burst of [`SCHEDULE_RATE`]: the ends of a program's parallel runs, say.
const SCHEDULE_BURST: NonZeroU32 = NonZeroU32::new(60).expect("not zero");
/// How long a schedule held back by its rate waits before it is looked at again.
const HELD: u64 = 1000;
/// The least share of a tick's run ends each namespace has.
const LEAST_SHARE: usize = 64;

/// The token buckets of fires (GCRA, as `governor` keeps them): per schedule and per
/// namespace, in memory while this server holds the duty.
struct Rates {
    schedules: governor::DefaultKeyedRateLimiter<String>,
    namespaces: governor::DefaultKeyedRateLimiter<String>,
    /// Ticks since idle buckets were last dropped.
    ticks: u32,
}

impl Rates {
    fn new(settings: Settings) -> Rates {
        let burst = settings
            .namespace_rate
            .saturating_mul(NonZeroU32::new(10).expect("ten"));
        Rates {
            schedules: governor::RateLimiter::keyed(
                governor::Quota::per_second(SCHEDULE_RATE).allow_burst(SCHEDULE_BURST),
            ),
            namespaces: governor::RateLimiter::keyed(
                governor::Quota::per_second(settings.namespace_rate).allow_burst(burst),
            ),
            ticks: 0,
        }
    }

    /// Whether schedule `key` of namespace `ns` may fire once more now (it then has).
    fn allow(&self, ns: &str, key: &str) -> bool {
        let allowed = self.namespaces.check_key(&ns.to_string()).is_ok()
            && self.schedules.check_key(&key.to_string()).is_ok();
        if !allowed {
            metrics::counter!(crate::model::metrics::SCHEDULE_THROTTLED.name, "namespace" => ns.to_string())
                .increment(1);
        }
        allowed
    }

    /// Drops the buckets that are full again, once a minute of ticks.
    fn tidy(&mut self) {
        self.ticks += 1;
        if self.ticks >= 60 {
            self.ticks = 0;
            self.schedules.retain_recent();
            self.namespaces.retain_recent();
        }
    }
}

/// Most fires recorded at once.
const PARALLEL: usize = 64;
/// Most run ends read at once.
const ENDS_PER_TICK: usize = 1024;
/// Most pages of run ends offered per tick.
const ENDS_PAGES: usize = 4;
/// The longest a tick waits for the next.
const TICK: Duration = Duration::from_secs(1);
/// How many fire records each schedule keeps of each kind (times, run ends).
pub const KEPT_FIRES: usize = 1000;

/// A schedule as the scheduler holds it.
struct Entry {
    schedule: Schedule,
    /// Its cron expressions, each with its leaf's number in the trigger.
    crons: Vec<(usize, Cron)>,
    /// Its trigger holds an `AND`: each leaf's fire is a part to join.
    joins: bool,
    /// The newest cron time it fired for (or when it was enabled or last changed).
    cursor: u64,
    /// Its next cron time after `cursor`.
    next: Option<u64>,
    /// Fires recorded since the last trim of its fire records.
    fired: usize,
    /// Held back by its rate: not looked at again before then (epoch ms).
    held: u64,
    /// Its last due time was held back by its rate (cron times missed since were missed for
    /// that).
    throttled: bool,
}

impl Entry {
    /// Moves its cursor to `time` (if later) and finds its next cron time.
    fn advance(&mut self, time: u64) {
        if time > self.cursor || self.next.is_none() {
            self.cursor = self.cursor.max(time);
            self.next = self
                .crons
                .iter()
                .filter_map(|(_, c)| c.after(self.cursor))
                .min();
        }
    }
}

/// What the scheduler holds while it has the duty.
#[derive(Default)]
struct State {
    /// The `SCHEDULES_CHANGED` counter when the schedules were read.
    version: Option<u64>,
    /// Each namespace's own counter when its schedules were read.
    versions: BTreeMap<String, u64>,
    entries: BTreeMap<String, Entry>,
    /// The schedules with a program-status trigger, by the program they watch
    /// (`ns/app/program`).
    watchers: BTreeMap<String, Vec<String>>,
    /// The run ends kept because the rates held some of their fires back, by key in
    /// `RunEnds`, with the schedules that fired for them already (not offered again).
    kept: BTreeMap<String, BTreeSet<String>>,
}

/// The scheduler, as a duty (`runtime::duty` runs it).
pub struct Scheduler {
    runtime: Runtime,
    settings: Settings,
    state: State,
    rates: Rates,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("schedules", &self.state.entries.len())
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    pub fn new(runtime: Runtime, settings: Settings) -> Scheduler {
        Scheduler {
            runtime,
            settings,
            state: State::default(),
            rates: Rates::new(settings),
        }
    }
}

impl Work for Scheduler {
    fn duty(&self) -> Duty {
        Duty::Scheduler
    }

    /// At once at start, then at the next fire time (at least every second).
    fn first(&self) -> Duration {
        Duration::ZERO
    }

    fn idle(&self) -> Duration {
        TICK
    }

    async fn tick(&mut self) -> Duration {
        let state = &mut self.state;
        self.rates.tidy();
        match tick(&self.runtime, state, &self.rates, self.settings).await {
            Ok(()) => state
                .entries
                .values()
                .filter_map(|e| e.next.map(|next| next.max(e.held)))
                .min()
                .map_or(TICK, |next| {
                    let until = next.saturating_sub(clock::now_millis());
                    Duration::from_millis(until).clamp(Duration::from_millis(10), TICK)
                }),
            Err(e) => {
                tracing::warn!(error = %e, "firing schedules failed; retried");
                // Read everything again: what failed may have half happened.
                *state = State::default();
                TICK
            }
        }
    }

    fn lost(&mut self) {
        self.state = State::default();
    }
}

/// One round of the scheduler.
async fn tick(
    runtime: &Runtime,
    state: &mut State,
    rates: &Rates,
    settings: Settings,
) -> Result<(), ServiceError> {
    refresh(runtime, state).await?;
    let now = clock::now_millis();
    fire_times(runtime, state, rates, now, settings).await?;
    offer_ends(runtime, state, rates).await?;
    judge_waiting(runtime, now).await?;
    trim(runtime, state).await?;
    Ok(())
}

/// Reads again the schedules of the namespaces where any changed since they were read (all
/// of them at first).
async fn refresh(runtime: &Runtime, state: &mut State) -> Result<(), StoreError> {
    let store = runtime.store();
    let version: u64 = store
        .read(|r| r.get(Table::Meta, SCHEDULES_CHANGED))
        .await?
        .unwrap_or(0);
    if state.version == Some(version) {
        return Ok(());
    }
    let prefix = format!("{SCHEDULES_CHANGED}/");
    let versions: BTreeMap<String, u64> = store
        .read(move |r| {
            Ok::<_, StoreError>(
                r.scan::<u64>(Table::Meta, &prefix)?
                    .into_iter()
                    .filter_map(|(k, n)| Some((k.strip_prefix(&prefix)?.to_string(), n)))
                    .collect(),
            )
        })
        .await?;
    // None: every namespace (the first read, or after a failure).
    let stale: Option<BTreeSet<String>> = state.version.map(|_| {
        versions
            .iter()
            .filter(|(ns, n)| state.versions.get(*ns) != Some(*n))
            .map(|(ns, _)| ns.clone())
            .chain(
                state
                    .versions
                    .keys()
                    .filter(|ns| !versions.contains_key(*ns))
                    .cloned(),
            )
            .collect()
    });
    // What tells one version of a schedule from another: when it last changed and when it
    // was last enabled (a suspend and resume between two reads changes only the latter).
    let version_of = |s: &Schedule| (s.last_update_time, s.enabled_at);
    let known: BTreeMap<String, ((u64, Option<u64>), u64)> = state
        .entries
        .iter()
        .map(|(k, e)| (k.clone(), (version_of(&e.schedule), e.cursor)))
        .collect();
    let read = stale.clone();
    let loaded = store
        .read(move |r| {
            let mut out = Vec::new();
            let prefixes: Vec<String> = match &read {
                None => vec![String::new()],
                Some(namespaces) => namespaces.iter().map(|ns| format!("{ns}/")).collect(),
            };
            let mut all = Vec::new();
            for prefix in &prefixes {
                all.extend(r.scan::<Schedule>(Table::Schedules, prefix)?);
            }
            metrics::counter!(crate::model::metrics::SCHEDULES_READ.name)
                .increment(all.len() as u64);
            for (key, s) in all {
                if s.status != ScheduleStatus::Scheduled {
                    continue;
                }
                // A schedule unchanged since it was read keeps its place; any other starts
                // from its newest fire, or from when it was enabled or changed.
                let cursor = match known.get(&key) {
                    Some((version, cursor)) if *version == version_of(&s) => *cursor,
                    _ => {
                        let last = catalog::last_time_fire(r, &key)?.unwrap_or(0);
                        last.max(s.enabled_at.unwrap_or(0)).max(s.last_update_time)
                    }
                };
                out.push((key, s, cursor));
            }
            Ok::<_, StoreError>(out)
        })
        .await?;
    let now = clock::now_millis();
    // What an entry keeps across a read: its counts and whether its rate holds it back.
    let counts: BTreeMap<String, (usize, u64, bool)> = state
        .entries
        .iter()
        .map(|(k, e)| (k.clone(), (e.fired, e.held, e.throttled)))
        .collect();
    // The namespaces not read again keep their entries as they are.
    let mut entries: BTreeMap<String, Entry> = match &stale {
        None => BTreeMap::new(),
        Some(namespaces) => std::mem::take(&mut state.entries)
            .into_iter()
            .filter(|(_, e)| !namespaces.contains(&e.schedule.namespace))
            .collect(),
    };
    for (key, schedule, cursor) in loaded {
        let crons = rule::leaves(&schedule.trigger)
            .into_iter()
            .filter_map(|(leaf, t)| match t {
                schedule::Trigger::Time {
                    cron_expression,
                    time_zone,
                } => Cron::parse(cron_expression, time_zone.as_deref(), now)
                    .ok()
                    .map(|c| (leaf, c)),
                schedule::Trigger::ProgramStatus { .. }
                | schedule::Trigger::And { .. }
                | schedule::Trigger::Or { .. } => None,
            })
            .collect();
        let joins = rule::joins(&schedule.trigger);
        let (fired, held, throttled) = counts.get(&key).copied().unwrap_or((0, 0, false));
        let mut entry = Entry {
            schedule,
            crons,
            joins,
            cursor,
            next: None,
            fired,
            held,
            throttled,
        };
        entry.advance(cursor);
        entries.insert(key, entry);
    }
    let mut watchers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, entry) in &entries {
        for (_, t) in entry.schedule.trigger.walk() {
            if let schedule::Trigger::ProgramStatus { program_id, .. } = t {
                let ns = program_id
                    .namespace
                    .as_deref()
                    .unwrap_or(&entry.schedule.namespace);
                let watched = format!("{ns}/{}/{}", program_id.application, program_id.program);
                let keys = watchers.entry(watched).or_default();
                if !keys.contains(key) {
                    keys.push(key.clone());
                }
            }
        }
    }
    state.entries = entries;
    state.watchers = watchers;
    state.version = Some(version);
    state.versions = versions;
    metrics::gauge!(crate::model::metrics::SCHEDULES_ENABLED.name).set(state.entries.len() as f64);
    Ok(())
}

/// Fires every cron time due by `now`, as far as the rates allow.
async fn fire_times(
    runtime: &Runtime,
    state: &mut State,
    rates: &Rates,
    now: u64,
    settings: Settings,
) -> Result<(), ServiceError> {
    let grace = u64::try_from(settings.grace.as_millis()).unwrap_or(u64::MAX);
    let mut firings = Vec::new();
    let mut skips = Vec::new();
    for (key, entry) in &mut state.entries {
        if entry.next.is_none_or(|next| next > now) || entry.held > now {
            continue;
        }
        // Without an AND, times two expressions share fire once; with one, each leaf's
        // time is a part of its own.
        let mut times = BTreeSet::new();
        for (leaf, cron) in &entry.crons {
            let due = rule::due(cron, entry.cursor, now, grace, entry.schedule.catch_up);
            let part = entry.joins.then_some(*leaf);
            times.extend(due.run.into_iter().map(|t| (t, part)));
            if let Some(skipped) = due.skipped {
                skips.push((
                    key.clone(),
                    entry.schedule.clone(),
                    skipped,
                    entry.throttled,
                ));
            }
        }
        entry.throttled = false;
        for (time, part) in times {
            // Held back: this time and those after it stay due for a later tick.
            if !rates.allow(&entry.schedule.namespace, key) {
                entry.held = now + HELD;
                entry.throttled = true;
                break;
            }
            firings.push((key.clone(), time_firing(key, &entry.schedule, time, part)));
        }
    }
    for (key, s, skipped, throttled) in skips {
        record_skip(runtime, &key, &s, &skipped, throttled).await?;
        if let Some(e) = state.entries.get_mut(&key) {
            e.advance(skipped.time);
        }
    }
    let results = run_fires(runtime, firings.iter().map(|(_, f)| f.clone()).collect()).await;
    for ((key, f), result) in firings.into_iter().zip(results) {
        result?;
        if let Some(e) = state.entries.get_mut(&key) {
            e.advance(f.by.time);
            e.fired += 1;
        }
        let lag = now.saturating_sub(f.by.time) as f64 / 1000.0;
        metrics::histogram!(crate::model::metrics::SCHEDULE_FIRE_LAG.name).record(lag);
    }
    Ok(())
}

/// The firing of schedule `key` for cron time `time` (of leaf `part` of an `AND`).
fn time_firing(key: &str, s: &Schedule, time: u64, part: Option<usize>) -> Firing {
    let mut args = Values::new();
    args.insert("logical.start.time".into(), time.to_string());
    Firing {
        schedule: key.to_string(),
        version: s.last_update_time,
        by: StartedBy {
            schedule: s.path(),
            fire: part_id(schedule::time_fire(time), part),
            time,
            triggering: None,
            depth: 0,
        },
        args,
        part,
    }
}

/// The id of a fire, told apart by the leaf it is a part of, if any.
fn part_id(id: String, part: Option<usize>) -> String {
    match part {
        Some(leaf) => format!("{id}-{leaf}"),
        None => id,
    }
}

/// Records fires, [`PARALLEL`] at a time; answers each one's outcome in order.
async fn run_fires(runtime: &Runtime, firings: Vec<Firing>) -> Vec<Result<Fired, ServiceError>> {
    futures_util::stream::iter(firings)
        .map(|f| async move {
            let last_run = match needs_last_run(runtime, &f).await {
                Ok(last) => last,
                Err(e) => return Err(e.into()),
            };
            let fired = fire::fire(runtime, f, last_run).await;
            if let Ok(Fired::Recorded(outcome)) = &fired {
                count(outcome);
            }
            fired
        })
        .buffered(PARALLEL)
        .collect()
        .await
}

/// Counts a fire's outcome.
fn count(outcome: &FireOutcome) {
    let status = match outcome {
        FireOutcome::Started { .. } => "started",
        FireOutcome::Skipped { .. } => "skipped",
        FireOutcome::Waiting { .. } => "waiting",
        FireOutcome::Part { .. } => "part",
    };
    metrics::counter!(crate::model::metrics::SCHEDULE_FIRES.name, "outcome" => status).increment(1);
}

/// For a schedule with a `LAST_RUN` constraint: when the newest run of its program that did
/// not fail started (epoch ms).
async fn needs_last_run(runtime: &Runtime, f: &Firing) -> Result<Option<u64>, StoreError> {
    let key = f.schedule.clone();
    runtime
        .store()
        .read(move |r| {
            let Some(s) = r.get::<Schedule>(Table::Schedules, &key)? else {
                return Ok(None);
            };
            if !s
                .constraints
                .iter()
                .any(|c| matches!(c, schedule::Constraint::LastRun { .. }))
            {
                return Ok(None);
            }
            last_run(r, &s)
        })
        .await
}

/// When the newest run of `s`'s program that did not fail started, looking at its newest
/// hundred runs.
fn last_run(r: &Reader, s: &Schedule) -> Result<Option<u64>, StoreError> {
    let prefix = keys::program_runs(&s.namespace, &s.application, &s.program.program_name);
    let page = r.scan_back::<RunRecord>(Table::Runs, &prefix, None, 1, 100, |_, run| {
        run.status != crate::model::run::ProgramStatus::Failed
            && run.status != crate::model::run::ProgramStatus::Rejected
    })?;
    Ok(page
        .entries
        .first()
        .map(|(_, run)| run.starting.saturating_mul(1000)))
}

/// Records that `skipped` cron times of schedule `s` were missed and not run: while no
/// server fired schedules, or while its rate held it back (`throttled`).
async fn record_skip(
    runtime: &Runtime,
    key: &str,
    s: &Schedule,
    skipped: &rule::Skipped,
    throttled: bool,
) -> Result<(), StoreError> {
    let why = if throttled {
        "while the schedule or its namespace fired faster than its rate"
    } else {
        "while no server fired schedules"
    };
    let reason = format!(
        "missed {}{} fire time(s) from {} to {} {why} (catchUp {})",
        if skipped.more { "more than " } else { "" },
        skipped.count,
        schedule::iso(skipped.first),
        schedule::iso(skipped.time),
        s.catch_up
    );
    let fire_key = keys::fire(key, &schedule::time_fire(skipped.time));
    let record = Fire {
        schedule: s.name.clone(),
        id: schedule::time_fire(skipped.time),
        time: skipped.time,
        recorded: clock::now_millis(),
        outcome: FireOutcome::Skipped { reason },
        triggering: None,
        server: Some(runtime.deps().member.name.to_string()),
    };
    let missed = skipped.count as u64;
    runtime
        .store()
        .write(move |tx| {
            if tx.get::<Fire>(Table::Fires, &fire_key)?.is_none() {
                tx.put(Table::Fires, &fire_key, &record)?;
            }
            Ok::<_, StoreError>(())
        })
        .await?;
    metrics::counter!(crate::model::metrics::SCHEDULE_MISSED.name).increment(missed);
    tracing::warn!(schedule = %s.path(), missed, catch_up = %s.catch_up, "schedule fire times missed");
    Ok(())
}

/// Offers the recorded run ends to the program-status triggers, and forgets each once its
/// fires are recorded. Each namespace's ends are read as a share of the tick's
/// ([`ENDS_PER_TICK`] times [`ENDS_PAGES`], at least [`LEAST_SHARE`] each), so one that ends
/// runs by the thousand does not hold up the others'; an end whose fires the rates held back
/// is kept and offered again (its fires already recorded are not repeated: their keys).
async fn offer_ends(
    runtime: &Runtime,
    state: &mut State,
    rates: &Rates,
) -> Result<(), ServiceError> {
    let store = runtime.store();
    let ends = store
        .read(|r| {
            let namespaces = r.scan::<serde_json::Value>(Table::Namespaces, "")?;
            let share = (ENDS_PER_TICK * ENDS_PAGES / namespaces.len().max(1)).max(LEAST_SHARE);
            let mut ends = Vec::new();
            for (ns, _) in namespaces {
                let page = r.scan_back::<RunEnd>(
                    Table::RunEnds,
                    &format!("{ns}/"),
                    None,
                    share,
                    share,
                    |_, _| true,
                )?;
                ends.extend(page.entries);
            }
            Ok::<_, StoreError>(ends)
        })
        .await?;
    if ends.is_empty() {
        return Ok(());
    }
    let mut firings = Vec::new();
    let mut kept: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (end_key, end) in &ends {
        let t = &end.run;
        let watched = format!("{}/{}/{}", t.namespace, t.application, t.program);
        let before = state.kept.get(end_key);
        let mut fired = BTreeSet::new();
        let mut held = false;
        for key in state.watchers.get(&watched).into_iter().flatten() {
            let Some(entry) = state.entries.get(key) else {
                continue;
            };
            if before.is_some_and(|b| b.contains(key)) {
                fired.insert(key.clone());
                continue;
            }
            let mut all = true;
            for f in end_firings(key, &entry.schedule, entry.joins, end) {
                if rates.allow(&entry.schedule.namespace, key) {
                    firings.push((key.clone(), f));
                } else {
                    all = false;
                }
            }
            if all {
                fired.insert(key.clone());
            } else {
                held = true;
            }
        }
        if held {
            kept.insert(end_key.clone(), fired);
        }
    }
    let results = run_fires(runtime, firings.iter().map(|(_, f)| f.clone()).collect()).await;
    for ((key, _), result) in firings.into_iter().zip(results) {
        result?;
        if let Some(e) = state.entries.get_mut(&key) {
            e.fired += 1;
        }
    }
    let done: Vec<String> = ends
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| !kept.contains_key(k))
        .collect();
    store.delete_in_batches(Table::RunEnds, &done).await?;
    state.kept = kept;
    Ok(())
}

/// The firings of schedule `key` (`s`) for run end `end`: one if it meets its trigger, or,
/// when the trigger holds an `AND` (`joins`), one part for each leaf it meets.
fn end_firings(key: &str, s: &Schedule, joins: bool, end: &RunEnd) -> Vec<Firing> {
    let t = &end.run;
    let (ns, app, program) = (&t.namespace, &t.application, &t.program);
    let parts: Vec<Option<usize>> = if joins {
        rule::end_leaves(&s.trigger, &s.namespace, ns, app, program, t.status)
            .into_iter()
            .map(Some)
            .collect()
    } else if rule::meets_end(&s.trigger, &s.namespace, ns, app, program, t.status) {
        vec![None]
    } else {
        Vec::new()
    };
    let mut args = Values::new();
    for (source, target) in rule::mapping(&s.properties).unwrap_or_default() {
        if let Some(value) = end.args.get(&source) {
            args.insert(target, value.clone());
        }
    }
    args.insert("triggering.run.id".into(), t.run.clone());
    args.insert("triggering.namespace".into(), t.namespace.clone());
    args.insert("triggering.app".into(), t.application.clone());
    args.insert("triggering.program".into(), t.program.clone());
    args.insert("triggering.status".into(), t.status.to_string());
    parts
        .into_iter()
        .map(|part| Firing {
            schedule: key.to_string(),
            version: s.last_update_time,
            by: StartedBy {
                schedule: s.path(),
                fire: part_id(schedule::end_fire(&t.run), part),
                time: end.time,
                triggering: Some(t.clone()),
                depth: end.depth.saturating_add(1),
            },
            args: args.clone(),
            part,
        })
        .collect()
}

/// Judges again the fires waiting for a constraint whose time has come.
async fn judge_waiting(runtime: &Runtime, now: u64) -> Result<(), ServiceError> {
    let waiting = runtime
        .store()
        .read(move |r| {
            Ok::<_, StoreError>(
                r.scan::<Waiting>(Table::WaitingFires, "")?
                    .into_iter()
                    .map(|(_, w)| w)
                    .filter(|w| w.until <= now)
                    .map(|w| w.fire)
                    .collect::<Vec<_>>(),
            )
        })
        .await?;
    for result in run_fires(runtime, waiting).await {
        result?;
    }
    Ok(())
}

/// Keeps the newest [`KEPT_FIRES`] fire records of each kind of every schedule that fired
/// more than a tenth of that since it was last trimmed.
async fn trim(runtime: &Runtime, state: &mut State) -> Result<(), StoreError> {
    let store = runtime.store();
    for (key, entry) in &mut state.entries {
        if entry.fired < KEPT_FIRES / 10 {
            continue;
        }
        entry.fired = 0;
        for kind in ["t", "r"] {
            let prefix = format!("{key}/{kind}");
            let fires = store.keys_under(Table::Fires, &prefix).await?;
            if fires.len() <= KEPT_FIRES {
                continue;
            }
            let old = &fires[..fires.len() - KEPT_FIRES];
            // A fire still waiting for a constraint keeps its record.
            let waiting: BTreeSet<String> = store
                .keys_under(Table::WaitingFires, &format!("{key}/"))
                .await?
                .into_iter()
                .collect();
            let old: Vec<String> = old
                .iter()
                .filter(|k| !waiting.contains(*k))
                .cloned()
                .collect();
            store.delete_in_batches(Table::Fires, &old).await?;
        }
    }
    Ok(())
}
