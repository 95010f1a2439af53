//! Starting runs: `start` resolves the run's profile over every level of the hierarchy,
//! checks it (its properties, its template, who may run what on the server's host, the
//! program's concurrency limit, the namespace's quota), and records the run (or its
//! rejection) in one write, so a check and the record it guards cannot race. Everything
//! after that is the supervisor's. `preview` shows what a start would resolve to.
//!
//! Runs start by request, or when a schedule fires: [`scheduler`] fires schedules, and
//! [`fire`] records a fire with its run. A start that a limit refuses may wait in its
//! namespace's queue instead (QUEUED), and [`queue`] starts it once the limit allows.

pub mod fire;
pub mod idempotent;
mod limits;
pub mod pool;
pub mod queue;
pub mod scheduler;

use std::collections::BTreeMap;

use crate::model::access::Act;
use crate::model::app::{Program, WORKFLOWS};
use crate::model::event::EventKind;
use crate::model::namespace::Namespace;
use crate::model::preference::Scope;
use crate::model::profile::ProfileStatus;
use crate::model::property::{Level, Origin, Values};
use crate::model::run::{Launch, ProgramStatus, QueueStay, RunError, RunKey, RunRecord};
use crate::model::schedule::{Schedule, StartedBy};
use crate::model::server::Owner;
use crate::rules::lifecycle::{self, Event};
use crate::rules::queue::{self as admission, Decision};
use crate::rules::resolve;
use crate::runtime::handle::Runtime;
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::clock;
use crate::store::events;
use crate::store::keys;
use crate::store::{Read, StoreError, Table, Txn, changes};
use limits::{Authors, refusal, waits_on};

fn prefs(r: &impl Read, scope: Scope) -> Result<Values, StoreError> {
    Ok(r.get(Table::Preferences, &scope.key())?.unwrap_or_default())
}

/// Starts a run of `ns/app/program` with runtime arguments `args`. Returns the run id; a run
/// refused for the concurrency limit is recorded as REJECTED and reported as an error. With
/// an idempotency key (`once`), a start the key made before is answered again instead.
pub async fn start(
    runtime: &Runtime,
    act: Act,
    (ns, app_name, program): (String, String, String),
    args: Values,
    once: Option<String>,
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
    if let Some(once) = &once {
        idempotent::check(once)?;
    }
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
        since: crate::store::clock::now_secs(),
    };
    let act = Act {
        namespace: Some(key.namespace.clone()),
        target: key.run.clone(),
        ..act
    };
    let begun_ms = clock::now_millis();
    for _ in 0..MAX_START_TRIES {
        let (r, k, a, o) = (registry.clone(), key.clone(), args.clone(), owner.clone());
        let (act, once) = (act.clone(), once.clone());
        let outcome = store
            .write(move |tx| {
                let now = crate::store::clock::now_secs();
                if let Some(once) = &once
                    && let Some(first) = idempotent::earlier(tx, &k, once, &a, now)?
                {
                    return Ok::<_, ServiceError>(Recorded::Replayed(first));
                }
                let how = Starting {
                    owner: &o,
                    act: &act,
                    schedule: None,
                    begun_ms,
                };
                let recorded = record_start(tx, &r, k.clone(), a.clone(), solved.clone(), &how)?;
                if let Some(once) = &once {
                    let refused = match &recorded {
                        Recorded::Rejected(refusal) => Some(Some(refusal.to_string())),
                        Recorded::Started(_) | Recorded::Queued(_) => Some(None),
                        Recorded::Unsolved(_) | Recorded::Replayed(_) => None,
                    };
                    if let Some(refused) = refused {
                        idempotent::remember(tx, &k, once, &a, refused, now)?;
                    }
                }
                Ok(recorded)
            })
            .await?;
        match outcome {
            Recorded::Replayed(first) => {
                return match first.refused {
                    Some(refusal) => Err(ServiceError::RefusedBefore(refusal)),
                    None => Ok(first.run),
                };
            }
            Recorded::Started(run) => {
                let id = run.key.run.clone();
                spawn(runtime, *run);
                return Ok(id);
            }
            Recorded::Queued(run) => {
                runtime.deps().queue_news.queued();
                return Ok(run.key.run);
            }
            Recorded::Rejected(refusal) => return Err(refusal.into()),
            Recorded::Unsolved(resolved) => {
                solved = Some(solve_outside(&registry, *resolved).await?);
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

/// Starts the supervisor of `run`, just recorded; when it took over an IDLE cluster, the
/// supervisor of the run that left it (on this server) stops, and the claim is counted.
pub(super) fn spawn(runtime: &Runtime, run: RunRecord) {
    if run.reuse.is_some() {
        crate::runtime::reuse::counted(run.cluster.origin.as_ref());
    }
    if let Some(origin) = &run.cluster.origin {
        runtime.deps().notifier.notify(&origin.from);
        runtime.taken_over(&origin.from);
    }
    runtime.spawn(run);
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
    /// What `system.run.queue` says, if a level sets it, else the profile's `queueRuns`.
    queue: Option<bool>,
    /// How a failed program is tried again: the program's policy, else the profile's.
    retry: Option<crate::model::retry::Retry>,
    /// The profile's cluster reuse.
    reuse: Option<crate::model::profile::Reuse>,
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
    let chosen = resolve::choose_profile(&ns, &levels)?;
    resolve_at(r, registry, (&ns, &levels), chosen, program, schedule)
}

/// Resolves profile `chosen` for a run of `program` in namespace `ns` over `levels`, checking
/// each part.
fn resolve_at(
    r: &impl Read,
    registry: &crate::runtime::registry::Registry,
    (ns, levels): (&str, &[(Level, &Values)]),
    mut chosen: resolve::ChosenProfile,
    program: Program,
    schedule: Option<&Schedule>,
) -> Result<Resolved, ServiceError> {
    let ns = ns.to_string();
    let queue = resolve::queue_wanted(levels)?;
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
        resolve::effective_properties(&chosen.id, &stored.profile, authority, levels)?;
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
            let (mut t, author) = catalog::resolve_template(r, &ns, name, chosen.id.scope)?;
            // The profile's (or the run's) values over the template's default config.
            if let Some(given) = map.get(ebb_spi::resource::TEMPLATE_CONFIG.name) {
                let given: serde_json::Map<String, serde_json::Value> = serde_json::from_str(given)
                    .map_err(|e| RunError::BadProperty {
                        property: ebb_spi::resource::TEMPLATE_CONFIG.name.into(),
                        message: format!("must be a JSON object: {e}"),
                    })?;
                t.defaults.config.extend(given);
            }
            // The profile's (or the run's) choice of the template's services over its defaults.
            if let Some(given) = map.get(ebb_spi::resource::TEMPLATE_SERVICES.name) {
                t.defaults.services = template_services(&t, given)?;
            }
            (Some(t), Some((name.clone(), author)))
        }
    };
    let template_on_host = template
        .as_ref()
        .is_some_and(|t: &crate::model::template::Template| {
            t.services
                .values()
                .any(|s| s.actions.values().any(|a| a.is_plugin()))
        });
    let authors = Authors {
        profile: stored.author(),
        profile_id: chosen.id.clone(),
        template: template_author,
        template_on_host,
    };
    let retry = program.retry.clone().or(stored.profile.retry.clone());
    let queue = queue.or(stored.profile.queue_runs);
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
        queue,
        retry,
        reuse: stored.profile.reuse(),
    })
}

