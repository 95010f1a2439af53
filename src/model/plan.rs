//! Plans as data: what a cluster operation is, its node-level tasks, and what ebb records
//! about each node's resource. The rules that build and walk plans are in `rules::plan`.

use std::collections::{BTreeMap, BTreeSet};

use ebb_spi::{Resource, ResourceState};
use serde::{Deserialize, Serialize};

use crate::model::template::ActionKind;

/// What one task does to one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TaskKind {
    /// Request the node's resource (or adopt the one an earlier attempt made).
    Create,
    /// Wait until the resource is ready and record its address.
    Confirm,
    /// Delete the resource and wait until it is gone.
    Delete,
}

/// Progress of one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Waiting,
    Running,
    Done,
}

/// What a task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    Create,
    Confirm,
    Bootstrap,
    Install,
    Configure,
    Initialize,
    Start,
    Stop,
    Remove,
    Delete,
    /// Replace the node's resource: delete the old one (gone or not) and request a new one,
    /// a new incarnation of the same node.
    Replace,
}

impl Action {
    /// The name the API and the audit log use.
    pub fn name(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Confirm => "confirm",
            Action::Bootstrap => "bootstrap",
            Action::Install => "install",
            Action::Configure => "configure",
            Action::Initialize => "initialize",
            Action::Start => "start",
            Action::Stop => "stop",
            Action::Remove => "remove",
            Action::Delete => "delete",
            Action::Replace => "replace",
        }
    }

    /// The template action a service task runs, if it is a service task.
    pub fn service_action(self) -> Option<ActionKind> {
        Some(match self {
            Action::Install => ActionKind::Install,
            Action::Configure => ActionKind::Configure,
            Action::Initialize => ActionKind::Initialize,
            Action::Start => ActionKind::Start,
            Action::Stop => ActionKind::Stop,
            Action::Remove => ActionKind::Remove,
            Action::Create
            | Action::Confirm
            | Action::Bootstrap
            | Action::Delete
            | Action::Replace => return None,
        })
    }

    /// The task that undoes this one in a rollback, if any.
    pub fn inverse(self) -> Option<Action> {
        match self {
            Action::Create | Action::Confirm | Action::Replace => Some(Action::Delete),
            Action::Install => Some(Action::Remove),
            Action::Start => Some(Action::Stop),
            Action::Stop => Some(Action::Start),
            Action::Configure => Some(Action::Configure),
            Action::Bootstrap | Action::Initialize | Action::Remove | Action::Delete => None,
        }
    }
}

/// One task of a cluster plan.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTask {
    pub id: usize,
    pub node: String,
    pub action: Action,
    /// `None` for node tasks (create, confirm, bootstrap, delete).
    pub service: Option<String>,
    pub depends_on: Vec<usize>,
}

/// A node as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanNode {
    pub name: String,
    pub services: BTreeSet<String>,
}

/// Which services a start, stop or restart of services acts on, and on which nodes; empty
/// lists mean all. The plan adds the dependent chains: what needs them at run time (stopped
/// first, started after) and, for a start, what they need (started first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Selection {
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    #[schemars(schema_with = "crate::model::names::list_schema")]
    pub services: BTreeSet<String>,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    #[schemars(schema_with = "crate::model::names::list_schema")]
    pub nodes: BTreeSet<String>,
}

impl Selection {
    /// Whether it names nothing: every service on every node.
    pub fn is_all(&self) -> bool {
        self.services.is_empty() && self.nodes.is_empty()
    }

    /// Whether it takes `service` on `node`.
    pub fn takes(&self, node: &str, service: &str) -> bool {
        (self.nodes.is_empty() || self.nodes.contains(node))
            && (self.services.is_empty() || self.services.contains(service))
    }
}

/// An operation on a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterOperation {
    Create,
    Delete,
    /// Add nodes: created and brought up, then the nodes already there reconfigured.
    Expand,
    /// Remove nodes: their services stopped and removed, the nodes deleted, then the nodes
    /// that stay reconfigured.
    Shrink,
    StartServices,
    StopServices,
    RestartServices,
    /// Apply a new config: every service's `configure`, with a stop before and a start after
    /// for the services that ask for it (`restartOnConfigure`).
    Configure,
    /// Replace nodes (a node whose resource is gone): each is made anew, bootstrapped and
    /// given its services and the cluster's config, then the other nodes are reconfigured.
    ReplaceNode,
    /// Add services to the live cluster: placed by the template's rules (or on the nodes
    /// named), installed and started in dependency order, then what uses them reconfigured.
    AddServices,
    /// Remove services from every node (refused while a service that stays needs them):
    /// stopped and removed, then what used them reconfigured.
    RemoveServices,
    /// Bring the cluster back to its last good layout from what the store knows of its nodes
    /// and services: a node that is gone made anew, one being deleted taken back, services
    /// not up brought up, nodes outside the layout deleted. The way out of NEEDS ATTENTION.
    Repair,
}

impl ClusterOperation {
    /// Whether the run's lifecycle drives operations of this kind (admins drive the others).
    pub fn is_lifecycle(self) -> bool {
        match self {
            ClusterOperation::Create | ClusterOperation::Delete => true,
            ClusterOperation::Expand
            | ClusterOperation::Shrink
            | ClusterOperation::StartServices
            | ClusterOperation::StopServices
            | ClusterOperation::RestartServices
            | ClusterOperation::Configure
            | ClusterOperation::ReplaceNode
            | ClusterOperation::AddServices
            | ClusterOperation::RemoveServices
            | ClusterOperation::Repair => false,
        }
    }

