//! What the API returns for a run, its logs and a profile's usage; the CLI reads the same
//! types. Secrets are redacted on the way in ([`RunView::new`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::plan::{ClusterTask, NodeRecord, ResourceStatus};
use crate::model::property::{Origin, Values, redact};
use crate::model::run::{ClusterStatus, Exit, Failure, ProgramStatus, RunRecord};
use crate::model::service::{ServiceRecord, ServiceState};

/// A property as a run shows it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PropertyView {
    pub name: String,
    pub value: String,
    pub origin: Origin,
}

/// A node as a run shows it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    pub name: String,
    pub id: Option<String>,
    pub status: ResourceStatus,
    pub ip_address: Option<String>,
    pub create_time: Option<u64>,
    pub delete_time: Option<u64>,
    pub properties: BTreeMap<String, String>,
    /// The state of each service on the node, as the operations and checks left it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub services: BTreeMap<String, ServiceState>,
}

/// The cluster of a run as shown.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    pub status: Option<ClusterStatus>,
    pub expires_at: Option<u64>,
    pub end: Option<u64>,
    pub num_nodes: Option<usize>,
    pub nodes: Vec<NodeView>,
    /// Set while the cluster needs attention (an operation and its rollback failed); only a
    /// `repair` may run on it then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<crate::model::run::Attention>,
    /// Where the cluster came from: `fresh` (made for the run), `reused` (taken over from a
    /// run that left it IDLE) or `pooled` (made ahead of demand for the profile's pool).
    #[serde(default = "fresh")]
    pub origin: String,
    /// The cluster's id, when the run did not make it (the run that did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The run it was taken over from, when and how fast, whether it was made ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<crate::model::run::Origin>,
    /// The run that took the cluster over (`REUSED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_by: Option<String>,
    /// Nodes its create gave up for want of capacity anywhere: the cluster went on with
    /// fewer, at least the profile's `minNodes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub given_up: Vec<String>,
    /// What the cluster's services published for programs (`endpoint.<name>` facts): each
    /// name with its nodes' values, master first, joined by commas.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub endpoints: BTreeMap<String, String>,
}

fn fresh() -> String {
    "fresh".into()
}

/// A run as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    pub runid: String,
    pub namespace: String,
    pub app: String,
    pub program: String,
    pub status: ProgramStatus,
    pub starting: u64,
    pub start: Option<u64>,
    pub end: Option<u64>,
    pub properties: Values,
    pub profile: String,
    pub profile_properties: Vec<PropertyView>,
    pub cluster: ClusterView,
    pub failure: Option<Failure>,
    pub exit: Option<Exit>,
    pub stopping: bool,
    /// The server that carries the run on while it is live (none once it ended).
    #[serde(default)]
    pub owner: Option<String>,
    /// The schedule fire that started it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<crate::model::schedule::StartedBy>,
    /// Its stay in the admission queue, if a limit made it wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueView>,
    /// The number of the program's attempt now (from 1).
    #[serde(default = "first")]
    pub attempt: u32,
    /// The attempts that failed and were tried again, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<crate::model::run::ProgramAttempt>,
    /// How a failed program is tried again, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::model::retry::Retry>,
    /// When the next attempt is launched (epoch seconds), while the run waits to try again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relaunch_at: Option<u64>,
    /// The engine application the program's attempt now submitted, once its output named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<ApplicationView>,
}

/// The engine application a run's program submitted, as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationView {
    /// `spark`.
    pub engine: String,
    pub id: String,
    /// Its page on the engine's web UI (the Spark master's page of the application), while
    /// the cluster publishes the UI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ui: Option<String>,
    /// Its page on the engine's history server (Spark's, when the cluster runs one), which
    /// shows it after it ended too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<String>,
}

impl ApplicationView {
    /// `app` with its page on the UI that `endpoints` publish.
    pub fn new(app: crate::model::run::Application, endpoints: &BTreeMap<String, String>) -> Self {
        let ui = match app.engine.as_str() {
            crate::model::app::SPARK => endpoints
                .get("spark-ui")
                .map(|ui| format!("{}/app/?appId={}", ui.trim_end_matches('/'), app.id)),
            _ => None,
        };
        let history = match app.engine.as_str() {
            crate::model::app::SPARK => endpoints
                .get("spark-history")
                .map(|h| format!("{}/history/{}/", h.trim_end_matches('/'), app.id)),
            _ => None,
        };
        ApplicationView {
            engine: app.engine,
            id: app.id,
            ui,
            history,
        }
    }
}

fn first() -> u32 {
    1
}

/// A run's stay in the admission queue, as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct QueueView {
    #[serde(flatten)]
    pub stay: crate::model::run::QueueStay,
    /// Where it stands in its namespace's queue while QUEUED (1 is next, in order of
    /// arrival; the runs ahead that a limit of their own holds back may be passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
}

