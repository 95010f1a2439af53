//! Schedules of programs (CDAP's v3 schedule API): create, update, read, list, delete,
//! enable and disable, the next and previous fire times, and the record of each schedule's
//! fires. Every change is one write that checks what it depends on (the catalog's
//! `check_schedule` and `save_schedule`, which app deploys share): the program exists, a
//! profile named in the properties exists, is enabled and may be chosen by the caller, and
//! the namespace holds no more than `MAX_PER_NAMESPACE` schedules. Firing is the
//! scheduler's (`starts::scheduler`).

use crate::model::access::{Act, Caller};
use crate::model::app::WORKFLOWS;
use crate::model::names;
use crate::model::namespace;
use crate::model::schedule::{self, Fire, Schedule, ScheduleBody, ScheduleStatus};
use crate::rules::schedule::{self as rule, Cron};
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::clock;
use crate::store::{Read, Store, Table, changes, keys};

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
    let now = clock::now_millis();
    let names = (id.namespace.as_str(), id.app.as_str(), id.name.as_str());
    let s = schedule::merge(names, &body, None, &caller.name, now)?;
    catalog::check_schedule(&s, caller, now)?;
    let act = Act::new(caller, "schedule.create", Some(&id.namespace), &id.path());
    let caller = caller.clone();
    store
        .write(move |tx| {
            if tx.get::<Schedule>(Table::Schedules, &id.key())?.is_some() {
                return Err(ServiceError::ScheduleExists(id.path()));
            }
            catalog::save_schedule(tx, &s, &caller, true)?;
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
    let act = Act::new(caller, "schedule.update", Some(&id.namespace), &id.path());
    let caller = caller.clone();
    store
        .write(move |tx| {
            let old = require(tx, &id)?;
            let now = clock::now_millis();
            let names = (id.namespace.as_str(), id.app.as_str(), id.name.as_str());
            let s = schedule::merge(names, &body, Some(&old), &caller.name, now)?;
            catalog::check_schedule(&s, &caller, now)?;
            catalog::save_schedule(tx, &s, &caller, false)?;
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
                catalog::check_schedule_in_store(tx, &old, instance_admin)?;
            }
            let now = clock::now_millis();
            let s = Schedule {
                status,
                enabled_at: (status == ScheduleStatus::Scheduled).then_some(now),
                updated_by: Some(by.clone()),
                ..old
            };
            tx.put(Table::Schedules, &id.key(), &s)?;
            catalog::touch_schedules(tx, &id.namespace)?;
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
    /// At most this many (default and most: [`PAGE`]).
    pub limit: Option<usize>,
    /// Only those after this one (`app/name`, the last of the page before).
    pub after: Option<String>,
}

use crate::model::schedule::LIST_PAGE as PAGE;

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
    let limit = match filter.limit {
        None => PAGE,
        Some(n) if (1..=PAGE).contains(&n) => n,
        Some(_) => {
            return Err(ServiceError::invalid(
                "limit",
                format!("must be between 1 and {PAGE}"),
            ));
        }
    };
    if let Some(after) = &filter.after {
        let parts: Vec<&str> = after.split('/').collect();
        let [app, name] = parts.as_slice() else {
            return Err(ServiceError::invalid(
                "after",
                "must be a schedule's app/name, the last of the page before",
            ));
        };
        names::check("after", app)?;
        names::check("after", name)?;
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
            // Keys sort by app and name; the page begins just after the one given.
            let from = filter
                .after
                .as_ref()
                .map(|after| format!("{}\u{0}", keys::in_namespace(&ns) + after))
                .unwrap_or_default();
            Ok(r.scan_from::<Schedule>(Table::Schedules, &prefix, &from)?
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
                .take(limit)
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
            catalog::forget_schedule(tx, &s)?;
            changes::record(tx, &act)?;
            Ok::<_, ServiceError>(s)
        })
        .await?;
    catalog::forget_fires(store, &removed).await?;
    Ok(removed)
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
