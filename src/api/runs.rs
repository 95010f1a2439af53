//! Routes of runs: start, list, get, stop, deprovision, extend, logs and events.

use std::time::Duration;

use actix_web::{HttpRequest, web};
use serde::{Deserialize, Serialize};

use crate::api::body::{Json, OrDefault};
use crate::api::contract::{Answer, Flag, Query, Reply, ok};
use crate::api::error::ApiError;
use crate::api::state::{ProgramPath, RunPath, ServiceLogsPath, State};
use crate::model::access::{Act, Caller, Role};
use crate::model::event::RunEvent;
use crate::model::property::Values;
use crate::model::run::RunKey;
use crate::model::view::{Logs, RunView};
use crate::rules::lifecycle::Event;
use crate::service::error::ServiceError;
use crate::service::history;
use crate::service::runs::{self, RunFilter};
use crate::service::starts;

/// Longest a request may wait for new events.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// Longest text of `wait` (`"30s"`, `"1m"`) accepted.
const MAX_WAIT_TEXT: usize = 64;

impl From<RunPath> for RunKey {
    fn from(p: RunPath) -> RunKey {
        RunKey {
            namespace: p.ns,
            app: p.app,
            program: p.program,
            run: p.run,
        }
    }
}

/// The answer to a start: the new run's id.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Started {
    pub run_id: String,
}

pub async fn start_run(
    state: State,
    caller: Caller,
    path: web::Path<ProgramPath>,
    args: OrDefault<Values>,
    req: HttpRequest,
) -> Reply<Started> {
    let p = path.into_inner();
    // The run's id, the act's target, is made by the start.
    let act = Act::new(&caller, "run.start", Some(&p.ns), "");
    // A retried request carries the key of the first: it starts nothing more.
    let once = match req.headers().get(starts::idempotent::HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| {
                    ServiceError::invalid(
                        starts::idempotent::HEADER,
                        "must be visible ASCII characters",
                    )
                })?
                .to_string(),
        ),
    };
    let mut args = args.0;
    let once = starts::idempotent::of_request(once, &mut args)?;
    let program = (p.ns, p.app, p.program);
    let run_id = starts::start(&state.runtime, act, program, args, once).await?;
    ok(Started { run_id })
}

/// A page of runs for `caller`: the list, and, when more runs follow, a `Link` to the next
/// page.
fn page(
    req: &HttpRequest,
    caller: &Caller,
    filter: &RunFilter,
    page: runs::RunPage,
) -> Reply<Vec<RunView>> {
    let runs = page.runs.into_iter().map(|r| seen_by(caller, r)).collect();
    let mut answer = Answer::new(runs);
    if let Some(next) = &page.next {
        let mut query = format!("before={next}");
        if let Some(limit) = filter.limit {
            query.push_str(&format!("&limit={limit}"));
        }
        if let Some(status) = &filter.status {
            query.push_str(&format!("&status={status}"));
        }
        if let Some(cluster) = &filter.cluster {
            query.push_str(&format!("&cluster={cluster}"));
        }
        answer = answer.header(
            actix_web::http::header::LINK,
            &format!("<{}?{query}>; rel=\"next\"", req.path()),
        );
    }
    Ok(answer)
}

/// Run `view` as `caller` sees it: which server owns a run (the name its resources are
/// tagged with) is for those who may act on the run, not for viewers.
pub fn seen_by(caller: &Caller, view: RunView) -> RunView {
    let acts = caller
        .grants
        .role_in(&view.namespace)
        .is_some_and(|r| r >= Role::Operator);
    if acts { view } else { view.owned_by(None) }
}

pub async fn list_runs(
    state: State,
    caller: Caller,
    path: web::Path<ProgramPath>,
    filter: Query<RunFilter>,
    req: HttpRequest,
) -> Reply<Vec<RunView>> {
    let p = path.into_inner();
    let filter = filter.0;
    let runs = runs::list_program(&state.runtime, p.ns, p.app, p.program, filter.clone()).await?;
    page(&req, &caller, &filter, runs)
}

