//! Starting runs: `start` resolves the run's profile over every level of the hierarchy,
//! checks it (its properties, its template, who may run what on the server's host, the
//! program's concurrency limit, the namespace's quota), and records the run (or its
//! rejection) in one write, so a check and the record it guards cannot race. Everything
//! after that is the supervisor's. `preview` shows what a start would resolve to.

use std::collections::BTreeMap;

use crate::model::access::{Act, Trust, runs_on_host};
use crate::model::app::{Program, WORKFLOWS};
use crate::model::event::EventKind;
use crate::model::preference::Scope;
use crate::model::profile::ProfileStatus;
use crate::model::property::{Level, Origin, Values};
use crate::model::run::{Launch, ProgramStatus, RunError, RunKey, RunRecord};
use crate::model::schedule::{Constraint, Fire, FireOutcome, Schedule, ScheduleStatus, StartedBy};
use crate::model::server::Owner;
use crate::rules::lifecycle::{self, Event};
use crate::rules::schedule::Verdict;
use crate::rules::{host, resolve};
use crate::runtime::clock;
use crate::runtime::handle::Runtime;
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::events;
use crate::store::keys;
use crate::store::{Read, StoreError, Table, Txn, changes};

fn prefs(r: &impl Read, scope: Scope) -> Result<Values, StoreError> {
    Ok(r.get(Table::Preferences, &scope.key())?.unwrap_or_default())
}

/// Starts a run of `ns/app/program` with runtime arguments `args`. Returns the run id; a run
/// refused for the concurrency limit is recorded as REJECTED and reported as an error.
pub async fn start(
    runtime: &Runtime,
    act: Act,
    ns: String,
    app_name: String,
    program: String,
    args: Values,
) -> Result<String, ServiceError> {
    metrics::counter!(crate::model::metrics::RUNS_STARTED.name, "namespace" => ns.clone())
        .increment(1);
    let key = RunKey {
        namespace: ns,
        app: app_name,
        program,
        run: uuid::Uuid::now_v7().to_string(),
    };
    key.check()?;
    resolve::check_overrides(Level::Runtime, &args)?;
    if runtime.deps().member.draining() {
        let me = runtime.deps().member.name.to_string();
        return Err(crate::runtime::error::RuntimeError::Draining(me).into());
    }
    let registry = runtime.deps().registry.clone();
    // A request answers 503 when the store cannot be reached, rather than wait as runs do.
    let store = &runtime.store();
    // A run without a template is recorded in one write. With one, the write hands back what
    // it resolved, the layout is solved outside it (the solver never holds the store's
    // writer), and the next write records the run if what was solved for still holds.
    let mut solved: Option<(Resolved, Layout)> = None;
    // The server that accepts a start owns the run.
    let member = &runtime.deps().member;
    let owner = Owner {
        server: member.name.to_string(),
        lease: member.lease(),
        since: crate::runtime::clock::now_secs(),
    };
    let act = Act {
        namespace: Some(key.namespace.clone()),
        target: key.run.clone(),
        ..act
    };
    for _ in 0..MAX_START_TRIES {
        let (r, k, a, o) = (registry.clone(), key.clone(), args.clone(), owner.clone());
        let act = act.clone();
        let outcome = store
            .write(move |tx| {
                let how = Starting {
                    owner: &o,
                    act: &act,
                    schedule: None,
                };
                record_start(tx, &r, k.clone(), a.clone(), solved.clone(), &how)
            })
            .await?;
        match outcome {
            Recorded::Started(run) => {
                let id = run.key.run.clone();
                runtime.spawn(*run);
                return Ok(id);
            }
            Recorded::Rejected(refusal) => return Err(refusal.into()),
            Recorded::Unsolved(resolved) => {
                let r = registry.clone();
                solved = Some(
                    tokio::task::spawn_blocking(move || {
                        solve_layout(&r, &resolved).map(|layout| (*resolved, layout))
                    })
                    .await
                    .map_err(|e| ServiceError::unfinished("the layout's solution", &e))??,
                );
            }
        }
    }
    Err(ServiceError::Changed(format!(
        "the run's profile, preferences or template kept changing while it started ({MAX_START_TRIES} tries); start it again"
    )))
}

