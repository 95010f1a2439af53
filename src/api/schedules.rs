//! Routes of schedules (CDAP's v3 schedule API) and of a program's next and previous fire
//! times.

use actix_web::web;
use serde::Deserialize;

use crate::api::body::Json;
use crate::api::contract::{Query, Reply, ok};
use crate::api::state::{AppPath, ProgramPath, State};
use crate::model::access::Caller;
use crate::model::names;
use crate::model::schedule::{Fire, Schedule, ScheduleBody, ScheduleStatus};
use crate::service::schedules::{self, Filter, RunTime, ScheduleId};

#[derive(Debug, Deserialize)]
pub struct SchedulePath {
    pub ns: String,
    pub app: String,
    pub name: String,
}

impl From<SchedulePath> for ScheduleId {
    fn from(p: SchedulePath) -> Self {
        ScheduleId {
            namespace: p.ns,
            app: p.app,
            name: p.name,
        }
    }
}

/// The query of a list of schedules (CDAP's names).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleQuery {
    /// Only schedules whose trigger is of this type: `time`, `program-status`, `and`, `or`.
    #[serde(default, rename = "trigger-type")]
    trigger_type: Option<String>,
    /// Only `SCHEDULED` or `SUSPENDED` ones.
    #[serde(default, rename = "schedule-status")]
    schedule_status: Option<ScheduleStatus>,
    /// At most this many, 1 to 1000 (default 1000), by app and name.
    #[serde(default)]
    limit: Option<usize>,
    /// The page after this schedule (`app/name`, the last of the page before).
    #[serde(default)]
    after: Option<String>,
}

impl ScheduleQuery {
    fn filter(self, app: Option<String>, program: Option<String>) -> Filter {
        Filter {
            app,
            program,
            trigger_type: self.trigger_type,
            status: self.schedule_status,
            limit: self.limit,
            after: self.after,
        }
    }
}

pub async fn list_namespace_schedules(
    state: State,
    ns: web::Path<String>,
    query: Query<ScheduleQuery>,
) -> Reply<Vec<Schedule>> {
    let filter = query.0.filter(None, None);
    ok(schedules::list(&state.store, ns.into_inner(), filter).await?)
}

pub async fn list_app_schedules(
    state: State,
    path: web::Path<AppPath>,
    query: Query<ScheduleQuery>,
) -> Reply<Vec<Schedule>> {
    let p = path.into_inner();
    let filter = query.0.filter(Some(p.app), None);
    ok(schedules::list(&state.store, p.ns, filter).await?)
}

pub async fn list_program_schedules(
    state: State,
    path: web::Path<ProgramPath>,
    query: Query<ScheduleQuery>,
) -> Reply<Vec<Schedule>> {
    let p = path.into_inner();
    names::check("program", &p.program).map_err(crate::service::error::ServiceError::from)?;
    let filter = query.0.filter(Some(p.app), Some(p.program));
    ok(schedules::list(&state.store, p.ns, filter).await?)
}

pub async fn create_schedule(
    state: State,
    caller: Caller,
    path: web::Path<SchedulePath>,
    body: Json<ScheduleBody>,
) -> Reply<Schedule> {
    let id = path.into_inner().into();
    ok(schedules::create(&state.store, &caller, id, body.0).await?)
}

pub async fn update_schedule(
    state: State,
    caller: Caller,
    path: web::Path<SchedulePath>,
    body: Json<ScheduleBody>,
) -> Reply<Schedule> {
    let id = path.into_inner().into();
    ok(schedules::update(&state.store, &caller, id, body.0).await?)
}

pub async fn get_schedule(state: State, path: web::Path<SchedulePath>) -> Reply<Schedule> {
    ok(schedules::get(&state.store, path.into_inner().into()).await?)
}

pub async fn delete_schedule(
    state: State,
    caller: Caller,
    path: web::Path<SchedulePath>,
) -> Reply<Schedule> {
    let id = path.into_inner().into();
    ok(schedules::delete(&state.store, &caller, id).await?)
}

pub async fn enable_schedule(
    state: State,
    caller: Caller,
    path: web::Path<SchedulePath>,
) -> Reply<Schedule> {
    let id = path.into_inner().into();
    ok(schedules::set_status(&state.store, &caller, id, ScheduleStatus::Scheduled).await?)
}

pub async fn disable_schedule(
    state: State,
    caller: Caller,
    path: web::Path<SchedulePath>,
) -> Reply<Schedule> {
    let id = path.into_inner().into();
    ok(schedules::set_status(&state.store, &caller, id, ScheduleStatus::Suspended).await?)
}

/// `{"status": "SCHEDULED" | "SUSPENDED"}`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct StatusView {
    status: ScheduleStatus,
}

pub async fn schedule_status(state: State, path: web::Path<SchedulePath>) -> Reply<StatusView> {
    let s = schedules::get(&state.store, path.into_inner().into()).await?;
    ok(StatusView { status: s.status })
}

/// The query of a schedule's fires.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FiresQuery {
    /// At most this many fires, 1 to 1000 (100 when left out).
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<usize>,
    /// Only fires older than this fire id: the last `id` of the page before.
    #[serde(default)]
    before: Option<String>,
}

pub async fn schedule_fires(
    state: State,
    path: web::Path<SchedulePath>,
    query: Query<FiresQuery>,
) -> Reply<Vec<Fire>> {
    let q = query.0;
    let limit = match q.limit {
        None => 100,
        Some(n @ 1..=1000) => n,
        Some(n) => {
            return Err(crate::service::error::ServiceError::invalid(
                "limit",
                format!("must be between 1 and 1000, not {n}"),
            )
            .into());
        }
    };
    if let Some(b) = &q.before
        && (b.len() > 64 || b.contains('/'))
    {
        return Err(crate::service::error::ServiceError::invalid("before", "not a fire id").into());
    }
    ok(schedules::fires(&state.store, path.into_inner().into(), q.before, limit).await?)
}

/// The query of a schedule's next fire times.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NextQuery {
    /// How many, 1 to 100 (5 when left out).
    #[schemars(range(min = 1, max = 100))]
    count: Option<usize>,
}

pub async fn schedule_next(
    state: State,
    path: web::Path<SchedulePath>,
    query: Query<NextQuery>,
) -> Reply<Vec<u64>> {
    let count = match query.0.count {
        None => 5,
        Some(n @ 1..=100) => n,
        Some(n) => {
            return Err(crate::service::error::ServiceError::invalid(
                "count",
                format!("must be between 1 and 100, not {n}"),
            )
            .into());
        }
    };
    let s = schedules::get(&state.store, path.into_inner().into()).await?;
    ok(schedules::next_times(
        &s,
        crate::store::clock::now_millis(),
        count,
    ))
}

pub async fn next_runtime(state: State, path: web::Path<ProgramPath>) -> Reply<Vec<RunTime>> {
    let p = path.into_inner();
    ok(schedules::next_runtimes(&state.store, p.ns, p.app, p.program).await?)
}

pub async fn previous_runtime(state: State, path: web::Path<ProgramPath>) -> Reply<Vec<RunTime>> {
    let p = path.into_inner();
    ok(schedules::previous_runtimes(&state.store, p.ns, p.app, p.program).await?)
}
