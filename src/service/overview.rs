//! What an installation is doing, for the namespaces a caller sees: live runs by status,
//! clusters and nodes now per provisioner, profile and state, node-hours of the last days, and the
//! newest failures with their kind.
//!
//! Bounded: it reads at most [`MAX_NAMESPACES`] namespaces, and of each at most
//! [`RECENT_RUNS`] of its newest runs ([`RECENT_TOTAL`] in all) for the node-hours and
//! failures; the answer says when it stopped short.

use std::collections::BTreeMap;

use crate::model::plan::ResourceStatus;
use crate::model::run::{ClusterStatus, Failure, RunKey, RunRecord};
use crate::runtime::handle::Runtime;
use crate::service::catalog;
use crate::service::error::ServiceError;
use crate::store::clock;
use crate::store::{Read, Table, keys};

/// Most namespaces one overview reads.
pub const MAX_NAMESPACES: usize = 50;
/// Most of a namespace's newest runs one overview reads for node-hours and failures.
pub const RECENT_RUNS: usize = 500;
/// Most ended runs one overview reads in all.
pub const RECENT_TOTAL: usize = 2_000;
/// Failures the overview lists.
const FAILURES: usize = 10;

/// Clusters and nodes of one provisioner and profile.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Clusters {
    pub clusters: usize,
    pub nodes: usize,
}

/// A run that failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    pub key: RunKey,
    pub profile: String,
    pub failure: Failure,
    pub end: Option<u64>,
}

/// The overview.
#[derive(Debug, Clone, Default)]
pub struct Overview {
    /// Live runs (a cluster not yet deprovisioned) by program status.
    pub live: BTreeMap<String, usize>,
    /// Clusters that hold or may hold resources (IDLE and warm-pool ones too), by
    /// (provisioner, profile, state).
    pub clusters: BTreeMap<ClusterKey, Clusters>,
    /// Node-hours within the last `days` days.
    pub node_hours: f64,
    pub days: u64,
    /// The newest failures, newest first.
    pub failures: Vec<Failed>,
    /// Whether a bound was reached: the figures cover only part of the history.
    pub partial: bool,
}

/// The overview of `namespaces` over the last `days` days.
pub async fn overview(
    runtime: &Runtime,
    mut namespaces: Vec<String>,
    days: u64,
) -> Result<Overview, ServiceError> {
    let mut partial = false;
    if namespaces.len() > MAX_NAMESPACES {
        namespaces.truncate(MAX_NAMESPACES);
        partial = true;
    }
    runtime
        .store()
        .read(move |r| {
            let now = clock::now_secs();
            let since = now.saturating_sub(days * 86_400);
            let mut out = Overview {
                days,
                partial,
                ..Overview::default()
            };
            let mut seen = std::collections::BTreeSet::new();
            let mut failures = Vec::new();
            let mut budget = RECENT_TOTAL;
            for ns in &namespaces {
                // Live runs, from the index of active ones.
                for (key, _) in
                    r.scan::<serde_json::Value>(Table::Active, &keys::in_namespace(ns))?
                {
                    let Some(run) = r.get::<RunRecord>(Table::Runs, &key)? else {
                        continue;
                    };
                    *out.live.entry(run.status.to_string()).or_default() += 1;
                    let nodes = catalog::held_nodes(r, &run)?;
                    if holds(&run) {
                        count_cluster(&mut out.clusters, &run, &nodes);
                    }
                    out.node_hours += window(&nodes, since, now);
                    seen.insert(run.key.run.clone());
                    if let Some(f) = &run.failure {
                        failures.push(failed(&run, f));
                    }
                }
                // Runs that ended lately, newest first.
                let mut recent = Vec::new();
                let take = RECENT_RUNS.min(budget);
                if take == 0 {
                    out.partial = true;
                    continue;
                }
                let page = r.scan_back::<String>(
                    Table::RunIndex,
                    &keys::in_namespace(ns),
                    None,
                    take,
                    take,
                    |_, key| {
                        recent.push(key.clone());
                        true
                    },
                )?;
                out.partial |= page.next.is_some();
                budget -= recent.len().min(budget);
                for key in recent {
                    let Some(run) = r.get::<RunRecord>(Table::Runs, &key)? else {
                        continue;
                    };
                    if seen.contains(&run.key.run)
                        || run.end.is_some_and(|e| e < since)
                            && run.cluster.end.is_some_and(|e| e < since)
                    {
                        continue;
                    }
                    out.node_hours += window(&catalog::held_nodes(r, &run)?, since, now);
                    if let Some(f) = &run.failure
                        && run.end.is_none_or(|e| e >= since)
                    {
                        failures.push(failed(&run, f));
                    }
                }
            }
            failures.sort_by(|a, b| b.end.cmp(&a.end).then_with(|| b.key.run.cmp(&a.key.run)));
            failures.dedup_by(|a, b| a.key == b.key);
            failures.truncate(FAILURES);
            out.failures = failures;
            Ok(out)
        })
        .await
}

