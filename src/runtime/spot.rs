//! Spot nodes the cloud takes back: the watch's state, and what it reads and writes.
//!
//! While a cluster bought on spot is live (PROVISIONED or WAITING), its resources are looked
//! up every [`TICK`] with the provisioner's many-resource lookup: one call for the whole
//! cluster, however many nodes it has. A spot node recorded as made that two lookups in a row
//! lack is reclaimed (one miss is not enough: a cloud's list can lag, and "cannot see it" is
//! not "reclaimed"). Its record counts the reclaim, a note says so, and the run's supervisor
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
    /// Nodes the last lookup lacked: a second miss in a row is a reclaim.
    pub missing: BTreeSet<String>,
    /// The run's provisioner context with its secure references resolved, once read.
    pub context: Option<Arc<ebb_spi::Context>>,
}

impl Reclaims {
    /// The nodes a lookup found `missing`: those the one before lacked too are reclaimed.
    pub fn seen(&mut self, missing: BTreeSet<String>) -> Vec<String> {
        let twice: Vec<String> = missing.intersection(&self.missing).cloned().collect();
        self.missing = missing;
        for node in &twice {
            self.missing.remove(node);
        }
        twice
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

/// The spot nodes of cluster `cluster` made and recorded that the cloud's answer lacks.
pub async fn look(
    deps: &Deps,
    cluster: &str,
    provisioner: Arc<dyn ebb_spi::Provisioner>,
    ctx: Arc<ebb_spi::Context>,
) -> Result<BTreeSet<String>, String> {
    let nodes = super::on_node::cluster_nodes(deps, cluster)
        .await
        .map_err(|e| e.to_string())?;
    let spot: Vec<NodeRecord> = nodes
        .into_iter()
        .filter(|n| n.status == ResourceStatus::Created && n.id.is_some())
        .filter(|n| n.properties.get("market").is_some_and(|m| m == "spot"))
        .collect();
    if spot.is_empty() {
        return Ok(BTreeSet::new());
    }
    let live = provisioner
        .lookup(&ctx, cluster)
        .await
        .map_err(|e| ctx.redact(&e.message))?;
    Ok(spot
        .into_iter()
        .filter(|n| !live.iter().any(|r| Some(&r.id) == n.id.as_ref()))
        .map(|n| n.node)
        .collect())
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
