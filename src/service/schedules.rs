//! Schedules of programs (CDAP's v3 schedule API): create, update, read, list, delete,
//! enable and disable, the next and previous fire times, and the record of each schedule's
//! fires. Every change is one write that checks what it depends on: the program exists, a
//! profile named in the properties exists, is enabled and may be chosen by the caller, and
//! the namespace holds no more than [`MAX_PER_NAMESPACE`] schedules. Firing is
//! [`super::scheduler`]'s.

use crate::model::access::{Act, Caller};
use crate::model::app::WORKFLOWS;
use crate::model::invalid::Invalid;
use crate::model::names;
use crate::model::namespace;
use crate::model::property::Level;
use crate::model::schedule::{
    self, CatchUp, DEFAULT_TIMEOUT_MILLIS, Fire, MAX_PER_NAMESPACE, Schedule, ScheduleBody,
    ScheduleStatus, Trigger,
};
use crate::rules::schedule::{self as rule, Cron};
use crate::runtime::clock;
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::{Read, Store, StoreError, Table, Txn, changes, keys};

/// The `Meta` key that counts the schedules of namespace `ns`.
fn count_key(ns: &str) -> String {
    format!("schedules/{ns}")
}

/// Marks that a schedule changed, for the scheduler.
fn touch(tx: &mut Txn) -> Result<(), StoreError> {
    let n: u64 = tx
        .get(Table::Meta, catalog::SCHEDULES_CHANGED)?
        .unwrap_or(0);
    tx.put(Table::Meta, catalog::SCHEDULES_CHANGED, &(n + 1))
}

/// Which schedule a request names.
#[derive(Debug, Clone)]
pub struct ScheduleId {
    pub namespace: String,
    pub app: String,
    pub name: String,
}

impl ScheduleId {
    fn check(&self) -> Result<(), ServiceError> {
        namespace::check_name(&self.namespace)?;
        names::check("app", &self.app)?;
        names::check("schedule", &self.name)?;
        Ok(())
    }

    fn key(&self) -> String {
        keys::schedule(&self.namespace, &self.app, &self.name)
    }

    fn path(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.app, self.name)
    }
}

/// Schedule `id`, or 404.
fn require(r: &impl Read, id: &ScheduleId) -> Result<Schedule, ServiceError> {
    r.get(Table::Schedules, &id.key())?
        .ok_or_else(|| ServiceError::ScheduleNotFound(id.path()))
}

/// Creates schedule `id` from `body` for `caller`: 409 if it exists.
pub async fn create(
    store: &Store,
    caller: &Caller,
    id: ScheduleId,
    body: ScheduleBody,
) -> Result<Schedule, ServiceError> {
    id.check()?;
    check_body_names(&id, &body)?;
    let program = body
        .program
        .clone()
        .ok_or_else(|| Invalid::new("program", "required: {programName, programType}"))?;
    let trigger = body
        .trigger
        .clone()
        .ok_or_else(|| Invalid::new("trigger", "required"))?;
    let now = clock::now_millis();
    let status = body.status.unwrap_or_default();
    let s = Schedule {
        namespace: id.namespace.clone(),
        application: id.app.clone(),
        name: id.name.clone(),
        description: body.description.clone().unwrap_or_default(),
        program,
        properties: body.properties.clone().unwrap_or_default(),
        trigger,
        constraints: body.constraints.clone().unwrap_or_default(),
        timeout_millis: body.timeout_millis.unwrap_or(DEFAULT_TIMEOUT_MILLIS),
        catch_up: body.catch_up.unwrap_or(CatchUp::None),
        status,
        last_update_time: now,
        enabled_at: (status == ScheduleStatus::Scheduled).then_some(now),
        updated_by: Some(caller.name.clone()),
    };
    check(&s, caller, now)?;
    let act = Act::new(caller, "schedule.create", Some(&id.namespace), &id.path());
    let instance_admin = caller.grants.instance_admin;
    store
        .write(move |tx| {
            if tx.get::<Schedule>(Table::Schedules, &id.key())?.is_some() {
                return Err(ServiceError::ScheduleExists(id.path()));
            }
            check_in_store(tx, &s, instance_admin)?;
            let count: usize = tx.get(Table::Meta, &count_key(&id.namespace))?.unwrap_or(0);
            if count >= MAX_PER_NAMESPACE {
                return Err(ServiceError::TooManySchedules {
                    namespace: id.namespace.clone(),
                    max: MAX_PER_NAMESPACE,
                });
            }
            tx.put(Table::Meta, &count_key(&id.namespace), &(count + 1))?;
            tx.put(Table::Schedules, &id.key(), &s)?;
            touch(tx)?;
            changes::record(tx, &act)?;
            Ok(s.clone())
        })
        .await
}

