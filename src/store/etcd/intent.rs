//! Writes larger than one etcd transaction, still all or nothing.
//!
//! etcd takes at most `--max-txn-ops` operations (128 by default) and `--max-request-bytes`
//! (1.5 MiB by default) in one transaction. A write closure that stages more is committed as
//! an *intent*, a redo log in etcd:
//!
//! 1. its operations are written in batches under `~intents/<id>/<n>`, keys nobody reads;
//! 2. one transaction compares everything the closure read (as any write does) and puts
//!    `~pending` naming the intent: this is the commit point, and the write is acknowledged
//!    only after it;
//! 3. each batch is applied in a transaction conditional on `~pending` being the same record;
//! 4. a last transaction removes `~pending` and the batches.
//!
//! While `~pending` exists every other write fails its compare (each compares `~pending`
//! absent) and every read finds it (a view's first read fetches it at the same revision), and
//! both *help*: they apply the intent themselves before going on. So no one ever sees a write
//! half applied, and a writer that dies anywhere after step 2 leaves an intent that the next
//! reader or writer finishes; one that dies before leaves batches that no record names, which
//! the sweep removes. Applying a batch twice writes the same values again, which is harmless:
//! nothing else can write meanwhile.

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};

use super::shared::{Shared, Trip};
use crate::store::table::StoreError;

/// One operation of a write, as a transaction runs it and as an intent keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Op {
    /// Puts `value` under `key`, bound to `lease` unless it is 0.
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    },
    /// Deletes `key`, or every key from `key` up to `end` (excluded).
    Delete { key: Vec<u8>, end: Option<Vec<u8>> },
}

impl Op {
    /// The bytes it adds to a request (its key, value and a little framing).
    pub(super) fn size(&self) -> usize {
        match self {
            Op::Put { key, value, .. } => key.len() + value.len() + 16,
            Op::Delete { key, end } => key.len() + end.as_ref().map_or(0, Vec::len) + 16,
        }
    }

    pub(super) fn to_txn_op(&self) -> TxnOp {
        match self {
            Op::Put { key, value, lease } => {
                let options = (*lease != 0).then(|| PutOptions::new().with_lease(*lease));
                TxnOp::put(key.clone(), value.clone(), options)
            }
            Op::Delete { key, end } => TxnOp::delete(
                key.clone(),
                end.clone().map(|end| DeleteOptions::new().with_range(end)),
            ),
        }
    }
}

/// The pending intent's record: which batches to apply.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Pending {
    pub(super) id: String,
    pub(super) batches: usize,
}

/// Splits `ops` into batches of at most `max_ops` operations and `max_bytes` bytes.
pub(super) fn batches(ops: Vec<Op>, max_ops: usize, max_bytes: usize) -> Vec<Vec<Op>> {
    let mut all = Vec::new();
    let mut batch: Vec<Op> = Vec::new();
    let mut bytes = 0;
    for op in ops {
        let size = op.size();
        if !batch.is_empty() && (batch.len() == max_ops || bytes + size > max_bytes) {
            all.push(std::mem::take(&mut batch));
            bytes = 0;
        }
        bytes += size;
        batch.push(op);
    }
    if !batch.is_empty() {
        all.push(batch);
    }
    all
}

/// A batch as stored: per operation a tag (`P`ut or `D`elete), then length-prefixed fields.
pub(super) fn encode(batch: &[Op]) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(bytes);
    }
    let mut out = Vec::with_capacity(batch.iter().map(Op::size).sum());
    for op in batch {
        match op {
            Op::Put { key, value, lease } => {
                out.push(b'P');
                field(&mut out, key);
                field(&mut out, value);
                out.extend_from_slice(&lease.to_be_bytes());
            }
            Op::Delete { key, end } => {
                out.push(b'D');
                field(&mut out, key);
                field(&mut out, end.as_deref().unwrap_or_default());
            }
        }
    }
    out
}

