//! A closure's staged writes as one etcd transaction: compare everything the closure read at
//! its revision, then write.
//!
//! - A key read on its own is compared by mod revision (0 for a key that was absent).
//! - A scanned range is compared as a range (no key in it changed after the revision), and the
//!   table's deletion key too, since a deleted key leaves nothing in the range to compare.
//! - A value larger than [`CHUNK`] is written first as chunks under a fresh generation, and
//!   the transaction writes a pointer to them; it also drops every other generation of the
//!   key's chunks, so a rewrite or a delete leaves none behind.
//! - Each transaction leaves a commit marker, so a write whose answer was lost can tell
//!   whether it committed before running again.

use std::collections::BTreeSet;

use etcd_client::{Compare, CompareOp, DeleteOptions, PutOptions, Txn, TxnOp, TxnOpResponse};

use super::shared::Shared;
use super::view::{CHUNKED, Pointer, View};
use crate::store::backend::Fence;
use crate::store::table::{StoreError, Table};
use crate::store::txn::Staged;

/// Largest value written as one etcd value; larger ones are split into chunks this size.
pub(super) const CHUNK: usize = 256 << 10;

/// How a commit went, when etcd answered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Committed,
    /// Something the closure read changed meanwhile: nothing was written.
    Conflict,
}

/// A commit etcd did not answer, or refused.
#[derive(Debug)]
pub(super) struct Failed {
    pub(super) error: StoreError,
    /// The marker of a transaction that may have committed although its answer was lost.
    pub(super) marker: Option<Vec<u8>>,
}

impl From<StoreError> for Failed {
    fn from(error: StoreError) -> Self {
        Failed {
            error,
            marker: None,
        }
    }
}

pub(super) fn commit(
    shared: &Shared,
    view: &View<'_>,
    staged: Staged,
    fence: Option<&Fence>,
) -> Result<Outcome, Failed> {
    if staged.is_empty() {
        return Ok(Outcome::Committed);
    }
    let mut compares = compares(shared, view);
    let fence_key = fence.map(|f| shared.keys.of(Table::Owners, &f.run));
    if let (Some(fence), Some(key)) = (fence, &fence_key) {
        compares.push(Compare::lease(key.clone(), CompareOp::Equal, fence.lease));
    }
    let lease = *shared.lease.borrow();
    let mut ops = Vec::with_capacity(staged.len() * 2 + 2);
    let mut deleted_from = BTreeSet::new();
    for ((table, key), value) in staged {
        let etcd_key = shared.keys.of(table, &key);
        let mut chunks = shared.keys.chunks(table, &key);
        chunks.push(0);
        let chunks_end = {
            let mut end = chunks.clone();
            *end.last_mut().expect("ends with 0") = 1;
            end
        };
        match value {
            None => {
                deleted_from.insert(table);
                ops.push(TxnOp::delete(etcd_key, None));
                ops.push(delete_range(chunks, chunks_end));
            }
            Some(bytes) if table.is_live() => {
                // Who is up now goes with the server that wrote it.
                if lease == 0 {
                    return Err(StoreError::Storage(format!(
                        "a write to {} needs this server's lease, and it holds none",
                        table.name()
                    ))
                    .into());
                }
                ops.push(TxnOp::put(
                    etcd_key,
                    bytes,
                    Some(PutOptions::new().with_lease(lease)),
                ));
            }
            Some(bytes) if bytes.len() <= CHUNK => {
                ops.push(TxnOp::put(etcd_key, bytes, None));
                ops.push(delete_range(chunks, chunks_end));
            }
            Some(bytes) => {
                let generation = uuid::Uuid::now_v7().simple().to_string();
                let pointer = write_chunks(shared, &chunks, &generation, &bytes)?;
                ops.push(TxnOp::put(etcd_key, pointer, None));
                let mut this = chunks.clone();
                this.extend_from_slice(generation.as_bytes());
                let mut after = this.clone();
                after.push(1);
                ops.push(delete_range(chunks, this));
                ops.push(delete_range(after, chunks_end));
            }
        }
    }
    for table in deleted_from {
        ops.push(TxnOp::put(shared.keys.deleted(table), Vec::new(), None));
    }
    let marker = shared
        .keys
        .marker(&uuid::Uuid::now_v7().simple().to_string());
    ops.push(TxnOp::put(marker.clone(), Vec::new(), None));
    let mut txn = Txn::new().when(compares).and_then(ops);
    if let Some(key) = &fence_key {
        // On failure, the owner record tells a lost run from a conflict.
        txn = txn.or_else([TxnOp::get(key.clone(), None)]);
    }
    let mut kv = shared.kv();
    let started = std::time::Instant::now();
    let answer = shared.handle.block_on(async move { kv.txn(txn).await });
    metrics::histogram!(crate::model::metrics::STORE_COMMIT_SECONDS.name, "store" => "etcd")
        .record(started.elapsed().as_secs_f64());
    match answer {
        Ok(response) if response.succeeded() => {
            metrics::histogram!(crate::model::metrics::STORE_COMMIT_BATCH.name, "store" => "etcd")
                .record(1.0);
            Ok(Outcome::Committed)
        }
        Ok(response) => match fence {
            Some(fence) if !still_owned(&response, fence.lease) => Err(StoreError::Fenced {
                run: fence.run.clone(),
            }
            .into()),
            _ => Ok(Outcome::Conflict),
        },
        Err(e) => {
            let error = shared.unavailable(&e);
            let marker = error.is_unavailable().then_some(marker);
            Err(Failed { error, marker })
        }
    }
}

