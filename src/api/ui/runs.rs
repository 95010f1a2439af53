//! Runs: the list (filtered, updating live) and a run's page (status, resolved properties,
//! nodes, the events as they happen, the program's output, the operations as a timeline, and
//! the commands an operator may send).

use std::time::Duration;

use actix_web::http::{Method, StatusCode};
use actix_web::{HttpRequest, web};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{
    Answer, Ctx, UiError, badge, deadline, facts, fragment, frame, need, notice, refused, run_href,
    span, time, values,
};
use crate::api::error::ApiError;
use crate::api::state::{RunPath, State};
use crate::model::access::Act;
use crate::model::event::{EventKind, RunEvent};
use crate::model::run::{ClusterStatus, ProgramStatus, RunKey};
use crate::model::view::RunView;
use crate::rules::lifecycle::Event;
use crate::service::error::ServiceError;
use crate::service::history;
use crate::service::runs::{self, RunFilter};

/// Runs the list shows.
const LIST_LIMIT: usize = 50;
/// Most namespaces the list of every namespace's runs reads.
const LIST_NAMESPACES: usize = 20;
/// Bytes of each output stream the page shows (the end of it).
const LOG_TAIL: u64 = 64 * 1024;

/// The filters of the run list, as the form sends them (empty means any).
#[derive(Debug, Default, Clone, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    app: String,
    #[serde(default)]
    program: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    cluster: String,
    /// Older runs: those before this run id (one namespace's list only).
    #[serde(default)]
    before: String,
}

impl ListQuery {
    fn query_string(&self) -> String {
        let pairs = [
            ("namespace", &self.namespace),
            ("app", &self.app),
            ("program", &self.program),
            ("status", &self.status),
            ("cluster", &self.cluster),
            ("before", &self.before),
        ];
        let mut out = Vec::new();
        for (k, v) in pairs {
            if !v.is_empty() {
                out.push(format!("{k}={}", super::layout::encode(v)));
            }
        }
        out.join("&")
    }
}