pub async fn list_namespace_runs(
    state: State,
    caller: Caller,
    ns: web::Path<String>,
    filter: Query<RunFilter>,
    req: HttpRequest,
) -> Reply<Vec<RunView>> {
    let filter = filter.0;
    let runs = runs::list_namespace(&state.runtime, ns.into_inner(), filter.clone()).await?;
    page(&req, &caller, &filter, runs)
}

pub async fn get_run(state: State, caller: Caller, path: web::Path<RunPath>) -> Reply<RunView> {
    let view = runs::get(&state.runtime, path.into_inner().into()).await?;
    ok(seen_by(&caller, view))
}

/// The body of `POST .../stop`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopBody {
    /// Keep the cluster for the profile's keepalive after the run stops.
    #[serde(default)]
    keepalive: bool,
}

/// Sends command `event` to run `path` for `caller`, recorded as `action`; answers with the
/// run. (A run another server owns was sent there before: its rows are owner-bound.)
async fn command(
    state: &State,
    caller: &Caller,
    path: RunPath,
    event: Event,
    action: &str,
) -> Reply<RunView> {
    let key: RunKey = path.into();
    let act = Act::new(caller, action, Some(&key.namespace), &key.run);
    ok(runs::command(&state.runtime, key, event, act).await?)
}

pub async fn stop_run(
    state: State,
    caller: Caller,
    path: web::Path<RunPath>,
    body: OrDefault<StopBody>,
) -> Reply<RunView> {
    let event = Event::Stop {
        keepalive: body.0.keepalive,
    };
    command(&state, &caller, path.into_inner(), event, "run.stop").await
}

/// The query of `POST .../deprovision`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct DeprovisionQuery {
    /// Deprovision even a run whose program is still running (it is killed), or whose
    /// deprovisioning failed before.
    #[serde(default)]
    force: Flag,
}

pub async fn deprovision_run(
    state: State,
    caller: Caller,
    path: web::Path<RunPath>,
    query: Query<DeprovisionQuery>,
) -> Reply<RunView> {
    let (event, action) = if query.0.force.0 {
        (Event::ForceDeprovision, "run.deprovision.force")
    } else {
        (Event::Deprovision, "run.deprovision")
    };
    command(&state, &caller, path.into_inner(), event, action).await
}

/// The body of `POST .../extend`: `expireAt` (a time) or `by` (a duration), one of them.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(example = serde_json::json!({"by": "1h"}))]
pub struct ExtendBody {
    /// Keep the cluster until then (epoch seconds). A time before its deadline now is refused
    /// (409) unless `shorten` is true.
    #[serde(default)]
    expire_at: Option<u64>,
    /// Keep the cluster this much longer than its deadline now (`30m`, `2h`, at most ten
    /// years).
    #[serde(default)]
    #[schemars(length(max = 64))]
    by: Option<String>,
    /// With `expireAt`: it may be earlier than the deadline now.
    #[serde(default)]
    shorten: bool,
}

/// The event an extend's body asks for, or why the body is refused (naming its field).
fn extension(body: ExtendBody) -> Result<Event, ServiceError> {
    match (body.expire_at, body.by) {
        (Some(_), Some(_)) => Err(ServiceError::invalid(
            "by",
            "give expireAt (a time) or by (a duration), not both",
        )),
        (None, None) => Err(ServiceError::invalid(
            "expireAt",
            "give expireAt (epoch seconds) or by (a duration such as 1h)",
        )),
        (Some(expire_at), None) => Ok(Event::Extend {
            expire_at,
            shorten: body.shorten,
        }),
        (None, Some(by)) => {
            if body.shorten {
                return Err(ServiceError::invalid(
                    "shorten",
                    "goes with expireAt; by moves the deadline later",
                ));
            }
            if by.len() > 64 {
                return Err(ServiceError::invalid("by", "at most 64 characters"));
            }
            let d = ebb_spi::parse_duration(&by).map_err(|m| ServiceError::invalid("by", m))?;
            if d.as_secs() > crate::model::profile::MAX_SECONDS {
                return Err(ServiceError::invalid("by", "is more than ten years"));
            }
            if d.as_secs() == 0 {
                return Err(ServiceError::invalid("by", "must be at least one second"));
            }
            Ok(Event::ExtendBy {
                seconds: d.as_secs(),
            })
        }
    }
}

