//! The catalog: reads and cascades that cross tables, shared by the resource services so that
//! no service calls another.
//!
//! Each function runs inside the caller's store read or write, so a check and the write it
//! guards are one transaction: "the namespace exists" and "the app is put" cannot be split by
//! a concurrent delete.

use std::collections::BTreeMap;

use crate::model::access::{Caller, Trust, runs_on_host};
use crate::model::app::{App, Program, WORKFLOWS};
use crate::model::namespace::{DEFAULT, Namespace};
use crate::model::plan::NodeRecord;
use crate::model::preference::{Assignment, Scope, check_keys};
use crate::model::profile::{ProfileId, ProfileStatus, SYSTEM_NAMESPACE, StoredProfile};
use crate::model::property::{Level, PROFILE_KEY, Values, references};
use crate::model::run::{RunKey, RunRecord};
use crate::model::schedule::{Fire, Schedule};
use crate::model::service::ServiceRecord;
use crate::model::template::{StoredTemplate, Template, TemplateId};
use crate::rules::resolve;
use crate::service::error::ServiceError;
use crate::store::keys;
use crate::store::secure::StoredKey;
use crate::store::{Read, StoreError, Table, Txn};

/// Fails with 404 unless namespace `name` exists.
pub fn require_namespace(r: &impl Read, name: &str) -> Result<Namespace, ServiceError> {
    r.get(Table::Namespaces, name)?
        .ok_or_else(|| ServiceError::NamespaceNotFound(name.to_string()))
}

/// The key prefixes a scoped list reads, in order: namespace `ns`'s own records (after
/// checking it exists), then the SYSTEM ones when `ns` is `None` or `include_system`.
pub fn scoped_prefixes(
    r: &impl Read,
    ns: Option<&str>,
    include_system: bool,
) -> Result<Vec<String>, ServiceError> {
    let mut prefixes = Vec::new();
    if let Some(ns) = ns {
        require_namespace(r, ns)?;
        prefixes.push(keys::in_namespace(ns));
    }
    if ns.is_none() || include_system {
        prefixes.push(keys::in_namespace(SYSTEM_NAMESPACE));
    }
    Ok(prefixes)
}

/// App `app` of namespace `ns`, or a 404-class error (after checking the namespace).
pub fn require_app(r: &impl Read, ns: &str, app: &str) -> Result<App, ServiceError> {
    require_namespace(r, ns)?;
    r.get(Table::Apps, &keys::app(ns, app))?
        .ok_or_else(|| ServiceError::AppNotFound {
            namespace: ns.to_string(),
            app: app.to_string(),
        })
}

/// Program `program` of app `app` as `program_type` addresses it, or a 404-class error:
/// `workflows` (ebb's own paths) addresses every program; another type (`spark`, CDAP's paths)
/// only a program of that type.
pub fn require_program(
    r: &impl Read,
    ns: &str,
    app: &str,
    program_type: &str,
    program: &str,
) -> Result<(App, Program), ServiceError> {
    let found = require_app(r, ns, app)?;
    let p = found
        .programs
        .iter()
        .find(|p| {
            p.name == program && (program_type == WORKFLOWS || p.program_type == program_type)
        })
        .cloned()
        .ok_or_else(|| ServiceError::ProgramNotFound {
            namespace: ns.to_string(),
            app: app.to_string(),
            program: program.to_string(),
        })?;
    Ok((found, p))
}

/// Whether namespace `ns` holds apps (which block deleting it).
pub fn app_names(r: &impl Read, ns: &str) -> Result<Vec<String>, ServiceError> {
    Ok(
        r.scan::<serde_json::Value>(Table::Apps, &keys::in_namespace(ns))?
            .into_iter()
            .map(|(k, _)| k[ns.len() + 1..].to_string())
            .collect(),
    )
}

/// The names of the secure keys namespace `ns` holds.
pub fn secure_key_names(r: &impl Read, ns: &str) -> Result<Vec<String>, ServiceError> {
    Ok(
        r.scan::<StoredKey>(Table::SecureKeys, &keys::in_namespace(ns))?
            .into_iter()
            .map(|(_, k)| k.meta.name)
            .collect(),
    )
}

