//! History retention (`--history-retention`, 30 days by default): the record, events, node
//! records and audit log of a run that ended longer ago are compacted away. What the run
//! counts for in its profile's usage (its status, its node-seconds) is kept in the `Usage`
//! table, in the same write that drops its record, so a usage total never loses or doubles a
//! run.
//!
//! The audit log of changes (who changed what) is kept as long: older entries go too.
//!
//! Compaction is crash-safe in two steps: one write moves the run's usage and drops its record
//! and index entry, leaving a marker (`Meta`, `compacting/<run>`); then its history goes a
//! few records per write, and the marker last. A sweep finishes any marked run first.

use std::time::Duration;

use super::duty::Work;
use super::membership::Duty;
use crate::model::plan::NodeRecord;
use crate::model::profile::ProfileId;
use crate::model::run::{ClusterStatus, RunRecord};
use crate::model::view::KeptUsage;
use crate::store::clock::now_secs;
use crate::store::{Read, Reader, Store, StoreError, Table, keys};

/// The `Meta` prefix of the markers of runs whose history is being dropped.
const COMPACTING: &str = "compacting/";

/// Most runs one sweep compacts; the next sweep takes the rest.
const RUNS_PER_SWEEP: usize = 500;

/// Entries of a run index read per page while looking for ended runs.
const INDEX_PAGE: usize = 1000;

/// Most entries of the audit log of changes one sweep drops.
const CHANGES_PER_SWEEP: usize = 10_000;

/// The tables that hold a run's history under `<run>/`.
const HISTORY: [Table; 3] = [Table::Events, Table::Operations, Table::Attempts];

/// The tables that hold a cluster's records under `<cluster id>/` (the id of the run that
/// made it).
const CLUSTER: [Table; 2] = [Table::Resources, Table::Services];

