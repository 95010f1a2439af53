//! Routes of the server itself: health, the servers of the installation, the provisioners it
//! offers, its janitor.

use std::sync::Arc;

use actix_web::{HttpRequest, web};
use serde::{Deserialize, Serialize};

use crate::api::contract::{Answer, Flag, Prometheus, Query, Reply, ok};
use crate::api::error::ApiError;
use crate::api::forward::forward;
use crate::api::state::State;
use crate::model::access::{Act, Caller};
use crate::model::server::ServerView;
use crate::model::sweep::{JanitorView, Sweep};
use crate::model::view::{PluginList, ProvisionerDetail};
use crate::runtime::membership::drain;
use crate::service::error::ServiceError;

/// The answer of `GET /v3/health`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Health {
    /// Always `ok`: the server answers.
    pub status: &'static str,
}

pub async fn health() -> Reply<Health> {
    ok(Health { status: "ok" })
}

pub async fn list_servers(state: State) -> Reply<Vec<ServerView>> {
    ok(crate::service::servers::list(&state.store).await?)
}

/// `POST /v3/servers/{name}/drain`: the server hands its runs to the others, then stops.
/// Sent to another server, the request goes on to the one named.
pub async fn drain_server(
    state: State,
    caller: Caller,
    name: web::Path<String>,
    req: HttpRequest,
) -> Reply<Draining, 202> {
    let name = name.into_inner();
    let member = &state.runtime.deps().member;
    if *member.name != *name {
        let servers = crate::service::servers::list(&state.store).await?;
        let Some(server) = servers.into_iter().find(|s| s.record.name == name) else {
            return Err(ServiceError::ServerNotFound(name).into());
        };
        let who = format!("server {name}, which");
        return forward(&state, &req, &who, &server.record.url)
            .await
            .map(Answer::forwarded);
    }
    if !state.store.shared() {
        return Err(ApiError::Conflict(
            "this server is the only one of its installation (embedded store): there is no other to hand its runs to; stop it with SIGTERM, and its runs resume when it starts again".into(),
        ));
    }
    // The first request starts the drain; a second one at the same time only answers.
    if member.start_draining() {
        let act = Act::new(&caller, "server.drain", None, &name);
        crate::service::audit::record(&state.store, act).await?;
        let (runtime, shutdown) = (state.runtime.clone(), Arc::clone(&state.shutdown));
        actix_web::rt::spawn(async move {
            if let Err(e) = drain(&runtime).await {
                tracing::error!(error = %e, "drain did not finish; stopping anyway");
            }
            shutdown.notify_one();
        });
    }
    Ok(Answer::new(Draining {
        name,
        draining: true,
    }))
}

/// The answer to a drain: the server hands its runs on and stops.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Draining {
    pub name: String,
    pub draining: bool,
}

pub async fn list_provisioners(state: State) -> Reply<Vec<ProvisionerDetail>> {
    ok(state.registry.details())
}

/// The plugins this server loaded, how they fare, and those it refused.
pub async fn list_plugins(state: State) -> Reply<PluginList> {
    ok(state.registry.plugins())
}

pub async fn get_provisioner(state: State, name: web::Path<String>) -> Reply<ProvisionerDetail> {
    let name = name.into_inner();
    match state.registry.detail(&name) {
        Some(detail) => ok(detail),
        None => Err(ServiceError::ProvisionerNotFound(name).into()),
    }
}

pub async fn get_janitor(state: State) -> Reply<JanitorView> {
    let last = state.janitor.last().await?;
    ok(JanitorView {
        settings: state.janitor.settings,
        last,
    })
}

/// The query of `POST /v3/janitor/run`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SweepQuery {
    /// Only find the orphans; delete nothing.
    #[serde(default)]
    dry_run: Flag,
}

pub async fn run_janitor(state: State, caller: Caller, query: Query<SweepQuery>) -> Reply<Sweep> {
    ok(sweep(&state, &caller, query.0.dry_run.0).await?)
}

/// A sweep of the janitor asked for by `caller` (the API's and the UI's): a sweep that may
/// delete is recorded in the audit log first.
pub async fn sweep(state: &State, caller: &Caller, dry_run: bool) -> Result<Sweep, ApiError> {
    if !dry_run {
        let act = Act::new(caller, "janitor.run", None, "sweep");
        crate::service::audit::record(&state.store, act).await?;
    }
    Ok(state.janitor.sweep_now(dry_run).await?)
}

/// `GET /metrics`: the recorded metrics and the installation's live runs, clusters and
/// nodes, in Prometheus text format.
pub async fn metrics(state: State) -> Result<Prometheus, ApiError> {
    use crate::model::metrics::{
        BUDGET_USED, CLUSTERS_NEEDING_ATTENTION, LIVE_CLUSTERS, LIVE_NODES, LIVE_RUNS,
        POOL_CLUSTERS,
    };
    let Some(handle) = &state.metrics else {
        return Err(ApiError::Unavailable(
            "this process records no metrics (its recorder could not be installed)".into(),
        ));
    };
    metrics::gauge!(crate::model::metrics::CLOCK_OFFSET.name)
        .set(crate::store::clock::offset_secs());
    handle.run_upkeep();
    let mut text = handle.render();
    let live = crate::service::overview::live(&state.runtime).await?;
    let mut gauge = |m: &crate::model::metrics::Metric, rows: Vec<(Vec<&str>, usize)>| {
        text.push_str(&format!(
            "# HELP {} {}\n# TYPE {} gauge\n",
            m.name, m.help, m.name
        ));
        for (values, n) in rows {
            let labels: Vec<String> = m
                .labels
                .iter()
                .zip(values)
                .map(|(k, v)| format!("{k}=\"{}\"", label_value(v)))
                .collect();
            text.push_str(&format!("{}{{{}}} {n}\n", m.name, labels.join(",")));
        }
    };
    gauge(
        &LIVE_RUNS,
        live.runs
            .iter()
            .map(|((p, c), n)| (vec![p.as_str(), c.as_str()], *n))
            .collect(),
    );
    gauge(
        &LIVE_CLUSTERS,
        live.clusters
            .iter()
            .map(|((p, f, s), c)| (vec![p.as_str(), f.as_str(), s.as_str()], c.clusters))
            .collect(),
    );
    gauge(
        &LIVE_NODES,
        live.clusters
            .iter()
            .map(|((p, f, s), c)| (vec![p.as_str(), f.as_str(), s.as_str()], c.nodes))
            .collect(),
    );
    gauge(&CLUSTERS_NEEDING_ATTENTION, vec![(vec![], live.attention)]);
    gauge(
        &POOL_CLUSTERS,
        vec![
            (vec!["ready"], live.pool_ready),
            (vec!["creating"], live.pool_creating),
        ],
    );
    let shares = crate::service::usage::budget_shares(&state.store).await?;
    text.push_str(&format!(
        "# HELP {0} {1}\n# TYPE {0} gauge\n",
        BUDGET_USED.name, BUDGET_USED.help
    ));
    for (ns, share) in shares {
        text.push_str(&format!(
            "{}{{namespace=\"{}\"}} {share}\n",
            BUDGET_USED.name,
            label_value(&ns)
        ));
    }
    Ok(Prometheus(text))
}

/// `v` as a Prometheus label value: backslash, quote and newline escaped.
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