/// Checks that every key `properties` refer to exists in namespace `ns`, so a run that would
/// fail for a missing secret is refused when it is started.
pub fn check_secure_keys_exist<'a>(
    r: &impl Read,
    ns: &str,
    properties: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), ServiceError> {
    for (property, value) in properties {
        for name in references(value).map_err(|e| ServiceError::invalid(property.clone(), e))? {
            if r.get::<StoredKey>(Table::SecureKeys, &keys::secure_key(ns, &name))?
                .is_none()
            {
                return Err(ServiceError::invalid(
                    property.clone(),
                    format!(
                        "secure key '{name}' does not exist in namespace '{ns}'; create it with PUT /v3/namespaces/{ns}/securekeys/{name}"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Profile `id` as stored, if it exists.
pub fn stored_profile(
    r: &impl Read,
    id: &ProfileId,
) -> Result<Option<StoredProfile>, ServiceError> {
    Ok(r.get(Table::Profiles, &id.key())?)
}

/// The live runs using profile `id` (they block deleting it).
pub fn active_runs_of_profile(r: &impl Read, id: &ProfileId) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    for (key, value) in r.scan::<serde_json::Value>(Table::Active, "")? {
        let Some(run) = RunKey::from_key(&key) else {
            continue;
        };
        let profile = value.get("profile").and_then(|p| p.as_str()).unwrap_or("");
        if ProfileId::parse_scoped(&run.namespace, profile).as_ref() == Ok(id) {
            out.push(run.run);
        }
    }
    Ok(out)
}

/// What the live runs of namespace `ns` hold: runs, and the nodes each asked for at its
/// start (its `Active` entry).
pub fn namespace_usage(
    r: &impl Read,
    ns: &str,
) -> Result<crate::model::namespace::Usage, StoreError> {
    let mut usage = crate::model::namespace::Usage::default();
    for (_, value) in r.scan::<serde_json::Value>(Table::Active, &keys::in_namespace(ns))? {
        if !crate::store::idle::is_idle_entry(&value) {
            usage.live_runs = usage.live_runs.saturating_add(1);
        }
        let nodes = value
            .get("nodes")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        usage.live_nodes = usage
            .live_nodes
            .saturating_add(u32::try_from(nodes).unwrap_or(u32::MAX));
    }
    Ok(usage)
}

/// Resolves template reference `name` (`SYSTEM:x`, `USER:x` or `x`) as the author of a
/// profile of `scope` meant it: a bare name in a USER profile is the namespace's template,
/// else the SYSTEM one; in a SYSTEM profile it is the SYSTEM one, which a namespace's
/// template of the same name never shadows. Returns the template and its author's trust.
pub fn resolve_template(
    r: &impl Read,
    ns: &str,
    name: &str,
    scope: crate::model::profile::Scope,
) -> Result<(Template, Trust), ServiceError> {
    let (given, bare) = match name.split_once(':') {
        Some((s, n)) => (Some(s.to_ascii_uppercase()), n),
        None => (None, name),
    };
    let user = TemplateId {
        namespace: Some(ns.to_string()),
        name: bare.to_string(),
    };
    let system = TemplateId {
        namespace: None,
        name: bare.to_string(),
    };
    let ids = match given.as_deref() {
        Some("SYSTEM") => vec![system],
        Some("USER") => vec![user],
        None if scope == crate::model::profile::Scope::System => vec![system],
        None => vec![user, system],
        Some(other) => {
            return Err(ServiceError::invalid(
                "template",
                format!("unknown scope '{other}': use SYSTEM:<name>, USER:<name> or <name>"),
            ));
        }
    };
    for id in &ids {
        id.check()?;
        if let Some(found) = r.get::<StoredTemplate>(Table::Templates, &id.key())? {
            let author = found.author();
            return Ok((found.template, author));
        }
    }
    Err(ServiceError::TemplateNotFound(ids[0].to_string()))
}

/// Fails with 404 unless the namespace, app or program `scope` belongs to exists.
pub fn require_scope(r: &impl Read, scope: &Scope) -> Result<(), ServiceError> {
    match scope {
        Scope::Instance => {}
        Scope::Namespace(ns) => {
            require_namespace(r, ns)?;
        }
        Scope::App { namespace, app } => {
            require_app(r, namespace, app)?;
        }
        Scope::Program {
            namespace,
            app,
            program_type,
            program,
        } => {
            require_program(r, namespace, app, program_type, program)?;
        }
    }
    Ok(())
}

/// The preferences kept at `scope` (none is an empty set).
pub fn preferences(r: &impl Read, scope: &Scope) -> Result<Values, ServiceError> {
    Ok(r.get(Table::Preferences, &scope.key())?.unwrap_or_default())
}

/// Checks the values of one level of namespace `namespace` the way preferences are checked:
/// keys, property overrides, and any profile assignment. For an app's deploy-time config.
pub fn check_level(
    r: &impl Read,
    namespace: &str,
    level: Level,
    values: &Values,
) -> Result<(), ServiceError> {
    check_keys(values)?;
    check_profile_assignment(r, namespace, level, values)
}

/// Checks a profile assignment in `values`: well-formed, allowed at this level, existing and
/// enabled. Also checks the shape of property overrides.
pub fn check_profile_assignment(
    r: &impl Read,
    namespace: &str,
    level: Level,
    values: &Values,
) -> Result<(), ServiceError> {
    resolve::check_overrides(level, values)?;
    if !values.contains_key(PROFILE_KEY) {
        return Ok(());
    }
    let chosen = resolve::choose_profile(namespace, &[(level, values)])?;
    let stored =
        stored_profile(r, &chosen.id)?.ok_or(ServiceError::ProfileNotFound(chosen.id.clone()))?;
    if stored.profile.status == ProfileStatus::Disabled {
        return Err(ServiceError::ProfileDisabled(chosen.id));
    }
    Ok(())
}

/// Every place profile `id` is assigned: preferences at every level, app configurations and
/// schedules.
pub fn assignments(r: &impl Read, id: &ProfileId) -> Result<Vec<Assignment>, ServiceError> {
    let mut places = Vec::new();
    for (key, values) in r.scan::<Values>(Table::Preferences, "")? {
        let Some(scope) = Scope::from_key(&key) else {
            continue;
        };
        let Some(assigned) = values.get(PROFILE_KEY) else {
            continue;
        };
        let namespace = scope.namespace().unwrap_or(DEFAULT);
        if ProfileId::parse_scoped(namespace, assigned).as_ref() == Ok(id) {
            let (app, program) = match &scope {
                Scope::App { app, .. } => (Some(app.clone()), None),
                Scope::Program { app, program, .. } => (Some(app.clone()), Some(program.clone())),
                Scope::Instance | Scope::Namespace(_) => (None, None),
            };
            places.push(Assignment {
                level: scope.level(),
                namespace: scope.namespace().map(str::to_string),
                app,
                program,
                schedule: None,
            });
        }
    }
    for (_, app) in r.scan::<App>(Table::Apps, "")? {
        if let Some(assigned) = app.config.get(PROFILE_KEY)
            && ProfileId::parse_scoped(&app.namespace, assigned).as_ref() == Ok(id)
        {
            places.push(Assignment {
                level: Level::App,
                namespace: Some(app.namespace.clone()),
                app: Some(app.name.clone()),
                program: None,
                schedule: None,
            });
        }
    }
    for (_, s) in r.scan::<Schedule>(Table::Schedules, "")? {
        if let Some(assigned) = s.properties.get(PROFILE_KEY)
            && ProfileId::parse_scoped(&s.namespace, assigned).as_ref() == Ok(id)
        {
            places.push(Assignment {
                level: Level::Schedule,
                namespace: Some(s.namespace.clone()),
                app: Some(s.application.clone()),
                program: Some(s.program.program_name.clone()),
                schedule: Some(s.name.clone()),
            });
        }
    }
    Ok(places)
}

/// Removes the preferences of app `app` in `ns` and of its programs.
pub fn delete_app_preferences(tx: &mut Txn, ns: &str, app: &str) -> Result<(), ServiceError> {
    tx.delete(
        Table::Preferences,
        &Scope::App {
            namespace: ns.to_string(),
            app: app.to_string(),
        }
        .key(),
    );
    delete_prefix(tx, &format!("program/{ns}/{app}/"))
}

fn delete_prefix(tx: &mut Txn, prefix: &str) -> Result<(), ServiceError> {
    let keys: Vec<String> = tx
        .scan::<BTreeMap<String, String>>(Table::Preferences, prefix)?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for key in keys {
        tx.delete(Table::Preferences, &key);
    }
    Ok(())
}

/// Removes the preferences of namespace `ns` and of everything in it.
pub fn delete_namespace_preferences(tx: &mut Txn, ns: &str) -> Result<(), ServiceError> {
    tx.delete(Table::Preferences, &Scope::Namespace(ns.to_string()).key());
    for prefix in [format!("app/{ns}/"), format!("program/{ns}/")] {
        delete_prefix(tx, &prefix)?;
    }
    Ok(())
}

/// The node records of the cluster `run` holds: none once another run took it over (they
/// are that run's), and each node once over every run that held the cluster.
pub fn held_nodes(r: &impl Read, run: &RunRecord) -> Result<Vec<NodeRecord>, StoreError> {
    if run.cluster.status == Some(crate::model::run::ClusterStatus::Reused) {
        return Ok(Vec::new());
    }
    nodes_of(r, run.cluster_id())
}

/// The node records of cluster `run` (a run's id: the run that made the cluster).
pub fn nodes_of(r: &impl Read, run: &str) -> Result<Vec<NodeRecord>, StoreError> {
    Ok(r.scan::<NodeRecord>(Table::Resources, &keys::of_run(run))?
        .into_iter()
        .map(|(_, n)| n)
        .collect())
}

/// The state of every service on the nodes `nodes` of run `run`. A node that is gone took
/// its services with it, so a run whose nodes are all gone (most runs a list shows) is not
/// read again.
pub fn services_of(
    r: &impl Read,
    run: &str,
    nodes: &[NodeRecord],
) -> Result<Vec<ServiceRecord>, StoreError> {
    if !nodes.iter().any(NodeRecord::may_exist) {
        return Ok(Vec::new());
    }
    Ok(
        r.scan::<ServiceRecord>(Table::Services, &keys::of_run(run))?
            .into_iter()
            .map(|(_, s)| s)
            .collect(),
    )
}

/// Run `key`, or a 404-class error (after checking its namespace, app and program).
pub fn require_run(r: &impl Read, key: &RunKey) -> Result<RunRecord, ServiceError> {
    // A pool's runs have no app: their program is their profile's name.
    match key.app == crate::model::run::POOL_APP {
        true => {
            require_namespace(r, &key.namespace)?;
        }
        false => {
            require_program(r, &key.namespace, &key.app, WORKFLOWS, &key.program)?;
        }
    }
    r.get::<RunRecord>(Table::Runs, &key.key())?
        .ok_or_else(|| ServiceError::RunNotFound(key.run.clone()))
}

/// Stages the end of every token's role in namespace `ns` (it is deleted), so that no token
/// holds a role in a namespace made later under the same name; the access generation
/// advances, so a record written back with the role is of a past one.
pub fn forget_grants(tx: &mut crate::store::Txn, ns: &str) -> Result<(), StoreError> {
    let mut changed = false;
    for (key, mut record) in tx.scan::<crate::model::access::TokenRecord>(Table::Tokens, "")? {
        if record.grants.namespaces.remove(ns).is_some() {
            tx.put(Table::Tokens, &key, &record)?;
            changed = true;
        }
    }
    if changed {
        crate::store::generation::advance(tx)?;
    }
    Ok(())
}

/// Refuses values of one level (an app's config, a schedule's properties: `field`) that pick
/// a profile whose runs execute on the server's host, for a caller who may not choose one.
pub fn refuse_host_profile(
    r: &impl Read,
    ns: &str,
    field: &str,
    config: &crate::model::property::Values,
) -> Result<(), ServiceError> {
    let Some(chosen) = config.get(PROFILE_KEY) else {
        return Ok(());
    };
    let Ok(id) = ProfileId::parse_scoped(ns, chosen) else {
        return Ok(());
    };
    let Some(stored) = stored_profile(r, &id)? else {
        return Ok(());
    };
    let provisioner = &stored.profile.provisioner.name;
    if runs_on_host(provisioner, &stored.profile.properties()) {
        return Err(ServiceError::NotAllowed(format!(
            "{field}.{PROFILE_KEY}: {chosen} runs programs on the server's own host ({provisioner}), which only an instance admin may choose there, or set allowHostPrograms on namespace '{ns}'"
        )));
    }
    Ok(())
}

/// The `Meta` key that changes whenever any schedule does: the scheduler looks again when it
/// moves. (Not under `schedules/`, where each namespace's count is: a namespace may be named
/// `changed`.)
pub const SCHEDULES_CHANGED: &str = "schedule_changes";

/// The `Meta` key that changes whenever a schedule of namespace `ns` does: the scheduler
/// reads again the schedules of the namespaces whose key moved, and only those.
pub fn schedules_changed_in(ns: &str) -> String {
    format!("{SCHEDULES_CHANGED}/{ns}")
}

/// The newest cron time schedule `key` fired for (started, skipped or waiting), if any.
pub fn last_time_fire(r: &crate::store::Reader, key: &str) -> Result<Option<u64>, StoreError> {
    let prefix = format!("{key}/t");
    let page = r.scan_back::<Fire>(Table::Fires, &prefix, None, 1, 1, |_, _| true)?;
    Ok(page.entries.first().map(|(_, f)| f.time))
}

/// The `Meta` key that counts the schedules of namespace `ns`.
fn schedule_count_key(ns: &str) -> String {
    format!("schedules/{ns}")
}

/// Marks that a schedule of namespace `ns` changed, for the scheduler.
pub fn touch_schedules(tx: &mut Txn, ns: &str) -> Result<(), StoreError> {
    let n: u64 = tx.get(Table::Meta, SCHEDULES_CHANGED)?.unwrap_or(0);
    tx.put(Table::Meta, SCHEDULES_CHANGED, &(n + 1))?;
    let key = schedules_changed_in(ns);
    let n: u64 = tx.get(Table::Meta, &key)?.unwrap_or(0);
    tx.put(Table::Meta, &key, &(n + 1))
}

/// The checks of schedule `s` made by `caller` that need no store: shape and bounds, cron
/// expressions and time zones, the argument mapping, and that a program-status trigger
/// watches the caller's own namespace.
pub fn check_schedule(s: &Schedule, caller: &Caller, now: u64) -> Result<(), ServiceError> {
    crate::model::schedule::check(s)?;
    crate::rules::schedule::check_trigger(&s.trigger, now)?;
    crate::rules::schedule::check_constraints(&s.constraints)?;
    let mapped = crate::rules::schedule::mapping(&s.properties)?;
    // Copied arguments become the triggered run's runtime arguments: checked as those are.
    let targets: Values = mapped
        .into_iter()
        .map(|(_, t)| (t, String::new()))
        .collect();
    resolve::check_overrides(Level::Runtime, &targets)?;
    for (_, t) in s.trigger.walk() {
        if let crate::model::schedule::Trigger::ProgramStatus { program_id, .. } = t
            && let Some(other) = &program_id.namespace
            && *other != s.namespace
            && !caller.grants.instance_admin
        {
            // The end of another namespace's runs (and their arguments, which a triggered
            // run may copy) is that namespace's to share.
            return Err(ServiceError::invalid(
                "trigger.programId.namespace",
                format!(
                    "a schedule in namespace '{}' may watch only its own namespace's programs, not '{other}' (an instance admin may)",
                    s.namespace
                ),
            ));
        }
    }
    Ok(())
}

/// The checks of schedule `s` against the store: its program exists; its properties are a
/// valid level (keys, overrides, a profile that exists and is enabled); a profile that runs
/// programs on the server's host only where the caller may choose one.
pub fn check_schedule_in_store(
    r: &impl Read,
    s: &Schedule,
    instance_admin: bool,
) -> Result<(), ServiceError> {
    let ns = &s.namespace;
    let namespace = require_namespace(r, ns)?;
    let program_type = if s
        .program
        .program_type
        .eq_ignore_ascii_case(crate::model::app::SPARK)
    {
        crate::model::app::SPARK
    } else {
        WORKFLOWS
    };
    require_program(r, ns, &s.application, program_type, &s.program.program_name)?;
    let checked = check_level(r, ns, Level::Schedule, &s.properties);
    // The keys are checked as preferences are; here they are the schedule's properties.
    if let Err(ServiceError::Invalid(i)) = &checked
        && i.field == "preferences"
    {
        return Err(ServiceError::invalid("properties", i.message.clone()));
    }
    checked?;
    if !(instance_admin || namespace.allow_host_programs) {
        refuse_host_profile(r, ns, "properties", &s.properties)?;
    }
    Ok(())
}

/// Checks schedule `s` (checked with [`check_schedule`]) against the store and stores it, as
/// `caller` made it; a `new` one counts against its namespace's bound.
pub fn save_schedule(
    tx: &mut Txn,
    s: &Schedule,
    caller: &Caller,
    new: bool,
) -> Result<(), ServiceError> {
    use crate::model::schedule::MAX_PER_NAMESPACE;
    check_schedule_in_store(tx, s, caller.grants.instance_admin)?;
    refuse_trigger_loop(tx, s)?;
    if new {
        let count: usize = tx
            .get(Table::Meta, &schedule_count_key(&s.namespace))?
            .unwrap_or(0);
        if count >= MAX_PER_NAMESPACE {
            return Err(ServiceError::TooManySchedules {
                namespace: s.namespace.clone(),
                max: MAX_PER_NAMESPACE,
            });
        }
        tx.put(Table::Meta, &schedule_count_key(&s.namespace), &(count + 1))?;
    }
    tx.put(
        Table::Schedules,
        &keys::schedule(&s.namespace, &s.application, &s.name),
        s,
    )?;
    touch_schedules(tx, &s.namespace)?;
    Ok(())
}

/// Refuses schedule `s` if its program-status triggers would close a loop with the other
/// schedules of its namespace (its own program among them): each run's end would start the
/// next for ever.
fn refuse_trigger_loop(tx: &Txn, s: &Schedule) -> Result<(), ServiceError> {
    let has_status_trigger = s
        .trigger
        .walk()
        .iter()
        .any(|(_, t)| matches!(t, crate::model::schedule::Trigger::ProgramStatus { .. }));
    if !has_status_trigger {
        return Ok(());
    }
    let key = keys::schedule(&s.namespace, &s.application, &s.name);
    let others: Vec<Schedule> = tx
        .scan::<Schedule>(Table::Schedules, &format!("{}/", s.namespace))?
        .into_iter()
        .filter(|(k, _)| *k != key)
        .map(|(_, other)| other)
        .collect();
    match crate::rules::schedule::trigger_loop(s, &others) {
        None => Ok(()),
        Some(programs) if programs.len() == 2 => Err(ServiceError::invalid(
            "trigger",
            format!(
                "a program-status trigger may not watch {}, the program the schedule starts: each run's end would start the next for ever",
                programs[0]
            ),
        )),
        Some(programs) => Err(ServiceError::invalid(
            "trigger",
            format!(
                "schedules would trigger each other round a loop ({}): each run's end would start the next for ever",
                programs.join(" → ")
            ),
        )),
    }
}

/// Removes schedule `s` from the store, in a write: its record, its count, the fires it
/// has waiting and the parts of its `AND` that wait for the others. (Its fire records go after, in batches: [`forget_fires`].)
pub fn forget_schedule(tx: &mut Txn, s: &Schedule) -> Result<(), StoreError> {
    let key = keys::schedule(&s.namespace, &s.application, &s.name);
    tx.delete(Table::Schedules, &key);
    tx.delete(Table::Joins, &key);
    let count: usize = tx
        .get(Table::Meta, &schedule_count_key(&s.namespace))?
        .unwrap_or(0);
    tx.put(
        Table::Meta,
        &schedule_count_key(&s.namespace),
        &count.saturating_sub(1),
    )?;
    for (waiting, _) in tx.scan::<serde_json::Value>(Table::WaitingFires, &format!("{key}/"))? {
        tx.delete(Table::WaitingFires, &waiting);
    }
    touch_schedules(tx, &s.namespace)
}

/// Deletes the fire records of schedule `s` (already removed), in batches.
pub async fn forget_fires(store: &crate::store::Store, s: &Schedule) -> Result<(), StoreError> {
    let prefix = format!("{}/", keys::schedule(&s.namespace, &s.application, &s.name));
    let fires = store.keys_under(Table::Fires, &prefix).await?;
    store.delete_in_batches(Table::Fires, &fires).await
}