/// How often to sweep for a retention period: a quarter of it, between a second and an hour.
pub fn interval(retention: Duration) -> Duration {
    (retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

/// History compaction, as a duty ([`super::duty`] runs it): a sweep every [`interval`].
#[derive(Debug)]
pub struct Compaction {
    pub store: Store,
    pub retention: Duration,
}

impl Work for Compaction {
    fn duty(&self) -> Duty {
        Duty::Retention
    }

    fn idle(&self) -> Duration {
        interval(self.retention)
    }

    async fn tick(&mut self) -> Duration {
        match sweep(&self.store, self.retention).await {
            Ok(0) => {}
            Ok(runs) => tracing::info!(runs, "compacted the history of ended runs"),
            Err(e) => tracing::warn!(error = %e, "history compaction failed; it is retried"),
        }
        interval(self.retention)
    }
}

/// Compacts every run that ended more than `retention` ago (up to [`RUNS_PER_SWEEP`]), after
/// finishing any compaction a crash interrupted. Returns how many runs it compacted.
pub async fn sweep(store: &Store, retention: Duration) -> Result<usize, StoreError> {
    let cutoff = now_secs().saturating_sub(retention.as_secs());
    let (marked, ended) = store
        .read(move |r| {
            let marked: Vec<Compacting> = r
                .scan::<serde_json::Value>(Table::Meta, COMPACTING)?
                .into_iter()
                .filter_map(|(_, marker)| Compacting::read(marker))
                .collect();
            Ok::<_, StoreError>((marked, ended_before(r, cutoff, RUNS_PER_SWEEP)?))
        })
        .await?;
    for compacting in marked {
        drop_history(store, &compacting).await?;
    }
    let mut compacted = 0;
    for key in ended {
        if let Some(compacting) = keep_usage(store, key, cutoff).await? {
            drop_history(store, &compacting).await?;
            compacted += 1;
        }
    }
    drop_changes(store, cutoff).await?;
    drop_start_keys(store).await?;
    Ok(compacted)
}

/// The `Runs` keys of at most `limit` runs that ended before `cutoff` (epoch seconds). A run
/// ends after it starts, and run ids follow their start, so only the runs each namespace's
/// run index lists before the cutoff are read, newest first: those not compacted yet, and
/// the few still live since; never every run record.
fn ended_before(r: &Reader, cutoff: u64, limit: usize) -> Result<Vec<String>, StoreError> {
    let first_kept = keys::run_ids_before(cutoff.saturating_mul(1000));
    let mut ended = Vec::new();
    for ns in namespaces_with_runs(r)? {
        let prefix = keys::in_namespace(&ns);
        let mut before = Some(format!("{prefix}{first_kept}"));
        while ended.len() < limit {
            let mut failed = None;
            let page = r.scan_back::<String>(
                Table::RunIndex,
                &prefix,
                before.as_deref(),
                limit - ended.len(),
                INDEX_PAGE,
                |_, key| match r.get::<RunRecord>(Table::Runs, key) {
                    Ok(Some(run)) => !run.is_active() && run.end.unwrap_or(run.starting) < cutoff,
                    Ok(None) => false,
                    Err(e) => {
                        failed.get_or_insert(e);
                        false
                    }
                },
            )?;
            if let Some(e) = failed {
                return Err(e);
            }
            ended.extend(page.entries.into_iter().map(|(_, key)| key));
            match page.next {
                Some(next) => before = Some(next),
                None => break,
            }
        }
    }
    Ok(ended)
}

/// The namespaces the run index lists runs of (a deleted namespace's runs included), one
/// entry read for each: from the last key back, each namespace's keys skipped at once.
pub(super) fn namespaces_with_runs(r: &Reader) -> Result<Vec<String>, StoreError> {
    let mut found = Vec::new();
    let mut before = None;
    loop {
        let page = r.scan_back::<serde_json::Value>(
            Table::RunIndex,
            "",
            before.as_deref(),
            1,
            1,
            |_, _| true,
        )?;
        let Some((ns, _)) = page
            .entries
            .first()
            .and_then(|(key, _)| key.split_once('/'))
        else {
            return Ok(found);
        };
        before = Some(keys::in_namespace(ns));
        found.push(ns.to_string());
    }
}

/// Drops the entries of the audit log of changes made before `cutoff` (epoch seconds), up to
/// [`CHANGES_PER_SWEEP`]; the next sweep takes the rest.
async fn drop_changes(store: &Store, cutoff: u64) -> Result<(), StoreError> {
    let before = cutoff.saturating_mul(1_000_000);
    let old: Vec<String> = store
        .keys_under(Table::Changes, "")
        .await?
        .into_iter()
        .filter(|key| {
            key.rsplit('/')
                .next()
                .and_then(|seq| seq.parse::<u64>().ok())
                .is_some_and(|seq| seq < before)
        })
        .take(CHANGES_PER_SWEEP)
        .collect();
    store.delete_in_batches(Table::Changes, &old).await
}

/// How long a start's idempotency key is kept (`service::starts::idempotent` honours it no
/// longer; the sweep drops it after).
pub const START_KEYS_KEPT: u64 = 24 * 3600;

/// Drops the idempotency keys of starts older than [`START_KEYS_KEPT`], up to
/// [`CHANGES_PER_SWEEP`].
async fn drop_start_keys(store: &Store) -> Result<(), StoreError> {
    let cutoff = now_secs().saturating_sub(START_KEYS_KEPT);
    let old: Vec<String> = store
        .read(move |r| {
            Ok::<_, StoreError>(
                r.scan::<serde_json::Value>(Table::StartKeys, "")?
                    .into_iter()
                    .filter(|(_, v)| v["created"].as_u64().is_some_and(|c| c < cutoff))
                    .map(|(k, _)| k)
                    .take(CHANGES_PER_SWEEP)
                    .collect(),
            )
        })
        .await?;
    store.delete_in_batches(Table::StartKeys, &old).await
}

/// A run being compacted: its history is dropped, and its cluster's resources and services
/// when it held the cluster last (a cluster another run took over is that run's to drop).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Compacting {
    run: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cluster: Option<String>,
}

impl Compacting {
    /// A marker as kept; an older build kept the run id alone (its cluster was its own).
    fn read(marker: serde_json::Value) -> Option<Self> {
        match marker {
            serde_json::Value::String(run) => Some(Self {
                cluster: Some(run.clone()),
                run,
            }),
            other @ (serde_json::Value::Null
            | serde_json::Value::Bool(_)
            | serde_json::Value::Number(_)
            | serde_json::Value::Array(_)
            | serde_json::Value::Object(_)) => serde_json::from_value(other).ok(),
        }
    }
}

/// Moves run `key`'s usage into its profile's kept totals and drops its record, if it still
/// ended before `cutoff`; returns what is left to drop.
async fn keep_usage(
    store: &Store,
    key: String,
    cutoff: u64,
) -> Result<Option<Compacting>, StoreError> {
    store
        .write(move |tx| {
            let Some(mut run) = tx.get::<RunRecord>(Table::Runs, &key)? else {
                return Ok(None);
            };
            if run.is_active() || run.end.unwrap_or(run.starting) >= cutoff {
                return Ok(None);
            }
            let now = now_secs();
            // Its usage outlives it: fixed now if no write fixed it yet.
            crate::store::usage::settle(tx, &mut run, now)?;
            let id = &run.key.run;
            // A cluster's node time is counted once, with the last run that held it.
            let cluster = (run.cluster.status != Some(ClusterStatus::Reused))
                .then(|| run.cluster_id().to_string());
            let mut node_seconds = 0;
            if let Some(cluster) = &cluster {
                node_seconds = tx
                    .scan::<NodeRecord>(Table::Resources, &keys::of_run(cluster))?
                    .iter()
                    .map(|(_, n)| n.seconds(now))
                    .sum();
            }
            if let Ok(profile) = ProfileId::parse_scoped(&run.key.namespace, &run.profile) {
                let mut kept: KeptUsage = tx.get(Table::Usage, &profile.key())?.unwrap_or_default();
                *kept.runs.entry(run.status.to_string()).or_default() += 1;
                kept.node_seconds += node_seconds;
                kept.idle_node_seconds += run.cluster.idle_node_seconds(now);
                tx.put(Table::Usage, &profile.key(), &kept)?;
            }
            tx.delete(Table::Runs, &key);
            tx.delete(Table::Active, &key);
            tx.delete(Table::Owners, &key);
            if let Some(index) = keys::run_index_of(&key) {
                tx.delete(Table::RunIndex, &index);
            }
            let compacting = Compacting {
                run: id.clone(),
                cluster,
            };
            tx.put(Table::Meta, &format!("{COMPACTING}{id}"), &compacting)?;
            Ok(Some(compacting))
        })
        .await
}

/// Drops run `run`'s history a few records per write (an ended run's history no longer
/// grows), then its marker.
async fn drop_history(store: &Store, compacting: &Compacting) -> Result<(), StoreError> {
    let run = &compacting.run;
    for table in HISTORY {
        let history = store.keys_under(table, &keys::of_run(run)).await?;
        store.delete_in_batches(table, &history).await?;
    }
    if let Some(cluster) = &compacting.cluster {
        for table in CLUSTER {
            let records = store.keys_under(table, &keys::of_run(cluster)).await?;
            store.delete_in_batches(table, &records).await?;
        }
    }
    let marker = format!("{COMPACTING}{run}");
    store
        .write(move |tx| {
            tx.delete(Table::Meta, &marker);
            Ok::<_, StoreError>(())
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_interval_follows_the_retention_within_bounds() {
        assert_eq!(interval(Duration::from_secs(1)), Duration::from_secs(1));
        assert_eq!(interval(Duration::from_secs(40)), Duration::from_secs(10));
        assert_eq!(
            interval(Duration::from_secs(30 * 86_400)),
            Duration::from_secs(3600)
        );
    }

    /// Namespaces whose names share a beginning, or sort around `/`, are each found once.
    #[tokio::test]
    async fn every_namespace_with_runs_is_found_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        store
            .write(|tx| {
                for k in [
                    "a/1", "a/2", "ns/1", "ns-a/1", "ns.b/1", "nsa/1", "nsa/2", "z/9",
                ] {
                    tx.put(Table::RunIndex, k, &format!("x/y/{k}"))?;
                }
                Ok::<_, StoreError>(())
            })
            .await
            .expect("index");
        let found = store.read(namespaces_with_runs).await.expect("namespaces");
        assert_eq!(found, ["z", "nsa", "ns", "ns.b", "ns-a", "a"]);
    }
}