/// Updates schedule `id` with the fields `body` gives; the rest keep their values. Its
/// program cannot change (delete it and create another). Fires already waiting are judged
/// against the schedule as it is now.
pub async fn update(
    store: &Store,
    caller: &Caller,
    id: ScheduleId,
    body: ScheduleBody,
) -> Result<Schedule, ServiceError> {
    id.check()?;
    check_body_names(&id, &body)?;
    let act = Act::new(caller, "schedule.update", Some(&id.namespace), &id.path());
    let instance_admin = caller.grants.instance_admin;
    let caller = caller.clone();
    store
        .write(move |tx| {
            let old = require(tx, &id)?;
            if let Some(p) = &body.program
                && (p.program_name != old.program.program_name
                    || !p
                        .program_type
                        .eq_ignore_ascii_case(&old.program.program_type))
            {
                return Err(ServiceError::invalid(
                    "program",
                    "a schedule's program cannot change: delete the schedule and create a new one",
                ));
            }
            let now = clock::now_millis();
            let status = body.status.unwrap_or(old.status);
            let s = Schedule {
                description: body.description.clone().unwrap_or(old.description.clone()),
                properties: body.properties.clone().unwrap_or(old.properties.clone()),
                trigger: body.trigger.clone().unwrap_or(old.trigger.clone()),
                constraints: body.constraints.clone().unwrap_or(old.constraints.clone()),
                timeout_millis: body.timeout_millis.unwrap_or(old.timeout_millis),
                catch_up: body.catch_up.unwrap_or(old.catch_up),
                status,
                last_update_time: now,
                enabled_at: match (old.status, status) {
                    (ScheduleStatus::Suspended, ScheduleStatus::Scheduled) => Some(now),
                    (_, ScheduleStatus::Suspended) => None,
                    _ => old.enabled_at,
                },
                updated_by: Some(caller.name.clone()),
                ..old.clone()
            };
            check(&s, &caller, now)?;
            check_in_store(tx, &s, instance_admin)?;
            tx.put(Table::Schedules, &id.key(), &s)?;
            touch(tx)?;
            changes::record(tx, &act)?;
            Ok(s)
        })
        .await
}

/// Enables (`SCHEDULED`) or disables (`SUSPENDED`) schedule `id`; 409 if it already is. A
/// schedule enabled again fires for times after now, not for those it was suspended across.
/// Disabling drops the fires waiting for a constraint (runs already started go on).
pub async fn set_status(
    store: &Store,
    caller: &Caller,
    id: ScheduleId,
    status: ScheduleStatus,
) -> Result<Schedule, ServiceError> {
    id.check()?;
    let action = match status {
        ScheduleStatus::Scheduled => "schedule.enable",
        ScheduleStatus::Suspended => "schedule.disable",
    };
    let act = Act::new(caller, action, Some(&id.namespace), &id.path());
    let by = caller.name.clone();
    let instance_admin = caller.grants.instance_admin;
    store
        .write(move |tx| {
            let old = require(tx, &id)?;
            if old.status == status {
                return Err(ServiceError::ScheduleStatusUnchanged {
                    schedule: id.path(),
                    status,
                });
            }
            if status == ScheduleStatus::Scheduled {
                // The profile it names may have been disabled since it was written.
                check_in_store(tx, &old, instance_admin)?;
            }
            let now = clock::now_millis();
            let s = Schedule {
                status,
                enabled_at: (status == ScheduleStatus::Scheduled).then_some(now),
                updated_by: Some(by.clone()),
                ..old
            };
            tx.put(Table::Schedules, &id.key(), &s)?;
            touch(tx)?;
            changes::record(tx, &act)?;
            Ok(s)
        })
        .await
}

/// Schedule `id`.
pub async fn get(store: &Store, id: ScheduleId) -> Result<Schedule, ServiceError> {
    id.check()?;
    store.read(move |r| require(r, &id)).await
}

/// Which schedules a list shows.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this app's (else the namespace's).
    pub app: Option<String>,
    /// Only those starting this program.
    pub program: Option<String>,
    /// CDAP's `trigger-type`: `time`, `program-status`, `and`, `or`.
    pub trigger_type: Option<String>,
    pub status: Option<ScheduleStatus>,
}