/// What a start of a program would resolve to, shown before starting it.
#[derive(Debug, Clone, PartialEq)]
pub struct Preview {
    /// `SYSTEM:name` or `USER:name`, and the level that chose it.
    pub profile: String,
    pub origin: crate::model::property::Origin,
    pub provisioner: String,
    pub keepalive: crate::model::profile::Keepalive,
    pub timeout: Option<u64>,
    /// Effective properties, secrets masked, each with the level that set it.
    pub properties: Vec<crate::model::property::EffectiveProperty>,
    pub nodes: usize,
}

/// What starting `ns/app/program` with runtime arguments `args` would resolve to: the same
/// resolution and checks as a start, without starting anything.
pub async fn preview(
    runtime: &Runtime,
    ns: String,
    app: String,
    program: String,
    args: Values,
) -> Result<Preview, ServiceError> {
    let key = RunKey {
        namespace: ns,
        app,
        program,
        run: "preview".into(),
    };
    key.check()?;
    resolve::check_overrides(Level::Runtime, &args)?;
    let registry = std::sync::Arc::clone(&runtime.deps().registry);
    runtime
        .store()
        .read(move |r| {
            let resolved = resolve_start(r, &registry, &key, &args, None)?;
            Ok(Preview {
                profile: resolved.chosen.id.scoped_name(),
                origin: resolved.chosen.origin,
                provisioner: resolved.provisioner,
                keepalive: resolved.keepalive,
                timeout: resolved.timeout,
                properties: resolved
                    .properties
                    .into_iter()
                    .map(|p| crate::model::property::EffectiveProperty {
                        value: crate::model::property::redact(&p.name, &p.value).to_string(),
                        ..p
                    })
                    .collect(),
                nodes: resolved.nodes.len(),
            })
        })
        .await
}

/// How often a start resolves and solves again when the store changed under it.
const MAX_START_TRIES: usize = 3;

/// What a start resolves from the store: with a template, resolved once to solve the layout
/// outside the store's writer, and again in the write that records the run, which goes ahead
/// only if nothing changed in between.
#[derive(Debug, Clone, PartialEq)]
struct Resolved {
    chosen: resolve::ChosenProfile,
    keepalive: crate::model::profile::Keepalive,
    timeout: Option<u64>,
    properties: Vec<crate::model::property::EffectiveProperty>,
    provisioner: String,
    nodes: Vec<String>,
    template: Option<crate::model::template::Template>,
    program: Program,
    /// Who wrote the profile and the template, for the host check.
    authors: Authors,
}

/// The authors of what a run resolved to, and their names for a refusal.
#[derive(Debug, Clone, PartialEq)]
struct Authors {
    profile: Trust,
    profile_id: crate::model::profile::ProfileId,
    /// The template's reference and its author.
    template: Option<(String, Trust)>,
}

/// The layout a template gives the run's nodes: services and types per node.
type Layout = (
    BTreeMap<String, std::collections::BTreeSet<String>>,
    BTreeMap<String, crate::model::template::NodeTypes>,
);

