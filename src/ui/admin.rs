//! What admins look after besides runs: secure keys (names only), namespaces, the janitor.

use actix_web::{HttpRequest, web};
use maud::{Markup, html};

use super::layout::{Answer, Ctx, facts, frame, need, refused, span, time};
use crate::api::state::State;
use crate::model::access::{Act, Need, Role};
use crate::service::{namespaces, secure};

/// `GET /ui/ns/{ns}/securekeys`: names and metadata; values never leave the server.
pub async fn secure_keys(state: State, ctx: Ctx, ns: web::Path<String>) -> Answer {
    let ns = ns.into_inner();
    let keys = need(secure::list(&state.store, ns.clone()).await)?;
    let admin = ctx.allows(Need::Namespace(Role::Admin), Some(&ns));
    let body = html! {
        h1 { "Secure keys of " (ns) }
        p.muted { "Profiles and runs refer to a key as " code { "${secure(name)}" } "; its value is never shown again, here or anywhere." }
        @if keys.is_empty() { p.muted { "None." } } @else {
            table.wide {
                thead { tr { th scope="col" { "Name" } th scope="col" { "Description" } th scope="col" { "Created" } th scope="col" { span.sr { "Actions" } } } }
                tbody {
                    @for k in &keys {
                        tr {
                            td data-label="Name" { code { (k.name) } } td data-label="Description" { (k.description) }
                            td data-label="Created" { (time(k.created_epoch_ms / 1000)) }
                            td {
                                @if admin {
                                    button.danger hx-post=(format!("/ui/ns/{ns}/securekeys/{}/delete", k.name))
                                        hx-confirm=(format!("Delete secure key {}? Profiles that refer to it stop working.", k.name))
                                        aria-label=(format!("Delete {}", k.name)) { "Delete" }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if admin {
            h2 { "Add or replace a key" }
            form hx-post=(format!("/ui/ns/{ns}/securekeys")) method="post" action=(format!("/ui/ns/{ns}/securekeys")) autocomplete="off" {
                div.field { label for="key-name" { "Name" } input #key-name type="text" name="name" required maxlength="128"; }
                div.field {
                    label for="key-data" { "Value" }
                    input #key-data type="password" name="data" required autocomplete="new-password" maxlength="8192" aria-describedby="key-data-help";
                    p #key-data-help.help { "Sealed in the store; never shown again." }
                }
                div.field { label for="key-description" { "Description" } input #key-description type="text" name="description" maxlength="2000"; }
                button.primary type="submit" { "Save key" }
            }
        }
    };
    Ok(frame(&ctx, "Secure keys", body))
}

/// `GET /ui/namespaces`: the namespaces the caller sees, with their quotas.
pub async fn namespaces(state: State, ctx: Ctx) -> Answer {
    let list = need(namespaces::list(&state.store, &ctx.caller.grants).await)?;
    let limit = |v: Option<u32>| v.map_or("–".to_string(), |n| n.to_string());
    let body = html! {
        h1 { "Namespaces" }
        @if ctx.instance_admin() {
            form.filters hx-post="/ui/namespaces" method="post" action="/ui/namespaces" aria-label="Create a namespace" {
                div.field { label for="ns-name" { "New namespace" } input #ns-name type="text" name="name" required maxlength="64"; }
                div.field { label for="ns-description" { "Description" } input #ns-description type="text" name="description" maxlength="2000"; }
                button.primary type="submit" { "Create" }
            }
            p.muted { "Quotas, the queue and host programs are set with " code { "PUT /v3/namespaces/{ns}" } " or " code { "ebb namespace" } "." }
        }
        table.wide {
            thead { tr {
                th scope="col" { "Namespace" } th scope="col" { "Your role" } th scope="col" { "Description" }
                th scope="col" { "Live runs at most" } th scope="col" { "Live nodes at most" } th scope="col" { "Nodes per run at most" }
                th scope="col" { "Host programs" } th scope="col" { "Queue" }
            } }
            tbody {
                @for n in &list {
                    tr {
                        td data-label="Namespace" { a href=(format!("/ui/runs?namespace={}", n.name)) { (n.name) } }
                        td data-label="Your role" {
                            @if ctx.instance_admin() { "instance admin" } @else { (ctx.caller.grants.role_in(&n.name).map_or("–".to_string(), |r| r.to_string())) }
                        }
                        td data-label="Description" { (n.description) }
                        td data-label="Live runs at most" { (limit(n.quota.max_live_runs)) }
                        td data-label="Live nodes at most" { (limit(n.quota.max_live_nodes)) }
                        td data-label="Nodes per run at most" { (limit(n.quota.max_nodes_per_run)) }
                        td data-label="Host programs" { (if n.allow_host_programs { "allowed" } else { "instance admins only" }) }
                        td data-label="Queue" {
                            (if n.queue.queue_runs { "runs over a limit wait" } else { "on request (system.run.queue)" })
                            br;
                            span.muted {
                                "at most " (n.queue.max_queued()) ", each for "
                                (humantime::format_duration(std::time::Duration::from_secs(n.queue.max_queue_time())))
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(frame(&ctx, "Namespaces", body))
}

/// `GET /ui/janitor`: its settings, its last sweep, and buttons to sweep now.
pub async fn janitor(state: State, ctx: Ctx) -> Answer {
    let last = state
        .janitor
        .last()
        .await
        .map_err(crate::api::error::ApiError::from)?;
    let settings = state.janitor.settings;
    let body = html! {
        h1 { "Janitor" }
        p.muted { "Sweeps every provisioner's cloud for resources ebb made that no live run holds, and deletes them." }
        (facts(&[
            ("Scheduled sweeps", html! { (settings.interval.map_or("off".to_string(), |s| format!("every {}", span(s)))) }),
            ("Scheduled sweeps delete", html! { (if settings.delete { "yes" } else { "no: they only report" }) }),
        ]))
        div.actions {
            button hx-post="/ui/janitor/run?dryRun=true" hx-target="#sweep" { "Dry run (lists, deletes nothing)" }
            button.danger hx-post="/ui/janitor/run" hx-target="#sweep" hx-confirm="Sweep now and delete what no run holds?" { "Sweep now" }
        }
        div #sweep aria-live="polite" {}
        h2 { "Last sweep" }
        @match &last {
            None => p.muted { "None yet." },
            Some(sweep) => (sweep_view(sweep)),
        }
    };
    Ok(frame(&ctx, "Janitor", body))
}

/// `POST /ui/janitor/run[?dryRun=true]`.
pub async fn run_janitor(state: State, ctx: Ctx, req: HttpRequest) -> Answer {
    let dry = crate::api::contract::flag(&req, "dryRun")?;
    match crate::api::system::sweep(&state, &ctx.caller, dry).await {
        Ok(sweep) => Ok(super::layout::fragment(html! {
            p.notice.good role="status" { (if dry { "Dry run done: nothing was deleted." } else { "Sweep done." }) }
            (sweep_view(&sweep))
        })),
        Err(e) => refused(&req, e),
    }
}

/// A sweep: when, what each account listed, and the orphans found.
fn sweep_view(sweep: &crate::model::sweep::Sweep) -> Markup {
    html! {
        (facts(&[
            ("Started", time(sweep.started)),
            ("Took", html! { (span(sweep.finished.saturating_sub(sweep.started))) }),
            ("Asked by", html! { (sweep.trigger) }),
            ("Dry run", html! { (if sweep.dry_run { "yes" } else { "no" }) }),
        ]))
        h3 { "Accounts" }
        @if sweep.accounts.is_empty() { p.muted { "No cloud accounts are in use." } } @else {
            table.wide {
                thead { tr { th scope="col" { "Provisioner" } th scope="col" { "Account" } th scope="col" { "Resources seen" } th scope="col" { "Used by" } th scope="col" { "Error" } } }
                tbody {
                    @for a in &sweep.accounts {
                        tr {
                            td data-label="Provisioner" { (a.provisioner) } td data-label="Account" { code { (a.account) } }
                            td data-label="Resources seen" { (a.listed) }
                            td data-label="Used by" { (a.sources.join(", ")) @if a.more_sources > 0 { " and " (a.more_sources) " more" } }
                            td data-label="Error" { (a.error.as_deref().unwrap_or("–")) }
                        }
                    }
                }
            }
        }
        h3 { "Orphans" }
        @if sweep.orphans.is_empty() { p.muted { "None found." } } @else {
            table.wide {
                thead { tr { th scope="col" { "Resource" } th scope="col" { "Run" } th scope="col" { "Why" } th scope="col" { "Done" } } }
                tbody {
                    @for o in &sweep.orphans {
                        tr {
                            td data-label="Resource" { code { (o.id) } " (" (o.provisioner) ")" }
                            td data-label="Run" { code { (o.run) } @if let Some(n) = &o.node { " " (n) } }
                            td data-label="Why" { (o.reason) }
                            td data-label="Done" { (o.action) }
                        }
                    }
                }
            }
        }
    }
}

/// The add-a-key form.
#[derive(Debug, serde::Deserialize)]
pub struct KeyForm {
    name: String,
    data: String,
    #[serde(default)]
    description: String,
}

/// `POST /ui/ns/{ns}/securekeys`: adds or replaces a key; its value goes into the sealed
/// store and nowhere else.
pub async fn put_secure_key(
    state: State,
    ctx: Ctx,
    ns: web::Path<String>,
    form: web::Form<KeyForm>,
    req: HttpRequest,
) -> Answer {
    let ns = ns.into_inner();
    let form = form.into_inner();
    let name = form.name.trim().to_string();
    let spec: crate::model::secure::KeySpec = match serde_json::from_value(serde_json::json!({
        "data": form.data,
        "description": (!form.description.trim().is_empty()).then(|| form.description.trim().to_string()),
    })) {
        Ok(spec) => spec,
        Err(e) => {
            return refused(
                &req,
                crate::service::error::ServiceError::invalid("data", e.to_string()),
            );
        }
    };
    let act = Act::new(&ctx.caller, "securekey.put", Some(&ns), &name);
    match secure::put(&state.store, &state.cipher, act, ns.clone(), name, spec).await {
        Ok(_) => Ok(super::layout::redirect(
            &req,
            &format!("/ui/ns/{ns}/securekeys"),
        )),
        Err(e) => refused(&req, e),
    }
}

/// `POST /ui/ns/{ns}/securekeys/{name}/delete`.
pub async fn delete_secure_key(
    state: State,
    ctx: Ctx,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Answer {
    let (ns, name) = path.into_inner();
    let act = Act::new(&ctx.caller, "securekey.delete", Some(&ns), &name);
    match secure::delete(&state.store, act, ns.clone(), name).await {
        Ok(_) => Ok(super::layout::redirect(
            &req,
            &format!("/ui/ns/{ns}/securekeys"),
        )),
        Err(e) => refused(&req, e),
    }
}

/// The new-namespace form.
#[derive(Debug, serde::Deserialize)]
pub struct NamespaceForm {
    name: String,
    #[serde(default)]
    description: String,
}

/// `POST /ui/namespaces`: a new namespace (an existing one is not changed).
pub async fn create_namespace(
    state: State,
    ctx: Ctx,
    form: web::Form<NamespaceForm>,
    req: HttpRequest,
) -> Answer {
    let form = form.into_inner();
    let name = form.name.trim().to_string();
    if ctx.namespaces.contains(&name) {
        return refused(
            &req,
            crate::service::error::ServiceError::invalid(
                "name",
                format!("namespace '{name}' exists already"),
            ),
        );
    }
    let spec: crate::model::namespace::NamespaceSpec =
        match serde_json::from_value(serde_json::json!({
            "description": form.description.trim(),
        })) {
            Ok(spec) => spec,
            Err(e) => {
                return refused(
                    &req,
                    crate::service::error::ServiceError::invalid("description", e.to_string()),
                );
            }
        };
    let act = Act::new(&ctx.caller, "namespace.put", Some(&name), &name);
    match namespaces::put(&state.store, act, name, spec).await {
        Ok(_) => Ok(super::layout::redirect(&req, "/ui/namespaces")),
        Err(e) => refused(&req, e),
    }
}

/// `GET /ui/plugins`: the plugins this server loaded, how their calls fare, and those it
/// refused at start-up.
pub async fn plugins(state: State, ctx: Ctx) -> Answer {
    let list = state.registry.plugins();
    let body = html! {
        h1 { "Plugins" }
        p.muted {
            "Provisioners as outside programs, loaded at start-up from the plugin directories ("
            code { "--plugin-dir" } "). Each server of an installation loads its own: install the same on each."
        }
        @if list.plugins.is_empty() {
            p.muted { "No plugin is loaded." }
        } @else {
            table.wide {
                thead { tr {
                    th scope="col" { "Plugin" } th scope="col" { "Kind" } th scope="col" { "Version" }
                    th scope="col" { "Status" } th scope="col" { "Calls" } th scope="col" { "Answered with an error" }
                    th scope="col" { "Broke" } th scope="col" { "Processes started" } th scope="col" { "Directory" }
                } }
                tbody {
                    @for p in &list.plugins {
                        tr {
                            td data-label="Plugin" { code { (p.name) } }
                            td data-label="Kind" { (p.kind) }
                            td data-label="Version" { (p.version) }
                            td data-label="Status" {
                                @if p.failure.is_some() { span.badge.bad { (p.status) } } @else { span.badge.ok { (p.status) } }
                                @if let Some(why) = &p.failure { br; span.muted { (why) } }
                            }
                            td data-label="Calls" { (p.calls) }
                            td data-label="Answered with an error" { (p.errors) }
                            td data-label="Broke" { (p.broken) }
                            td data-label="Processes started" { (p.starts) }
                            td data-label="Directory" { code { (p.dir.clone().unwrap_or_default()) } }
                        }
                    }
                }
            }
        }
        @if !list.broken.is_empty() {
            h2 { "Not loaded" }
            ul {
                @for b in &list.broken { li { code { (b.dir) } ": " (b.error) } }
            }
        }
    };
    Ok(frame(&ctx, "Plugins", body))
}