/// The operations of a stored batch.
pub(super) fn decode(mut bytes: &[u8]) -> Result<Vec<Op>, String> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if bytes.len() < n {
            return Err("a batch ends inside an operation".into());
        }
        let (head, rest) = bytes.split_at(n);
        *bytes = rest;
        Ok(head)
    }
    fn field(bytes: &mut &[u8]) -> Result<Vec<u8>, String> {
        let len = take(bytes, 4)?;
        let len = u32::from_be_bytes(len.try_into().expect("four bytes")) as usize;
        Ok(take(bytes, len)?.to_vec())
    }
    let mut ops = Vec::new();
    while let Some((&tag, rest)) = bytes.split_first() {
        bytes = rest;
        ops.push(match tag {
            b'P' => {
                let key = field(&mut bytes)?;
                let value = field(&mut bytes)?;
                let lease = i64::from_be_bytes(take(&mut bytes, 8)?.try_into().expect("8 bytes"));
                Op::Put { key, value, lease }
            }
            b'D' => {
                let key = field(&mut bytes)?;
                let end = field(&mut bytes)?;
                Op::Delete {
                    key,
                    end: (!end.is_empty()).then_some(end),
                }
            }
            other => return Err(format!("unknown operation tag {other}")),
        });
    }
    Ok(ops)
}

impl Shared {
    /// Writes `batches` of intent `id` where no one reads them yet (step 1).
    pub(super) fn stage_intent(&self, id: &str, batches: &[Vec<Op>]) -> Result<(), StoreError> {
        for (n, batch) in batches.iter().enumerate() {
            let mut kv = self.kv();
            let key = self.keys.intent(id, n);
            let value = encode(batch);
            self.trip(Trip::Intent);
            self.handle
                .block_on(async move { kv.put(key, value, None).await })
                .map_err(|e| self.unavailable(&e))?;
        }
        Ok(())
    }

    /// Removes the batches of an intent that was never committed (best effort: the sweep
    /// removes what is left).
    pub(super) fn drop_intent(&self, id: &str) {
        let (from, to) = self.keys.intent_range(id);
        let mut kv = self.kv();
        let _ = self.handle.block_on(async move {
            kv.delete(from, Some(DeleteOptions::new().with_range(to)))
                .await
        });
    }

    /// Applies the pending intent, if there is one, and removes it (steps 3 and 4): by its
    /// writer, or by anyone who finds it in their way. Answers the revision etcd was at when
    /// it was done.
    pub(super) fn finish_pending(&self) -> Result<i64, StoreError> {
        let found = self.get_now(self.keys.pending(), None, Trip::Intent)?;
        let now = found.header().map_or(0, |h| h.revision());
        let Some(record) = found.kvs().first() else {
            return Ok(now);
        };
        let revision = record.mod_revision();
        let pending: Pending =
            serde_json::from_slice(record.value()).map_err(|e| StoreError::Corrupt {
                table: crate::store::Table::Meta,
                key: "~pending".into(),
                message: e.to_string(),
            })?;
        let started = std::time::Instant::now();
        for n in 0..pending.batches {
            let stored = self.get_now(self.keys.intent(&pending.id, n), None, Trip::Intent)?;
            let now = stored.header().map_or(0, |h| h.revision());
            let Some(stored) = stored.kvs().first() else {
                // Removed with `~pending` by whoever finished it first.
                return Ok(now);
            };
            let ops = decode(stored.value()).map_err(|message| StoreError::Corrupt {
                table: crate::store::Table::Meta,
                key: format!("~intents/{}/{n}", pending.id),
                message,
            })?;
            if let Some(done) = self.apply(revision, &ops)? {
                return Ok(done);
            }
        }
        let (from, to) = self.keys.intent_range(&pending.id);
        let txn = Txn::new().when([self.pending_is(revision)]).and_then([
            TxnOp::delete(self.keys.pending(), None),
            TxnOp::delete(from, Some(DeleteOptions::new().with_range(to))),
        ]);
        let mut kv = self.kv();
        let done = self
            .handle
            .block_on(async move { kv.txn(txn).await })
            .map_err(|e| self.unavailable(&e))?;
        metrics::histogram!(crate::model::metrics::STORE_INTENT_SECONDS.name)
            .record(started.elapsed().as_secs_f64());
        Ok(done.header().map_or(0, |h| h.revision()))
    }

