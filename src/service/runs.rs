//! Answering questions about runs (lists, a run, its cluster's operations) and starting the
//! operations an admin asks for; starting runs is [`starts`](super::starts). The views
//! redact secret-looking values.

use crate::model::access::Act;
use crate::model::app::WORKFLOWS;
use crate::model::names;
use crate::model::namespace;
use crate::model::run::{ClusterStatus, ProgramStatus, RunKey, RunRecord};
use crate::model::server::Owner;
use crate::model::view::RunView;
use crate::runtime::handle::Runtime;
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::keys;
use crate::store::{Read, Reader, StoreError, Table};

/// Which runs a list shows (the query of `GET .../runs`).
#[derive(Debug, Clone, Default, serde::Deserialize, schemars::JsonSchema)]
pub struct RunFilter {
    /// A program or cluster status (`RUNNING`, `WAITING`...), or `NEEDS_ATTENTION` (a
    /// cluster an operation and its rollback left broken), any case.
    #[serde(default)]
    #[schemars(schema_with = "any_status")]
    pub status: Option<String>,
    /// A cluster status (`PROVISIONED`, `WAITING`...), any case, besides `status`.
    #[serde(default)]
    #[schemars(schema_with = "any_cluster_status")]
    pub cluster: Option<String>,
    /// At most this many runs, 1 to 1000 (100 when left out).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    /// Only runs older than this run id: the `next` of the page before.
    #[serde(default)]
    #[schemars(schema_with = "names::schema")]
    pub before: Option<String>,
}