/// The most services `templateServices` may name.
const MAX_TEMPLATE_SERVICES: usize = 64;

/// The services property `templateServices` names (comma-separated), each one the template
/// allows, with what they require; a 400 naming the property otherwise.
fn template_services(
    template: &crate::model::template::Template,
    given: &str,
) -> Result<Vec<String>, RunError> {
    let bad = |message: String| RunError::BadProperty {
        property: ebb_spi::resource::TEMPLATE_SERVICES.name.into(),
        message,
    };
    let mut names = std::collections::BTreeSet::new();
    for name in given.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        // Refused at the first name past the limit, before a long value is all read.
        if names.len() == MAX_TEMPLATE_SERVICES && !names.contains(name) {
            return Err(bad(format!(
                "names more than the limit of {MAX_TEMPLATE_SERVICES} services"
            )));
        }
        names.insert(name.to_string());
    }
    crate::rules::solver::check_services(template, &names).map_err(|e| bad(e.to_string()))?;
    Ok(names.into_iter().collect())
}

/// Solves the layout of what a start resolved to, on the blocking pool (never inside a
/// store write).
async fn solve_outside(
    registry: &std::sync::Arc<crate::runtime::registry::Registry>,
    resolved: Resolved,
) -> Result<(Resolved, Layout), ServiceError> {
    let r = std::sync::Arc::clone(registry);
    tokio::task::spawn_blocking(move || {
        solve_layout(&r, &resolved).map(|layout| (resolved, layout))
    })
    .await
    .map_err(|e| ServiceError::unfinished("the layout's solution", &e))?
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
    /// Recorded QUEUED: it starts when a limit allows.
    Queued(Box<RunRecord>),
    Rejected(RunError),
    /// Nothing: the run has a template whose layout must be solved first (or solved again:
    /// the profile, its properties or the template changed since).
    Unsolved(Box<Resolved>),
    /// Nothing: a start with the same idempotency key did this before.
    Replayed(idempotent::Remembered),
}