    /// Applies one batch while `~pending` is still the record of `revision`; the revision etcd
    /// is at if it is not (someone finished the intent). A put bound to a lease that has ended
    /// is left out: its key would have gone with the lease anyway.
    fn apply(&self, revision: i64, ops: &[Op]) -> Result<Option<i64>, StoreError> {
        let mut ops = ops.to_vec();
        loop {
            let txn = Txn::new()
                .when([self.pending_is(revision)])
                .and_then(ops.iter().map(Op::to_txn_op).collect::<Vec<_>>());
            let mut kv = self.kv();
            self.trip(Trip::Intent);
            match self.handle.block_on(async move { kv.txn(txn).await }) {
                Ok(response) => {
                    let now = response.header().map_or(0, |h| h.revision());
                    return Ok((!response.succeeded()).then_some(now));
                }
                Err(e) if e.to_string().contains("lease not found") => {
                    let ended = self.ended_leases(&ops)?;
                    if ended.is_empty() {
                        return Err(self.unavailable(&e));
                    }
                    ops.retain(|op| !matches!(op, Op::Put { lease, .. } if ended.contains(lease)));
                }
                Err(e) => return Err(self.unavailable(&e)),
            }
        }
    }

    /// The leases of `ops`' puts that etcd no longer has.
    fn ended_leases(&self, ops: &[Op]) -> Result<Vec<i64>, StoreError> {
        let mut leases: Vec<i64> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Put { lease, .. } if *lease != 0 => Some(*lease),
                Op::Put { .. } | Op::Delete { .. } => None,
            })
            .collect();
        leases.sort_unstable();
        leases.dedup();
        let mut ended = Vec::new();
        for lease in leases {
            let mut client = self.lease_client();
            let ttl = self
                .handle
                .block_on(async move { client.time_to_live(lease, None).await })
                .map_err(|e| self.unavailable(&e))?;
            if ttl.ttl() <= 0 {
                ended.push(lease);
            }
        }
        Ok(ended)
    }

    /// That `~pending` is still the record written at `revision`.
    fn pending_is(&self, revision: i64) -> Compare {
        Compare::mod_revision(self.keys.pending(), CompareOp::Equal, revision)
    }

    /// That no intent is pending: every ordinary write compares it.
    pub(super) fn none_pending(&self) -> Compare {
        Compare::create_revision(self.keys.pending(), CompareOp::Equal, 0)
    }

    /// A read of `~pending` alongside a view's first read.
    pub(super) fn get_pending(&self) -> TxnOp {
        TxnOp::get(
            self.keys.pending(),
            Some(GetOptions::new().with_keys_only()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &[u8], lease: i64) -> Op {
        Op::Put {
            key: key.as_bytes().to_vec(),
            value: value.to_vec(),
            lease,
        }
    }

    #[test]
    fn a_batch_reads_back_as_written() {
        let ops = vec![
            put("/ebb/runs/a", b"{\"x\":1}", 0),
            put("/ebb/owners/a", b"", 7_000_000_000_001),
            Op::Delete {
                key: b"/ebb/runs/b".to_vec(),
                end: None,
            },
            Op::Delete {
                key: b"/ebb/~chunks/x\0".to_vec(),
                end: Some(b"/ebb/~chunks/x\x01".to_vec()),
            },
            put("/ebb/meta/bin", &[0, 1, 2, 255], 0),
        ];
        assert_eq!(decode(&encode(&ops)).expect("decode"), ops);
        let mut cut = encode(&ops);
        cut.truncate(cut.len() - 3);
        assert!(decode(&cut).is_err());
    }

    #[test]
    fn batches_keep_to_both_limits_and_the_order() {
        let ops: Vec<Op> = (0..300)
            .map(|i| {
                put(
                    &format!("k{i:03}"),
                    &vec![b'v'; if i % 50 == 0 { 900 } else { 10 }],
                    0,
                )
            })
            .collect();
        let split = batches(ops.clone(), 100, 2000);
        assert!(split.iter().all(|b| b.len() <= 100));
        assert!(
            split
                .iter()
                .all(|b| b.iter().map(Op::size).sum::<usize>() <= 2000)
        );
        assert_eq!(split.concat(), ops);
        // One operation larger than the byte limit still goes, alone.
        let big = vec![put("a", &[0; 5000], 0), put("b", b"", 0)];
        assert_eq!(batches(big, 10, 1000).len(), 2);
    }
}