/// Resolves the run's profile, properties, nodes and template, checking each.
fn resolve_start(
    r: &impl Read,
    registry: &crate::runtime::registry::Registry,
    key: &RunKey,
    args: &Values,
    schedule: Option<&Schedule>,
) -> Result<Resolved, ServiceError> {
    let ns = key.namespace.clone();
    let (app, program) = catalog::require_program(r, &ns, &key.app, WORKFLOWS, &key.program)?;
    let scope = Scope::Program {
        namespace: ns.clone(),
        app: key.app.clone(),
        program_type: WORKFLOWS.into(),
        program: key.program.clone(),
    };
    let mut maps: Vec<(Level, Values)> = Vec::new();
    for s in &scope.lineage() {
        maps.push((s.level(), prefs(r, s.clone())?));
    }
    maps.push((Level::App, app.config.clone()));
    if let Some(s) = schedule {
        maps.push((Level::Schedule, s.properties.clone()));
    }
    maps.push((Level::Runtime, args.clone()));
    let levels: Vec<(Level, &Values)> = maps.iter().map(|(l, v)| (*l, v)).collect();

    let mut chosen = resolve::choose_profile(&ns, &levels)?;
    let stored = catalog::stored_profile(r, &chosen.id)?
        .ok_or_else(|| ServiceError::ProfileNotFound(chosen.id.clone()))?;
    if stored.profile.status == ProfileStatus::Disabled {
        return Err(ServiceError::ProfileDisabled(chosen.id));
    }
    let provisioner_name = stored.profile.provisioner.name.clone();
    let provisioner = registry
        .get(&provisioner_name)
        .ok_or_else(|| ServiceError::ProvisionerNotFound(provisioner_name.clone()))?;
    let authority = resolve::Authority {
        author: stored.author(),
        spec: provisioner.spec(),
    };
    let mut properties =
        resolve::effective_properties(&chosen.id, &stored.profile, authority, &levels)?;
    if let Some(s) = schedule {
        // Values of the schedule level name the schedule they came from.
        let named = |o: &mut Origin| {
            if *o == Origin::Level(Level::Schedule) {
                *o = Origin::Schedule(s.path());
            }
        };
        named(&mut chosen.origin);
        properties.iter_mut().for_each(|p| named(&mut p.origin));
    }
    let map = crate::model::property::by_name(&properties);
    if let Err(e) = provisioner.validate(&map) {
        return Err(RunError::BadProperty {
            property: e.property,
            message: e.message,
        }
        .into());
    }
    crate::model::property::check_references("properties", provisioner.spec(), &map)?;
    catalog::check_secure_keys_exist(r, &ns, &map)?;
    let nodes = provisioner.nodes(&map);
    let max = provisioner.max_nodes(&map);
    if nodes.len() > max as usize {
        return Err(RunError::BadProperty {
            property: "nodes".into(),
            message: format!(
                "provisioner '{provisioner_name}' allows at most {max} nodes, not {}",
                nodes.len()
            ),
        }
        .into());
    }
    let (template, template_author) = match map.get(ebb_spi::resource::TEMPLATE.name) {
        None => (None, None),
        Some(name) => {
            let (t, author) = catalog::resolve_template(r, &ns, name, chosen.id.scope)?;
            (Some(t), Some((name.clone(), author)))
        }
    };
    let authors = Authors {
        profile: stored.author(),
        profile_id: chosen.id.clone(),
        template: template_author,
    };
    Ok(Resolved {
        chosen,
        keepalive: stored.profile.keepalive,
        timeout: stored.profile.timeout,
        properties,
        provisioner: provisioner_name,
        nodes,
        template,
        program,
        authors,
    })
}

