//! Warm pools: a namespace's profile with a `pool` keeps at least `min` clusters IDLE ahead of
//! demand, so a run that starts takes one over at once. A pool's clusters are made by runs
//! without a program ([`POOL_APP`], the profile's name as their program), recorded, owned and
//! supervised like any run: on several servers a dead server's are taken over, and nothing is
//! leaked. One server of an installation tends the pools ([`run`], an elected duty): every
//! [`TICK`] it counts each pool's ready clusters (IDLE ones that match the pool's runs,
//! whether made ahead or left by a run) and those being made, and starts what is missing, each
//! in one write with the namespace's limits (a pool's nodes count against `maxLiveNodes`) and
//! the host rules a run's would meet. IDLE clusters beyond the pool's `max`, and every IDLE
//! cluster of a DISABLED profile, are retired by their own supervisors
//! (`runtime::supervisor`). A pool whose runs fail waits longer after each failure and stops
//! after five in a row, until its profile changes ([`rules::pool`](crate::rules::pool)); a
//! namespace keeps at most [`MAX_POOLS_PER_NAMESPACE`] pools.
//!
//! [`MAX_POOLS_PER_NAMESPACE`]: crate::model::profile::MAX_POOLS_PER_NAMESPACE

use std::time::Duration;

use super::limits::limit_hold;
use super::{Layout, Resolved, activate, index, resolve_at, solve_outside};
use crate::model::access::runs_on_host;
use crate::model::app::{Program, WORKFLOWS};
use crate::model::event::EventKind;
use crate::model::preference::Scope;
use crate::model::profile::{Pool, ProfileId, ProfileStatus, StoredProfile};
use crate::model::property::{Level, Origin, Values};
use crate::model::run::{ClusterStatus, Launch, POOL_APP, ProgramStatus, RunKey, RunRecord};
use crate::model::server::Owner;
use crate::rules::pool as rules;
use crate::rules::{host, resolve};
use crate::runtime::Runtime;
use crate::runtime::duty::Work;
use crate::runtime::membership::Duty;
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::clock;
use crate::store::{Read, StoreError, Table, Txn, events, keys};

/// How often the pools are tended.
pub const TICK: Duration = Duration::from_secs(2);

/// The pools' tending, as a duty (`runtime::duty` runs it).
#[derive(Debug)]
pub struct Pools {
    runtime: Runtime,
    /// The pools found stopped so far, so each stop is told once.
    stopped: std::collections::BTreeSet<String>,
}

impl Pools {
    pub fn new(runtime: Runtime) -> Pools {
        Pools {
            runtime,
            stopped: Default::default(),
        }
    }
}

impl Work for Pools {
    fn duty(&self) -> Duty {
        Duty::Pools
    }

    fn idle(&self) -> Duration {
        TICK
    }

    async fn tick(&mut self) -> Duration {
        if let Err(e) = tend(&self.runtime, &mut self.stopped).await {
            tracing::warn!(error = %e, "tending the pools failed; retried");
        }
        TICK
    }
}

