//! A closure's staged writes as one etcd transaction: compare everything the closure read at
//! its revision, then write.
//!
//! - A key read on its own is compared by mod revision (0 for a key that was absent).
//! - A scanned range is compared as a range (no key in it changed after the revision), and the
//!   table's deletion key too, since a deleted key leaves nothing in the range to compare.
//! - A value larger than [`CHUNK`] is written first as chunks under a fresh generation, and
//!   the transaction writes a pointer to them; it also drops every other generation of the
//!   key's chunks. A small value or a delete drops the key's chunks if the closure read it as
//!   a chunked value; a key it did not read leaves any it had to the sweep of orphans
//!   ([`super::orphans`]).
//! - Each transaction leaves a commit marker, so a write whose answer was lost can tell
//!   whether it committed before running again.
//! - Each compares that no intent is pending; a write larger than one transaction becomes one
//!   (see [`super::intent`]).

use std::collections::BTreeSet;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

use super::intent::{self, Op, Pending};
use super::shared::{MAX_TXN_BYTES, Shared, Trip};
use super::view::{CHUNKED, Pointer, View};
use crate::store::backend::Fence;
use crate::store::table::{StoreError, Table};
use crate::store::txn::Staged;

/// Largest value written as one etcd value; larger ones are split into chunks this size.
pub(super) const CHUNK: usize = 256 << 10;

/// How a commit went, when etcd answered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Committed at this revision.
    Committed(i64),
    /// Something the closure read changed meanwhile: nothing was written. etcd was at this
    /// revision.
    Conflict(i64),
    /// Another write larger than a transaction is being applied: nothing was written; finish
    /// it ([`Shared::finish_pending`]) and run the closure again.
    Pending,
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
        return Ok(Outcome::Committed(0));
    }
    let (ops, unswept) = operations(shared, view, staged)?;
    let max = shared.max_ops();
    // Room for the compares of no pending intent, of the fence, of an intent's batches and of
    // no sweep since this write's chunks.
    let mut compares = compares(shared, view, max.saturating_sub(4));
    compares.push(shared.none_pending());
    compares.extend(unswept);
    let fence_key = fence.map(|f| shared.keys.of(Table::Owners, &f.run));
    if let (Some(fence), Some(key)) = (fence, &fence_key) {
        compares.push(Compare::lease(key.clone(), CompareOp::Equal, fence.lease));
    }
    let marker = shared
        .keys
        .marker(&uuid::Uuid::now_v7().simple().to_string());
    let mark = TxnOp::put(marker.clone(), Vec::new(), None);
    // On failure, `~pending` (and the owner record of a fenced write) tell a conflict from an
    // intent in the way and from a lost run.
    let mut otherwise = vec![shared.get_pending()];
    if let Some(key) = &fence_key {
        otherwise.push(TxnOp::get(key.clone(), None));
    }
    let bytes: usize = ops.iter().map(Op::size).sum();
    let (txn, intent) = if ops.len() < max && bytes <= MAX_TXN_BYTES {
        let mut then: Vec<TxnOp> = ops.iter().map(Op::to_txn_op).collect();
        then.push(mark);
        (Txn::new().when(compares).and_then(then), None)
    } else {
        // Larger than one transaction: committed as an intent (see `intent`).
        let id = uuid::Uuid::now_v7().simple().to_string();
        let batches = intent::batches(ops, max.saturating_sub(1), MAX_TXN_BYTES);
        shared.stage_intent(&id, &batches)?;
        let pending = Pending {
            id: id.clone(),
            batches: batches.len(),
        };
        let record = serde_json::to_vec(&pending).expect("a pending record serializes");
        // Its batches are still there (the sweep removes an intent's batches all at once).
        compares.push(Compare::create_revision(
            shared.keys.intent(&id, 0),
            CompareOp::Greater,
            0,
        ));
        let then = [TxnOp::put(shared.keys.pending(), record, None), mark];
        (Txn::new().when(compares).and_then(then), Some(id))
    };
    let txn = txn.or_else(otherwise);
    match send(shared, txn, 1, intent.is_some()) {
        Ok(response) if response.succeeded() => {
            let mut revision = response.header().map_or(0, |h| h.revision());
            if intent.is_some() {
                // Committed: whoever comes next finishes it if this cannot.
                match shared.finish_pending() {
                    Ok(finished) => revision = revision.max(finished),
                    Err(e) => {
                        tracing::debug!(error = %e, "an intent is left for the next reader to apply");
                    }
                }
            }
            Ok(Outcome::Committed(revision))
        }
        Ok(response) => {
            if let Some(id) = &intent {
                shared.drop_intent(id);
            }
            if found(&response, &shared.keys.pending()).is_some() {
                return Ok(Outcome::Pending);
            }
            match (fence, &fence_key) {
                (Some(fence), Some(key)) if found(&response, key) != Some(fence.lease) => {
                    Err(StoreError::Fenced {
                        run: fence.run.clone(),
                    }
                    .into())
                }
                _ => Ok(Outcome::Conflict(
                    response.header().map_or(0, |h| h.revision()),
                )),
            }
        }
        Err(e) => {
            let error = shared.unavailable(&e);
            let marker = error.is_unavailable().then_some(marker);
            Err(Failed { error, marker })
        }
    }
}

