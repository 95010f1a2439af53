//! The live panels of a run's page: its status (badges, facts, the commands its caller may
//! send, the nodes and their services), the program's output and the operations, each
//! redrawn when the run changes.

use actix_web::http::Method;
use actix_web::web;
use maud::{Markup, html};

use crate::api::state::{RunPath, State};
use crate::model::event::{EventKind, RunEvent};
use crate::model::run::{ClusterStatus, ProgramStatus, RunKey};
use crate::model::view::RunView;
use crate::service::history;
use crate::service::runs::{self};
use crate::ui::layout::{Answer, Ctx, badge, deadline, facts, fragment, need, run_href, time};

/// The operations the run page offers on a live cluster, with their labels.
pub(super) const CLUSTER_OPERATIONS: [(&str, &str); 10] = [
    ("expand", "expand"),
    ("shrink", "shrink"),
    ("start-services", "start services"),
    ("stop-services", "stop services"),
    ("restart-services", "restart services"),
    ("configure", "configure"),
    ("replace-node", "replace nodes"),
    ("add-services", "add services"),
    ("remove-services", "remove services"),
    ("repair", "repair"),
];

/// Bytes of each output stream the page shows (the end of it).
const LOG_TAIL: u64 = 64 * 1024;

pub(super) fn short(id: &str) -> &str {
    id.get(..13).unwrap_or(id)
}

pub(super) fn key_of(r: &RunView) -> RunKey {
    RunKey {
        namespace: r.namespace.clone(),
        app: r.app.clone(),
        program: r.program.clone(),
        run: r.runid.clone(),
    }
}

pub(crate) fn live(run: &RunView) -> bool {
    run.status != ProgramStatus::Rejected
        && !matches!(
            run.cluster.status,
            Some(ClusterStatus::Deprovisioned | ClusterStatus::Orphaned)
        )
}

/// Where the run's cluster came from and where it went: made for it, or taken over from
/// the run that left it IDLE (how fast), and the run that took it over after.
fn origin(run: &RunView) -> Markup {
    let c = &run.cluster;
    html! {
        @match &c.reused_from {
            Some(o) => {
                (if o.pooled { "made ahead by the pool's run " } else { "reused from run " }) code { (short(&o.from)) } ", taken over in " (o.claim_ms) " ms"
                @if let Some(why) = &o.discarded { " · could not be used (" (why) ")" }
            }
            None => "made for this run",
        }
        @if let Some(by) = &c.reused_by { " · taken over by run " code { (short(by)) } }
        @if c.status == Some(ClusterStatus::Idle) { " · IDLE: the next run that matches takes it over" }
        @if !c.given_up.is_empty() {
            " · went on without " (c.given_up.join(", ")) ": no room for them anywhere (minNodes)"
        }
    }
}

