//! Cluster templates: their services with dependencies, and the `plan` dry run drawn as a DAG
//! of tasks in its stages.

use actix_web::{HttpRequest, web};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{Answer, Ctx, fragment, frame, need, refused, time};
use super::timeline::name_of;
use crate::api::state::State;
use crate::model::template::TemplateId;
use crate::model::view::DryRun;
use crate::service::templates::{self, PlanRequest, TemplateRef};

/// The UI path of a template.
fn href(scope_ns: Option<&str>, name: &str) -> String {
    match scope_ns {
        None => format!("/ui/system/templates/{name}"),
        Some(ns) => format!("/ui/ns/{ns}/templates/{name}"),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    namespace: Option<String>,
}

/// `GET /ui/templates`: SYSTEM templates and the namespace's.
pub async fn list(state: State, ctx: Ctx, q: web::Query<ListQuery>) -> Answer {
    let ns = q
        .namespace
        .clone()
        .filter(|n| ctx.namespaces.contains(n))
        .or(ctx.ns.clone());
    let system = need(templates::list(&state.store, None, false).await)?;
    let user = match &ns {
        Some(ns) => need(templates::list(&state.store, Some(ns.clone()), false).await)?,
        None => Vec::new(),
    };
    let body = html! {
        h1 { "Cluster templates" }
        p.muted { "The services a profile's " code { "template" } " property installs, configures and starts on a cluster's nodes, in dependency order." }
        table.wide {
            thead { tr { th scope="col" { "Template" } th scope="col" { "Scope" } th scope="col" { "Services" } th scope="col" { "Updated" } } }
            tbody {
                @for t in user.iter().map(|t| (t, ns.as_deref())).chain(system.iter().map(|t| (t, None))) {
                    tr {
                        td data-label="Template" { a href=(href(t.1, &t.0.name)) { (t.0.name) } }
                        td data-label="Scope" { (t.0.scope) }
                        td data-label="Services" { (t.0.template.services.keys().cloned().collect::<Vec<_>>().join(", ")) }
                        td data-label="Updated" { (time(t.0.updated)) }
                    }
                }
            }
        }
    };
    Ok(frame(&ctx, "Templates", body))
}

/// `GET` a template's page: its services and dependencies, and a plan form.
pub async fn page(state: State, ctx: Ctx, req: HttpRequest) -> Answer {
    let info = req.match_info();
    let ns = info.get("ns").map(str::to_string);
    let name = info.get("name").unwrap_or_default().to_string();
    let t = need(
        templates::get(
            &state.store,
            TemplateId {
                namespace: ns.clone(),
                name: name.clone(),
            },
        )
        .await,
    )?;
    // A plan is drawn in the namespace the page is in (a SYSTEM template's, the picked one).
    let plan_ns = ns.clone().or(ctx.ns.clone());
    let scoped = match &ns {
        None => format!("SYSTEM:{name}"),
        Some(_) => format!("USER:{name}"),
    };
    let provisioners: Vec<String> = state
        .registry
        .details()
        .into_iter()
        .map(|d| d.name)
        .filter(|n| n != "native")
        .collect();
    let body = html! {
        p.muted { a href="/ui/templates" { "Templates" } }
        h1 { (scoped) }
        @if !t.template.description.is_empty() { p { (t.template.description) } }
        h2 { "Services" }
        table.wide {
            thead { tr {
                th scope="col" { "Service" } th scope="col" { "Installed after" } th scope="col" { "Started after" }
                th scope="col" { "Conflicts with" } th scope="col" { "Actions" }
            } }
            tbody {
                @for (s, svc) in &t.template.services {
                    tr {
                        td data-label="Service" { strong { (s) } @if !svc.description.is_empty() { br; span.muted { (svc.description) } } }
                        td data-label="Installed after" { (deps(&svc.dependencies.install.requires, &svc.dependencies.install.uses)) }
                        td data-label="Started after" { (deps(&svc.dependencies.runtime.requires, &svc.dependencies.runtime.uses)) }
                        td data-label="Conflicts with" { (svc.dependencies.conflicts.join(", ")) }
                        td data-label="Actions" { (svc.actions.keys().map(name_of).collect::<Vec<_>>().join(", ")) }
                    }
                }
            }
        }
        @if let Some(plan_ns) = &plan_ns {
            h2 { "Plan (dry run)" }
            form.filters hx-post=(format!("/ui/ns/{plan_ns}/plan")) hx-target="#plan" {
                input type="hidden" name="template" value=(scoped);
                div.field {
                    label for="provisioner" { "Provisioner" }
                    select #provisioner name="provisioner" {
                        @for p in &provisioners { option value=(p) selected[p == "sim"] { (p) } }
                    }
                }
                div.field {
                    label for="nodes" { "Nodes" }
                    input #nodes type="number" name="nodes" min="1" max="1000" value="3";
                }
                div.field {
                    label for="operation" { "Operation" }
                    select #operation name="operation" {
                        @for op in ["create", "delete", "start", "stop", "restart", "configure"] { option value=(op) { (op) } }
                    }
                }
                button.primary type="submit" { "Plan" }
            }
            div #plan aria-live="polite" {}
        }
    };
    Ok(frame(&ctx, &scoped, body))
}

