//! What a service action or check runs on: a node of a run's cluster, and the cluster as a
//! script (`EBB_CLUSTER_FILE`) or an automator plugin sees it.

use std::collections::BTreeMap;

use super::attempt::TaskSpec;
use super::deps::Deps;
use crate::model::plan::NodeRecord;
use crate::store::keys;
use crate::store::{Read, StoreError, Table};

/// What an action runs on: a node of a run's cluster, with the cluster's services and config.
#[derive(Debug)]
pub struct On<'a> {
    pub run: &'a str,
    /// The cluster's id, which its nodes' records are kept under (the run that made it).
    pub cluster: &'a str,
    pub node: &'a str,
    /// The run's provisioner properties, secure references resolved.
    pub context: &'a ebb_spi::Context,
    pub config: &'a serde_json::Value,
    /// Every node's services.
    pub layout: &'a BTreeMap<String, std::collections::BTreeSet<String>>,
    /// Set for a check: its files are its own, so it may run beside a task or another check.
    pub check: bool,
}

impl<'a> On<'a> {
    pub fn task(spec: &'a TaskSpec) -> Self {
        On {
            run: &spec.run,
            cluster: &spec.cluster,
            node: spec.node(),
            context: &spec.context,
            config: &spec.config,
            layout: &spec.layout,
            check: false,
        }
    }
}

/// The nodes of cluster `cluster` that may exist.
pub async fn cluster_nodes(deps: &Deps, cluster: &str) -> Result<Vec<NodeRecord>, StoreError> {
    let prefix = keys::of_run(cluster);
    Ok(deps
        .store
        .read(move |r| r.scan::<NodeRecord>(Table::Resources, &prefix))
        .await?
        .into_iter()
        .map(|(_, n)| n)
        .filter(NodeRecord::may_exist)
        .collect())
}

/// What a script reads as `EBB_CLUSTER_FILE`: the run, its config, and every node with its
/// address, properties and services.
pub fn cluster_doc(on: &On<'_>, nodes: &[NodeRecord]) -> serde_json::Value {
    let layout = on.layout;
    serde_json::json!({
        "run": on.run,
        "config": on.config,
        "nodes": nodes.iter().map(|n| serde_json::json!({
            "name": n.node, "id": n.id, "ipAddress": n.address, "properties": n.properties,
            "services": layout.get(&n.node).cloned().unwrap_or_default(),
        })).collect::<Vec<_>>(),
    })
}
