//! The Usage page: cost or node-hours over time, stacked by namespace, app, program, profile
//! or provisioner, with the namespace's budget as a line, and the table of the same figures;
//! a range, a grouping and a measure to pick (the page redraws in place; without script, the
//! form reloads it).

use actix_web::{HttpRequest, web};
use maud::{Markup, html};
use serde::Deserialize;

use super::chart::{Measure, usage_chart};
use super::layout::{Answer, Ctx, fragment, frame, htmx, need};
use crate::api::state::State;
use crate::model::usage::{Dimension, UsageParams, UsageReport};
use crate::service::error::ServiceError;

/// The page's query: what the form picks.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct UsageForm {
    pub from: Option<String>,
    pub to: Option<String>,
    pub namespace: Option<String>,
    /// What the bars stack by.
    pub by: Option<String>,
    /// `day`, `week` or `month`.
    pub period: Option<String>,
    /// `cost` or `hours`.
    pub measure: Option<String>,
}

/// What the bars may stack by.
const STACKS: [Dimension; 5] = [
    Dimension::Namespace,
    Dimension::App,
    Dimension::Program,
    Dimension::Profile,
    Dimension::Provisioner,
];

/// The form's values, defaults filled in: the last 30 days by day, stacked by namespace (by
/// program within one namespace), in cost.
struct Picked {
    from: String,
    to: String,
    namespace: Option<String>,
    by: Dimension,
    period: Dimension,
    measure: Measure,
}

fn picked(ctx: &Ctx, form: UsageForm) -> Result<Picked, ServiceError> {
    let today = crate::rules::usage::date_of(crate::store::clock::now_secs());
    let days = |n: i64| {
        today
            .checked_add(jiff::Span::new().days(n))
            .map(|d| d.to_string())
            .map_err(|e| ServiceError::Internal(e.to_string()))
    };
    let namespace = match form.namespace.filter(|n| !n.is_empty()) {
        Some(ns) => Some(ns),
        // Only an instance admin sees every namespace at once.
        None if ctx.instance_admin() => None,
        None => ctx.ns.clone(),
    };
    let dimension =
        |field: &str, v: Option<String>, allowed: &[Dimension], default: Dimension| match v
            .filter(|v| !v.is_empty())
        {
            None => Ok(default),
            Some(v) => allowed
                .iter()
                .copied()
                .find(|d| d.name() == v)
                .ok_or_else(|| {
                    ServiceError::invalid(field, format!("{v:?} is not one you can pick here"))
                }),
        };
    let default_by = match namespace {
        Some(_) => Dimension::Program,
        None => Dimension::Namespace,
    };
    let by = dimension("by", form.by, &STACKS, default_by)?;
    let period = dimension(
        "period",
        form.period,
        &[Dimension::Day, Dimension::Week, Dimension::Month],
        Dimension::Day,
    )?;
    let measure = match form.measure.as_deref().unwrap_or("cost") {
        "cost" => Measure::Cost,
        "hours" => Measure::NodeHours,
        other => {
            return Err(ServiceError::invalid(
                "measure",
                format!("{other:?} is not cost or hours"),
            ));
        }
    };
    Ok(Picked {
        from: form
            .from
            .filter(|v| !v.is_empty())
            .map_or_else(|| days(-29), Ok)?,
        to: form
            .to
            .filter(|v| !v.is_empty())
            .map_or_else(|| days(1), Ok)?,
        namespace,
        by,
        period,
        measure,
    })
}

/// `GET /ui/usage`: the page, or (asked by htmx) its chart and table.
pub async fn page(state: State, ctx: Ctx, req: HttpRequest, form: web::Query<UsageForm>) -> Answer {
    let p = need(picked(&ctx, form.into_inner()))?;
    let params = UsageParams {
        namespace: p.namespace.clone(),
        from: Some(p.from.clone()),
        to: Some(p.to.clone()),
        group_by: Some(format!("{},{}", p.period.name(), p.by.name())),
        ..Default::default()
    };
    let report =
        need(crate::service::usage::report(&state.store, &ctx.caller.grants, params).await)?;
    let budget = match (&p.namespace, p.period) {
        (Some(ns), Dimension::Month) => {
            let view = need(crate::service::namespaces::get(&state.store, ns.clone()).await)?;
            view.namespace.budget.and_then(|b| match p.measure {
                Measure::Cost => b.cost,
                Measure::NodeHours => b.node_hours,
            })
        }
        _ => None,
    };
    let figures = figures(&report, &p, budget);
    if htmx(&req) {
        return Ok(fragment(figures));
    }
    let body = html! {
        h1 { "Usage" }
        p.muted { "What runs used, counted when their use of a cluster ended: node-hours by what the nodes did, and their cost at the prices then in force. Days are UTC." }
        (form_of(&ctx, &p))
        div #usage aria-live="polite" { (figures) }
    };
    Ok(frame(&ctx, "Usage", body))
}

