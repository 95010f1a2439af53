//! Runs: the list (filtered, updating live) and a run's page (status, resolved properties,
//! nodes, the events as they happen, the program's output, the operations as a timeline, and
//! the commands an operator may send). The page's live [`panels`] and its [`commands`] have
//! modules of their own.

use actix_web::web;
use maud::{Markup, html};
use serde::Deserialize;

use crate::api::error::ApiError;
use crate::api::state::{RunPath, State};
use crate::model::run::{ClusterStatus, RunKey};
use crate::model::view::RunView;
use crate::service::error::ServiceError;
use crate::service::runs::{self, RunFilter};
use crate::ui::layout::{
    Answer, Ctx, UiError, badge, deadline, fragment, frame, need, run_href, time, values,
};

mod commands;
mod panels;
pub use commands::{CommandForm, cancel_operation, cluster, deprovision, extend, stop};
pub(crate) use panels::{event_item, live};
use panels::{key_of, short, status_panel};
pub use panels::{logs, operations, service_logs, status};

/// Runs the list shows.
const LIST_LIMIT: usize = 50;
/// Most namespaces the list of every namespace's runs reads.
const LIST_NAMESPACES: usize = 20;

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
    "QUEUED",
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
                                    @if r.cluster.attention.is_some() { " " span.badge.bad { "NEEDS ATTENTION" } }
                                }
                                td data-label="Profile" { (r.profile) }
                                td data-label="Started" { (time(r.starting)) }
                                td data-label="Ends" {
                                    @if let Some(at) = r.cluster.expires_at.filter(|_| matches!(r.cluster.status, Some(ClusterStatus::Waiting | ClusterStatus::Idle))) {
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
        @if let Some(by) = &run.started_by { (super::schedules::started_by(by)) }
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
                            tr { td { code { (p.name) } } td { code { (p.value) } } td { (super::layout::origin(&p.origin)) } }
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
