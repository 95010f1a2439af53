//! The overview: live runs by status, clusters and nodes now per provisioner, profile and state,
//! node-hours of the last seven days, and the newest failures with their kind.

use maud::html;

use super::layout::{Answer, Ctx, badge, frame, need, run_href, time};
use crate::api::state::State;
use crate::service::overview;

/// Days the node-hours cover.
const DAYS: u64 = 7;

/// `GET /ui`.
pub async fn page(state: State, ctx: Ctx) -> Answer {
    let o = need(overview::overview(&state.runtime, ctx.namespaces.clone(), DAYS).await)?;
    let live: usize = o.live.values().sum();
    let nodes: usize = o.clusters.values().map(|c| c.nodes).sum();
    let clusters: usize = o.clusters.values().map(|c| c.clusters).sum();
    let body = html! {
        h1 { "Overview" }
        @if o.partial {
            p.notice.warn { "Figures cover the newest runs only (the overview reads a bounded number of namespaces and runs)." }
        }
        div.cards {
            div.card { div.n { (live) } div { "live runs" } }
            div.card { div.n { (clusters) } div { "clusters now" } }
            div.card { div.n { (nodes) } div { "nodes now" } }
            div.card { div.n { (format!("{:.1}", o.node_hours)) } div { "node-hours, last " (o.days) " days" } }
        }
        div.split {
            section aria-labelledby="live-h" {
                h2 #live-h { "Live runs by status" }
                @if o.live.is_empty() {
                    p.muted { "No live runs." }
                } @else {
                    table {
                        thead { tr { th scope="col" { "Status" } th scope="col" { "Runs" } } }
                        tbody {
                            @for (status, n) in &o.live {
                                tr { td { a href=(format!("/ui/runs?status={status}")) { (badge(status)) } } td { (n) } }
                            }
                        }
                    }
                }
            }
            section aria-labelledby="clusters-h" {
                h2 #clusters-h { "Clusters now" }
                @if o.clusters.is_empty() {
                    p.muted { "No clusters." }
                } @else {
                    table {
                        thead { tr { th scope="col" { "Provisioner" } th scope="col" { "Profile" } th scope="col" { "State" } th scope="col" { "Clusters" } th scope="col" { "Nodes" } } }
                        tbody {
                            @for ((provisioner, profile, state), c) in &o.clusters {
                                tr {
                                    td data-label="Provisioner" { (provisioner) }
                                    td data-label="Profile" { (profile) }
                                    td data-label="State" { (state) }
                                    td data-label="Clusters" { (c.clusters) }
                                    td data-label="Nodes" { (c.nodes) }
                                }
                            }
                        }
                    }
                }
            }
        }
        section aria-labelledby="failures-h" {
            h2 #failures-h { "Recent failures" }
            @if o.failures.is_empty() {
                p.muted { "No failures in the last " (o.days) " days." }
            } @else {
                div.scroll { table.wide {
                    thead { tr {
                        th scope="col" { "Run" } th scope="col" { "Kind" } th scope="col" { "Why" }
                        th scope="col" { "Profile" } th scope="col" { "Ended" }
                    } }
                    tbody {
                        @for f in &o.failures {
                            tr {
                                td data-label="Run" { a href=(run_href(&f.key)) { (f.key.namespace) "/" (f.key.app) "/" (f.key.program) } }
                                td data-label="Kind" { span.badge.bad { (f.failure.kind) } }
                                td data-label="Why" { (f.failure.message) }
                                td data-label="Profile" { (f.profile) }
                                td data-label="Ended" { (f.end.map_or(html! { "–" }, time)) }
                            }
                        }
                    }
                } }
            }
        }
    };
    Ok(frame(&ctx, "Overview", body))
}