pub async fn extend_run(
    state: State,
    caller: Caller,
    path: web::Path<RunPath>,
    body: Json<ExtendBody>,
) -> Reply<RunView> {
    let event = extension(body.0)?;
    command(&state, &caller, path.into_inner(), event, "run.extend").await
}

/// The program's output: read where it is, on the run's owner or the server that launched
/// it when that is another server (a forwarded request is answered from here, whatever it
/// holds).
/// The query of `GET .../logs`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct LogsQuery {
    /// The attempt of the program (from 1) whose output to read; by default the one now.
    #[serde(default)]
    attempt: Option<u32>,
}

pub async fn run_logs(
    state: State,
    path: web::Path<RunPath>,
    query: Query<LogsQuery>,
    req: HttpRequest,
) -> Reply<Logs> {
    let key: RunKey = path.into_inner().into();
    if !req
        .headers()
        .contains_key(crate::api::forward::FORWARDED_BY)
        && let Some((server, url)) = state
            .runtime
            .output_elsewhere(&key)
            .await
            .map_err(|e| ApiError::from(crate::service::error::ServiceError::from(e)))?
    {
        let who = format!("server {server}, which holds the run's output,");
        return crate::api::forward::forward(&state, &req, &who, &url)
            .await
            .map(Answer::forwarded);
    }
    ok(history::logs(&state.runtime, key, query.0.attempt).await?)
}

/// The query of `GET .../services/{service}/logs`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct ServiceLogsQuery {
    /// The node whose logs of the service to read (`worker-1`).
    #[schemars(length(min = 1, max = 63))]
    node: String,
}

/// The end of each log a service's template names, read from the node it runs on (the run's
/// owner answers: a `local` node's files are on its host).
pub async fn service_logs(
    state: State,
    path: web::Path<ServiceLogsPath>,
    query: Query<ServiceLogsQuery>,
) -> Reply<crate::model::view::ServiceLogs> {
    let p = path.into_inner();
    let key: RunKey = RunPath {
        ns: p.ns,
        app: p.app,
        program: p.program,
        run: p.run,
    }
    .into();
    ok(history::service_logs(&state.runtime, key, query.0.node, p.service).await?)
}

/// The query of `GET .../events`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct EventsQuery {
    /// Only events after this sequence number.
    #[serde(default)]
    after: u64,
    /// Wait this long (at most 60s: `"30s"`) for an event when none is there yet.
    #[serde(default)]
    #[schemars(length(max = MAX_WAIT_TEXT))]
    wait: Option<String>,
}

pub async fn run_events(
    state: State,
    path: web::Path<RunPath>,
    query: Query<EventsQuery>,
) -> Reply<Vec<RunEvent>> {
    let EventsQuery { after, wait } = query.0;
    let wait = match wait {
        None => None,
        Some(v) if v.len() > MAX_WAIT_TEXT => {
            return Err(ApiError::Query(format!(
                "'wait' must be at most {MAX_WAIT_TEXT} characters, got {}",
                v.len()
            )));
        }
        Some(v) => {
            let d =
                ebb_spi::parse_duration(&v).map_err(|m| ApiError::Query(format!("'wait' {m}")))?;
            if d > MAX_WAIT {
                return Err(ApiError::Query(format!(
                    "'wait' must be at most {}s, got '{v}'",
                    MAX_WAIT.as_secs()
                )));
            }
            Some(d)
        }
    };
    ok(history::history(&state.runtime, path.into_inner().into(), after, wait).await?)
}
