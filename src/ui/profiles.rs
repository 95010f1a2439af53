//! Profiles: the list with status switches, a profile's page (properties, usage,
//! assignments), and the create and edit form drawn from its provisioner's widget.

use std::collections::BTreeMap;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{
    Answer, Ctx, UiError, badge, facts, fragment, frame, need, redirect, refused, span, time,
};
use super::widgets::{self, Entered, Group};
use crate::api::error::ApiError;
use crate::api::profiles::{ProfilePath, act};
use crate::api::state::State;
use crate::model::access::{Need, Role};
use crate::model::profile::{Profile, ProfileId, ProfileSpec, ProfileStatus, Scope};
use crate::model::property::redact;
use crate::service::error::ServiceError;
use crate::service::{profiles, secure};

/// The UI path of profile `id`.
pub fn href(id: &ProfileId) -> String {
    match id.scope {
        Scope::System => format!("/ui/system/profiles/{}", id.name),
        Scope::User => format!("/ui/ns/{}/profiles/{}", id.namespace, id.name),
    }
}

fn id_of(p: &Profile, ns: &str) -> ProfileId {
    match p.scope {
        Scope::System => ProfileId::system(&p.name),
        Scope::User => ProfileId::user(ns, &p.name),
    }
}

/// Whether the caller may change profile `id`.
fn may_change(ctx: &Ctx, id: &ProfileId) -> bool {
    match id.scope {
        Scope::System => ctx.instance_admin(),
        Scope::User => ctx.allows(Need::Namespace(Role::Admin), Some(&id.namespace)),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    namespace: Option<String>,
}

/// One row of the list; swapped in place when its status changes.
fn row(ctx: &Ctx, p: &Profile, id: &ProfileId) -> Markup {
    let (action, label) = match p.status {
        ProfileStatus::Enabled => ("DISABLED", "Disable"),
        ProfileStatus::Disabled => ("ENABLED", "Enable"),
    };
    html! {
        tr id=(format!("profile-{}-{}", id.scope, id.name)) {
            td data-label="Name" { a href=(href(id)) { (p.name) } @if !p.label.is_empty() && p.label != p.name { br; span.muted { (p.label) } } }
            td data-label="Scope" { (id.scope) }
            td data-label="Provisioner" { (p.provisioner.name) }
            td data-label="Status" { (badge(&p.status.to_string())) }
            td data-label="Keepalive" { "failed " (span(p.keepalive.failed)) ", killed " (span(p.keepalive.killed)) }
            td data-label="Timeout" { (p.timeout.map_or("none".to_string(), span)) }
            td {
                @if may_change(ctx, id) {
                    button hx-post=(format!("{}/status", href(id))) hx-vals=(format!(r#"{{"status":"{action}"}}"#))
                        hx-target="closest tr" hx-swap="outerHTML" aria-label=(format!("{label} {}", p.name)) { (label) }
                }
            }
        }
    }
}

/// `GET /ui/profiles`: SYSTEM profiles, then the namespace's.
pub async fn list(state: State, ctx: Ctx, q: web::Query<ListQuery>) -> Answer {
    let ns = q
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or(ctx.ns.clone());
    if let Some(ns) = &ns
        && !ctx.namespaces.contains(ns)
    {
        return Err(ApiError::from(ServiceError::NamespaceNotFound(ns.clone())).into());
    }
    let system = need(profiles::list(&state.store, None, false).await)?;
    let user = match &ns {
        Some(ns) => need(profiles::list(&state.store, Some(ns.clone()), false).await)?,
        None => Vec::new(),
    };
    let ns_name = ns.clone().unwrap_or_default();
    let can_create = ctx.instance_admin()
        || ns
            .as_deref()
            .is_some_and(|n| ctx.allows(Need::Namespace(Role::Admin), Some(n)));
    let body = html! {
        h1 { "Profiles" }
        p.muted { "Where and how runs execute: a provisioner and its properties, keepalive and timeout. SYSTEM profiles serve every namespace." }
        @if can_create {
            p { a.button.primary href=(format!("/ui/profiles/new?namespace={ns_name}")) { "New profile" } }
        }
        div.scroll {
            table.wide {
                thead { tr {
                    th scope="col" { "Name" } th scope="col" { "Scope" } th scope="col" { "Provisioner" }
                    th scope="col" { "Status" } th scope="col" { "Keepalive" } th scope="col" { "Timeout" }
                    th scope="col" { span.sr { "Actions" } }
                } }
                tbody {
                    @for p in &user { (row(&ctx, p, &id_of(p, &ns_name))) }
                    @for p in &system { (row(&ctx, p, &id_of(p, &ns_name))) }
                }
            }
        }
        @if let Some(ns) = &ns { p.muted { "USER profiles of namespace " strong { (ns) } "; pick another at the top." } }
    };
    Ok(frame(&ctx, "Profiles", body))
}

#[derive(Debug, Deserialize)]
pub struct StatusForm {
    status: String,
}

/// `POST .../status`: enables or disables; a refusal (409) is shown with its reason.
pub async fn set_status(
    state: State,
    ctx: Ctx,
    id: ProfilePath,
    form: web::Form<StatusForm>,
    req: HttpRequest,
) -> Answer {
    let id = id.0;
    let (status, action) = match form.status.as_str() {
        "ENABLED" => (ProfileStatus::Enabled, "profile.enable"),
        "DISABLED" => (ProfileStatus::Disabled, "profile.disable"),
        other => {
            return refused(
                &req,
                ServiceError::invalid("status", format!("'{other}' is not ENABLED or DISABLED")),
            );
        }
    };
    match profiles::set_status(
        &state.store,
        act(&ctx.caller, action, &id),
        id.clone(),
        status,
    )
    .await
    {
        Ok(p) => Ok(fragment(row(&ctx, &p, &id))),
        Err(e) => refused(&req, e),
    }
}

/// `GET` a profile's page.
pub async fn page(state: State, ctx: Ctx, id: ProfilePath) -> Answer {
    let id = id.0;
    let p = need(profiles::get(&state.store, id.clone()).await)?;
    let builtin = need(profiles::is_builtin(&state.store, id.clone()).await)?;
    // A SYSTEM profile's usage spans namespaces: an instance admin's to see.
    let sees_usage = id.scope == Scope::User || ctx.instance_admin();
    let usage = if sees_usage {
        Some(need(profiles::usage(&state.runtime, id.clone()).await)?)
    } else {
        None
    };
    // Its usage this month, by day, from the usage ledger.
    let month = if sees_usage {
        let params = crate::model::usage::UsageParams {
            namespace: (id.scope == Scope::User).then(|| id.namespace.clone()),
            profile: Some(id.scoped_name()),
            group_by: Some("day".into()),
            ..Default::default()
        };
        Some(need(
            crate::service::usage::report(&state.store, &ctx.caller.grants, params).await,
        )?)
    } else {
        None
    };
    let assignments = if sees_usage {
        need(profiles::assignments(&state.runtime, id.clone()).await)?
    } else {
        Vec::new()
    };
    let pool = match (id.scope, p.reuse()) {
        (Scope::User, Some(_)) => Some(need(
            crate::service::starts::pool::view(&state.runtime, id.clone()).await,
        )?),
        _ => None,
    };
    let body = html! {
        p.muted { a href="/ui/profiles" { "Profiles" } }
        h1 { (id.scoped_name()) " " (badge(&p.status.to_string())) }
        @if !p.description.is_empty() { p { (p.description) } }
        @if builtin {
            p.muted { "Ships with ebb: it cannot be edited (enable or disable it from the list)." }
        } @else if may_change(&ctx, &id) {
            div.actions {
                a.button href=(format!("{}/edit", href(&id))) { "Edit" }
            }
        }
        (facts(&[
            ("Provisioner", html! { (p.provisioner.name) }),
            ("Scope", html! { (p.scope) }),
            ("Keep after a failed run", html! { (span(p.keepalive.failed)) }),
            ("Keep after a stop with keepalive", html! { (span(p.keepalive.killed)) }),
            ("Longest cluster life", html! { (p.timeout.map_or("no limit".to_string(), span)) }),
            ("Cluster reuse", html! {
                @match p.reuse() {
                    Some(r) => { "a completed run's cluster waits IDLE up to " (span(r.idle)) " for the next run that matches" }
                    None => "off: every run makes its own cluster",
                }
            }),
            ("Created", time(p.created)),
        ]))
        h2 { "Properties" }
        @if p.provisioner.properties.is_empty() {
            p.muted { "None: the provisioner's defaults." }
        } @else {
            div.scroll { table {
                thead { tr { th scope="col" { "Property" } th scope="col" { "Value" } th scope="col" { "Runs may override" } } }
                tbody {
                    @for prop in &p.provisioner.properties {
                        tr { td { code { (prop.name) } } td { code { (redact(&prop.name, &prop.value)) } } td { (if prop.is_editable { "yes" } else { "no (fixed)" }) } }
                    }
                }
            } }
        }
        @if let Some(u) = &usage {
            h2 { "Usage" }
            (facts(&[
                ("Active runs", html! { (u.active_runs.len()) }),
                ("Nodes now", html! { (u.nodes_now) }),
                ("Node-hours", html! { (format!("{:.2}", u.node_hours)) }),
                ("Of them IDLE between runs", html! { (format!("{:.2}", u.idle_node_seconds as f64 / 3600.0)) }),
                ("Runs by status", html! {
                    @if u.runs.is_empty() { "none" }
                    @for (s, n) in &u.runs { (badge(s)) " " (n) " " }
                }),
            ]))
            @if let Some(report) = &month {
                h2 { "This month" }
                (super::chart::month_chart(report))
            }
            @if let Some(pool) = &pool {
                h2 { "Pool" }
                p {
                    @match pool.pool {
                        Some(spec) => { "Keeps " (spec.min) " to " (spec.max) " clusters ready: " }
                        None => "No pool: IDLE clusters its runs left: ",
                    }
                    strong { (pool.ready.len()) } " ready, "
                    strong { (pool.creating.len()) } " being made, "
                    strong { (pool.claimed) } " held by runs."
                }
                @if !pool.ready.is_empty() || !pool.creating.is_empty() {
                    div.scroll { table {
                        thead { tr { th scope="col" { "State" } th scope="col" { "Cluster" } th scope="col" { "Made" } th scope="col" { "Nodes" } th scope="col" { "Expires" } } }
                        tbody {
                            @for (state, c) in pool.ready.iter().map(|c| ("READY", c)).chain(pool.creating.iter().map(|c| ("CREATING", c))) {
                                tr {
                                    td data-label="State" { (badge(if state == "READY" { "IDLE" } else { "PROVISIONING" })) }
                                    td data-label="Cluster" { code { (c.cluster) } }
                                    td data-label="Made" { (if c.pooled { "ahead, for the pool" } else { "by a run that completed" }) }
                                    td data-label="Nodes" { (c.nodes) }
                                    td data-label="Expires" { (c.expires_at.map_or(html! { "when a run takes it" }, crate::ui::layout::deadline)) }
                                }
                            }
                        }
                    } }
                }
            }
            h2 { "Assignments" }
            @if assignments.is_empty() {
                p.muted { "Assigned nowhere: runs use it only when their runtime arguments name it." }
            } @else {
                ul {
                    @for a in &assignments {
                        li {
                            (a.level.to_string())
                            @if let Some(ns) = &a.namespace { " · namespace " (ns) }
                            @if let Some(app) = &a.app { " · app " (app) }
                            @if let Some(program) = &a.program { " · program " (program) }
                        }
                    }
                }
            }
        }
    };
    Ok(frame(&ctx, &id.scoped_name(), body))
}

/// What the form does not show of profile `p` (its retry policy, whether its runs queue, its
/// pool's idle time), carried into the `body` that replaces it, so an edit keeps it.
fn keep_unshown(body: &mut serde_json::Value, p: &crate::model::profile::Profile) {
    if let Some(retry) = &p.retry {
        body["retry"] = serde_json::json!(retry);
    }
    if let Some(queue) = p.queue_runs {
        body["queueRuns"] = serde_json::json!(queue);
    }
    if let (Some(idle), Some(pool)) = (p.pool.and_then(|x| x.idle), body.get_mut("pool")) {
        pool["idle"] = serde_json::json!(idle);
    }
    if let Some(price) = p.price_per_node_hour {
        body["pricePerNodeHour"] = serde_json::json!(price);
    }
}

/// The form's profile-wide values.
#[derive(Debug, Clone, Default)]
struct Basics {
    name: String,
    label: String,
    description: String,
    killed: String,
    failed: String,
    timeout: String,
    /// Whether a completed run leaves its cluster for the next run that matches.
    reuse: bool,
    reuse_idle: String,
    /// The pool's min and max (empty: no pool).
    pool_min: String,
    pool_max: String,
}

/// What the form is for.
struct FormOf<'a> {
    /// The profile's id when it exists (edit); `None` for a new one (its name is a field).
    id: Option<&'a ProfileId>,
    /// Where a new profile goes: `SYSTEM` or a namespace.
    scope: &'a str,
    provisioner: &'a str,
}

/// The create or edit form: profile-wide fields, then each widget group's properties.
#[allow(clippy::too_many_arguments)]
fn form(
    of: &FormOf<'_>,
    groups: &[Group],
    basics: &Basics,
    entered: &BTreeMap<String, Entered>,
    errors: &BTreeMap<String, String>,
    keys: &[String],
) -> Markup {
    let action = match (of.id, of.scope) {
        (Some(id), _) => href(id),
        (None, "SYSTEM") => "/ui/system/profiles".to_string(),
        (None, ns) => format!("/ui/ns/{ns}/profiles"),
    };
    let top = |field: &str| errors.get(field).map(String::as_str);
    let plain = |id: &str, name: &str, label: &str, value: &str, help: &str, required: bool| {
        let error = top(name);
        html! {
            div.field.invalid[error.is_some()] {
                label.required[required] for=(id) { (label) }
                input id=(id) type="text" name=(name) value=(value) required[required] maxlength="2000"
                    aria-describedby=(format!("{id}-help")) aria-invalid=[error.map(|_| "true")];
                @if let Some(e) = error { p.error role="alert" { (e) } }
                p.help id=(format!("{id}-help")) { (help) }
            }
        }
    };
    html! {
        @if let Some(e) = top("") { p.notice.bad role="alert" { (e) } }
        form.profile method="post" action=(action) novalidate {
            input type="hidden" name="provisioner" value=(of.provisioner);
            fieldset {
                legend { "Profile" }
                @if of.id.is_none() {
                    (plain("name", "name", "Name", &basics.name, "Letters, digits, '-' and '_'; it names the profile in preferences (system.profile.name).", true))
                }
                (plain("label", "label", "Label", &basics.label, "A short human name.", false))
                (plain("description", "description", "Description", &basics.description, "What runs on it, and for whom.", false))
            }
            fieldset {
                legend { "Keepalive and timeout" }
                (plain("keepalive-failed", "keepalive.failed", "Keep after a failed run", &basics.failed, "How long a failed run's cluster stays for debugging (0, 30m, 8h).", false))
                (plain("keepalive-killed", "keepalive.killed", "Keep after a stop with keepalive", &basics.killed, "How long a cluster stays after its run is stopped with keepalive.", false))
                (plain("timeout", "timeout", "Longest cluster life", &basics.timeout, "The run is killed when its cluster is this old (1h, 2d); empty for no limit.", false))
            }
            fieldset {
                legend { "Reuse and warm pool" }
                div.field {
                    label {
                        input type="checkbox" name="clusterReuse" value="true" checked[basics.reuse];
                        " A run that completes leaves its cluster IDLE for the next run that matches (same namespace, profile, properties and template)"
                    }
                }
                (plain("reuse-idle", "reuseIdle", "Idle for at most", &basics.reuse_idle, "How long an IDLE cluster waits for its next run (10m, 1h); empty for 30m. Bounded by the longest cluster life.", false))
                (plain("pool-min", "pool.min", "Pool: clusters kept ready", &basics.pool_min, "Clusters made ahead of demand for this namespace's runs (a profile of a namespace only); empty for no pool.", false))
                (plain("pool-max", "pool.max", "Pool: at most", &basics.pool_max, "Most IDLE clusters the pool keeps (made ahead, or left by runs); 1 to 100.", false))
            }
            @for g in groups {
                fieldset {
                    legend { (g.label) }
                    @for f in &g.fields {
                        (widgets::field(f, entered.get(&f.name), errors.get(&format!("p.{}", f.name)).map(String::as_str), keys))
                    }
                }
            }
            div.actions { button.primary type="submit" { "Save profile" } }
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct NewQuery {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    provisioner: Option<String>,
}

/// The scopes the caller may make profiles in: `SYSTEM` for an instance admin, and every
/// namespace it administers.
fn scopes(ctx: &Ctx) -> Vec<String> {
    let mut out = Vec::new();
    if ctx.instance_admin() {
        out.push("SYSTEM".to_string());
    }
    out.extend(
        ctx.namespaces
            .iter()
            .filter(|n| ctx.allows(Need::Namespace(Role::Admin), Some(n)))
            .cloned(),
    );
    out
}

/// The secure keys a picker offers: the namespace's (for a SYSTEM profile, those of the
/// namespace the page is in).
async fn keys(state: &State, ctx: &Ctx, scope: &str) -> Vec<String> {
    let ns = if scope == "SYSTEM" {
        ctx.ns.clone()
    } else {
        Some(scope.to_string())
    };
    match ns {
        Some(ns) if ctx.namespaces.contains(&ns) => secure::list(&state.store, ns)
            .await
            .map(|ks| ks.into_iter().map(|k| k.name).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn provisioner_groups(state: &State, name: &str) -> Result<Vec<Group>, UiError> {
    let detail = state
        .registry
        .detail(name)
        .ok_or_else(|| ApiError::from(ServiceError::ProvisionerNotFound(name.to_string())))?;
    let spec = state
        .registry
        .get(name)
        .map(|p| p.spec())
        .ok_or_else(|| ApiError::from(ServiceError::ProvisionerNotFound(name.to_string())))?;
    Ok(widgets::groups(&detail.configuration_groups, spec))
}

/// `GET /ui/profiles/new`: pick where and which provisioner, then fill its form.
pub async fn new(state: State, ctx: Ctx, q: web::Query<NewQuery>) -> Answer {
    let scopes = scopes(&ctx);
    if scopes.is_empty() {
        return Err(ApiError::Forbidden(
            "making a profile needs a namespace's admin role or an instance-admin token".into(),
        )
        .into());
    }
    let scope = q
        .scope
        .clone()
        .filter(|s| scopes.contains(s))
        .or_else(|| q.namespace.clone().filter(|n| scopes.contains(n)))
        .unwrap_or_else(|| scopes[0].clone());
    let body = match q.provisioner.as_deref().filter(|p| !p.is_empty()) {
        None => html! {
            h1 { "New profile" }
            form method="get" action="/ui/profiles/new" {
                div.field {
                    label for="scope" { "Scope" }
                    select #scope name="scope" {
                        @for s in &scopes { option value=(s) selected[*s == scope] { (if s == "SYSTEM" { "SYSTEM (every namespace)".to_string() } else { format!("namespace {s}") }) } }
                    }
                }
                fieldset {
                    legend { "Provisioner" }
                    @for (i, d) in state.registry.details().iter().enumerate() {
                        label.fixed {
                            input type="radio" name="provisioner" value=(d.name) checked[i == 0] required;
                            strong { (d.label) } " (" code { (d.name) } ")"
                            @if let Some(plugin) = &d.plugin {
                                " " span.badge.wait { "plugin " (plugin.version) }
                            }
                        }
                        p.help { (d.description) }
                    }
                }
                button.primary type="submit" { "Next" }
            }
        },
        Some(provisioner) => {
            let groups = provisioner_groups(&state, provisioner)?;
            let keys = keys(&state, &ctx, &scope).await;
            html! {
                h1 { "New " (provisioner) " profile" }
                p.muted { "In " (if scope == "SYSTEM" { "SYSTEM scope".to_string() } else { format!("namespace {scope}") }) ". " a href="/ui/profiles/new" { "Start over" } }
                (form(&FormOf { id: None, scope: &scope, provisioner }, &groups, &Basics::default(), &BTreeMap::new(), &BTreeMap::new(), &keys))
            }
        }
    };
    Ok(frame(&ctx, "New profile", body))
}

/// `GET .../edit`.
pub async fn edit(state: State, ctx: Ctx, id: ProfilePath) -> Answer {
    let id = id.0;
    let p = need(profiles::get(&state.store, id.clone()).await)?;
    let groups = provisioner_groups(&state, &p.provisioner.name)?;
    let scope = match id.scope {
        Scope::System => "SYSTEM".to_string(),
        Scope::User => id.namespace.clone(),
    };
    let keys = keys(&state, &ctx, &scope).await;
    let basics = Basics {
        name: p.name.clone(),
        label: p.label.clone(),
        description: p.description.clone(),
        killed: span_text(p.keepalive.killed),
        failed: span_text(p.keepalive.failed),
        timeout: p.timeout.map(span_text).unwrap_or_default(),
        reuse: p.cluster_reuse,
        reuse_idle: p.reuse_idle.map(span_text).unwrap_or_default(),
        pool_min: p.pool.map(|x| x.min.to_string()).unwrap_or_default(),
        pool_max: p.pool.map(|x| x.max.to_string()).unwrap_or_default(),
    };
    let body = html! {
        p.muted { a href=(href(&id)) { (id.scoped_name()) } }
        h1 { "Edit " (id.scoped_name()) }
        (form(&FormOf { id: Some(&id), scope: &scope, provisioner: &p.provisioner.name }, &groups, &basics, &widgets::entered(&p.provisioner.properties), &BTreeMap::new(), &keys))
    };
    Ok(frame(&ctx, "Edit profile", body))
}

/// Seconds as the form shows them: a duration humantime reads back (`8h`, `90s`).
fn span_text(secs: u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

/// `POST /ui/system/profiles` and `/ui/ns/{ns}/profiles`: a new profile.
pub async fn create(
    state: State,
    ctx: Ctx,
    form: web::Form<Vec<(String, String)>>,
    req: HttpRequest,
) -> Answer {
    let scope = req
        .match_info()
        .get("ns")
        .map_or("SYSTEM".to_string(), str::to_string);
    save_form(&state, &ctx, None, &scope, form.into_inner(), &req).await
}

/// `POST` to a profile's path: its new definition.
pub async fn save(
    state: State,
    ctx: Ctx,
    id: ProfilePath,
    form: web::Form<Vec<(String, String)>>,
    req: HttpRequest,
) -> Answer {
    let id = id.0;
    let scope = match id.scope {
        Scope::System => "SYSTEM".to_string(),
        Scope::User => id.namespace.clone(),
    };
    save_form(&state, &ctx, Some(id), &scope, form.into_inner(), &req).await
}

/// Most fields a profile form may send.
const MAX_FIELDS: usize = 500;

/// Stores what the form sent, or draws it again with each error next to its field.
async fn save_form(
    state: &State,
    ctx: &Ctx,
    existing: Option<ProfileId>,
    scope: &str,
    sent: Vec<(String, String)>,
    req: &HttpRequest,
) -> Answer {
    if sent.len() > MAX_FIELDS {
        return Err(
            ServiceError::invalid("form", format!("has more than {MAX_FIELDS} fields")).into(),
        );
    }
    let get = |k: &str| {
        sent.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default()
    };
    let provisioner = get("provisioner");
    let groups = provisioner_groups(state, &provisioner)?;
    let basics = Basics {
        name: existing
            .as_ref()
            .map_or_else(|| get("name"), |id| id.name.clone()),
        label: get("label"),
        description: get("description"),
        killed: get("keepalive.killed"),
        failed: get("keepalive.failed"),
        timeout: get("timeout"),
        reuse: get("clusterReuse") == "true",
        reuse_idle: get("reuseIdle"),
        pool_min: get("pool.min"),
        pool_max: get("pool.max"),
    };
    let mut entered = BTreeMap::new();
    let mut properties = Vec::new();
    for f in groups.iter().flat_map(|g| &g.fields) {
        let raw = sent
            .iter()
            .find(|(n, _)| n.strip_prefix("p.") == Some(f.name.as_str()))
            .map(|(_, v)| v.as_str())
            .unwrap_or_default();
        let value = widgets::value_of(f, raw);
        let editable = !sent
            .iter()
            .any(|(n, v)| n.strip_prefix("fixed.") == Some(f.name.as_str()) && v == "true");
        entered.insert(
            f.name.clone(),
            Entered {
                value: value.clone(),
                editable,
            },
        );
        if !value.is_empty() {
            properties
                .push(serde_json::json!({"name": f.name, "value": value, "isEditable": editable}));
        }
    }
    let id = match &existing {
        Some(id) => id.clone(),
        None if scope == "SYSTEM" => ProfileId::system(&basics.name),
        None => ProfileId::user(scope, &basics.name),
    };
    let mut body = serde_json::json!({
        "label": basics.label,
        "description": basics.description,
        "provisioner": { "name": provisioner, "properties": properties },
        "keepalive": {
            "killed": if basics.killed.is_empty() { "0".to_string() } else { basics.killed.clone() },
            "failed": if basics.failed.is_empty() { "0".to_string() } else { basics.failed.clone() },
        },
    });
    if !basics.timeout.is_empty() {
        body["timeout"] = serde_json::Value::String(basics.timeout.clone());
    }
    if basics.reuse {
        body["clusterReuse"] = serde_json::Value::Bool(true);
    }
    if !basics.reuse_idle.is_empty() {
        body["reuseIdle"] = serde_json::Value::String(basics.reuse_idle.clone());
    }
    if !basics.pool_min.is_empty() || !basics.pool_max.is_empty() {
        // A number where one was typed; else the text, which the profile's checks name.
        let number = |v: &str, or: u64| match v {
            "" => serde_json::json!(or),
            v => v
                .parse::<u64>()
                .map_or_else(|_| serde_json::json!(v), |n| serde_json::json!(n)),
        };
        let min = number(&basics.pool_min, 0);
        let max = number(&basics.pool_max, min.as_u64().unwrap_or(0).max(1));
        body["pool"] = serde_json::json!({"min": min, "max": max});
    }
    let result = async {
        if basics.name.is_empty() {
            return Err(ServiceError::invalid("name", "a profile needs a name"));
        }
        crate::model::names::check("name", &basics.name)?;
        if existing.is_none() && profiles::get(&state.store, id.clone()).await.is_ok() {
            return Err(ServiceError::invalid(
                "name",
                format!("{id} exists already: edit it instead"),
            ));
        }
        if existing.is_some() {
            keep_unshown(&mut body, &profiles::get(&state.store, id.clone()).await?);
        }
        let spec: ProfileSpec = serde_path_to_error::deserialize(body.clone())
            .map_err(|e| ServiceError::invalid(e.path().to_string(), e.inner().to_string()))?;
        let action = if existing.is_some() {
            "profile.put"
        } else {
            "profile.create"
        };
        profiles::put(
            &state.store,
            &state.registry,
            (act(&ctx.caller, action, &id), ctx.caller.trust()),
            id.clone(),
            spec,
        )
        .await
    }
    .await;
    match result {
        Ok(_) => Ok(redirect(req, &href(&id))),
        Err(ServiceError::Invalid(invalid)) => {
            let key = match invalid.field.as_str() {
                f if widgets::property_of(f).is_some() => {
                    format!("p.{}", widgets::property_of(f).unwrap_or_default())
                }
                "name" | "label" | "description" | "timeout" | "keepalive.killed"
                | "keepalive.failed" | "reuseIdle" | "pool.min" | "pool.max" => {
                    invalid.field.clone()
                }
                _ => String::new(),
            };
            let message = if key.is_empty() {
                invalid.to_string()
            } else {
                invalid.message.clone()
            };
            let errors = BTreeMap::from([(key, message)]);
            let keys = keys(state, ctx, scope).await;
            let of = FormOf {
                id: existing.as_ref(),
                scope,
                provisioner: &provisioner,
            };
            let title = match &existing {
                Some(id) => format!("Edit {}", id.scoped_name()),
                None => format!("New {provisioner} profile"),
            };
            let body = html! {
                h1 { (title) }
                (form(&of, &groups, &basics, &entered, &errors, &keys))
            };
            let mut answer = frame(ctx, &title, body);
            *answer.status_mut() = StatusCode::BAD_REQUEST;
            Ok(answer)
        }
        Err(e) => Err(ApiError::from(e).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An edit through the form keeps what the form does not show.
    #[test]
    fn an_edit_keeps_the_retry_queueing_and_pool_idle_it_does_not_show() {
        let stored: crate::model::profile::Profile = serde_json::from_value(serde_json::json!({
            "name": "p", "label": "p", "description": "", "scope": "USER", "status": "ENABLED",
            "provisioner": {"name": "sim", "properties": []},
            "keepalive": {"killed": 0, "failed": 0}, "timeout": null,
            "retry": {"maxAttempts": 3, "onExitCodes": [75], "backoff": 30},
            "queueRuns": true,
            "pool": {"min": 1, "max": 2, "idle": 600},
            "created": 1
        }))
        .expect("a profile");
        let mut body = serde_json::json!({
            "label": "p", "description": "",
            "provisioner": {"name": "sim", "properties": []},
            "keepalive": {"killed": "0", "failed": "0"},
            "pool": {"min": 1, "max": 3},
        });
        keep_unshown(&mut body, &stored);
        let spec: ProfileSpec = serde_json::from_value(body).expect("a profile body");
        let retry = spec.retry.expect("retry kept");
        assert_eq!((retry.max_attempts, retry.backoff), (3, 30));
        assert_eq!(retry.on_exit_codes, vec![75]);
        assert_eq!(spec.queue_runs, Some(true));
        let pool = spec.pool.expect("pool");
        assert_eq!(
            (pool.max, pool.idle.map(|s| s.0)),
            (3, Some(600)),
            "the form's max, the kept idle"
        );
    }
}