impl RunView {
    /// Run `run` with its nodes `nodes` and the state of their `services`, as shown: secret
    /// values masked.
    pub fn new(run: RunRecord, nodes: Vec<NodeRecord>, services: Vec<ServiceRecord>) -> RunView {
        let mut states: BTreeMap<String, BTreeMap<String, ServiceState>> = BTreeMap::new();
        for s in services {
            states.entry(s.node).or_default().insert(s.service, s.state);
        }
        let args = run
            .args
            .iter()
            .map(|(k, v)| (k.clone(), redact(k, v).to_string()))
            .collect();
        let profile_properties = run
            .profile_properties
            .iter()
            .map(|p| PropertyView {
                name: p.name.clone(),
                value: redact(&p.name, &p.value).to_string(),
                origin: p.origin.clone(),
            })
            .collect();
        let endpoints = crate::model::endpoint::endpoints(in_cluster_order(&run, &nodes));
        let application = run
            .application
            .clone()
            .map(|app| ApplicationView::new(app, &endpoints));
        let nodes = nodes
            .into_iter()
            .map(|n| NodeView {
                services: states.remove(&n.node).unwrap_or_default(),
                name: n.node,
                id: n.id,
                status: n.status,
                ip_address: n.address,
                create_time: n.create_time,
                delete_time: n.delete_time,
                properties: n
                    .properties
                    .iter()
                    .map(|(k, v)| (k.clone(), redact(k, v).to_string()))
                    .collect(),
            })
            .collect();
        let attempt = run.attempt();
        RunView {
            runid: run.key.run,
            namespace: run.key.namespace,
            app: run.key.app,
            program: run.key.program,
            status: run.status,
            starting: run.starting,
            start: run.start,
            end: run.end,
            properties: args,
            profile: run.profile,
            profile_properties,
            cluster: ClusterView {
                status: run.cluster.status,
                expires_at: run.cluster.expires_at,
                end: run.cluster.end,
                num_nodes: run.cluster.status.map(|_| run.cluster.nodes.len()),
                attention: run.cluster.attention.clone(),
                origin: match &run.cluster.origin {
                    Some(o) if o.pooled => "pooled".into(),
                    Some(_) => "reused".into(),
                    None => fresh(),
                },
                id: run.cluster.id.clone(),
                reused_from: run.cluster.origin.clone(),
                reused_by: run.cluster.reused_by.clone(),
                given_up: run.cluster.given_up.clone(),
                endpoints,
                nodes,
            },
            failure: run.failure,
            exit: run.exit,
            stopping: run.stop.is_some() && !run.status.is_end(),
            owner: None,
            started_by: run.started_by,
            queue: run.queue.map(|stay| QueueView {
                stay,
                position: None,
            }),
            attempt,
            attempts: run.attempts,
            retry: run.retry,
            relaunch_at: run.relaunch_at,
            application,
        }
    }

    /// The view, with where the run stands in its namespace's queue.
    pub fn placed(mut self, position: Option<u32>) -> RunView {
        if let Some(q) = self.queue.as_mut() {
            q.position = position;
        }
        self
    }

    /// The view, with the server that owns the run.
    pub fn owned_by(self, owner: Option<String>) -> RunView {
        RunView { owner, ..self }
    }
}

/// `nodes` in the order of `run`'s cluster (its master first), those it does not name last.
pub fn in_cluster_order<'a>(run: &RunRecord, nodes: &'a [NodeRecord]) -> Vec<&'a NodeRecord> {
    let mut sorted: Vec<&NodeRecord> = nodes.iter().collect();
    sorted.sort_by_key(|n| {
        run.cluster
            .nodes
            .iter()
            .position(|m| m == &n.node)
            .unwrap_or(usize::MAX)
    });
    sorted
}

/// The end of one of a service's logs on a node, as `GET .../services/{service}/logs`
/// returns it.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceLog {
    /// The path the template names, under the node's directory.
    pub file: String,
    /// Its last bytes (at most 64 KiB), when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Its size in bytes: more than `text` holds when only its end is shown.
    #[serde(default)]
    pub size: u64,
    /// Why it could not be read (not there yet, the node out of reach).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ServiceLog {
    pub fn found(file: &str, text: String, size: u64) -> ServiceLog {
        ServiceLog {
            file: file.to_string(),
            text: Some(text),
            size,
            error: None,
        }
    }

    pub fn unread(file: &str, error: String) -> ServiceLog {
        ServiceLog {
            file: file.to_string(),
            text: None,
            size: 0,
            error: Some(error),
        }
    }
}

/// A service's logs on one node.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceLogs {
    pub node: String,
    pub service: String,
    pub logs: Vec<ServiceLog>,
}

/// The program's output so far.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Logs {
    pub stdout: String,
    pub stderr: String,
}

/// How a profile has been used.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub profile: String,
    /// Runs by program status, ended runs and live ones alike.
    pub runs: BTreeMap<String, usize>,
    /// Runs that still hold (or may hold) a cluster.
    pub active_runs: Vec<String>,
    /// Nodes that exist right now.
    pub nodes_now: usize,
    /// Node-seconds from each node's recorded create time to its delete time (or now).
    pub node_seconds: u64,
    pub node_hours: f64,
    /// Of `nodeSeconds`, those its clusters spent IDLE between runs (cluster reuse): what
    /// keeping them warm cost.
    #[serde(default)]
    pub idle_node_seconds: u64,
    /// Of `runs`, those whose history was compacted after the retention period.
    #[serde(default)]
    pub compacted_runs: usize,
}

