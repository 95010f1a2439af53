//! The admission queue (`Queue`): each QUEUED run's entry, by
//! `<namespace>/<queued at, epoch ms, 20 digits>/<run id>` so each namespace's runs list
//! oldest first, and how many each namespace holds (`Meta`, `queue/<namespace>`). Both are
//! written in the same write as the run's record, so the queue and the runs never disagree.

use serde::{Deserialize, Serialize};

use crate::model::run::{RunKey, RunRecord};

use super::{Read, StoreError, Table, Txn};

/// A queued run, as the dispatcher reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub run: RunKey,
    /// When it is REJECTED if still queued (epoch milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
}

/// The key of run `key`'s entry, queued at `since` (epoch milliseconds).
pub fn entry_key(key: &RunKey, since: u64) -> String {
    format!("{}/{since:020}/{}", key.namespace, key.run)
}

fn count_key(ns: &str) -> String {
    format!("queue/{ns}")
}

/// How many runs namespace `ns` has queued.
pub fn count(r: &impl Read, ns: &str) -> Result<u32, StoreError> {
    Ok(r.get::<u32>(Table::Meta, &count_key(ns))?.unwrap_or(0))
}

/// Puts QUEUED run `run` in its namespace's queue; answers how many were queued before it.
pub fn enter(tx: &mut Txn, run: &RunRecord) -> Result<u32, StoreError> {
    let Some(stay) = &run.queue else {
        return Ok(0);
    };
    let ns = &run.key.namespace;
    let before = count(tx, ns)?;
    let entry = Entry {
        run: run.key.clone(),
        until: stay.until,
    };
    tx.put(Table::Queue, &entry_key(&run.key, stay.since), &entry)?;
    tx.put(Table::Meta, &count_key(ns), &before.saturating_add(1))?;
    Ok(before)
}

/// Takes run `run` (which was QUEUED) out of its namespace's queue.
pub fn leave(tx: &mut Txn, run: &RunRecord) -> Result<(), StoreError> {
    let Some(stay) = &run.queue else {
        return Ok(());
    };
    let key = entry_key(&run.key, stay.since);
    if tx.get::<Entry>(Table::Queue, &key)?.is_none() {
        return Ok(());
    }
    tx.delete(Table::Queue, &key);
    let ns = &run.key.namespace;
    match count(tx, ns)?.saturating_sub(1) {
        0 => tx.delete(Table::Meta, &count_key(ns)),
        left => tx.put(Table::Meta, &count_key(ns), &left)?,
    }
    Ok(())
}

/// Every queued run, oldest first within each namespace (namespaces in name order).
pub fn all(r: &impl Read) -> Result<Vec<Entry>, StoreError> {
    Ok(r.scan::<Entry>(Table::Queue, "")?
        .into_iter()
        .map(|(_, e)| e)
        .collect())
}

/// Where each of the queued runs of namespace `ns` stands in its queue (1 is next), by run id.
pub fn positions(
    r: &impl Read,
    ns: &str,
) -> Result<std::collections::BTreeMap<String, u32>, StoreError> {
    Ok(r.scan::<Entry>(Table::Queue, &format!("{ns}/"))?
        .into_iter()
        .zip(1u32..)
        .map(|((_, e), i)| (e.run.run, i))
        .collect())
}