/// The chart and tables of `report`.
fn figures(report: &UsageReport, p: &Picked, budget: Option<f64>) -> Markup {
    let what = match p.measure {
        Measure::Cost => "Cost",
        Measure::NodeHours => "Node-hours",
    };
    let label = format!(
        "{what} by {} and {}, {} to {}{}",
        p.period.name(),
        p.by.name(),
        report.from,
        report.to,
        p.namespace
            .as_deref()
            .map_or_else(String::new, |ns| format!(", namespace {ns}"))
    );
    let t = &report.total;
    html! {
        (usage_chart(report, (p.period, Some(p.by)), p.measure, budget, &label))
        h2 { "In all" }
        (super::layout::facts(&[
            ("Runs", html! { @for (status, n) in &t.runs { (status) " " (n) " " } @if t.runs.is_empty() { "none" } }),
            ("Node-hours", html! { (format!("{:.2}", t.node_hours)) }),
            ("Of which kept (keepalive), idle (reuse), pool", html! {
                (format!("{:.2}, {:.2}, {:.2}", t.kept_node_seconds as f64 / 3600.0, t.idle_node_seconds as f64 / 3600.0, t.pool_node_seconds as f64 / 3600.0))
            }),
            ("Cost", html! {
                @match t.cost { Some(c) => (format!("{c:.2} {}", report.currency)), None => "unknown" }
                @if t.unpriced_node_seconds > 0 {
                    " " span.muted { (format!("({:.2} node-hours have no known price)", t.unpriced_node_seconds as f64 / 3600.0)) }
                }
            }),
        ]))
    }
}

/// The form that picks the range, the grouping and the measure.
fn form_of(ctx: &Ctx, p: &Picked) -> Markup {
    let selected = |a: &str, b: &str| a == b;
    html! {
        form.filters method="get" action="/ui/usage" hx-get="/ui/usage" hx-target="#usage"
            hx-trigger="change, submit" hx-push-url="true" {
            div.field { label for="u-from" { "From" } input #u-from type="date" name="from" value=(p.from) required; }
            div.field { label for="u-to" { "To (not counted)" } input #u-to type="date" name="to" value=(p.to) required; }
            div.field {
                label for="u-ns" { "Namespace" }
                select #u-ns name="namespace" {
                    @if ctx.instance_admin() { option value="" selected[p.namespace.is_none()] { "all" } }
                    @for ns in &ctx.namespaces {
                        option value=(ns) selected[p.namespace.as_deref() == Some(ns.as_str())] { (ns) }
                    }
                }
            }
            div.field {
                label for="u-by" { "Stacked by" }
                select #u-by name="by" {
                    @for d in STACKS { option value=(d.name()) selected[d == p.by] { (d.name()) } }
                }
            }
            div.field {
                label for="u-period" { "Per" }
                select #u-period name="period" {
                    @for d in [Dimension::Day, Dimension::Week, Dimension::Month] {
                        option value=(d.name()) selected[d == p.period] { (d.name()) }
                    }
                }
            }
            div.field {
                label for="u-measure" { "Measure" }
                select #u-measure name="measure" {
                    option value="cost" selected[selected("cost", measure_name(p.measure))] { "cost" }
                    option value="hours" selected[selected("hours", measure_name(p.measure))] { "node-hours" }
                }
            }
            noscript { button type="submit" { "Show" } }
        }
    }
}

fn measure_name(m: Measure) -> &'static str {
    match m {
        Measure::Cost => "cost",
        Measure::NodeHours => "hours",
    }
}