fn some(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

const PROGRAM_STATUSES: &[&str] = &[
    "PENDING",
    "STARTING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "KILLED",
    "REJECTED",
];
const CLUSTER_STATUSES: &[&str] = &[
    "PROVISIONING",
    "PROVISIONED",
    "WAITING",
    "DEPROVISIONING",
    "DEPROVISIONED",
    "ORPHANED",
];

/// What the list shows: the runs the filters pick, newest first; a note when not every
/// namespace was read; and, for one namespace's list, the run id older runs start before.
struct Found {
    runs: Vec<RunView>,
    note: Option<String>,
    next: Option<String>,
}

/// The runs the filters pick.
async fn find(state: &State, ctx: &Ctx, q: &ListQuery) -> Result<Found, UiError> {
    let namespaces: Vec<String> = match some(&q.namespace) {
        Some(ns) => {
            if !ctx.namespaces.contains(&ns) {
                return Err(ApiError::from(ServiceError::NamespaceNotFound(ns)).into());
            }
            vec![ns]
        }
        None => ctx.namespaces.clone(),
    };
    let note = (namespaces.len() > LIST_NAMESPACES).then(|| {
        format!(
            "Showing the first {LIST_NAMESPACES} of {} namespaces: pick one to see its runs.",
            namespaces.len()
        )
    });
    // Paging goes through one namespace's runs (several namespaces' pages do not line up).
    let one = namespaces.len() == 1;
    let filter = RunFilter {
        status: some(&q.status),
        cluster: some(&q.cluster),
        limit: Some(LIST_LIMIT),
        before: some(&q.before).filter(|_| one),
    };
    let (app, program) = (some(&q.app), some(&q.program));
    let mut found = Vec::new();
    let mut next = None;
    for ns in namespaces.into_iter().take(LIST_NAMESPACES) {
        let page = match (&app, &program) {
            (Some(app), Some(program)) => {
                match runs::list_program(
                    &state.runtime,
                    ns,
                    app.clone(),
                    program.clone(),
                    filter.clone(),
                )
                .await
                {
                    Ok(page) => page,
                    // Another namespace has no such program: it has none of its runs.
                    Err(
                        ServiceError::AppNotFound { .. } | ServiceError::ProgramNotFound { .. },
                    ) if q.namespace.is_empty() => {
                        continue;
                    }
                    Err(e) => return Err(ApiError::from(e).into()),
                }
            }
            _ => need(runs::list_namespace(&state.runtime, ns, filter.clone()).await)?,
        };
        if one {
            next = page.next.clone();
        }
        found.extend(page.runs.into_iter().filter(|r| {
            app.as_ref().is_none_or(|a| *a == r.app)
                && program.as_ref().is_none_or(|p| *p == r.program)
        }));
    }
    found.sort_by(|a, b| (b.starting, &b.runid).cmp(&(a.starting, &a.runid)));
    found.truncate(LIST_LIMIT);
    Ok(Found {
        runs: found,
        note,
        next,
    })
}

fn table(runs: &[RunView]) -> Markup {
    html! {
        @if runs.is_empty() {
            p.muted { "No runs match." }
        } @else {
            div.scroll {
                table.wide {
                    caption.muted { "Newest first; updates by itself." }
                    thead { tr {
                        th scope="col" { "Run" } th scope="col" { "Program" } th scope="col" { "Status" }
                        th scope="col" { "Cluster" } th scope="col" { "Profile" } th scope="col" { "Started" }
                        th scope="col" { "Ends" }
                    } }
                    tbody {
                        @for r in runs {
                            @let key = key_of(r);
                            tr data-run=(r.runid) {
                                td data-label="Run" { a href=(run_href(&key)) { code { (short(&r.runid)) } } }
                                td data-label="Program" { (r.namespace) " / " (r.app) " / " (r.program) }
                                td data-label="Status" { (badge(&r.status.to_string())) }
                                td data-label="Cluster" {
                                    @if let Some(c) = r.cluster.status { (badge(&c.to_string())) } @else { "–" }
                                }
                                td data-label="Profile" { (r.profile) }
                                td data-label="Started" { (time(r.starting)) }
                                td data-label="Ends" {
                                    @if let Some(at) = r.cluster.expires_at.filter(|_| r.cluster.status == Some(ClusterStatus::Waiting)) {
                                        "kept until " (deadline(at))
                                    } @else if let Some(end) = r.end { (time(end)) } @else { "–" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn short(id: &str) -> &str {
    id.get(..13).unwrap_or(id)
}

fn key_of(r: &RunView) -> RunKey {
    RunKey {
        namespace: r.namespace.clone(),
        app: r.app.clone(),
        program: r.program.clone(),
        run: r.runid.clone(),
    }
}

fn select(name: &str, label: &str, options: &[&str], chosen: &str) -> Markup {
    html! {
        div.field {
            label for=(name) { (label) }
            select #(name) name=(name) {
                option value="" { "Any" }
                @for o in options {
                    option value=(o) selected[*o == chosen] { (o) }
                }
            }
        }
    }
}

/// `GET /ui/runs`.
pub async fn list(state: State, ctx: Ctx, q: web::Query<ListQuery>) -> Answer {
    let q = q.into_inner();
    let Found {
        runs: found,
        note,
        next,
    } = find(&state, &ctx, &q).await?;
    let namespaces: Vec<&str> = ctx.namespaces.iter().map(String::as_str).collect();
    let older = next.map(|before| {
        let q = ListQuery {
            before,
            ..q.clone()
        };
        format!("/ui/runs?{}", q.query_string())
    });
    let body = html! {
        h1 { "Runs" }
        form.filters method="get" action="/ui/runs" role="search" aria-label="Filter runs" {
            (select("namespace", "Namespace", &namespaces, &q.namespace))
            div.field { label for="app" { "App" } input #app type="text" name="app" value=(q.app) maxlength="128"; }
            div.field { label for="program" { "Program" } input #program type="text" name="program" value=(q.program) maxlength="128"; }
            (select("status", "Program status", PROGRAM_STATUSES, &q.status))
            (select("cluster", "Cluster status", CLUSTER_STATUSES, &q.cluster))
            button type="submit" { "Filter" }
        }
        @if let Some(note) = note { p.notice.warn { (note) } }
        @if q.before.is_empty() {
            div #runs hx-get=(format!("/ui/runs/rows?{}", q.query_string())) hx-trigger="every 2s" hx-swap="innerHTML" {
                (table(&found))
            }
        } @else {
            p { a href=(format!("/ui/runs?{}", ListQuery { before: String::new(), ..q.clone() }.query_string())) { "← Newest runs" } }
            div #runs { (table(&found)) }
        }
        @if let Some(older) = older {
            p { a href=(older) rel="next" { "Older runs →" } }
        } @else if ctx.namespaces.len() > 1 && q.namespace.is_empty() && found.len() == LIST_LIMIT {
            p.muted { "Pick a namespace to page through its older runs." }
        }
    };
    Ok(frame(&ctx, "Runs", body))
}

/// `GET /ui/runs/rows`: the list's table, for its live updates.
pub async fn rows(state: State, ctx: Ctx, q: web::Query<ListQuery>) -> Answer {
    Ok(fragment(table(&find(&state, &ctx, &q).await?.runs)))
}

pub(super) fn live(run: &RunView) -> bool {
    run.status != ProgramStatus::Rejected
        && !matches!(
            run.cluster.status,
            Some(ClusterStatus::Deprovisioned | ClusterStatus::Orphaned)
        )
}

/// The part of a run's page that changes with its status: badges, facts, commands, nodes.
fn status_panel(ctx: &Ctx, run: &RunView) -> Markup {
    let key = key_of(run);
    let href = run_href(&key);
    let ns = Some(run.namespace.as_str());
    let may = |tail: &str| {
        let path = format!("/ns/{{ns}}/apps/{{app}}/{{program}}/runs/{{run}}{tail}");
        ctx.may(Method::POST, &path, ns)
    };
    let cluster = run.cluster.status;
    let ended = run.status.is_end();
    html! {
        div.statusline {
            "Program " (badge(&run.status.to_string()))
            @if let Some(c) = cluster { " · cluster " (badge(&c.to_string())) }
            @if run.stopping { " · " span.badge.wait { "STOPPING" } }
        }
        @if let Some(f) = &run.failure {
            p.notice.bad role="alert" { strong { "Failed (" (f.kind) "): " } (f.message) }
        }
        (facts(&[
            ("Profile", html! { (run.profile) }),
            ("Queued", time(run.starting)),
            ("Started", run.start.map_or(html! { "–" }, time)),
            ("Ended", run.end.map_or(html! { "–" }, time)),
            ("Cluster kept until", match (cluster, run.cluster.expires_at) {
                (Some(ClusterStatus::Waiting), Some(at)) => deadline(at),
                _ => html! { "–" },
            }),
            ("Exit", run.exit.map_or(html! { "–" }, |e| html! { (e.to_string()) })),
            // Which server owns it is for those who may act on it (the API's rule).
            ("Owner", html! { (if may("/stop") { run.owner.as_deref().unwrap_or("–") } else { "–" }) }),
        ]))
        @if may("/stop") {
            div.actions role="group" aria-label="Commands" {
                @if !ended && !run.stopping {
                    button hx-target="#notice" hx-post=(format!("{href}/stop")) hx-confirm="Stop this run? Its cluster is deleted once the program ends." { "Stop" }
                    button hx-target="#notice" hx-post=(format!("{href}/stop")) hx-vals=r#"{"keepalive":"true"}"#
                        hx-confirm="Stop this run and keep its cluster for the profile's keepalive?" { "Stop, keep cluster" }
                }
                @if cluster == Some(ClusterStatus::Waiting) {
                    form hx-target="#notice" hx-post=(format!("{href}/extend")) aria-label="Extend the cluster's life" {
                        div.field {
                            label for="extend-at" { "Keep until (your time)" }
                            input #extend-at type="datetime-local" name="at";
                        }
                        input type="hidden" name="tzOffset" value="0";
                        button type="submit" { "Extend" }
                        button type="submit" name="by" value="1h" { "+1h" }
                    }
                    button hx-target="#notice" hx-post=(format!("{href}/deprovision")) hx-confirm="Delete this cluster now?" { "Deprovision now" }
                }
                @if matches!(cluster, Some(ClusterStatus::Deprovisioning | ClusterStatus::Orphaned)) {
                    div {
                        p.notice.warn {
                            "A forced deprovision records the cluster DEPROVISIONED without waiting for its resources to be deleted. "
                            "Whatever is still out there (instances, disks) is listed in the events, is left to the janitor, and may keep costing money until it is gone."
                        }
                        button.danger hx-target="#notice" hx-post=(format!("{href}/deprovision?force=true"))
                            hx-confirm="Force the deprovision? Resources that are not deleted yet are left behind." { "Force deprovision" }
                    }
                }
                @if matches!(cluster, Some(ClusterStatus::Provisioned | ClusterStatus::Waiting)) {
                    form hx-target="#notice" hx-post=(format!("{href}/cluster")) aria-label="Cluster operation" {
                        div.field {
                            label for="op" { "Cluster operation" }
                            select #op name="operation" {
                                @for (op, label) in CLUSTER_OPERATIONS {
                                    option value=(op) { (label) }
                                }
                            }
                        }
                        div.field {
                            label for="op-nodes" { "Nodes (expand, shrink)" }
                            input #op-nodes type="number" name="nodes" min="1" max="1000" value="1";
                        }
                        div.field {
                            label for="op-services" { "Services (start, stop, restart; comma-separated, empty: all)" }
                            input #op-services type="text" name="services" maxlength="2000" placeholder="zookeeper";
                        }
                        div.field {
                            label for="op-on" { "On nodes (start, stop, restart, replace; comma-separated, empty: all)" }
                            input #op-on type="text" name="on" maxlength="2000" placeholder="worker-1";
                        }
                        div.field {
                            label for="op-config" { "Config (configure; JSON)" }
                            textarea #op-config name="config" rows="1" placeholder="{\"zookeeper\": {\"tickTime\": 2000}}" {}
                        }
                        button type="submit" hx-confirm="Run this operation on the cluster?" { "Run" }
                    }
                }
            }
        }
        h2 { "Nodes" }
        @if run.cluster.nodes.is_empty() {
            p.muted { "No nodes (yet)." }
        } @else {
            div.scroll {
                table.wide {
                    thead { tr {
                        th scope="col" { "Node" } th scope="col" { "Status" } th scope="col" { "Services" }
                        th scope="col" { "Address" } th scope="col" { "Id" } th scope="col" { "Created" } th scope="col" { "Deleted" }
                    } }
                    tbody {
                        @for n in &run.cluster.nodes {
                            tr {
                                td data-label="Node" { (n.name) }
                                td data-label="Status" { (badge(&serde_json::to_value(n.status).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default())) }
                                td data-label="Services" {
                                    @if n.services.is_empty() { "–" }
                                    @for (service, state) in &n.services {
                                        span.service { (service) " " (service_badge(*state)) } " "
                                    }
                                }
                                td data-label="Address" { code { (n.ip_address.as_deref().unwrap_or("–")) } }
                                td data-label="Id" { code { (n.id.as_deref().unwrap_or("–")) } }
                                td data-label="Created" { (n.create_time.map_or(html! { "–" }, time)) }
                                td data-label="Deleted" { (n.delete_time.map_or(html! { "–" }, time)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A service's state on a node, coloured as a status.
fn service_badge(state: crate::model::service::ServiceState) -> Markup {
    use crate::model::service::ServiceState;
    let class = match state {
        ServiceState::Up => "ok",
        ServiceState::Failed | ServiceState::Down => "bad",
        ServiceState::Unknown | ServiceState::Outdated => "wait",
    };
    html! { span.badge.(class) { (state) } }
}

pub(super) fn event_item(e: &RunEvent) -> Markup {
    let kind = match e.kind {
        EventKind::Status => "status",
        EventKind::Task => "task",
        EventKind::Retry => "retry",
        EventKind::Error => "error",
        EventKind::Program => "program",
        EventKind::Service => "service",
    };
    html! {
        li id=(format!("ev-{}", e.seq)) class=(kind) {
            (time(e.time as u64))
            @if let Some(node) = &e.node { strong { (node) } ": " }
            (e.message)
            @if let Some(actor) = &e.actor { span.muted { " (by " (actor) ")" } }
        }
    }
}

/// `GET` a run's page.
pub async fn page_of(state: &State, ctx: &Ctx, key: RunKey) -> Answer {
    let run = need(runs::get(&state.runtime, key.clone()).await)?;
    let href = run_href(&key);
    let is_live = live(&run);
    let body = html! {
        p.muted {
            a href=(format!("/ui/runs?namespace={}", run.namespace)) { (run.namespace) }
            " / " a href=(format!("/ui/ns/{}/apps/{}/{}", run.namespace, run.app, run.program)) { (run.app) " / " (run.program) }
        }
        h1 { "Run " code { (run.runid) } }
        div #live hx-ext="sse" sse-connect=(format!("{href}/events")) sse-close="end" {
            div #status hx-get=(format!("{href}/status")) hx-trigger="sse:status, ebb-run-changed from:body" hx-swap="innerHTML" {
                (status_panel(ctx, &run))
            }
            div.split {
                section aria-labelledby="events-h" {
                    h2 #events-h { "Events" }
                    ul #events.events sse-swap="events" hx-swap="beforeend" aria-live="polite" {}
                }
                section aria-labelledby="output-h" {
                    h2 #output-h { "Output" }
                    div #output hx-get=(format!("{href}/logs")) hx-trigger=(if is_live { "load, every 3s" } else { "load" }) hx-swap="innerHTML" {
                        p.muted { "Loading…" }
                    }
                }
            }
            section aria-labelledby="ops-h" {
                h2 #ops-h { "Operations" }
                div #operations hx-get=(format!("{href}/operations")) hx-trigger="load, sse:status, ebb-run-changed from:body" hx-swap="innerHTML" {
                    p.muted { "Loading…" }
                }
            }
        }
        section aria-labelledby="props-h" {
            h2 #props-h { "Resolved properties" }
            @if run.profile_properties.is_empty() {
                p.muted { "None." }
            } @else {
                div.scroll { table {
                    caption.muted { "Each value with the level of the preference hierarchy that set it." }
                    thead { tr { th scope="col" { "Property" } th scope="col" { "Value" } th scope="col" { "Set by" } } }
                    tbody {
                        @for p in &run.profile_properties {
                            tr { td { code { (p.name) } } td { code { (p.value) } } td { (super::layout::origin(p.origin)) } }
                        }
                    }
                } }
            }
            h2 { "Runtime arguments" }
            (values(&run.properties))
        }
    };
    Ok(frame(ctx, &format!("Run {}", short(&run.runid)), body))
}

pub async fn page(state: State, ctx: Ctx, path: web::Path<RunPath>) -> Answer {
    page_of(&state, &ctx, path.into_inner().into()).await
}

/// `GET .../status`: the status panel, for its live updates.
pub async fn status(state: State, ctx: Ctx, path: web::Path<RunPath>) -> Answer {
    let run = need(runs::get(&state.runtime, path.into_inner().into()).await)?;
    Ok(fragment(status_panel(&ctx, &run)))
}

/// `GET .../logs`: the end of the program's output.
pub async fn logs(state: State, path: web::Path<RunPath>) -> Answer {
    let logs = need(history::logs_tail(&state.runtime, path.into_inner().into(), LOG_TAIL).await)?;
    Ok(fragment(html! {
        h3 { "stdout" }
        pre.log tabindex="0" aria-label="Standard output" { (logs.stdout) }
        @if !logs.stderr.is_empty() {
            h3 { "stderr" }
            pre.log tabindex="0" aria-label="Standard error" { (logs.stderr) }
        }
    }))
}

/// `GET .../operations`: the cluster's operations, each a timeline per node.
pub async fn operations(state: State, path: web::Path<RunPath>) -> Answer {
    let ops = need(history::operations(&state.runtime, path.into_inner().into()).await)?;
    Ok(fragment(super::timeline::operations(&ops)))
}

/// The body of a command's form.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandForm {
    #[serde(default)]
    keepalive: Option<String>,
    /// Extend: the new deadline, as a `datetime-local` input gives it (the browser's time).
    #[serde(default)]
    at: Option<String>,
    /// Extend: minutes the browser's zone is behind UTC (`Date.getTimezoneOffset`).
    #[serde(default)]
    tz_offset: Option<i64>,
    /// Extend by this much from the present deadline (`1h`).
    #[serde(default)]
    by: Option<String>,
    /// A cluster operation.
    #[serde(default)]
    operation: Option<String>,
    #[serde(default)]
    nodes: Option<u32>,
    /// Starting, stopping or restarting services: which, comma-separated.
    #[serde(default)]
    services: Option<String>,
    /// Starting, stopping or restarting services, replacing nodes: on which nodes,
    /// comma-separated.
    #[serde(default)]
    on: Option<String>,
    /// `configure`: the new config, a JSON object.
    #[serde(default)]
    config: Option<String>,
}

/// Sends `event` to run `key` as `caller`'s `action`; when another server owns the run, the
/// API call `api_body` goes to it with the session's token. Answers a notice, and has the
/// page update its status.
async fn command(
    state: &State,
    ctx: &Ctx,
    req: &HttpRequest,
    key: RunKey,
    what: Command,
) -> Answer {
    let act = Act::new(&ctx.caller, what.action, Some(&key.namespace), &key.run);
    let done = match &what.kind {
        Kind::Event(event) => runs::command(&state.runtime, key.clone(), event.clone(), act)
            .await
            .map(drop),
        Kind::Cluster(request) => {
            runs::cluster_operation(&state.runtime, key.clone(), request.clone(), act)
                .await
                .map(drop)
        }
    };
    // (A run another server owns was sent there before: these rows are owner-bound.)
    if let Err(e) = done {
        return refused(req, e);
    }
    let (status, message) = (StatusCode::OK, what.done.to_string());
    let mut answer = notice(req, status, &message);
    if status.is_success() {
        // The status panel follows at once, without waiting for the event stream.
        answer.headers_mut().insert(
            actix_web::http::header::HeaderName::from_static("hx-trigger"),
            actix_web::http::header::HeaderValue::from_static("ebb-run-changed"),
        );
    }
    Ok(answer)
}

/// What a command does: the event or operation, the action recorded, and what the notice
/// says when it is done.
struct Command {
    kind: Kind,
    action: &'static str,
    done: String,
}

enum Kind {
    Event(Event),
    Cluster(crate::rules::resize::ClusterRequest),
}

fn flag(v: &Option<String>) -> bool {
    v.as_deref().is_some_and(|v| v == "true" || v == "on")
}

pub async fn stop(
    state: State,
    ctx: Ctx,
    path: web::Path<RunPath>,
    form: web::Form<CommandForm>,
    req: HttpRequest,
) -> Answer {
    let keepalive = flag(&form.keepalive);
    let what = Command {
        kind: Kind::Event(Event::Stop { keepalive }),
        action: "run.stop",
        done: if keepalive {
            "Stop requested; the cluster is kept for the profile's keepalive.".into()
        } else {
            "Stop requested.".into()
        },
    };
    command(&state, &ctx, &req, path.into_inner().into(), what).await
}

pub async fn deprovision(
    state: State,
    ctx: Ctx,
    path: web::Path<RunPath>,
    req: HttpRequest,
) -> Answer {
    let force = crate::api::contract::flag(&req, "force")?;
    let what = if force {
        Command {
            kind: Kind::Event(Event::ForceDeprovision),
            action: "run.deprovision.force",
            done: "The cluster is recorded deprovisioned; the events list what may be left behind."
                .into(),
        }
    } else {
        Command {
            kind: Kind::Event(Event::Deprovision),
            action: "run.deprovision",
            done: "Deprovisioning the cluster now.".into(),
        }
    };
    command(&state, &ctx, &req, path.into_inner().into(), what).await
}

/// The epoch second a `datetime-local` value names, in a zone `offset` minutes behind UTC.
fn local_time(value: &str, offset: i64) -> Result<u64, String> {
    let value = value.trim();
    if value.len() > 32 {
        return Err("is not a date and time".into());
    }
    let full = if value.len() == 16 {
        format!("{value}:00")
    } else {
        value.to_string()
    };
    let at = humantime::parse_rfc3339_weak(&full.replace('T', " "))
        .map_err(|_| format!("'{value}' is not a date and time"))?;
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("'{value}' is before 1970"))?
        .as_secs() as i64;
    if !(-24 * 60..=24 * 60).contains(&offset) {
        return Err(format!("the zone offset {offset} minutes is not a zone"));
    }
    u64::try_from(secs + offset * 60).map_err(|_| format!("'{value}' is before 1970"))
}

pub async fn extend(
    state: State,
    ctx: Ctx,
    path: web::Path<RunPath>,
    form: web::Form<CommandForm>,
    req: HttpRequest,
) -> Answer {
    let key: RunKey = path.into_inner().into();
    let form = form.into_inner();
    let expire_at = if let Some(by) = form.by.as_deref().filter(|b| !b.is_empty()) {
        let by = ebb_spi::parse_duration(by)
            .map_err(|m| ServiceError::invalid("by", m))
            .and_then(|d| {
                if d > Duration::from_secs(crate::model::profile::MAX_SECONDS) {
                    Err(ServiceError::invalid("by", "is more than ten years"))
                } else {
                    Ok(d)
                }
            });
        let by = match by {
            Ok(by) => by,
            Err(e) => return refused(&req, e),
        };
        let run = need(runs::get(&state.runtime, key.clone()).await)?;
        let now = crate::model::time::now_secs();
        run.cluster
            .expires_at
            .unwrap_or(now)
            .max(now)
            .saturating_add(by.as_secs())
    } else {
        match local_time(
            form.at.as_deref().unwrap_or_default(),
            form.tz_offset.unwrap_or(0),
        ) {
            Ok(at) => at,
            Err(m) => return refused(&req, ServiceError::invalid("at", m)),
        }
    };
    let now = crate::model::time::now_secs();
    let what = Command {
        kind: Kind::Event(Event::Extend { expire_at }),
        action: "run.extend",
        done: format!(
            "The cluster is kept until {} from now.",
            span(expire_at.saturating_sub(now))
        ),
    };
    command(&state, &ctx, &req, key, what).await
}

/// The operations the run page offers on a live cluster, with their labels.
const CLUSTER_OPERATIONS: [(&str, &str); 7] = [
    ("expand", "expand"),
    ("shrink", "shrink"),
    ("start-services", "start services"),
    ("stop-services", "stop services"),
    ("restart-services", "restart services"),
    ("configure", "configure"),
    ("replace-node", "replace nodes"),
];

pub async fn cluster(
    state: State,
    ctx: Ctx,
    path: web::Path<RunPath>,
    form: web::Form<CommandForm>,
    req: HttpRequest,
) -> Answer {
    let form = form.into_inner();
    let operation = form.operation.unwrap_or_default();
    let config = match (operation.as_str(), form.config.as_deref().map(str::trim)) {
        ("configure", Some(text)) if !text.is_empty() => {
            match serde_json::from_str::<serde_json::Value>(text) {
                Ok(v) if v.is_object() => Some(v),
                _ => {
                    return refused(
                        &req,
                        ServiceError::invalid("config", "must be a JSON object"),
                    );
                }
            }
        }
        ("configure", _) => {
            return refused(
                &req,
                ServiceError::invalid("config", "configure needs the new config, a JSON object"),
            );
        }
        _ => None,
    };
    // A comma-separated list from a text field; bounded by the field's length.
    let list = |text: &Option<String>| -> Vec<String> {
        text.as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .take(crate::model::names::MAX_LIST + 1)
            .map(str::to_string)
            .collect()
    };
    let (services, on) = (list(&form.services), list(&form.on));
    let nodes = match operation.as_str() {
        "expand" | "shrink" => form.nodes.map(|n| serde_json::json!(n)),
        _ if !on.is_empty() => Some(serde_json::json!(on)),
        _ => None,
    };
    let mut body = serde_json::json!({"operation": operation, "nodes": nodes, "config": config});
    if !services.is_empty() && operation.ends_with("-services") {
        body["services"] = serde_json::json!(services);
    }
    let request: crate::rules::resize::ClusterRequest = match serde_json::from_value(body) {
        Ok(r) => r,
        Err(_) => {
            return refused(
                &req,
                ServiceError::invalid(
                    "operation",
                    format!("'{operation}' is not an operation of a live cluster"),
                ),
            );
        }
    };
    let what = Command {
        kind: Kind::Cluster(request),
        action: "run.cluster",
        done: format!("Operation {operation} started."),
    };
    command(&state, &ctx, &req, path.into_inner().into(), what).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_picked_time_is_read_in_the_browsers_zone() {
        // 10:00 in a zone two hours ahead of UTC (offset -120) is 08:00 UTC.
        let utc = local_time("2026-11-24T08:00", 0).expect("valid");
        assert_eq!(local_time("2026-11-24T10:00", -120), Ok(utc));
        assert_eq!(local_time("2026-11-24T10:00:30", -120), Ok(utc + 30));
        for bad in [
            "",
            "tomorrow",
            "2026-13-01T00:00",
            "2026-11-24T10:00:00:00:00:00:00:00:00",
        ] {
            assert!(local_time(bad, 0).is_err(), "{bad}");
        }
        assert!(local_time("2026-11-24T10:00", 100_000).is_err());
    }
}