/// One round: every enabled pool made up to its `min`, but those whose runs fail. `stopped`
/// holds the pools found stopped so far, so each stop is told once.
pub async fn tend(
    runtime: &Runtime,
    stopped: &mut std::collections::BTreeSet<String>,
) -> Result<(), ServiceError> {
    let pools: Vec<(ProfileId, Pool)> = runtime
        .deps()
        .store
        .read(|r| {
            Ok::<_, StoreError>(
                r.scan::<StoredProfile>(Table::Profiles, "")?
                    .into_iter()
                    .filter(|(_, s)| s.profile.status == ProfileStatus::Enabled)
                    .filter_map(|(key, s)| {
                        let (ns, _) = key.split_once('/')?;
                        let pool = s.profile.pool?;
                        (ns != crate::model::profile::SYSTEM_NAMESPACE)
                            .then(|| (ProfileId::user(ns, &s.profile.name), pool))
                    })
                    .collect(),
            )
        })
        .await?;
    let mut now_stopped = std::collections::BTreeSet::new();
    for (id, pool) in pools {
        let (health, newest) = pool_health(runtime, &id).await?;
        match health {
            rules::Health::Filling => {}
            rules::Health::Waiting { failures, .. } => {
                tracing::debug!(profile = %id, failures, "pool waits after failed runs");
                continue;
            }
            rules::Health::Stopped { failures, reason } => {
                now_stopped.insert(id.key());
                if !stopped.contains(&id.key()) {
                    tell_stopped(runtime, &id, failures, &reason, newest).await?;
                }
                continue;
            }
        }
        if let Err(e) = fill(runtime, &id, pool).await {
            tracing::warn!(profile = %id, error = %e, "cannot fill the pool");
            metrics::counter!(crate::model::metrics::POOL_REFILLS.name, "result" => "refused")
                .increment(1);
        }
    }
    metrics::gauge!(crate::model::metrics::POOLS_STOPPED.name).set(now_stopped.len() as f64);
    *stopped = now_stopped;
    Ok(())
}

/// How many of a pool's newest runs its health looks at.
const LOOKED_AT: usize = rules::STOP_AFTER + 1;

/// What pool `id`'s own runs say of it now, with its newest run's key.
async fn pool_health(
    runtime: &Runtime,
    id: &ProfileId,
) -> Result<(rules::Health, Option<RunKey>), ServiceError> {
    let id = id.clone();
    runtime
        .store()
        .read(move |r| {
            let since = catalog::stored_profile(r, &id)?.map_or(0, |s| s.changed);
            Ok(health_of(r, &id, since)?)
        })
        .await
}

/// Pool `id`'s health, from its newest runs requested since `since`.
fn health_of(
    r: &crate::store::Reader,
    id: &ProfileId,
    since: u64,
) -> Result<(rules::Health, Option<RunKey>), StoreError> {
    let page = r.scan_back::<RunRecord>(
        Table::Runs,
        &pool_runs(id),
        None,
        LOOKED_AT,
        LOOKED_AT,
        |_, _| true,
    )?;
    let tried: Vec<rules::Tried> = page
        .entries
        .iter()
        .map(|(_, run)| rules::Tried {
            started: run.starting,
            ended: run.end.or(run.cluster.end),
            outcome: match run.status {
                ProgramStatus::Failed | ProgramStatus::Rejected => rules::Outcome::Failed(
                    run.failure
                        .as_ref()
                        .map_or_else(|| run.status.to_string(), |f| f.message.clone()),
                ),
                ProgramStatus::Queued | ProgramStatus::Pending | ProgramStatus::Starting => {
                    rules::Outcome::Making
                }
                ProgramStatus::Running | ProgramStatus::Completed | ProgramStatus::Killed => {
                    rules::Outcome::Made
                }
            },
        })
        .collect();
    let newest = page.entries.first().map(|(_, run)| run.key.clone());
    Ok((rules::health(&tried, since, clock::now_secs()), newest))
}

/// What the pool's view says of `health`.
fn health_view(health: &rules::Health) -> crate::model::view::PoolHealth {
    use crate::model::view::PoolHealth;
    match health {
        rules::Health::Filling => PoolHealth {
            status: "filling".into(),
            ..PoolHealth::default()
        },
        rules::Health::Waiting {
            until,
            failures,
            reason,
        } => PoolHealth {
            status: "waiting".into(),
            failures: *failures,
            reason: Some(reason.clone()),
            retry_at: Some(*until),
        },
        rules::Health::Stopped { failures, reason } => PoolHealth {
            status: "stopped".into(),
            failures: *failures,
            reason: Some(reason.clone()),
            retry_at: None,
        },
    }
}

