//! The audit log in the store: operation records (`Operations`, `<run>/<id>`) and attempt
//! records (`Attempts`, `<run>/<id>/<task>/<attempt>`). The records themselves are
//! `model::operation`'s types.

use std::collections::BTreeMap;

use crate::model::operation::{AttemptRecord, OperationRecord};
use crate::store::{Read, StoreError, Table, Txn};

/// The key of operation `id` of `run`.
pub fn op_key(run: &str, id: u32) -> String {
    format!("{run}/{id:06}")
}

/// The key of attempt `attempt` (from 1) of task `task`.
pub fn attempt_key(run: &str, op: u32, task: usize, attempt: u32) -> String {
    format!("{run}/{op:06}/{task:06}/{attempt:03}")
}

/// Every operation of `run`, oldest first.
pub fn operations<R: Read + ?Sized>(r: &R, run: &str) -> Result<Vec<OperationRecord>, StoreError> {
    Ok(
        r.scan::<OperationRecord>(Table::Operations, &format!("{run}/"))?
            .into_iter()
            .map(|(_, o)| o)
            .collect(),
    )
}

/// The attempts of every task of operation `op`, by task id.
pub fn attempts<R: Read + ?Sized>(
    r: &R,
    run: &str,
    op: u32,
) -> Result<BTreeMap<usize, Vec<AttemptRecord>>, StoreError> {
    let prefix = format!("{run}/{op:06}/");
    let mut out: BTreeMap<usize, Vec<AttemptRecord>> = BTreeMap::new();
    for (key, a) in r.scan::<AttemptRecord>(Table::Attempts, &prefix)? {
        let task = key[prefix.len()..]
            .split('/')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or(usize::MAX);
        out.entry(task).or_default().push(a);
    }
    Ok(out)
}

/// The id the next operation of `run` gets.
pub fn next_id(tx: &Txn<'_>, run: &str) -> Result<u32, StoreError> {
    Ok(operations(tx, run)?.last().map_or(1, |o| o.id + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_number() {
        assert!(op_key("r", 9) < op_key("r", 10));
        assert!(attempt_key("r", 1, 9, 2) < attempt_key("r", 1, 10, 1));
        assert!(attempt_key("r", 1, 3, 9) < attempt_key("r", 1, 3, 10));
    }
}