/// The schedules of namespace `ns` that `filter` lets through, by app and name.
pub async fn list(
    store: &Store,
    ns: String,
    filter: Filter,
) -> Result<Vec<Schedule>, ServiceError> {
    namespace::check_name(&ns)?;
    if let Some(app) = &filter.app {
        names::check("app", app)?;
    }
    if let Some(t) = &filter.trigger_type
        && !["time", "program-status", "and", "or"].contains(&t.as_str())
    {
        return Err(ServiceError::invalid(
            "trigger-type",
            format!("'{t}' is not one of time, program-status, and, or"),
        ));
    }
    store
        .read(move |r| {
            catalog::require_namespace(r, &ns)?;
            let prefix = match &filter.app {
                Some(app) => {
                    catalog::require_app(r, &ns, app)?;
                    format!("{}/", keys::app(&ns, app))
                }
                None => keys::in_namespace(&ns),
            };
            Ok(r.scan::<Schedule>(Table::Schedules, &prefix)?
                .into_iter()
                .map(|(_, s)| s)
                .filter(|s| {
                    filter
                        .program
                        .as_ref()
                        .is_none_or(|p| *p == s.program.program_name)
                        && filter
                            .trigger_type
                            .as_ref()
                            .is_none_or(|t| t == s.trigger.category())
                        && filter.status.is_none_or(|st| st == s.status)
                })
                .collect())
        })
        .await
}

/// Deletes schedule `id` and the record of its fires. Runs it started go on.
pub async fn delete(
    store: &Store,
    caller: &Caller,
    id: ScheduleId,
) -> Result<Schedule, ServiceError> {
    id.check()?;
    let act = Act::new(caller, "schedule.delete", Some(&id.namespace), &id.path());
    let removed = store
        .write(move |tx| {
            let s = require(tx, &id)?;
            forget(tx, &s)?;
            changes::record(tx, &act)?;
            Ok::<_, ServiceError>(s)
        })
        .await?;
    forget_fires(store, &removed).await?;
    Ok(removed)
}

/// Removes schedule `s` from the store, in a write: its record, its count, and the fires it
/// has waiting. (Its fire records go after, in batches: [`forget_fires`].)
pub fn forget(tx: &mut Txn, s: &Schedule) -> Result<(), StoreError> {
    let key = keys::schedule(&s.namespace, &s.application, &s.name);
    tx.delete(Table::Schedules, &key);
    let count: usize = tx.get(Table::Meta, &count_key(&s.namespace))?.unwrap_or(0);
    tx.put(
        Table::Meta,
        &count_key(&s.namespace),
        &count.saturating_sub(1),
    )?;
    for (waiting, _) in tx.scan::<serde_json::Value>(Table::WaitingFires, &format!("{key}/"))? {
        tx.delete(Table::WaitingFires, &waiting);
    }
    touch(tx)
}

/// Deletes the fire records of schedule `s` (already removed), in batches.
pub async fn forget_fires(store: &Store, s: &Schedule) -> Result<(), StoreError> {
    let prefix = format!("{}/", keys::schedule(&s.namespace, &s.application, &s.name));
    let fires = store.keys_under(Table::Fires, &prefix).await?;
    store.delete_in_batches(Table::Fires, &fires).await
}

/// The fires of schedule `id`, newest first: at most `limit`, before fire `before` if given.
pub async fn fires(
    store: &Store,
    id: ScheduleId,
    before: Option<String>,
    limit: usize,
) -> Result<Vec<Fire>, ServiceError> {
    id.check()?;
    store
        .read(move |r| {
            require(r, &id)?;
            let prefix = format!("{}/", id.key());
            let before = before.as_ref().map(|b| keys::fire(&id.key(), b));
            let page = r.scan_back::<Fire>(
                Table::Fires,
                &prefix,
                before.as_deref(),
                limit,
                limit,
                |_, _| true,
            )?;
            Ok(page.entries.into_iter().map(|(_, f)| f).collect())
        })
        .await
}

/// One fire time of a schedule, as CDAP's `nextruntime` and `previousruntime` show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct RunTime {
    /// The schedule's name.
    pub id: String,
    /// Epoch ms.
    pub time: u64,
}

/// The next fire time of each enabled time schedule of program `ns/app/program` (the
/// soonest of its time triggers), soonest first.
pub async fn next_runtimes(
    store: &Store,
    ns: String,
    app: String,
    program: String,
) -> Result<Vec<RunTime>, ServiceError> {
    let schedules = program_schedules(store, &ns, &app, &program).await?;
    let now = clock::now_millis();
    let mut out: Vec<RunTime> = schedules
        .iter()
        .filter(|s| s.status == ScheduleStatus::Scheduled)
        .filter_map(|s| {
            let time = next_times(s, now, 1).into_iter().next()?;
            Some(RunTime {
                id: s.name.clone(),
                time,
            })
        })
        .collect();
    out.sort_by_key(|r| r.time);
    Ok(out)
}