/// Tells that pool `id` stopped: in its newest run's history, the log and the metrics.
async fn tell_stopped(
    runtime: &Runtime,
    id: &ProfileId,
    failures: usize,
    reason: &str,
    newest: Option<RunKey>,
) -> Result<(), StoreError> {
    let message = format!(
        "the pool of {id} stopped after {failures} failed runs in a row ({reason}); it tries again once the profile changes (written again, or disabled and enabled)"
    );
    tracing::warn!(profile = %id, failures, reason, "pool stopped after failed runs in a row");
    if let Some(key) = newest {
        let run = key.run.clone();
        runtime
            .store()
            .write(move |tx| {
                events::append(tx, &key.run, EventKind::Status, None, message.clone())?;
                Ok::<_, StoreError>(())
            })
            .await?;
        runtime.deps().notifier.notify(&run);
    }
    Ok(())
}

/// What a pool holds now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolState {
    /// The IDLE clusters its runs may take over: their runs.
    pub ready: Vec<RunRecord>,
    /// Its runs still making their clusters.
    pub creating: Vec<RunRecord>,
}

/// The runs a pool's clusters are made with: `<namespace>/_pool/<profile>/`.
fn pool_runs(id: &ProfileId) -> String {
    keys::program_runs(&id.namespace, POOL_APP, &id.name)
}

/// What pool `id` holds, for runs whose reuse key is `reuse_key`.
pub fn state(r: &impl Read, id: &ProfileId, reuse_key: &str) -> Result<PoolState, StoreError> {
    let mut out = PoolState::default();
    for run_key in crate::store::idle::offered(r, &id.namespace, reuse_key)? {
        if let Some(run) = r.get::<RunRecord>(Table::Runs, &run_key)? {
            out.ready.push(run);
        }
    }
    for (key, _) in r.scan::<serde_json::Value>(Table::Active, &pool_runs(id))? {
        if let Some(run) = r.get::<RunRecord>(Table::Runs, &key)?
            && matches!(run.status, ProgramStatus::Pending | ProgramStatus::Starting)
        {
            out.creating.push(run);
        }
    }
    out.ready
        .sort_by_key(|r| (r.cluster.expires_at, r.key.run.clone()));
    Ok(out)
}

/// Starts the runs pool `id` lacks to hold `min` clusters (never past `max`), one write each.
async fn fill(runtime: &Runtime, id: &ProfileId, pool: Pool) -> Result<(), ServiceError> {
    let mut solved: Option<(Resolved, Layout)> = None;
    let mut made = 0u32;
    // Each round makes at most `max` runs: a pool's record says what it holds at once.
    for _ in 0..pool.max.saturating_mul(2).max(2) {
        let (registry, id2, owner) = (
            std::sync::Arc::clone(&runtime.deps().registry),
            id.clone(),
            owner(runtime),
        );
        let s = solved.clone();
        let outcome = runtime
            .deps()
            .store
            .write(move |tx| record(tx, &registry, &id2, pool, s.clone(), &owner))
            .await?;
        match outcome {
            Made::Full => break,
            Made::Unsolved(resolved) => {
                solved = Some(solve_outside(&runtime.deps().registry, *resolved).await?);
            }
            Made::Started(run) => {
                made += 1;
                metrics::counter!(crate::model::metrics::POOL_REFILLS.name, "result" => "made")
                    .increment(1);
                runtime.spawn(*run);
            }
        }
    }
    if made > 0 {
        tracing::info!(profile = %id, made, "pool refilled");
    }
    Ok(())
}

fn owner(runtime: &Runtime) -> Owner {
    let member = &runtime.deps().member;
    Owner {
        server: member.name.to_string(),
        lease: member.lease(),
        since: clock::now_secs(),
    }
}

/// What one write of [`fill`] did.
enum Made {
    /// The pool holds (or is making) `min` clusters.
    Full,
    /// Nothing: the pool's template's layout must be solved first (or again).
    Unsolved(Box<Resolved>),
    Started(Box<RunRecord>),
}