/// A program or cluster status in any case, as the document describes `status`.
fn any_status(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    use schemars::JsonSchema;
    let mut words = names::variants(&ProgramStatus::json_schema(generator));
    words.extend(names::variants(&ClusterStatus::json_schema(generator)));
    words.push(NEEDS_ATTENTION.to_string());
    names::any_case(&words.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A cluster status in any case.
fn any_cluster_status(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    use schemars::JsonSchema;
    let words = names::variants(&ClusterStatus::json_schema(generator));
    names::any_case(&words.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Runs a list shows when it does not say.
pub const DEFAULT_LIMIT: usize = 100;
/// The most runs one page shows.
pub const MAX_LIMIT: usize = 1_000;
/// The most runs one page reads while looking for those its filter wants.
const SCAN_BUDGET: usize = 10_000;

/// One page of runs, newest first, and the run id the next page starts before.
#[derive(Debug, Clone)]
pub struct RunPage {
    pub runs: Vec<RunView>,
    pub next: Option<String>,
}

/// The `status` a list filters on for the clusters that need attention.
pub const NEEDS_ATTENTION: &str = "NEEDS_ATTENTION";

fn matches(run: &RunRecord, filter: &RunFilter) -> bool {
    let cluster = |s: &str| run.cluster.status.is_some_and(|c| c.to_string() == s);
    filter.status.as_ref().is_none_or(|s| {
        let s = s.to_ascii_uppercase();
        match s.as_str() {
            NEEDS_ATTENTION => run.cluster.attention.is_some(),
            _ => run.status.to_string() == s || cluster(&s),
        }
    }) && filter
        .cluster
        .as_ref()
        .is_none_or(|s| cluster(&s.to_ascii_uppercase()))
}

/// A page of the runs of one program (`program`: `<ns>/<app>/<program>/`), or of a whole
/// namespace (`namespace`: `<ns>/`, through the run index), newest first, paged in the store.
fn list_page(
    r: &Reader,
    program: Option<&str>,
    namespace: &str,
    filter: &RunFilter,
) -> Result<RunPage, ServiceError> {
    let limit = filter.limit.unwrap_or(DEFAULT_LIMIT);
    let mut runs: Vec<RunRecord> = Vec::new();
    let page = match program {
        Some(prefix) => {
            let before = filter.before.as_ref().map(|b| format!("{prefix}{b}"));
            let page = r.scan_back::<RunRecord>(
                Table::Runs,
                prefix,
                before.as_deref(),
                limit,
                SCAN_BUDGET,
                |_, run| matches(run, filter),
            )?;
            runs.extend(page.entries.into_iter().map(|(_, run)| run));
            page.next
        }
        None => {
            let before = filter.before.as_ref().map(|b| format!("{namespace}{b}"));
            let mut failed = None;
            let page = r.scan_back::<String>(
                Table::RunIndex,
                namespace,
                before.as_deref(),
                limit,
                SCAN_BUDGET,
                |_, key| match r.get::<RunRecord>(Table::Runs, key) {
                    Ok(Some(run)) if matches(&run, filter) => {
                        runs.push(run);
                        true
                    }
                    Ok(_) => false,
                    Err(e) => {
                        failed.get_or_insert(e);
                        false
                    }
                },
            )?;
            if let Some(e) = failed {
                return Err(e.into());
            }
            page.next
        }
    };
    let next = page.map(|key| key.rsplit('/').next().unwrap_or_default().to_string());
    let mut positions = Positions::default();
    let runs = runs
        .into_iter()
        .map(|run| {
            let nodes = catalog::held_nodes(r, &run)?;
            let services = catalog::services_of(r, run.cluster_id(), &nodes)?;
            let owner = owner_of(r, &run.key)?;
            let position = positions.of(r, &run)?;
            Ok(RunView::new(run, nodes, services)
                .owned_by(owner)
                .placed(position))
        })
        .collect::<Result<Vec<_>, ServiceError>>()?;
    Ok(RunPage { runs, next })
}

fn check_filter(filter: &RunFilter) -> Result<(), ServiceError> {
    if let Some(limit) = filter.limit
        && !(1..=MAX_LIMIT).contains(&limit)
    {
        return Err(ServiceError::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}, got {limit}"),
        ));
    }
    if let Some(before) = &filter.before {
        names::check("before", before)?;
    }
    if let Some(status) = &filter.status {
        let s = serde_json::Value::String(status.to_ascii_uppercase());
        let known = serde_json::from_value::<ProgramStatus>(s.clone()).is_ok()
            || serde_json::from_value::<ClusterStatus>(s.clone()).is_ok()
            || s == NEEDS_ATTENTION;
        if !known {
            return Err(ServiceError::invalid(
                "status",
                format!(
                    "'{status}' is not a run or cluster status (QUEUED, PENDING, STARTING, RUNNING, COMPLETED, FAILED, KILLED, REJECTED, PROVISIONING, PROVISIONED, WAITING, DEPROVISIONING, DEPROVISIONED, ORPHANED, NEEDS_ATTENTION)"
                ),
            ));
        }
    }
    if let Some(cluster) = &filter.cluster {
        let s = serde_json::Value::String(cluster.to_ascii_uppercase());
        if serde_json::from_value::<ClusterStatus>(s).is_err() {
            return Err(ServiceError::invalid(
                "cluster",
                format!(
                    "'{cluster}' is not a cluster status (PROVISIONING, PROVISIONED, WAITING, DEPROVISIONING, DEPROVISIONED, ORPHANED)"
                ),
            ));
        }
    }
    Ok(())
}

/// The runs of one program, newest first.
pub async fn list_program(
    runtime: &Runtime,
    ns: String,
    app_name: String,
    program: String,
    filter: RunFilter,
) -> Result<RunPage, ServiceError> {
    check_filter(&filter)?;
    runtime
        .store()
        .read(move |r| {
            catalog::require_program(r, &ns, &app_name, WORKFLOWS, &program)?;
            let prefix = keys::program_runs(&ns, &app_name, &program);
            list_page(r, Some(&prefix), &keys::in_namespace(&ns), &filter)
        })
        .await
}

/// The runs of a namespace, newest first.
pub async fn list_namespace(
    runtime: &Runtime,
    ns: String,
    filter: RunFilter,
) -> Result<RunPage, ServiceError> {
    namespace::check_name(&ns)?;
    check_filter(&filter)?;
    runtime
        .store()
        .read(move |r| {
            catalog::require_namespace(r, &ns)?;
            list_page(r, None, &format!("{ns}/"), &filter)
        })
        .await
}

/// Run `key`.
pub async fn get(runtime: &Runtime, key: RunKey) -> Result<RunView, ServiceError> {
    key.check()?;
    runtime
        .store()
        .read(move |r| {
            let run = catalog::require_run(r, &key)?;
            let nodes = catalog::held_nodes(r, &run)?;
            let services = catalog::services_of(r, run.cluster_id(), &nodes)?;
            let owner = owner_of(r, &key)?;
            let position = Positions::default().of(r, &run)?;
            Ok(RunView::new(run, nodes, services)
                .owned_by(owner)
                .placed(position))
        })
        .await
}

/// Where queued runs stand in their namespace's queue, each namespace's queue read once.
#[derive(Default)]
struct Positions(std::collections::BTreeMap<String, std::collections::BTreeMap<String, u32>>);

impl Positions {
    /// Where `run` stands, if it is queued.
    fn of(&mut self, r: &impl Read, run: &RunRecord) -> Result<Option<u32>, StoreError> {
        if run.status != ProgramStatus::Queued {
            return Ok(None);
        }
        let ns = &run.key.namespace;
        if !self.0.contains_key(ns) {
            let positions = crate::store::queue::positions(r, ns)?;
            self.0.insert(ns.clone(), positions);
        }
        Ok(self.0.get(ns).and_then(|p| p.get(&run.key.run)).copied())
    }
}

/// The server that owns run `key`, while it is live.
fn owner_of(r: &impl Read, key: &RunKey) -> Result<Option<String>, StoreError> {
    Ok(r.get::<Owner>(Table::Owners, &key.key())?.map(|o| o.server))
}

/// An operation on a run's cluster that started: its id and kind.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct OperationStarted {
    pub id: u32,
    pub operation: crate::model::plan::ClusterOperation,
}

/// Starts an admin's operation on run `key`'s cluster (expand, shrink, start, stop or
/// restart the services, configure); returns its id and kind.
/// Who asks for a change of a run's cluster: an operator, or the run's own program (its run
/// token), which may not grow the cluster past the size asked for unless `maxNodes` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resizer {
    Admin,
    Program,
}