/// The newest time each time schedule of program `ns/app/program` fired for.
pub async fn previous_runtimes(
    store: &Store,
    ns: String,
    app: String,
    program: String,
) -> Result<Vec<RunTime>, ServiceError> {
    namespace::check_name(&ns)?;
    names::check("app", &app)?;
    names::check("program", &program)?;
    store
        .read(move |r| {
            catalog::require_program(r, &ns, &app, WORKFLOWS, &program)?;
            let mut out = Vec::new();
            for (key, s) in
                r.scan::<Schedule>(Table::Schedules, &format!("{}/", keys::app(&ns, &app)))?
            {
                if s.program.program_name != program {
                    continue;
                }
                if let Some(time) = catalog::last_time_fire(r, &key)? {
                    out.push(RunTime {
                        id: s.name.clone(),
                        time,
                    });
                }
            }
            out.sort_by_key(|r| std::cmp::Reverse(r.time));
            Ok(out)
        })
        .await
}

async fn program_schedules(
    store: &Store,
    ns: &str,
    app: &str,
    program: &str,
) -> Result<Vec<Schedule>, ServiceError> {
    namespace::check_name(ns)?;
    names::check("app", app)?;
    names::check("program", program)?;
    let (ns, app, program) = (ns.to_string(), app.to_string(), program.to_string());
    store
        .read(move |r| {
            catalog::require_program(r, &ns, &app, WORKFLOWS, &program)?;
            Ok(
                r.scan::<Schedule>(Table::Schedules, &format!("{}/", keys::app(&ns, &app)))?
                    .into_iter()
                    .map(|(_, s)| s)
                    .filter(|s| s.program.program_name == program)
                    .collect(),
            )
        })
        .await
}

/// The next `count` times schedule `s` fires for by its cron expressions, after `now`.
pub fn next_times(s: &Schedule, now: u64, count: usize) -> Vec<u64> {
    let mut times: Vec<u64> = rule::time_parts(&s.trigger)
        .into_iter()
        .filter_map(|(e, z)| Cron::parse(e, z, now).ok())
        .flat_map(|c| c.next(now, count))
        .collect();
    times.sort_unstable();
    times.dedup();
    times.truncate(count);
    times
}

/// The checks of a schedule that need no store: shape and bounds, cron expressions and time
/// zones, and that a program-status trigger watches the caller's own namespace.
fn check(s: &Schedule, caller: &Caller, now: u64) -> Result<(), ServiceError> {
    schedule::check(s)?;
    rule::check_trigger(&s.trigger, now)?;
    let mapped = rule::mapping(&s.properties)?;
    // Copied arguments become the triggered run's runtime arguments: checked as those are.
    let targets: crate::model::property::Values = mapped
        .into_iter()
        .map(|(_, t)| (t, String::new()))
        .collect();
    crate::rules::resolve::check_overrides(Level::Runtime, &targets)?;
    rule::check_constraints(&s.constraints)?;
    for (_, t) in s.trigger.walk() {
        if let Trigger::ProgramStatus { program_id, .. } = t
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

/// The checks of a schedule against the store: its program exists; its properties are a
/// valid level (keys, overrides, a profile that exists and is enabled); a profile that runs
/// programs on the server's host only where the caller may choose one.
fn check_in_store(tx: &Txn, s: &Schedule, instance_admin: bool) -> Result<(), ServiceError> {
    let ns = &s.namespace;
    let namespace = catalog::require_namespace(tx, ns)?;
    catalog::require_program(tx, ns, &s.application, WORKFLOWS, &s.program.program_name)?;
    catalog::check_level(tx, ns, Level::Schedule, &s.properties).map_err(|e| match e {
        // The keys are checked as preferences are; here they are the schedule's properties.
        ServiceError::Invalid(i) if i.field == "preferences" => {
            ServiceError::invalid("properties", i.message)
        }
        other => other,
    })?;
    if !(instance_admin || namespace.allow_host_programs) {
        catalog::refuse_host_profile(tx, ns, "properties", &s.properties)?;
    }
    Ok(())
}

/// A body's `name`, `namespace` and `application` must be the path's, if given.
fn check_body_names(id: &ScheduleId, body: &ScheduleBody) -> Result<(), ServiceError> {
    for (field, given, path) in [
        ("name", &body.name, &id.name),
        ("namespace", &body.namespace, &id.namespace),
        ("application", &body.application, &id.app),
    ] {
        if let Some(g) = given
            && g != path
        {
            return Err(ServiceError::invalid(
                field,
                format!("'{g}' differs from the path's '{path}'"),
            ));
        }
    }
    Ok(())
}