/// What a profile's compacted runs leave behind: their count by program status and their
/// node-seconds, kept when their history goes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptUsage {
    pub runs: BTreeMap<String, usize>,
    pub node_seconds: u64,
    #[serde(default)]
    pub idle_node_seconds: u64,
}

/// A provisioner as `/v3/provisioners` shows it: its configuration groups are its widget's
/// (`widgets/<name>.json`, CDAP's plugin widget format), as written.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProvisionerDetail {
    pub name: String,
    pub label: String,
    pub description: String,
    #[serde(rename = "configuration-groups")]
    pub configuration_groups: serde_json::Value,
    /// For a provisioner that is a plugin: its version and how it fares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<PluginView>,
}

/// A plugin the server loaded, and how its calls fare (on the server that answers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginView {
    pub name: String,
    /// `provisioner` or `automator`.
    pub kind: String,
    /// The plugin's own version.
    pub version: String,
    /// The directory it was loaded from (shown to instance admins, in `GET /v3/plugins`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// `loaded`, or `failing` while its last call broke (crashed, hung, wrote garbage).
    pub status: String,
    pub calls: u64,
    /// Calls the plugin answered with an error.
    pub errors: u64,
    /// Calls whose process broke; each counted as a failed attempt.
    pub broken: u64,
    /// Processes of the plugin started.
    pub starts: u64,
    /// Why its last call broke, while it is failing (shown to instance admins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// A plugin directory that could not be loaded, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginFault {
    pub dir: String,
    pub error: String,
}

/// `GET /v3/plugins`: what the answering server loaded from its plugin directories.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginList {
    pub plugins: Vec<PluginView>,
    /// Plugins refused at start-up (a bad descriptor, an unsafe directory, a taken name).
    pub broken: Vec<PluginFault>,
}

/// One node of a planned layout.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedNode {
    pub node: String,
    pub hardware_type: String,
    pub image_type: String,
    pub services: BTreeSet<String>,
}

/// What `POST .../plan` answers: the layout, the tasks and their stages (for reading).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DryRun {
    pub layout: Vec<PlannedNode>,
    pub tasks: Vec<ClusterTask>,
    pub stages: Vec<Vec<usize>>,
}

/// A profile's warm pool as `GET .../profiles/{p}/pool` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolView {
    /// `USER:name`.
    pub profile: String,
    /// The pool's spec; none when the profile keeps no pool (what it holds is still shown).
    pub pool: Option<crate::model::profile::Pool>,
    /// How long a cluster a run leaves waits for the next (seconds), when the profile reuses
    /// clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<u64>,
    /// IDLE clusters its runs may take over now, soonest to expire first.
    pub ready: Vec<PoolCluster>,
    /// Clusters being made for it.
    pub creating: Vec<PoolCluster>,
    /// Clusters it made that runs hold now.
    pub claimed: usize,
    /// Whether it makes clusters now, or waits or stopped after failed runs.
    pub health: PoolHealth,
}

/// Whether a pool makes clusters now (see `rules::pool`).
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema
)]
#[serde(rename_all = "camelCase")]
pub struct PoolHealth {
    /// `filling`; `waiting` after failed runs; `stopped` after five in a row, until its profile
    /// changes (written again, or disabled and enabled).
    pub status: String,
    /// Its failed runs in a row.
    pub failures: usize,
    /// Why the newest failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it tries again (epoch seconds), while waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<u64>,
}

/// One cluster of a pool.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolCluster {
    /// The run that holds it (the pool's own run, or a run that left it).
    pub run: String,
    /// The cluster's id.
    pub cluster: String,
    /// Made ahead for the pool (else left by a run that completed).
    pub pooled: bool,
    pub nodes: usize,
    /// IDLE since (epoch seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// When it is deprovisioned if no run takes it over (epoch seconds); none for a cluster
    /// made ahead that waits until taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

impl PoolView {
    pub fn new(
        id: &crate::model::profile::ProfileId,
        profile: &crate::model::profile::Profile,
        held: &(Vec<RunRecord>, Vec<RunRecord>),
        claimed: usize,
    ) -> PoolView {
        let cluster = |r: &RunRecord| PoolCluster {
            run: r.key.run.clone(),
            cluster: r.cluster_id().to_string(),
            pooled: r.pooled,
            nodes: r.cluster.nodes.len(),
            since: r.cluster.idle_since,
            expires_at: r
                .cluster
                .expires_at
                .filter(|_| !r.pooled || r.timeout.is_some()),
        };
        PoolView {
            profile: id.scoped_name(),
            pool: profile.pool,
            idle: profile.reuse().map(|r| r.idle),
            ready: held.0.iter().map(cluster).collect(),
            creating: held.1.iter().map(cluster).collect(),
            claimed,
            health: PoolHealth::default(),
        }
    }
}