/// The levels a pool's runs resolve over: the instance's and the namespace's preferences
/// (an app's or a program's overrides are their runs' own).
fn levels(r: &impl Read, ns: &str) -> Result<Vec<(Level, Values)>, StoreError> {
    let mut out = Vec::new();
    for scope in [Scope::Instance, Scope::Namespace(ns.to_string())] {
        let values: Values = r.get(Table::Preferences, &scope.key())?.unwrap_or_default();
        out.push((scope.level(), values));
    }
    Ok(out)
}

/// What a run of pool `id` resolves to.
fn resolve_pool(
    r: &impl Read,
    registry: &crate::runtime::registry::Registry,
    id: &ProfileId,
) -> Result<Resolved, ServiceError> {
    let maps = levels(r, &id.namespace)?;
    let levels: Vec<(Level, &Values)> = maps.iter().map(|(l, v)| (*l, v)).collect();
    let chosen = resolve::ChosenProfile {
        id: id.clone(),
        origin: Origin::Profile,
    };
    let program = Program {
        program_type: WORKFLOWS.into(),
        name: id.name.clone(),
        ..Default::default()
    };
    resolve_at(r, registry, (&id.namespace, &levels), chosen, program, None)
}

/// Records the next run pool `id` lacks, if it lacks one: checked as a run's start is (its
/// properties, its template, the host rules, the namespace's quota), in one write.
fn record(
    tx: &mut Txn,
    registry: &crate::runtime::registry::Registry,
    id: &ProfileId,
    pool: Pool,
    solved: Option<(Resolved, Layout)>,
    owner: &Owner,
) -> Result<Made, ServiceError> {
    let resolved = resolve_pool(tx, registry, id)?;
    let layout = match solved {
        _ if resolved.template.is_none() => Layout::default(),
        Some((expected, layout)) if expected == resolved => layout,
        _ => return Ok(Made::Unsolved(Box::new(resolved))),
    };
    let run = pool_run(id, resolved.clone(), layout);
    let Some(reuse_key) = run.reuse_key() else {
        return Ok(Made::Full);
    };
    let held = state(tx, id, &reuse_key)?;
    let holds = held.ready.len() + held.creating.len();
    if holds >= pool.min as usize || holds >= pool.max as usize {
        return Ok(Made::Full);
    }
    let namespace = catalog::require_namespace(tx, &id.namespace)?;
    if super::limits::template_host_refusal(&namespace, &resolved.authors).is_some() {
        return Err(ServiceError::NotAllowed(format!(
            "the pool of {id} would run its template's automator-plugin actions, which run on the server's own host, from a template an instance admin did not write (or set allowHostPrograms on namespace '{}')",
            id.namespace
        )));
    }
    if runs_on_host(&run.provisioner, &run.properties()) {
        let host = host::HostRun {
            namespace_allows: namespace.allow_host_programs,
            // A pool's run has no program: its profile and template decide.
            app_approved: true,
            profile: resolved.authors.profile,
            template: resolved.authors.template.as_ref().map(|(_, t)| *t),
        };
        if host::refusal(&host).is_some() {
            return Err(ServiceError::NotAllowed(format!(
                "the pool of {id} would run its services' scripts on the server's own host, which only a profile and template an instance admin wrote may do (or set allowHostPrograms on namespace '{}')",
                id.namespace
            )));
        }
    }
    if let Some((refusal, _)) = limit_hold(tx, &namespace, &run, (None, None))? {
        return Err(refusal.into());
    }
    tx.put(Table::Runs, &run.key.key(), &run)?;
    index(tx, &run.key)?;
    activate(tx, &run, owner)?;
    events::append(
        tx,
        &run.key.run,
        EventKind::Status,
        None,
        format!(
            "run PENDING: a cluster of {} node(s) made ahead for the pool of {id} ({holds} of its min {} held)",
            run.cluster.nodes.len(),
            pool.min
        ),
    )?;
    Ok(Made::Started(Box::new(run)))
}