pub async fn cluster_operation(
    runtime: &Runtime,
    key: RunKey,
    request: crate::rules::resize::ClusterRequest,
    act: Act,
    by: Resizer,
) -> Result<OperationStarted, ServiceError> {
    let (run, change) = change_of(runtime, key, request, by).await?;
    let (before, after) = (run.cluster.nodes.len(), change.final_nodes.len());
    if after > before {
        check_expand(runtime, &run.key.namespace, before, after).await?;
    }
    let operation = change.operation;
    let id = runtime.cluster(&run, change, act).await?;
    Ok(OperationStarted { id, operation })
}

/// The plan an admin's operation would have on run `key`'s cluster now, touching nothing:
/// the cluster's layout once it succeeds, its tasks and their stages, as `POST .../plan`
/// answers for a new cluster.
pub async fn plan_operation(
    runtime: &Runtime,
    key: RunKey,
    request: crate::rules::resize::ClusterRequest,
) -> Result<crate::model::view::DryRun, ServiceError> {
    use crate::runtime::planner::{PlanInput, node_records, plan_tasks};
    let (run, change) = change_of(runtime, key, request, Resizer::Admin).await?;
    runtime
        .store()
        .read(move |r| {
            let nodes = node_records(r, run.cluster_id())?;
            let input = PlanInput {
                operation: change.operation,
                template: run.template.as_ref(),
                nodes: &change.nodes,
                layout: &change.layout,
                changed: &change.changed,
                selection: &change.selection,
            };
            let tasks = plan_tasks(r, run.cluster_id(), &input, &nodes)?;
            let layout = change
                .final_nodes
                .iter()
                .map(|n| {
                    let types = change.node_types.get(n);
                    crate::model::view::PlannedNode {
                        node: n.clone(),
                        hardware_type: types.map(|t| t.hardware_type.clone()).unwrap_or_default(),
                        image_type: types.map(|t| t.image_type.clone()).unwrap_or_default(),
                        services: change.layout.get(n).cloned().unwrap_or_default(),
                    }
                })
                .collect();
            let stages = crate::rules::plan::cluster::stages(&tasks);
            Ok::<_, ServiceError>(crate::model::view::DryRun {
                layout,
                tasks,
                stages,
            })
        })
        .await
}