/// What the failure branch of a commit's transaction read of `key` (`~pending`, an owner
/// record): the lease it is bound to (0: none), if it exists.
pub(super) fn found(response: &etcd_client::TxnResponse, key: &[u8]) -> Option<i64> {
    response.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Get(get) => get
            .kvs()
            .first()
            .filter(|kv| kv.key() == key)
            .map(|kv| kv.lease()),
        TxnOpResponse::Put(_) | TxnOpResponse::Delete(_) | TxnOpResponse::Txn(_) => None,
    })
}

/// Sends a commit's transaction of `writes` writes (one that puts `~pending` if it succeeds,
/// when `puts_pending`), and counts it. Its answer is also etcd's revision for the reads
/// waiting on it (see [`super::probe`]).
pub(super) fn send(
    shared: &Shared,
    txn: Txn,
    writes: usize,
    puts_pending: bool,
) -> Result<etcd_client::TxnResponse, etcd_client::Error> {
    shared
        .handle
        .block_on(send_from_runtime(shared, txn, writes, puts_pending))
}

/// [`send`], for a task on the etcd client's runtime.
pub(super) async fn send_from_runtime(
    shared: &Shared,
    txn: Txn,
    writes: usize,
    puts_pending: bool,
) -> Result<etcd_client::TxnResponse, etcd_client::Error> {
    use crate::model::metrics::{STORE_COMMIT_BATCH, STORE_COMMIT_SECONDS};
    let mut kv = shared.kv();
    let started = std::time::Instant::now();
    shared.trip(Trip::Commit);
    let sent = shared.probe.commit_sent();
    let answer = kv.txn(txn).await;
    let revision = answer.as_ref().ok().and_then(|r| {
        let revision = r.header()?.revision();
        let pending = if r.succeeded() {
            puts_pending
        } else {
            found(r, &shared.keys.pending()).is_some()
        };
        Some((revision, pending))
    });
    sent.answered(revision);
    metrics::histogram!(STORE_COMMIT_SECONDS.name, "store" => "etcd")
        .record(started.elapsed().as_secs_f64());
    if answer.as_ref().is_ok_and(|r| r.succeeded()) {
        metrics::histogram!(STORE_COMMIT_BATCH.name, "store" => "etcd").record(writes as f64);
    }
    answer
}

