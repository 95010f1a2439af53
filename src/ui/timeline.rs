//! A cluster's operations drawn as timelines: per operation, one lane per node with a bar per
//! task attempt (a Gantt view), failures and retries marked, and each rollback linked to the
//! operation it undid. The same facts follow as a table, for screen readers and for copying.

use maud::{Markup, html};

use super::layout::{badge, time};
use crate::model::operation::{AttemptStatus, OpStatus, OperationView, TaskView};

/// A value's name as the API writes it (`create`, `install`).
pub fn name_of<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// What a task does: `install zookeeper`, `create`.
fn task_name(t: &TaskView) -> String {
    match &t.service {
        Some(s) => format!("{} {s}", name_of(&t.action)),
        None => name_of(&t.action),
    }
}

/// The operations, newest first; with `cancel` (the run's page, for an operator), an admin's
/// operation that runs has a button that cancels it.
pub fn operations(ops: &[OperationView], cancel: Option<&str>) -> Markup {
    let now = crate::store::clock::now_f64();
    html! {
        @if ops.is_empty() {
            p.muted { "No cluster operations (yet)." }
        }
        @for op in ops.iter().rev() {
            (operation(op, now, cancel))
        }
    }
}

fn operation(op: &OperationView, now: f64, cancel: Option<&str>) -> Markup {
    let cancellable = op.status == OpStatus::Running
        && !op.operation.is_lifecycle()
        && op.rollback_of.is_none()
        && op.cancel.is_none();
    let start = op.created;
    let end = op
        .finished
        .or_else(|| {
            op.tasks
                .iter()
                .flat_map(|t| &t.attempts)
                .map(|a| a.finished.unwrap_or(now))
                .reduce(f64::max)
        })
        .unwrap_or(now)
        .max(start + 0.001);
    let width = end - start;
    // The nodes, in the order their first task appears.
    let mut nodes: Vec<&str> = Vec::new();
    for t in &op.tasks {
        if !nodes.contains(&t.node.as_str()) {
            nodes.push(&t.node);
        }
    }
    let pct = |x: f64| ((x - start) / width * 100.0).clamp(0.0, 100.0);
    let attempts: usize = op.tasks.iter().map(|t| t.attempts.len()).sum();
    let retries =
        attempts.saturating_sub(op.tasks.iter().filter(|t| !t.attempts.is_empty()).count());
    html! {
        section.operation id=(format!("op-{}", op.id)) aria-labelledby=(format!("op-{}-h", op.id)) {
            h3 id=(format!("op-{}-h", op.id)) {
                "#" (op.id) " " (name_of(&op.operation)) " " (badge(&op.status.to_string()))
                @if let (Some(href), true) = (cancel, cancellable) {
                    " "
                    button hx-post=(format!("{href}/operations/{}/cancel", op.id)) hx-target="#notice"
                        hx-confirm=(format!("Cancel operation #{}? What it did so far is rolled back.", op.id)) {
                        "Cancel"
                    }
                }
            }
            p.muted {
                "Began " (time(start as u64))
                @if let Some(f) = op.finished { ", took " (format!("{:.1}s", f - start)) }
                @if let Some(actor) = &op.actor { ", asked by " (actor) }
                @if let Some(c) = &op.cancel { ", cancelled by " (c.by) " at " (time(c.at as u64)) }
                ". " (op.tasks.len()) " tasks, " (attempts) " attempts, " (retries) " retries."
                @if let Some(of) = op.rollback_of {
                    " Rolls back " a href=(format!("#op-{of}")) { "operation #" (of) } "."
                }
                @if let Some(by) = op.rolled_back_by {
                    " Undone by " a href=(format!("#op-{by}")) { "rollback #" (by) } "."
                }
            }
            @if let Some(e) = &op.error { p.notice.bad { (e) } }
            @if !op.blocked.is_empty() {
                p.notice.warn {
                    "No room in " (crate::rules::capacity::describe(&op.blocked))
                    ": skipped by the rest of the operation."
                }
            }
            @for d in &op.dropped { p.notice.warn { (d.node) " given up: " (d.reason) } }
            @if !nodes.is_empty() {
                div.gantt role="img" aria-label=(format!("Timeline of operation {}: {} nodes, {} attempts, {} retries", op.id, nodes.len(), attempts, retries)) {
                    @for node in &nodes {
                        div.lane {
                            span.node { (node) }
                            div.track {
                                @for t in op.tasks.iter().filter(|t| t.node == *node) {
                                    @for (i, a) in t.attempts.iter().enumerate() {
                                        @let left = pct(a.started);
                                        @let right = pct(a.finished.unwrap_or(now));
                                        @let class = match a.status {
                                            None => "running",
                                            Some(AttemptStatus::Succeeded) => "ok",
                                            Some(_) => "failed",
                                        };
                                        @let retry = if i > 0 { " retry" } else { "" };
                                        @let title = format!(
                                            "{}: attempt {} {}{}",
                                            task_name(t), i + 1,
                                            a.status.map_or("running".to_string(), |s| s.to_string().to_lowercase()),
                                            a.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default()
                                        );
                                        span class=(format!("bar {class}{retry}"))
                                            style=(format!("left:{left:.2}%;width:{:.2}%", (right - left).max(0.3)))
                                            title=(title) {}
                                    }
                                }
                            }
                        }
                    }
                    div.legend aria-hidden="true" {
                        span { i.ok {} "succeeded" } span { i.failed {} "failed" }
                        span { i.running {} "running" } span { i.retry {} "retry" }
                        span { (format!("{:.1}s", width)) " in all" }
                    }
                }
                details {
                    summary { "Tasks of #" (op.id) " as a table" }
                    div.scroll { table {
                        thead { tr {
                            th scope="col" { "Node" } th scope="col" { "Task" } th scope="col" { "Status" }
                            th scope="col" { "Attempts" } th scope="col" { "Last error" }
                        } }
                        tbody {
                            @for t in &op.tasks {
                                tr {
                                    td { (t.node) } td { (task_name(t)) } td { (badge(&t.status.to_string())) }
                                    td { (t.attempts.len()) }
                                    td { (t.attempts.iter().rev().find_map(|a| a.error.as_deref()).unwrap_or("–")) }
                                }
                            }
                        }
                    } }
                }
            }
        }
    }
}