/// What a start records besides the run's key and arguments.
struct Starting<'a> {
    owner: &'a Owner,
    act: &'a Act,
    /// The schedule whose fire starts it, and what fired.
    schedule: Option<(&'a Schedule, &'a StartedBy)>,
    /// When the start began (epoch milliseconds): how long taking over an IDLE cluster took
    /// counts from here.
    begun_ms: u64,
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
        queue,
        retry,
        reuse,
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
            command: program.launch_command(),
            engine: program.engine(),
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
        queue: None,
        retry,
        attempts: Vec::new(),
        relaunch_at: None,
        reuse,
        application: None,
        pooled: false,
        settled: false,
        format: crate::model::run::RUN_FORMAT,
    };
    let namespace = catalog::require_namespace(tx, &key.namespace)?;
    // A run of a reusing profile takes over an IDLE cluster that matches in this same write,
    // so the limits count that cluster once, and two starts never take it both.
    let claim = crate::runtime::reuse::find(tx, &run, how.begun_ms)?;
    // Only a limit reads the program's active runs: a scan makes this write conflict with
    // every other start and end of the program's runs (on etcd, a retry each).
    let taken = claim.as_ref().map(|(left, _)| left);
    let held = refusal(
        tx,
        &namespace,
        &run,
        &authors,
        (program.max_concurrent_runs, taken),
    )?;
    let wanted = queue.unwrap_or(namespace.queue.queue_runs);
    let queued = match wanted {
        true => crate::store::queue::count(tx, &key.namespace)?,
        false => 0,
    };
    let max_queued = namespace.queue.max_queued();
    match admission::decide(held.as_ref().map(|(_, h)| *h), wanted, queued, max_queued) {
        Decision::Start => {}
        decision @ (Decision::Refuse | Decision::QueueFull) => {
            // Only a hold refuses; a full queue refuses whatever it would have waited on.
            let refusal = match held {
                Some((refusal, _)) if decision == Decision::Refuse => refusal,
                held => RunError::QueueFull {
                    namespace: key.namespace.clone(),
                    max: max_queued,
                    waits_on: waits_on(held.as_ref().map(|(r, _)| r), queued),
                    run: key.run.clone(),
                },
            };
            record_rejected(tx, run, refusal.to_string(), act)?;
            return Ok(Recorded::Rejected(refusal));
        }
        Decision::Queue => {
            let reason = waits_on(held.as_ref().map(|(r, _)| r), queued);
            let queued_run = record_queued(tx, run, &namespace, reason, how)?;
            return Ok(Recorded::Queued(Box::new(queued_run)));
        }
    }
    tx.put(Table::Runs, &key.key(), &run)?;
    index(tx, &key)?;
    activate(tx, &run, owner)?;
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
    if let Some((left, claim)) = claim {
        crate::runtime::reuse::commit(tx, &left, &run, &claim)?;
        return Ok(Recorded::Started(Box::new(claim.taker.run)));
    }
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
    let t = lifecycle::on(&run, Event::Reject(reason), clock::now_secs())?;
    let rejected = crate::runtime::transition::write(tx, &run, &t, Some(&act.actor))?;
    index(tx, &run.key)?;
    changes::record(tx, act)?;
    Ok(rejected)
}

/// Records `run` (not yet stored) as QUEUED in its namespace's queue, waiting on `reason`,
/// with its history. Answers the record.
fn record_queued(
    tx: &mut Txn,
    mut run: RunRecord,
    namespace: &Namespace,
    reason: String,
    how: &Starting<'_>,
) -> Result<RunRecord, ServiceError> {
    let key = run.key.clone();
    let since = clock::now_millis();
    let max_wait = namespace.queue.max_queue_time();
    run.status = ProgramStatus::Queued;
    run.queue = Some(QueueStay {
        since,
        until: Some(since.saturating_add(max_wait.saturating_mul(1000))),
        reason: reason.clone(),
        admitted: None,
    });
    tx.put(Table::Runs, &key.key(), &run)?;
    index(tx, &key)?;
    let ahead = crate::store::queue::enter(tx, &run)?;
    let by = match how.schedule {
        Some((s, fire)) => format!("schedule {} for {}", s.path(), fire.describe()),
        None => how.act.actor.clone(),
    };
    events::append_by(
        tx,
        &key.run,
        EventKind::Status,
        None,
        format!(
            "run QUEUED (started by {by}): {reason}; {ahead} run(s) of namespace '{}' queued ahead of it; it waits at most {}",
            key.namespace,
            humantime::format_duration(std::time::Duration::from_secs(max_wait))
        ),
        Some(&how.act.actor),
    )?;
    changes::record(tx, how.act)?;
    Ok(run)
}

/// Counts `run` among the live runs its limits count, owned by `owner`, which supervises it.
fn activate(tx: &mut Txn, run: &RunRecord, owner: &Owner) -> Result<(), StoreError> {
    let key = run.key.key();
    tx.put(
        Table::Active,
        &key,
        &serde_json::json!({ "profile": run.profile, "nodes": run.cluster.nodes.len() }),
    )?;
    tx.put(Table::Owners, &key, owner)
}

/// Adds run `key` to its namespace's run index.
fn index(tx: &mut Txn, key: &RunKey) -> Result<(), StoreError> {
    let entry = keys::run_index(&key.namespace, &key.run);
    tx.put(Table::RunIndex, &entry, &key.key())
}