/// The part of a run's page that changes with its status: badges, facts, commands, nodes.
pub(super) fn status_panel(ctx: &Ctx, run: &RunView) -> Markup {
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
            @if run.cluster.attention.is_some() { " · " span.badge.bad { "NEEDS ATTENTION" } }
        }
        @if let Some(a) = &run.cluster.attention {
            p.notice.bad role="alert" {
                strong { "The cluster needs attention" } " (since " (time(a.since)) "): " (a.reason)
                ". Only a repair may run on it: fix the cause, then run the repair operation below."
            }
        }
        @if let Some(f) = &run.failure {
            p.notice.bad role="alert" { strong { "Failed (" (f.kind) "): " } (f.message) }
        }
        @if let Some(q) = run.queue.as_ref().filter(|_| run.status == ProgramStatus::Queued) {
            p.notice.warn role="status" {
                strong { "Waiting in the queue" }
                @if let Some(p) = q.position { " (number " (p) " in namespace " (run.namespace) ")" }
                ": " (q.stay.reason) ". "
                @if let Some(until) = q.stay.until { "Rejected if still waiting at " (time(until / 1000)) "." }
            }
        }
        (facts(&[
            ("Profile", html! { (run.profile) }),
            ("Requested", time(run.starting)),
            ("Left the queue", match run.queue.as_ref().and_then(|q| q.stay.admitted) {
                Some(at) => time(at / 1000),
                None => html! { "–" },
            }),
            ("Started", run.start.map_or(html! { "–" }, time)),
            ("Ended", run.end.map_or(html! { "–" }, time)),
            ("Cluster kept until", match (cluster, run.cluster.expires_at) {
                (Some(ClusterStatus::Waiting | ClusterStatus::Idle), Some(at)) => deadline(at),
                _ => html! { "–" },
            }),
            ("Cluster", origin(run)),
            ("Exit", run.exit.map_or(html! { "–" }, |e| html! { (e.to_string()) })),
            ("Application", match &run.application {
                Some(app) => html! {
                    (app.engine) " "
                    @match &app.ui {
                        // Only web addresses become links.
                        Some(ui) if ui.starts_with("http://") || ui.starts_with("https://") => {
                            a href=(ui) rel="noopener noreferrer" target="_blank" { code { (app.id) } }
                        }
                        Some(_) | None => { code { (app.id) } }
                    }
                    @if let Some(history) = app.history.as_ref().filter(|h| h.starts_with("http://") || h.starts_with("https://")) {
                        " · " a href=(history) rel="noopener noreferrer" target="_blank" { "history" }
                    }
                },
                None => html! { "–" },
            }),
            ("Attempt", match &run.retry {
                Some(retry) => html! {
                    (run.attempt) " of " (retry.max_attempts)
                    @if let Some(at) = run.relaunch_at { " · the next at " (time(at)) }
                    @for a in &run.attempts {
                        br;
                        span.muted { "attempt " (a.attempt) " " (a.failure.kind) ": " (a.failure.message) }
                    }
                },
                None => html! { "1 (no retries)" },
            }),
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
                @if matches!(cluster, Some(ClusterStatus::Waiting | ClusterStatus::Idle)) {
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
                                        span.service {
                                            // A node that is there shows its daemons' logs.
                                            @if n.status == crate::model::plan::ResourceStatus::Created {
                                                a href=(format!("{}/services/{service}/logs?node={}", run_href(&key_of(run)), n.name)) title="Its logs on this node" { (service) }
                                            } @else {
                                                (service)
                                            }
                                            " " (service_badge(*state))
                                        } " "
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
        @if !run.cluster.endpoints.is_empty() {
            h2 { "Endpoints" }
            p.muted { "What the cluster's services published for programs, which read each as the variable shown." }
            div.scroll {
                table.wide {
                    thead { tr {
                        th scope="col" { "Endpoint" } th scope="col" { "Value" } th scope="col" { "Programs read" }
                    } }
                    tbody {
                        @for (name, value) in &run.cluster.endpoints {
                            tr {
                                td data-label="Endpoint" { (name) }
                                td data-label="Value" {
                                    // Only web addresses become links.
                                    @if value.starts_with("http://") || value.starts_with("https://") {
                                        a href=(value) rel="noopener noreferrer" target="_blank" { code { (value) } }
                                    } @else {
                                        code { (value) }
                                    }
                                }
                                td data-label="Programs read" { code { (crate::model::endpoint::env_name(name)) } }
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

pub(crate) fn event_item(e: &RunEvent) -> Markup {
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

/// `GET .../services/{service}/logs?node=N`: the end of each log file the service's template
/// names, read from node `N` (over SSH for a remote one), as a page.
pub async fn service_logs(
    state: State,
    ctx: Ctx,
    path: web::Path<crate::api::state::ServiceLogsPath>,
    query: web::Query<NodeQuery>,
) -> Answer {
    let p = path.into_inner();
    let key = RunKey {
        namespace: p.ns,
        app: p.app,
        program: p.program,
        run: p.run,
    };
    let href = run_href(&key);
    let node = query.into_inner().node.unwrap_or_default();
    let read = history::service_logs(&state.runtime, key.clone(), node, p.service).await;
    let logs = need(read)?;
    let body = html! {
        p.muted { a href=(href) { "Run " code { (short(&key.run)) } } }
        h1 { (logs.service) " on " (logs.node) }
        @if logs.logs.is_empty() {
            p.muted { "The service's template names no log files." }
        }
        @for log in &logs.logs {
            h2 { code { (log.file) } }
            @if let Some(error) = &log.error {
                p.muted { (error) }
            }
            @if let Some(text) = &log.text {
                @if log.size > text.len() as u64 {
                    p.muted { "The last " (text.len()) " of " (log.size) " bytes." }
                }
                pre.log tabindex="0" aria-label=(format!("{} on {}", log.file, logs.node)) { (text) }
            }
        }
    };
    Ok(crate::ui::layout::frame(
        &ctx,
        &format!("{} logs on {}", logs.service, logs.node),
        body,
    ))
}

/// The node a service's logs are read from.
#[derive(Debug, serde::Deserialize)]
pub struct NodeQuery {
    pub node: Option<String>,
}

/// `GET .../operations`: the cluster's operations, each a timeline per node.
/// An operator sees a Cancel button on an admin's operation that runs.
pub async fn operations(state: State, ctx: Ctx, path: web::Path<RunPath>) -> Answer {
    let key: RunKey = path.into_inner().into();
    let href = run_href(&key);
    let path = "/ns/{ns}/apps/{app}/{program}/runs/{run}/operations/{op}/cancel";
    let may = ctx.may(Method::POST, path, Some(&key.namespace));
    let ops = need(history::operations(&state.runtime, key).await)?;
    let cancel = may.then_some(href.as_str());
    Ok(fragment(crate::ui::timeline::operations(&ops, cancel)))
}
