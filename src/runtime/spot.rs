//! Spot nodes the cloud takes back: the watch's state, and what it reads and writes.
//!
//! While a cluster bought on spot is live (PROVISIONED or WAITING), its resources are looked
//! up every [`TICK`] with the provisioner's many-resource lookup: one call for the whole
//! cluster, however many nodes it has. A spot node recorded as made that the lookup lacks is
//! asked after by its id (`describe`): gone, it was reclaimed; there after all (a cloud's list
//! can lag), it was not. One the describe cannot settle (an error) is reclaimed when two
//! lookups in a row lack it ("cannot see it" is not "reclaimed"). Its record counts the reclaim, a note says so, and the run's supervisor
//! asks for a replace-node operation that makes it anew; with `spot-with-fallback` a node
//! reclaimed `spotRetries` times is made anew on-demand. A reclaimed master also ends the
//! program, as a lost server does, and the run's retry policy decides whether it runs again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use actix::SpawnHandle;
use ebb_spi::capacity::MarketType;

use super::deps::Deps;
use crate::model::event::EventKind;
use crate::model::plan::{NodeRecord, ResourceStatus};
use crate::model::run::{ClusterStatus, RunRecord};
use crate::store::{Read as _, StoreError, Table, events, keys};

/// How often a live spot cluster is looked up.
pub const TICK: Duration = Duration::from_secs(2);

/// The watch of one run's spot nodes.
#[derive(Debug, Default)]
pub struct Reclaims {
    pub ticker: Option<SpawnHandle>,
    /// A lookup is under way.
    pub looking: bool,
    /// Nodes the last lookup lacked that no describe settled: a second miss in a row is a
    /// reclaim.
    pub missing: BTreeSet<String>,
    /// The run's provisioner context with its secure references resolved, once read.
    pub context: Option<Arc<ebb_spi::Context>>,
}

/// What one look at a cluster's spot nodes found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Looked {
    /// Missing from the lookup, and gone by their id: reclaimed.
    pub gone: BTreeSet<String>,
    /// Missing from the lookup, and not settled by their id (the describe failed).
    pub unsure: BTreeSet<String>,
}

impl Reclaims {
    /// The nodes one look found reclaimed: those gone by their id, and those unsure now that
    /// the look before lacked too.
    pub fn seen(&mut self, looked: Looked) -> Vec<String> {
        let twice: BTreeSet<String> = looked.unsure.intersection(&self.missing).cloned().collect();
        self.missing = looked.unsure.difference(&twice).cloned().collect();
        looked.gone.union(&twice).cloned().collect()
    }
}

/// Whether `run` buys on spot and its cluster is live.
pub fn wanted(run: &RunRecord) -> bool {
    let live = matches!(
        run.cluster.status,
        Some(ClusterStatus::Provisioned | ClusterStatus::Waiting)
    );
    let properties = run.properties();
    let market = MarketType::of(&properties);
    live && market != MarketType::OnDemand
}

/// The spot nodes of cluster `cluster` made and recorded that the cloud's lookup lacks, each
/// asked after by its id.
pub async fn look(
    deps: &Deps,
    cluster: &str,
    provisioner: Arc<dyn ebb_spi::Provisioner>,
    ctx: Arc<ebb_spi::Context>,
) -> Result<Looked, String> {
    let nodes = super::on_node::cluster_nodes(deps, cluster)
        .await
        .map_err(|e| e.to_string())?;
    let spot: Vec<NodeRecord> = nodes
        .into_iter()
        .filter(|n| n.status == ResourceStatus::Created && n.id.is_some())
        .filter(|n| n.properties.get("market").is_some_and(|m| m == "spot"))
        .collect();
    if spot.is_empty() {
        return Ok(Looked::default());
    }
    use super::calls::Kind;
    deps.calls
        .admit(provisioner.as_ref(), &ctx, Kind::Read)
        .await;
    let live = provisioner
        .lookup(&ctx, cluster)
        .await
        .map_err(|e| ctx.redact(&e.message))?;
    let mut looked = Looked::default();
    for node in spot {
        let Some(id) = node.id.as_deref() else {
            continue;
        };
        if live.iter().any(|r| r.id == id) {
            continue;
        }
        deps.calls
            .admit(provisioner.as_ref(), &ctx, Kind::Read)
            .await;
        match provisioner.describe(&ctx, id).await {
            Ok(None) => looked.gone.insert(node.node),
            Ok(Some(r)) if r.state == ebb_spi::ResourceState::Deleting => {
                looked.gone.insert(node.node)
            }
            Ok(Some(_)) => false,
            Err(_) => looked.unsure.insert(node.node),
        };
    }
    Ok(looked)
}

/// Records that the cloud reclaimed `node` of cluster `cluster`: its count of reclaims grows
/// and the run's history says so. Answers the count.
pub async fn record(deps: &Deps, run: &str, cluster: &str, node: &str) -> Result<u32, StoreError> {
    let (key, run, who) = (keys::node(cluster, node), run.to_string(), node.to_string());
    deps.store
        .write(move |tx| {
            let Some(mut r) = tx.get::<NodeRecord>(Table::Resources, &key)? else {
                return Ok(0);
            };
            r.reclaims = r.reclaims.saturating_add(1);
            tx.put(Table::Resources, &key, &r)?;
            let note = format!(
                "{who} (spot, {}) was reclaimed by the cloud (reclaim {}); replacing it",
                r.id.as_deref().unwrap_or("?"),
                r.reclaims
            );
            events::append(tx, &run, EventKind::Error, Some(&who), note)?;
            Ok::<_, StoreError>(r.reclaims)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(nodes: &[&str]) -> BTreeSet<String> {
        nodes.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn gone_by_id_is_reclaimed_at_once_and_unsure_only_on_a_second_miss() {
        let mut watch = Reclaims::default();
        let first = Looked {
            gone: set(&["worker-1"]),
            unsure: set(&["worker-2", "worker-3"]),
        };
        assert_eq!(watch.seen(first), ["worker-1"]);
        let second = Looked {
            gone: BTreeSet::new(),
            unsure: set(&["worker-2"]),
        };
        assert_eq!(watch.seen(second), ["worker-2"], "missed twice");
        assert!(watch.missing.is_empty(), "worker-3 was seen again");
        let third = Looked {
            gone: BTreeSet::new(),
            unsure: set(&["worker-2"]),
        };
        assert!(watch.seen(third).is_empty(), "a new miss starts over");
    }
}