/// The PENDING run that makes a cluster for pool `id`.
fn pool_run(id: &ProfileId, resolved: Resolved, (layout, node_types): Layout) -> RunRecord {
    RunRecord {
        key: RunKey {
            namespace: id.namespace.clone(),
            app: POOL_APP.into(),
            program: id.name.clone(),
            run: uuid::Uuid::now_v7().to_string(),
        },
        status: ProgramStatus::Pending,
        starting: clock::now_secs(),
        start: None,
        end: None,
        args: Values::default(),
        profile: resolved.chosen.id.scoped_name(),
        provisioner: resolved.provisioner,
        profile_properties: resolved.properties,
        keepalive: resolved.keepalive,
        timeout: resolved.timeout,
        launch: Launch {
            command: Vec::new(),
            env: Default::default(),
            engine: None,
        },
        cluster: crate::model::run::ClusterState {
            nodes: resolved.nodes,
            ..Default::default()
        },
        failure: None,
        stop: None,
        exit: None,
        template: resolved.template,
        layout,
        node_types,
        config: None,
        launcher: None,
        started_by: None,
        queue: None,
        retry: None,
        attempts: Vec::new(),
        relaunch_at: None,
        reuse: resolved.reuse,
        application: None,
        pooled: true,
        settled: false,
        format: crate::model::run::RUN_FORMAT,
    }
}

/// What pool `id` holds now, and its spec: for `GET .../profiles/{p}/pool`.
pub async fn view(
    runtime: &Runtime,
    id: ProfileId,
) -> Result<crate::model::view::PoolView, ServiceError> {
    let registry = std::sync::Arc::clone(&runtime.deps().registry);
    runtime
        .store()
        .read(move |r| {
            let stored = catalog::stored_profile(r, &id)?
                .ok_or_else(|| ServiceError::ProfileNotFound(id.clone()))?;
            // What the pool's runs match: as its runs resolve now (with a template, as its
            // newest run did).
            let key = match resolve_pool(r, &registry, &id) {
                Ok(res) if res.template.is_none() => {
                    pool_run(&id, res, Layout::default()).reuse_key()
                }
                Ok(_) | Err(_) => r
                    .scan::<RunRecord>(Table::Runs, &pool_runs(&id))?
                    .into_iter()
                    .next_back()
                    .and_then(|(_, run)| run.reuse_key()),
            };
            let held = match &key {
                Some(k) => state(r, &id, k)?,
                None => state_by_runs(r, &id)?,
            };
            let claimed = claimed(r, &id)?;
            let (health, _) = health_of(r, &id, stored.changed)?;
            let mut view = crate::model::view::PoolView::new(
                &id,
                &stored.profile,
                &(held.ready, held.creating),
                claimed,
            );
            view.health = health_view(&health);
            Ok(view)
        })
        .await
}

/// What pool `id` holds, from its own runs alone (when the reuse key cannot be told).
fn state_by_runs(r: &impl Read, id: &ProfileId) -> Result<PoolState, StoreError> {
    let mut out = PoolState::default();
    for (key, _) in r.scan::<serde_json::Value>(Table::Active, &pool_runs(id))? {
        if let Some(run) = r.get::<RunRecord>(Table::Runs, &key)? {
            match (run.status, run.cluster.status) {
                (_, Some(ClusterStatus::Idle)) => out.ready.push(run),
                (ProgramStatus::Pending | ProgramStatus::Starting, _) => out.creating.push(run),
                _ => {}
            }
        }
    }
    Ok(out)
}

/// How many of the clusters pool `id` made are held by runs now.
fn claimed(r: &impl Read, id: &ProfileId) -> Result<usize, StoreError> {
    let mut n = 0;
    for (_, run) in r.scan::<RunRecord>(Table::Runs, &pool_runs(id))? {
        if run.cluster.status != Some(ClusterStatus::Reused) {
            continue;
        }
        let Some(holder) = crate::store::idle::holder(r, run.cluster_id())? else {
            continue;
        };
        if r.get::<serde_json::Value>(Table::Active, &holder)?
            .is_some_and(|e| !crate::store::idle::is_idle_entry(&e))
        {
            n += 1;
        }
    }
    Ok(n)
}
