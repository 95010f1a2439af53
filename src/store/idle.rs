//! The IDLE clusters a run may take over (`Idle`), by
//! `<namespace>/<reuse key>/<cluster id>`, and the holder of each cluster another run took
//! over (`Clusters`). Both are written in the same write as the run records they follow, so
//! the index and the runs never disagree.

use crate::model::run::RunRecord;

use super::{Read, StoreError, Table, Txn};

fn entry_key(ns: &str, reuse_key: &str, cluster: &str) -> String {
    format!("{ns}/{reuse_key}/{cluster}")
}

/// Offers IDLE run `run`'s cluster to the runs that match its reuse key.
pub fn offer(tx: &mut Txn, run: &RunRecord) -> Result<(), StoreError> {
    let Some(reuse_key) = &run.cluster.reuse_key else {
        return Ok(());
    };
    let key = entry_key(&run.key.namespace, reuse_key, run.cluster_id());
    tx.put(Table::Idle, &key, &run.key.key())
}

/// Takes run `run`'s cluster out of the offer.
pub fn withdraw(tx: &mut Txn, run: &RunRecord) {
    if let Some(reuse_key) = &run.cluster.reuse_key {
        tx.delete(
            Table::Idle,
            &entry_key(&run.key.namespace, reuse_key, run.cluster_id()),
        );
    }
}

/// The runs (their keys in `Runs`) whose IDLE clusters match `reuse_key` in namespace `ns`.
pub fn offered(r: &impl Read, ns: &str, reuse_key: &str) -> Result<Vec<String>, StoreError> {
    Ok(
        r.scan::<String>(Table::Idle, &format!("{ns}/{reuse_key}/"))?
            .into_iter()
            .map(|(_, run)| run)
            .collect(),
    )
}

/// Whether an entry of `Active` is an IDLE cluster's run: not a live run for the limits
/// (its nodes still count).
pub fn is_idle_entry(entry: &serde_json::Value) -> bool {
    entry.get("idle").and_then(serde_json::Value::as_bool) == Some(true)
}

/// Records that run `holder` holds cluster `cluster` now.
pub fn hold(tx: &mut Txn, cluster: &str, holder: &RunRecord) -> Result<(), StoreError> {
    tx.put(Table::Clusters, cluster, &holder.key.key())
}

/// The key in `Runs` of the run that holds cluster `cluster`, when another run than its
/// maker does.
pub fn holder(r: &impl Read, cluster: &str) -> Result<Option<String>, StoreError> {
    r.get::<String>(Table::Clusters, cluster)
}