/// Whether `run`'s cluster holds, or may hold, resources.
fn holds(run: &RunRecord) -> bool {
    matches!(
        run.cluster.status,
        Some(
            ClusterStatus::Provisioning
                | ClusterStatus::Provisioned
                | ClusterStatus::Waiting
                | ClusterStatus::Idle
                | ClusterStatus::Deprovisioning
                | ClusterStatus::Orphaned
        )
    )
}

/// Where a live cluster is counted: its provisioner, its profile, and its state (the
/// cluster's status in lower case, or `pool` for a warm pool's).
pub type ClusterKey = (String, String, String);

/// A held cluster's state as the overview and the gauges show it.
fn state(run: &RunRecord) -> String {
    if run.pooled {
        return "pool".into();
    }
    run.cluster
        .status
        .map(|s| s.to_string().to_lowercase())
        .unwrap_or_default()
}

/// Counts `run`'s cluster, and its `nodes` that exist now, under its provisioner and profile.
fn count_cluster(
    clusters: &mut BTreeMap<ClusterKey, Clusters>,
    run: &RunRecord,
    nodes: &[crate::model::plan::NodeRecord],
) {
    let entry = clusters
        .entry((run.provisioner.clone(), run.profile.clone(), state(run)))
        .or_default();
    entry.clusters += 1;
    entry.nodes += nodes
        .iter()
        .filter(|n| n.id.is_some() && n.status != ResourceStatus::Deleted)
        .count();
}

fn failed(run: &RunRecord, f: &Failure) -> Failed {
    Failed {
        key: run.key.clone(),
        profile: run.profile.clone(),
        failure: f.clone(),
        end: run.end,
    }
}

/// Node-hours of `nodes` between `since` and `now`.
fn window(nodes: &[crate::model::plan::NodeRecord], since: u64, now: u64) -> f64 {
    nodes
        .iter()
        .filter_map(|n| {
            let created = n.create_time?;
            let deleted = n.delete_time.unwrap_or(now);
            let (from, to) = (created.max(since), deleted.min(now));
            (to > from).then(|| (to - from) as f64 / 3600.0)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::plan::NodeRecord;

    fn node(created: Option<u64>, deleted: Option<u64>) -> NodeRecord {
        let mut n = NodeRecord::new("n", ResourceStatus::Created, 0);
        n.create_time = created;
        n.delete_time = deleted;
        n
    }

    #[test]
    fn node_hours_count_only_the_window() {
        let h = 3600;
        let nodes = [
            node(Some(0), Some(10 * h)),       // all before the window
            node(Some(90 * h), Some(110 * h)), // 10h inside
            node(Some(150 * h), None),         // live: 50h to now
            node(None, None),                  // never made
        ];
        assert_eq!(window(&nodes, 100 * h, 200 * h), 60.0);
    }
}

/// Most live runs one reading of [`live`] looks at.
pub const MAX_LIVE: usize = 10_000;

/// What the installation's live runs hold now, for the metrics.
#[derive(Debug, Clone, Default)]
pub struct Live {
    /// Live runs by (program status, cluster status).
    pub runs: BTreeMap<(String, String), usize>,
    /// Clusters and nodes by (provisioner, profile, state).
    pub clusters: BTreeMap<ClusterKey, Clusters>,
    /// Whether there were more than [`MAX_LIVE`] live runs (the rest are not counted).
    pub truncated: bool,
    /// Live clusters that need attention (an operation and its rollback failed).
    pub attention: usize,
    /// The pools' runs: ready (IDLE) and creating.
    pub pool_ready: usize,
    pub pool_creating: usize,
}

/// The live runs of the whole installation, read from the store.
pub async fn live(runtime: &Runtime) -> Result<Live, ServiceError> {
    runtime
        .store()
        .read(move |r| {
            let mut out = Live::default();
            let active = r.scan::<serde_json::Value>(Table::Active, "")?;
            out.truncated = active.len() > MAX_LIVE;
            for (key, _) in active.into_iter().take(MAX_LIVE) {
                let Some(run) = r.get::<RunRecord>(Table::Runs, &key)? else {
                    continue;
                };
                let cluster = run
                    .cluster
                    .status
                    .map(|c| c.to_string())
                    .unwrap_or_default();
                *out.runs
                    .entry((run.status.to_string(), cluster))
                    .or_default() += 1;
                out.attention += usize::from(run.cluster.attention.is_some());
                if run.pooled {
                    match run.cluster.status {
                        Some(crate::model::run::ClusterStatus::Idle) => out.pool_ready += 1,
                        None | Some(crate::model::run::ClusterStatus::Provisioning) => {
                            out.pool_creating += 1;
                        }
                        Some(_) => {}
                    }
                }
                if holds(&run) {
                    let nodes = catalog::held_nodes(r, &run)?;
                    count_cluster(&mut out.clusters, &run, &nodes);
                }
            }
            Ok(out)
        })
        .await
}