/// What `staged` does in etcd: each put and delete, large values as chunks (written now, under
/// a fresh generation), a put of each table's deletion key a delete touched, and the removal
/// of a key's chunks where the closure read it as a chunked value (a key it did not read
/// leaves any chunks it had to [`super::orphans`]).
pub(super) fn operations(
    shared: &Shared,
    view: &View<'_>,
    staged: Staged,
) -> Result<(Vec<Op>, Option<Compare>), Failed> {
    let lease = *shared.lease.borrow();
    // The revision of the first chunk this write wrote, if it wrote some.
    let mut chunks_from: Option<i64> = None;
    let reads = view.reads();
    let mut ops = Vec::with_capacity(staged.len() + 2);
    let mut deleted_from = BTreeSet::new();
    for ((table, key), value) in staged {
        let etcd_key = shared.keys.of(table, &key);
        // Chunks the closure saw go with this write; those of a key it did not read (most
        // never had any) are left to the sweep of orphans.
        let chunked = reads.keys.get(&etcd_key).is_some_and(|r| !r.whole);
        match value {
            None => {
                deleted_from.insert(table);
                ops.push(Op::Delete {
                    key: etcd_key,
                    end: None,
                });
                if chunked {
                    let (chunks, end) = shared.keys.all_chunks(table, &key);
                    ops.push(delete_range(chunks, end));
                }
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
                ops.push(Op::Put {
                    key: etcd_key,
                    value: bytes,
                    lease,
                });
            }
            Some(bytes) if bytes.len() <= CHUNK => {
                ops.push(Op::Put {
                    key: etcd_key,
                    value: bytes,
                    lease: 0,
                });
                if chunked {
                    let (chunks, end) = shared.keys.all_chunks(table, &key);
                    ops.push(delete_range(chunks, end));
                }
            }
            Some(bytes) => {
                let (chunks, chunks_end) = shared.keys.all_chunks(table, &key);
                let generation = uuid::Uuid::now_v7().simple().to_string();
                let (pointer, written_at) = write_chunks(shared, &chunks, &generation, &bytes)?;
                // Chunks are written one after the other: the first write's is the earliest.
                chunks_from.get_or_insert(written_at);
                ops.push(Op::Put {
                    key: etcd_key,
                    value: pointer,
                    lease: 0,
                });
                // Every other generation goes.
                let (this, after) = shared.keys.generation_chunks(table, &key, &generation);
                ops.push(delete_range(chunks, this));
                ops.push(delete_range(after, chunks_end));
            }
        }
    }
    for table in deleted_from {
        ops.push(Op::Put {
            key: shared.keys.deleted(table),
            value: Vec::new(),
            lease: 0,
        });
    }
    if tracing::enabled!(tracing::Level::TRACE) {
        let keys: Vec<String> = reads
            .keys
            .keys()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        let written: Vec<String> = ops
            .iter()
            .map(|op| match op {
                Op::Put { key, .. } => format!("put {}", String::from_utf8_lossy(key)),
                Op::Delete { key, end } => format!(
                    "delete {}{}",
                    String::from_utf8_lossy(key),
                    if end.is_some() { " (range)" } else { "" }
                ),
            })
            .collect();
        tracing::trace!(?keys, ranges = ?reads.ranges, ?written, "commit");
    }
    // The sweep of orphans drops no chunk of this write's while it is on its way: it drops
    // only old generations, and a write that waited that long (a paused process) finds the
    // sweep's mark newer than its chunks, and runs again.
    let unswept =
        chunks_from.map(|from| Compare::mod_revision(shared.keys.swept(), CompareOp::Less, from));
    Ok((ops, unswept))
}

/// The compares of everything `view` read: each key's mod revision and each scanned range's,
/// at most `room` of them. A closure that read more is compared table by table instead (no
/// key of a table it read changed since, nor was one deleted): stricter, never looser.
pub(super) fn compares(shared: &Shared, view: &View<'_>, room: usize) -> Vec<Compare> {
    let reads = view.reads();
    let after = view.revision() + 1;
    let unchanged_since = |table: Table, prefix: &str| {
        [
            Compare::mod_revision(shared.keys.of(table, prefix), CompareOp::Less, after)
                .with_prefix(),
            Compare::mod_revision(shared.keys.deleted(table), CompareOp::Less, after),
        ]
    };
    let mut compares: Vec<Compare> = reads
        .keys
        .iter()
        .map(|(key, read)| Compare::mod_revision(key.clone(), CompareOp::Equal, read.revision))
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
    if compares.len() <= room {
        return compares;
    }
    let tables: BTreeSet<Table> = reads
        .keys
        .values()
        .map(|read| read.table)
        .chain(reads.ranges.keys().copied())
        .collect();
    tables
        .into_iter()
        .flat_map(|table| unchanged_since(table, ""))
        .collect()
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

fn delete_range(from: Vec<u8>, to: Vec<u8>) -> Op {
    Op::Delete {
        key: from,
        end: Some(to),
    }
}

/// Writes `bytes` as chunks of generation `generation` under `base` (which ends in `\0`), and
/// returns the pointer to store in the value's place and the revision of the first chunk.
fn write_chunks(
    shared: &Shared,
    base: &[u8],
    generation: &str,
    bytes: &[u8],
) -> Result<(Vec<u8>, i64), Failed> {
    let mut count = 0;
    let mut first = 0;
    for (n, chunk) in bytes.chunks(CHUNK).enumerate() {
        let mut key = base.to_vec();
        key.extend_from_slice(generation.as_bytes());
        key.push(0);
        key.extend_from_slice(format!("{n:06}").as_bytes());
        let mut kv = shared.kv();
        let chunk = chunk.to_vec();
        shared.trip(Trip::Chunk);
        let put = shared
            .handle
            .block_on(async move { kv.put(key, chunk, None).await })
            .map_err(|e| shared.unavailable(&e))?;
        if count == 0 {
            // What the sweep's mark is compared with: without it the write could never commit.
            first = put.header().map(|h| h.revision()).ok_or_else(|| {
                StoreError::Storage("etcd answered a chunk's put without its revision".into())
            })?;
        }
        count += 1;
    }
    let pointer = Pointer {
        generation: generation.to_string(),
        chunks: count,
        len: bytes.len(),
    };
    let mut stored = vec![CHUNKED];
    stored.extend(serde_json::to_vec(&pointer).expect("a pointer serializes"));
    Ok((stored, first))
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