/// Run `key` and the change `request` makes to its cluster, or a 4xx naming the field.
async fn change_of(
    runtime: &Runtime,
    key: RunKey,
    request: crate::rules::resize::ClusterRequest,
    by: Resizer,
) -> Result<(RunRecord, crate::rules::resize::Change), ServiceError> {
    key.check()?;
    let run = runtime
        .store()
        .read(move |r| catalog::require_run(r, &key))
        .await?;
    let max_nodes = runtime
        .deps()
        .registry
        .get(&run.provisioner)
        .map_or(0, |p| p.max_nodes(&run.properties()));
    // Solving an expand or shrink can take a while: on the blocking pool, not the HTTP worker.
    tokio::task::spawn_blocking(move || {
        let change = crate::rules::resize::change(&run, &request, max_nodes)?;
        let bounds = crate::rules::capacity::resize_bounds(
            &run.properties(),
            by == Resizer::Program,
            max_nodes,
        );
        crate::rules::capacity::check_size(change.operation, change.final_nodes.len(), bounds)
            .map_err(|message| ServiceError::invalid("nodes", message))?;
        if let Some(template) = &run.template {
            let nodes: Vec<crate::model::plan::PlanNode> = change
                .nodes
                .iter()
                .map(|n| crate::model::plan::PlanNode {
                    name: n.clone(),
                    services: change.layout.get(n).cloned().unwrap_or_default(),
                })
                .collect();
            crate::rules::plan::cluster::check_size(change.operation, template, &nodes)
                .map_err(|e| ServiceError::invalid("nodes", e))?;
        }
        Ok::<_, ServiceError>((run, change))
    })
    .await
    .map_err(|e| ServiceError::unfinished("the operation's plan", &e))?
}

/// Refuses an expand from `before` to `after` nodes that would take namespace `ns` past its
/// quota. (Checked before the operation starts, not in its write: two expands at the same
/// instant may both pass.)
async fn check_expand(
    runtime: &Runtime,
    ns: &str,
    before: usize,
    after: usize,
) -> Result<(), ServiceError> {
    let ns = ns.to_string();
    runtime
        .store()
        .read(move |r| {
            let namespace = catalog::require_namespace(r, &ns)?;
            if !namespace.quota.limits() {
                return Ok(());
            }
            let mut usage = catalog::namespace_usage(r, &ns)?;
            // The run counts already, with its nodes before the expand.
            usage.live_runs = usage.live_runs.saturating_sub(1);
            usage.live_nodes = usage.live_nodes.saturating_sub(before as u32);
            match namespace.quota.refuse(usage, after as u32) {
                Some(reason) => Err(ServiceError::Quota {
                    namespace: ns.clone(),
                    reason,
                }),
                None => Ok(()),
            }
        })
        .await
}

/// Sends a command to run `key` and returns the run as it is after it.
pub async fn command(
    runtime: &Runtime,
    key: RunKey,
    event: crate::rules::lifecycle::Event,
    act: Act,
) -> Result<RunView, ServiceError> {
    key.check()?;
    let k = key.clone();
    runtime
        .store()
        .read(move |r| catalog::require_run(r, &k).map(|_| ()))
        .await?;
    runtime.command(key.clone(), event, act).await?;
    get(runtime, key).await
}