    /// Whether a failed (or an operator's cancelled) operation of this kind is undone. A
    /// delete and a stop of services are not: they carry on as far as they can, and a delete
    /// never recreates what it removed. A shrink is: the nodes it deleted are made anew.
    pub fn undoable(self) -> bool {
        match self {
            // A repair is already the way back: if it fails, another one is.
            ClusterOperation::Delete
            | ClusterOperation::StopServices
            | ClusterOperation::Repair => false,
            ClusterOperation::Create
            | ClusterOperation::AddServices
            | ClusterOperation::RemoveServices
            | ClusterOperation::Shrink
            | ClusterOperation::Expand
            | ClusterOperation::StartServices
            | ClusterOperation::RestartServices
            | ClusterOperation::Configure
            | ClusterOperation::ReplaceNode => true,
        }
    }

    /// The name the API and the audit log use.
    pub fn name(self) -> &'static str {
        match self {
            ClusterOperation::Create => "create",
            ClusterOperation::Delete => "delete",
            ClusterOperation::Expand => "expand",
            ClusterOperation::Shrink => "shrink",
            ClusterOperation::StartServices => "start-services",
            ClusterOperation::StopServices => "stop-services",
            ClusterOperation::RestartServices => "restart-services",
            ClusterOperation::Configure => "configure",
            ClusterOperation::ReplaceNode => "replace-node",
            ClusterOperation::Repair => "repair",
            ClusterOperation::AddServices => "add-services",
            ClusterOperation::RemoveServices => "remove-services",
        }
    }
}

impl ClusterTask {
    /// "install zookeeper", "create".
    pub fn describe(&self) -> String {
        match &self.service {
            Some(s) => format!("{} {s}", self.action.name()),
            None => self.action.name().to_string(),
        }
    }
}

/// Where a resource is in its life, as ebb last recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResourceStatus {
    RequestingCreate,
    PollingCreate,
    Created,
    RequestingDelete,
    PollingDelete,
    Deleted,
}

display_as_serde!(ResourceStatus, Action, ClusterOperation);

/// One node's resource, as the store keeps it (`Resources` table, key `<run>/<node>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    pub node: String,
    pub status: ResourceStatus,
    /// The provider's id, once known.
    pub id: Option<String>,
    pub address: Option<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// When the resource was confirmed ready (epoch seconds).
    pub create_time: Option<u64>,
    /// When it was confirmed gone.
    pub delete_time: Option<u64>,
    /// When the current status began, in epoch milliseconds: the retry budget counts from it.
    pub since_ms: u64,
    /// Outside calls started in the current status whose outcome may be unknown.
    pub attempts: u32,
    /// Where its current create is asked to go (recorded before the create), when the
    /// provisioner places nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<NodePlacement>,
    /// Times the cloud reclaimed this node's spot resource: with `spot-with-fallback`, once
    /// it reaches `spotRetries` the node is made anew on-demand.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reclaims: u32,
    /// For a cluster that runs reuse: the entries of the node's directory before the first
    /// program ran on it (what its services made). When another run takes the cluster over,
    /// everything else there is removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<String>>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Where a node's create goes, among the profile's zones and markets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePlacement {
    #[serde(flatten)]
    pub at: ebb_spi::Placement,
    /// Places tried before this one in this operation: each is a new incarnation (a cloud's
    /// idempotency token must change with the place asked for).
    #[serde(default)]
    pub moves: u32,
    /// When the node's current walk over its places began (epoch milliseconds; 0 for the
    /// first): a place blocked before it was tried already in an earlier walk.
    #[serde(default)]
    pub round_ms: u64,
}

impl NodeRecord {
    /// A record entering `status` at `now_ms`.
    pub fn new(node: &str, status: ResourceStatus, now_ms: u64) -> Self {
        Self {
            node: node.to_string(),
            status,
            id: None,
            address: None,
            properties: BTreeMap::new(),
            create_time: None,
            delete_time: None,
            since_ms: now_ms,
            attempts: 0,
            placement: None,
            reclaims: 0,
            entries: None,
        }
    }

    /// Moves to `status` at `now_ms`, starting a fresh budget.
    pub fn enter(&mut self, status: ResourceStatus, now_ms: u64) {
        // Only a deleted resource has an end: one found again (adopted, still there) has not.
        if status != ResourceStatus::Deleted {
            self.delete_time = None;
        }
        self.status = status;
        self.since_ms = now_ms;
        self.attempts = 0;
    }

    /// Takes what the provider reported about the resource: its id, address and facts, and
    /// the status its state implies on the way up.
    pub fn adopt(&mut self, resource: &Resource, now_ms: u64) {
        self.id = Some(resource.id.clone());
        if resource.address.is_some() {
            self.address = resource.address.clone();
        }
        self.properties.extend(resource.properties.clone());
        let status = match resource.state {
            ResourceState::Running => ResourceStatus::Created,
            ResourceState::Pending | ResourceState::Deleting => ResourceStatus::PollingCreate,
        };
        if status == ResourceStatus::Created {
            self.create_time.get_or_insert(now_ms / 1000);
        }
        self.enter(status, now_ms);
    }

    /// Whether the resource may exist in the outside world.
    pub fn may_exist(&self) -> bool {
        self.status != ResourceStatus::Deleted
    }

    /// Seconds the resource has existed, from its recorded create time to its delete time
    /// (or `now`); 0 if it was never created.
    pub fn seconds(&self, now: u64) -> u64 {
        self.create_time.map_or(0, |created| {
            self.delete_time.unwrap_or(now).saturating_sub(created)
        })
    }
}