/// Solves the template's layout for the run's nodes and checks that every node's types give
/// the provisioner valid properties and that the plan stays within bounds. Pure, and possibly
/// slow: called on the blocking pool, never inside a store write.
fn solve_layout(
    registry: &crate::runtime::registry::Registry,
    resolved: &Resolved,
) -> Result<Layout, ServiceError> {
    let Some(template) = &resolved.template else {
        return Ok((BTreeMap::new(), BTreeMap::new()));
    };
    let provisioner_name = &resolved.provisioner;
    let provisioner = registry
        .get(provisioner_name)
        .ok_or_else(|| ServiceError::ProvisionerNotFound(provisioner_name.clone()))?;
    let map = crate::model::property::by_name(&resolved.properties);
    let nodes = &resolved.nodes;
    let solved = crate::rules::solver::solve(
        template,
        &crate::rules::solver::Request {
            provisioner: provisioner_name.clone(),
            nodes: nodes.len() as u32,
            ..Default::default()
        },
    )
    .map_err(|e| ServiceError::invalid("template", e.to_string()))?;
    // A node gets its hardware and image type's properties on top of the profile's: the
    // provisioner must accept them too (checked once per pair of types).
    let mut checked = std::collections::BTreeSet::new();
    for l in &solved {
        if !checked.insert((&l.hardware_type, &l.image_type)) {
            continue;
        }
        let types = crate::model::template::NodeTypes {
            hardware_type: l.hardware_type.clone(),
            image_type: l.image_type.clone(),
        };
        let given = template.type_properties(provisioner_name, &types);
        // A template trusted less than the profile's author may not move what only the
        // author decides (an endpoint, a subnet, credentials) through its node types.
        let template_author = resolved.authors.template.as_ref().map(|(_, t)| *t);
        if let Some(author) = template_author
            && author < resolved.authors.profile
            && let Some(name) = given.keys().find(|k| provisioner.spec().author_only(k))
        {
            return Err(ServiceError::invalid(
                "template",
                format!(
                    "hardware type '{}' with image type '{}' sets property '{name}', which only the author of {} ({}) may set; the template was written by a {author}",
                    types.hardware_type,
                    types.image_type,
                    resolved.authors.profile_id,
                    resolved.authors.profile
                ),
            ));
        }
        let mut merged = map.clone();
        merged.extend(given);
        provisioner.validate(&merged).map_err(|e| {
            ServiceError::invalid(
                "template",
                format!(
                    "hardware type '{}' with image type '{}' gives {provisioner_name} a bad property '{}': {}",
                    types.hardware_type, types.image_type, e.property, e.message
                ),
            )
        })?;
    }
    let plan_nodes: Vec<crate::model::plan::PlanNode> = nodes
        .iter()
        .zip(&solved)
        .map(|(name, l)| crate::model::plan::PlanNode {
            name: name.clone(),
            services: l.services.clone(),
        })
        .collect();
    crate::rules::plan::cluster::check_size(
        crate::model::plan::ClusterOperation::Create,
        template,
        &plan_nodes,
    )
    .map_err(|e| ServiceError::invalid("template", e))?;
    let node_types = nodes
        .iter()
        .cloned()
        .zip(solved.iter().map(|l| crate::model::template::NodeTypes {
            hardware_type: l.hardware_type.clone(),
            image_type: l.image_type.clone(),
        }))
        .collect();
    let layout = nodes
        .iter()
        .cloned()
        .zip(solved.into_iter().map(|l| l.services))
        .collect();
    Ok((layout, node_types))
}

/// What [`record_start`] did.
enum Recorded {
    Started(Box<RunRecord>),
    Rejected(RunError),
    /// Nothing: the run has a template whose layout must be solved first (or solved again:
    /// the profile, its properties or the template changed since).
    Unsolved(Box<Resolved>),
}

/// What a start records besides the run's key and arguments.
struct Starting<'a> {
    owner: &'a Owner,
    act: &'a Act,
    /// The schedule whose fire starts it, and what fired.
    schedule: Option<(&'a Schedule, &'a StartedBy)>,
}