fn deps(requires: &[String], uses: &[String]) -> Markup {
    html! {
        @if requires.is_empty() && uses.is_empty() { span.muted { "–" } }
        @for r in requires { span.badge.live title="required" { (r) } " " }
        @for u in uses { span.badge.done title="used when present" { (u) } " " }
    }
}

/// The plan form.
#[derive(Debug, Deserialize)]
pub struct PlanForm {
    template: String,
    provisioner: String,
    nodes: u32,
    #[serde(default)]
    operation: Option<String>,
}

/// `POST /ui/ns/{ns}/plan`: the dry run, drawn.
pub async fn plan(
    state: State,
    ns: web::Path<String>,
    form: web::Form<PlanForm>,
    req: HttpRequest,
) -> Answer {
    let form = form.into_inner();
    let request: Result<PlanRequest, _> = serde_json::from_value(serde_json::json!({
        "template": form.template,
        "provisioner": form.provisioner,
        "nodes": form.nodes,
        "operation": form.operation.unwrap_or_else(|| "create".into()),
    }));
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            return refused(
                &req,
                crate::service::error::ServiceError::invalid("plan", e.to_string()),
            );
        }
    };
    let _: &TemplateRef = &request.template;
    match templates::dry_run(&state.store, &state.registry, ns.into_inner(), request).await {
        Ok(plan) => Ok(fragment(dag(&plan))),
        Err(e) => Ok(fragment(
            html! { p.notice.bad role="alert" { (crate::api::error::ApiError::from(e).to_string()) } },
        )),
    }
}

/// Most tasks a drawing shows; larger plans are summed up.
const MAX_DRAWN: usize = 400;

/// The plan's tasks as a DAG: one column per stage, one box per task, an arrow per dependency.
pub fn dag(plan: &DryRun) -> Markup {
    let (w, h, gap_x, gap_y, top) = (150.0, 30.0, 50.0, 10.0, 28.0);
    let mut position = std::collections::BTreeMap::new();
    for (s, stage) in plan.stages.iter().enumerate() {
        for (i, task) in stage.iter().enumerate() {
            position.insert(
                *task,
                (s as f64 * (w + gap_x), top + i as f64 * (h + gap_y)),
            );
        }
    }
    let tallest = plan.stages.iter().map(Vec::len).max().unwrap_or(0);
    let width = plan.stages.len() as f64 * (w + gap_x);
    let height = top + tallest as f64 * (h + gap_y);
    let drawn = plan.tasks.len() <= MAX_DRAWN;
    html! {
        p {
            (plan.layout.len()) " nodes, " (plan.tasks.len()) " tasks in " (plan.stages.len()) " stages. "
            "Nodes: "
            @for n in &plan.layout { code { (n.node) } " (" (n.services.iter().cloned().collect::<Vec<_>>().join(", ")) ") " }
        }
        @if drawn {
            div.scroll {
                svg.dag xmlns="http://www.w3.org/2000/svg" width=(width) height=(height) viewBox=(format!("0 0 {width} {height}"))
                    role="img" aria-label=(format!("Plan: {} tasks in {} stages", plan.tasks.len(), plan.stages.len())) {
                    defs {
                        marker #arrow viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse" {
                            path d="M 0 0 L 10 5 L 0 10 z" {}
                        }
                    }
                    @for s in 0..plan.stages.len() {
                        text.stage x=(s as f64 * (w + gap_x)) y="16" { "Stage " (s + 1) }
                    }
                    @for t in &plan.tasks {
                        @if let Some((x, y)) = position.get(&t.id) {
                            @for d in &t.depends_on {
                                @if let Some((dx, dy)) = position.get(d) {
                                    path d=(format!("M {} {} C {} {}, {} {}, {} {}", dx + w, dy + h / 2.0, dx + w + gap_x / 2.0, dy + h / 2.0, x - gap_x / 2.0, y + h / 2.0, x, y + h / 2.0)) marker-end="url(#arrow)" {}
                                }
                            }
                        }
                    }
                    @for t in &plan.tasks {
                        @if let Some((x, y)) = position.get(&t.id) {
                            g {
                                title { "#" (t.id) " " (t.node) ": " (name_of(&t.action)) @if let Some(s) = &t.service { " " (s) } }
                                rect x=(x) y=(y) width=(w) height=(h) rx="4" {}
                                text x=(x + 6.0) y=(y + 13.0) { (t.node) }
                                text x=(x + 6.0) y=(y + 25.0) { (name_of(&t.action)) @if let Some(s) = &t.service { " " (s) } }
                            }
                        }
                    }
                }
            }
        } @else {
            p.muted { "Too many tasks to draw; the stages follow as a list." }
        }
        details open[!drawn] {
            summary { "Stages as a list" }
            ol {
                @for stage in &plan.stages {
                    li {
                        @for id in stage {
                            @if let Some(t) = plan.tasks.iter().find(|t| t.id == *id) {
                                code { (t.node) " " (name_of(&t.action)) @if let Some(s) = &t.service { " " (s) } } " "
                            }
                        }
                    }
                }
            }
        }
    }
}