/// Whether the owner record a failed fenced transaction read back is still bound to `lease`.
fn still_owned(response: &etcd_client::TxnResponse, lease: i64) -> bool {
    response.op_responses().iter().any(|r| match r {
        TxnOpResponse::Get(get) => get.kvs().first().is_some_and(|kv| kv.lease() == lease),
        TxnOpResponse::Put(_) | TxnOpResponse::Delete(_) | TxnOpResponse::Txn(_) => false,
    })
}

/// The compares of everything `view` read.
fn compares(shared: &Shared, view: &View<'_>) -> Vec<Compare> {
    let reads = view.reads();
    let after = view.revision() + 1;
    let mut compares: Vec<Compare> = reads
        .keys
        .iter()
        .map(|(key, revision)| Compare::mod_revision(key.clone(), CompareOp::Equal, *revision))
        .collect();
    for (table, prefixes) in &reads.ranges {
        for prefix in outermost(prefixes) {
            compares.push(
                Compare::mod_revision(shared.keys.of(*table, prefix), CompareOp::Less, after)
                    .with_prefix(),
            );
        }
        compares.push(Compare::mod_revision(
            shared.keys.deleted(*table),
            CompareOp::Less,
            after,
        ));
    }
    compares
}

/// The prefixes not already inside a shorter one of the set.
fn outermost(prefixes: &BTreeSet<String>) -> Vec<&str> {
    let mut kept: Vec<&str> = Vec::new();
    // In key order a prefix comes before everything it contains.
    for p in prefixes {
        if !kept.last().is_some_and(|k| p.starts_with(k)) {
            kept.push(p);
        }
    }
    kept
}

fn delete_range(from: Vec<u8>, to: Vec<u8>) -> TxnOp {
    TxnOp::delete(from, Some(DeleteOptions::new().with_range(to)))
}

/// Writes `bytes` as chunks of generation `generation` under `base` (which ends in `\0`), and
/// returns the pointer to store in the value's place.
fn write_chunks(
    shared: &Shared,
    base: &[u8],
    generation: &str,
    bytes: &[u8],
) -> Result<Vec<u8>, Failed> {
    let mut count = 0;
    for (n, chunk) in bytes.chunks(CHUNK).enumerate() {
        let mut key = base.to_vec();
        key.extend_from_slice(generation.as_bytes());
        key.push(0);
        key.extend_from_slice(format!("{n:06}").as_bytes());
        let mut kv = shared.kv();
        let chunk = chunk.to_vec();
        shared
            .handle
            .block_on(async move { kv.put(key, chunk, None).await })
            .map_err(|e| shared.unavailable(&e))?;
        count += 1;
    }
    let pointer = Pointer {
        generation: generation.to_string(),
        chunks: count,
        len: bytes.len(),
    };
    let mut stored = vec![CHUNKED];
    stored.extend(serde_json::to_vec(&pointer).expect("a pointer serializes"));
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_inside_another_is_compared_once() {
        let set: BTreeSet<String> = ["ns/", "ns/app/", "nt/", "n"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(outermost(&set), vec!["n"]);
        let set: BTreeSet<String> = ["a/", "a/b/", "b/"].into_iter().map(String::from).collect();
        assert_eq!(outermost(&set), vec!["a/", "b/"]);
    }
}