/// Records run `key`, or its rejection for the concurrency limit, in one write. A run with
/// a template needs `solved`, the layout solved for what the store still resolves to;
/// otherwise nothing is written and what to solve for is handed back.
fn record_start(
    tx: &mut Txn,
    registry: &crate::runtime::registry::Registry,
    key: RunKey,
    args: Values,
    solved: Option<(Resolved, Layout)>,
    how: &Starting<'_>,
) -> Result<Recorded, ServiceError> {
    let (owner, act) = (how.owner, how.act);
    let resolved = resolve_start(tx, registry, &key, &args, how.schedule.map(|(s, _)| s))?;
    let actor = Some(act.actor.as_str());
    let layout = match solved {
        _ if resolved.template.is_none() => Layout::default(),
        Some((expected, layout)) if expected == resolved => layout,
        _ => return Ok(Recorded::Unsolved(Box::new(resolved))),
    };
    let Resolved {
        chosen,
        keepalive,
        timeout,
        properties,
        provisioner,
        nodes,
        template,
        program,
        authors,
    } = resolved;
    let (layout, node_types) = layout;
    let now = clock::now_secs();
    let run = RunRecord {
        key: key.clone(),
        status: ProgramStatus::Pending,
        starting: now,
        start: None,
        end: None,
        args,
        profile: chosen.id.scoped_name(),
        provisioner,
        profile_properties: properties,
        keepalive,
        timeout,
        launch: Launch {
            command: program.command.clone(),
            env: program.env.clone(),
        },
        cluster: crate::model::run::ClusterState {
            nodes,
            ..Default::default()
        },
        failure: None,
        stop: None,
        exit: None,
        template,
        layout,
        node_types,
        config: None,
        launcher: None,
        started_by: how.schedule.map(|(_, by)| by.clone()),
        format: crate::model::run::RUN_FORMAT,
    };
    // Only a limit reads the program's active runs: a scan makes this write conflict with
    // every other start and end of the program's runs (on etcd, a retry each).
    let refusal = refusal(tx, &key, &run, &authors, program.max_concurrent_runs)?;
    if let Some(refusal) = refusal {
        record_rejected(tx, run, refusal.to_string(), act)?;
        return Ok(Recorded::Rejected(refusal));
    }
    tx.put(Table::Runs, &key.key(), &run)?;
    index(tx, &key)?;
    tx.put(
        Table::Active,
        &key.key(),
        &serde_json::json!({ "profile": run.profile, "nodes": run.cluster.nodes.len() }),
    )?;
    tx.put(Table::Owners, &key.key(), owner)?;
    let origin = match &chosen.origin {
        Origin::Level(level) => format!("set by {level}"),
        Origin::Schedule(name) => format!("set by schedule {name}"),
        Origin::Default | Origin::Profile => "the instance default".into(),
    };
    let by = match how.schedule {
        Some((s, fire)) => format!(
            "schedule {} for {} (it was last changed by {})",
            s.path(),
            fire.describe(),
            s.updated_by.as_deref().unwrap_or("unknown")
        ),
        None => act.actor.clone(),
    };
    events::append_by(
        tx,
        &key.run,
        EventKind::Status,
        None,
        format!(
            "run PENDING with profile {} ({origin}), {} node(s), started by {by}",
            run.profile,
            run.cluster.nodes.len(),
        ),
        actor,
    )?;
    changes::record(tx, act)?;
    Ok(Recorded::Started(Box::new(run)))
}

/// Records `run` (not yet stored) as REJECTED for `reason`, with its history and, as for any
/// run end, its end for the program-status triggers. Answers the record.
fn record_rejected(
    tx: &mut Txn,
    run: RunRecord,
    reason: String,
    act: &Act,
) -> Result<RunRecord, ServiceError> {
    let key = run.key.clone();
    let t = lifecycle::on(&run, Event::Reject(reason), clock::now_secs())?;
    tx.put(Table::Runs, &key.key(), &t.run)?;
    index(tx, &key)?;
    for note in t.notes {
        events::append_by(
            tx,
            &key.run,
            EventKind::Status,
            None,
            note,
            Some(&act.actor),
        )?;
    }
    crate::store::ends::record(tx, &t.run)?;
    changes::record(tx, act)?;
    Ok(t.run)
}

/// Why run `run` (`key`) may not start, if it may not: a part of it that may not run on the
/// server's host, its program's concurrency limit, or its namespace's quota. Each check
/// reads only what it needs (a scan makes the write conflict with every other start and end
/// it covers: on etcd, a retry each).
fn refusal(
    tx: &Txn,
    key: &RunKey,
    run: &RunRecord,
    authors: &Authors,
    max_concurrent_runs: Option<u32>,
) -> Result<Option<RunError>, ServiceError> {
    let namespace = catalog::require_namespace(tx, &key.namespace)?;
    let properties = run.properties();
    if runs_on_host(&run.provisioner, &properties) {
        let app = catalog::require_app(tx, &key.namespace, &key.app)?;
        let host = host::HostRun {
            namespace_allows: namespace.allow_host_programs,
            app_approved: app.host_programs,
            profile: authors.profile,
            template: authors.template.as_ref().map(|(_, t)| *t),
        };
        if let Some(part) = host::refusal(&host) {
            let (part, written_by) = match part {
                host::HostPart::App => (format!("app '{}'", key.app), None),
                host::HostPart::Profile(by) => (authors.profile_id.to_string(), Some(by)),
                host::HostPart::Template(by) => {
                    let name = authors.template.as_ref().map_or("", |(n, _)| n.as_str());
                    (format!("template '{name}'"), Some(by))
                }
            };
            return Ok(Some(RunError::HostPrograms {
                namespace: key.namespace.clone(),
                part,
                written_by,
                profile: format!("{}, provisioner {}", run.profile, run.provisioner),
                run: key.run.clone(),
            }));
        }
    }
    let active = match max_concurrent_runs {
        Some(_) => tx
            .scan::<serde_json::Value>(
                Table::Active,
                &keys::program_runs(&key.namespace, &key.app, &key.program),
            )?
            .len(),
        None => 0,
    };
    if let Some(max) = max_concurrent_runs
        && active >= max as usize
    {
        return Ok(Some(RunError::ConcurrencyLimit {
            program: format!("{}/{}/{}", key.namespace, key.app, key.program),
            active,
            run: key.run.clone(),
        }));
    }
    if namespace.quota.limits() {
        let usage = catalog::namespace_usage(tx, &key.namespace)?;
        let nodes = u32::try_from(run.cluster.nodes.len()).unwrap_or(u32::MAX);
        if let Some(reason) = namespace.quota.refuse(usage, nodes) {
            return Ok(Some(RunError::Quota {
                namespace: key.namespace.clone(),
                reason,
                run: key.run.clone(),
            }));
        }
    }
    Ok(None)
}

