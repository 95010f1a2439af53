//! The audit log in the store: operation records (`Operations`, `<run>/<id>`) and attempt
//! records (`Attempts`, `<run>/<id>/<task>/<attempt>`). The records themselves are
//! `model::operation`'s types.

use std::collections::BTreeMap;

use crate::model::operation::{AttemptRecord, OperationRecord};
use crate::store::{Read, StoreError, Table, Txn, keys};

/// Every operation of `run`, oldest first.
pub fn operations<R: Read + ?Sized>(r: &R, run: &str) -> Result<Vec<OperationRecord>, StoreError> {
    Ok(
        r.scan::<OperationRecord>(Table::Operations, &keys::of_run(run))?
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
    let prefix = keys::attempts_of(run, op);
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