/// Adds run `key` to its namespace's run index.
fn index(tx: &mut Txn, key: &RunKey) -> Result<(), StoreError> {
    let entry = keys::run_index(&key.namespace, &key.run);
    tx.put(Table::RunIndex, &entry, &key.key())
}

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
                if let Some(run) = run {
                    runtime.spawn(*run);
                }
                return Ok(fired);
            }
            FireRecorded::Unsolved(resolved) => {
                let r = registry.clone();
                solved = Some(
                    tokio::task::spawn_blocking(move || {
                        solve_layout(&r, &resolved).map(|layout| (*resolved, layout))
                    })
                    .await
                    .map_err(|e| ServiceError::unfinished("the layout's solution", &e))??,
                );
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
    match crate::rules::schedule::judge(&schedule.constraints, &facts) {
        Verdict::Skip { reason } => {
            let outcome = FireOutcome::Skipped { reason };
            put_fire(tx, f, outcome.clone())?;
            return done(Fired::Recorded(outcome));
        }
        Verdict::Wait { reason, until } => {
            let outcome = FireOutcome::Waiting { reason };
            put_fire(tx, f, outcome.clone())?;
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
        actor: format!("schedule:{}", schedule.path()),
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
    };
    let run = match record_start(tx, registry, key.clone(), f.args.clone(), solved, &how) {
        Ok(Recorded::Unsolved(resolved)) => return Ok(FireRecorded::Unsolved(resolved)),
        Ok(Recorded::Started(run)) => Some(run),
        Ok(Recorded::Rejected(_)) => None,
        // What a manual start answers with an error (a disabled or missing profile, a bad
        // property) leaves a REJECTED run with the reason: nobody is there to read an error.
        Err(e @ (ServiceError::Store(_) | ServiceError::Internal(_))) => return Err(e),
        Err(e) => {
            let run = unresolved_run(tx, key.clone(), args.clone(), &f.by)?;
            record_rejected(tx, run, e.to_string(), &act)?;
            None
        }
    };
    // The run keeps the schedule's properties among its arguments, as CDAP's do.
    let run = match run {
        Some(mut run) => {
            run.args = args;
            tx.put(Table::Runs, &key.key(), &run)?;
            Some(run)
        }
        None => None,
    };
    let outcome = FireOutcome::Started {
        run: key.run.clone(),
    };
    put_fire(tx, f, outcome.clone())?;
    tx.delete(Table::WaitingFires, &fire_key);
    Ok(FireRecorded::Done(Fired::Recorded(outcome), run))
}

/// A fire waiting for a constraint, in `WaitingFires`: judged again at `until`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    pub until: u64,
    pub fire: Firing,
}

/// Puts the record of fire `f` with `outcome`.
fn put_fire(tx: &mut Txn, f: &Firing, outcome: FireOutcome) -> Result<(), StoreError> {
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
                .map(|p| p.command.clone())
                .unwrap_or_default(),
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
        format: crate::model::run::RUN_FORMAT,
    })
}
