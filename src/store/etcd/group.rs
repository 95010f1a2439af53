//! Group commit on etcd: concurrent writes whose keys do not meet share one transaction.
//!
//! One thread takes every write waiting, runs each closure over the same copy in memory
//! ([`super::cache`]), and gathers into one group the writes that neither read nor write what
//! another of the group writes. The group's transaction holds every member's compares (and
//! fence) and every member's operations: it commits all of them or none. If it fails on a
//! conflict, the members are committed one by one with their own compares, so a conflict
//! fails only the write it concerns, which runs again on a copy that has caught up. A write
//! that meets the group waits for the next one, run again on the newer copy.
//!
//! What the group cannot take goes the way of a single write ([`Shared::write`]): a write
//! while there is no copy, one that read a log from etcd and could not, one with a value
//! larger than a chunk, or one larger than a transaction.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use super::cache::Snapshot;
use super::commit::{CHUNK, compares, found, operations, send};
use super::intent::Op;
use super::shared::{GRACE, InFlight, MAX_CONFLICTS, MAX_TXN_BYTES, Shared, Trip};
use super::view::View;
use crate::store::backend::Fence;
use crate::store::job::{Verdict, WriteJob};
use crate::store::table::{StoreError, Table};
use crate::store::txn::{Staged, Txn as StoreTxn};

/// Most writes one round takes.
const MAX_GROUP: usize = 256;

/// A write waiting for its turn.
pub(super) struct Queued {
    pub(super) job: Box<dyn WriteJob>,
    pub(super) patient: bool,
    pub(super) fence: Option<Fence>,
    pub(super) started: Instant,
    pub(super) conflicts: u32,
    pub(super) guard: InFlight,
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued")
            .field("patient", &self.patient)
            .field("conflicts", &self.conflicts)
            .finish_non_exhaustive()
    }
}

/// One write of a group: the write, and its parts.
struct Member {
    queued: Queued,
    parts: Parts,
}

/// What a write compares, what it does, and the keys it touches.
struct Parts {
    compares: Vec<Compare>,
    ops: Vec<Op>,
    bytes: usize,
    /// Keys it read (and its fence's owner record, and the deletion keys of tables it
    /// scanned), and the prefixes it scanned.
    read: BTreeSet<Vec<u8>>,
    scanned: Vec<Vec<u8>>,
    /// Keys it puts or deletes, but the tables' deletion keys, which are only ever put empty
    /// and may be put by several members.
    written: BTreeSet<Vec<u8>>,
    deletion_keys: BTreeSet<Vec<u8>>,
}

impl Parts {
    /// Whether it reads what `other` writes, either way, or both write one key.
    fn meets(&self, other: &Parts) -> bool {
        let reads_of =
            |reader: &Parts, writer: &Parts| {
                writer.written.iter().chain(&writer.deletion_keys).any(|k| {
                    reader.read.contains(k) || reader.scanned.iter().any(|p| k.starts_with(p))
                })
            };
        reads_of(self, other)
            || reads_of(other, self)
            || self.written.iter().any(|k| other.written.contains(k))
    }
}

/// The sending side of the committer's queue.
#[derive(Debug)]
pub(super) struct Committer {
    queue: mpsc::Sender<Queued>,
}

impl Committer {
    /// Starts the committer thread.
    pub(super) fn spawn(shared: Arc<Shared>) -> std::io::Result<Committer> {
        let (queue, inbox) = mpsc::channel::<Queued>();
        std::thread::Builder::new()
            .name("ebb-etcd-writer".into())
            .spawn(move || run(&shared, &inbox))?;
        Ok(Committer { queue })
    }

    /// Queues a write; if the committer is gone, the write goes alone.
    pub(super) fn submit(&self, queued: Queued) {
        if let Err(mpsc::SendError(queued)) = self.queue.send(queued) {
            alone(queued);
        }
    }
}

/// Commits rounds until every sender is gone.
fn run(shared: &Arc<Shared>, inbox: &mpsc::Receiver<Queued>) {
    let mut carried: Vec<Queued> = Vec::new();
    loop {
        if carried.is_empty() {
            let Ok(first) = inbox.recv() else { return };
            carried.push(first);
        }
        while carried.len() < MAX_GROUP {
            match inbox.try_recv() {
                Ok(queued) => carried.push(queued),
                Err(_) => break,
            }
        }
        let round = std::mem::take(&mut carried);
        carried = round_of(shared, round);
    }
}

/// Runs a write the way of a single write, on the blocking pool.
fn alone(queued: Queued) {
    let Queued {
        job,
        patient,
        fence,
        guard,
        ..
    } = queued;
    let shared = Arc::clone(&guard.0);
    shared.handle.spawn_blocking(move || {
        guard.0.write(job, patient, fence.as_ref());
        drop(guard);
    });
}

/// One round: runs the closures over one copy, commits a group, and answers what is carried
/// to the next round.
fn round_of(shared: &Arc<Shared>, round: Vec<Queued>) -> Vec<Queued> {
    let Some(copy) = shared.cache.snapshot() else {
        round.into_iter().for_each(alone);
        return Vec::new();
    };
    if copy.get(&shared.keys.pending()).is_some() {
        // A write larger than a transaction is being applied: finish it first.
        if shared.finish_pending().is_err() {
            round.into_iter().for_each(alone);
            return Vec::new();
        }
        shared.catch_up(copy.revision + 1);
        return round;
    }
    let mut group: Vec<Member> = Vec::new();
    let mut later = Vec::new();
    let (mut ops, mut compared, mut bytes) = (1usize, 1usize, 0usize);
    let max = shared.max_ops();
    for queued in round {
        let member = match run_closure(shared, &copy, queued) {
            Ran::Answered => continue,
            Ran::Alone(queued) => {
                alone(queued);
                continue;
            }
            Ran::Member(member) => member,
        };
        let p = &member.parts;
        let fits = ops + p.ops.len() < max
            && compared + p.compares.len() < max
            && bytes + p.bytes <= MAX_TXN_BYTES;
        if !fits || group.iter().any(|m| m.parts.meets(p)) {
            later.push(member.queued);
            continue;
        }
        ops += p.ops.len();
        compared += p.compares.len();
        bytes += p.bytes;
        group.push(member);
    }
    if !group.is_empty() {
        later.extend(commit_group(shared, group));
    }
    later
}

/// How a closure's run over the copy went.
enum Ran {
    /// It refused, or staged nothing: answered.
    Answered,
    /// It must go the way of a single write.
    Alone(Queued),
    Member(Member),
}

/// Runs `queued`'s closure over `copy`.
fn run_closure(shared: &Shared, copy: &Snapshot, mut queued: Queued) -> Ran {
    let view = View::cached(shared, copy.clone(), Trip::WriteRead);
    let mut txn = StoreTxn::new(&view);
    let verdict = queued.job.run(&mut txn);
    let staged = txn.into_staged();
    if view.failure().is_some() {
        return Ran::Alone(queued);
    }
    if verdict == Verdict::Refused || staged.is_empty() {
        answer(queued, Ok(()));
        return Ran::Answered;
    }
    // Chunked values, and writes too large for a group, go alone.
    if staged.len() >= shared.max_ops() / 2
        || staged
            .values()
            .any(|v| v.as_ref().is_some_and(|b| b.len() > CHUNK))
    {
        return Ran::Alone(queued);
    }
    match parts(shared, &view, staged, queued.fence.as_ref()) {
        Ok(parts) => Ran::Member(Member { queued, parts }),
        Err(_) => Ran::Alone(queued),
    }
}

/// Answers a queued write.
fn answer(queued: Queued, outcome: Result<(), StoreError>) {
    let Queued { job, guard, .. } = queued;
    job.finish(outcome);
    drop(guard);
}

/// What a closure over `view` that staged `staged` compares and writes.
fn parts(
    shared: &Shared,
    view: &View<'_>,
    staged: Staged,
    fence: Option<&Fence>,
) -> Result<Parts, StoreError> {
    let reads = view.reads();
    let mut read: BTreeSet<Vec<u8>> = reads.keys.keys().cloned().collect();
    let mut scanned = Vec::new();
    for (table, prefixes) in &reads.ranges {
        read.insert(shared.keys.deleted(*table));
        scanned.extend(prefixes.iter().map(|p| shared.keys.of(*table, p)));
    }
    drop(reads);
    let mut compares = compares(shared, view, shared.max_ops() / 2);
    if let Some(fence) = fence {
        let key = shared.keys.of(Table::Owners, &fence.run);
        read.insert(key.clone());
        compares.push(Compare::lease(key, CompareOp::Equal, fence.lease));
    }
    let ops = operations(shared, view, staged).map_err(|f| f.error)?;
    let deletion: BTreeSet<Vec<u8>> = Table::ALL
        .into_iter()
        .map(|t| shared.keys.deleted(t))
        .collect();
    let mut written = BTreeSet::new();
    let mut deletion_keys = BTreeSet::new();
    for op in &ops {
        match op {
            Op::Put { key, .. } | Op::Delete { key, end: None } => {
                if deletion.contains(key) {
                    deletion_keys.insert(key.clone());
                } else {
                    written.insert(key.clone());
                }
            }
            // Chunks' ranges: nobody compares them.
            Op::Delete { end: Some(_), .. } => {}
        }
    }
    let bytes = ops.iter().map(Op::size).sum();
    Ok(Parts {
        compares,
        ops,
        bytes,
        read,
        scanned,
        written,
        deletion_keys,
    })
}

/// Commits `group` as one transaction; answers the writes carried to the next round.
fn commit_group(shared: &Arc<Shared>, group: Vec<Member>) -> Vec<Queued> {
    let mut compares: Vec<Compare> = group
        .iter()
        .flat_map(|m| m.parts.compares.clone())
        .collect();
    compares.push(shared.none_pending());
    let mut seen = BTreeSet::new();
    let mut ops: Vec<TxnOp> = Vec::new();
    for m in &group {
        for op in &m.parts.ops {
            let key = match op {
                Op::Put { key, .. } | Op::Delete { key, .. } => key.clone(),
            };
            // A table's deletion key once, however many members delete from it.
            if m.parts.deletion_keys.contains(&key) && !seen.insert(key) {
                continue;
            }
            ops.push(op.to_txn_op());
        }
    }
    let marker = shared
        .keys
        .marker(&uuid::Uuid::now_v7().simple().to_string());
    ops.push(TxnOp::put(marker.clone(), Vec::new(), None));
    let mut otherwise = vec![shared.get_pending()];
    for m in &group {
        if let Some(f) = &m.queued.fence {
            otherwise.push(TxnOp::get(shared.keys.of(Table::Owners, &f.run), None));
        }
    }
    let txn = Txn::new().when(compares).and_then(ops).or_else(otherwise);
    match send(shared, txn, group.len()) {
        Ok(response) if response.succeeded() => {
            let revision = response.header().map_or(0, |h| h.revision());
            shared
                .written
                .fetch_max(revision, std::sync::atomic::Ordering::SeqCst);
            shared.catch_up(revision);
            for m in group {
                answer(m.queued, Ok(()));
            }
            Vec::new()
        }
        Ok(response) => {
            if found(&response, &shared.keys.pending()).is_some() {
                let _ = shared.finish_pending();
                return group.into_iter().map(|m| m.queued).collect();
            }
            if group.len() > 1 {
                // Split: each member on its own, with its own compares.
                return group
                    .into_iter()
                    .flat_map(|m| commit_group(shared, vec![m]))
                    .collect();
            }
            let revision = response.header().map_or(0, |h| h.revision());
            group
                .into_iter()
                .filter_map(|m| conflicted(shared, &response, m.queued, revision))
                .collect()
        }
        Err(e) => {
            let error = shared.unavailable(&e);
            let queued: Vec<Queued> = group.into_iter().map(|m| m.queued).collect();
            if !error.is_unavailable() {
                for q in queued {
                    answer(q, Err(error.clone()));
                }
                return Vec::new();
            }
            // The answer was lost: the marker tells whether the group committed.
            let waiter = Arc::clone(shared);
            shared
                .handle
                .spawn_blocking(move || settle(&waiter, queued, &marker, &error));
            Vec::new()
        }
    }
}

/// A write whose own commit failed (its transaction's `response`, etcd at `revision`):
/// answered when its run is no longer this server's (the owner record read back is not bound
/// to its fence's lease) or when it conflicted too often, else carried to the next round, on a
/// copy at least at `revision`.
fn conflicted(
    shared: &Shared,
    response: &etcd_client::TxnResponse,
    mut q: Queued,
    revision: i64,
) -> Option<Queued> {
    if let Some(fence) = &q.fence
        && found(response, &shared.keys.of(Table::Owners, &fence.run)) != Some(fence.lease)
    {
        let run = fence.run.clone();
        answer(q, Err(StoreError::Fenced { run }));
        return None;
    }
    q.conflicts += 1;
    if q.conflicts >= MAX_CONFLICTS {
        let tries = q.conflicts;
        let store = shared.describe.clone();
        answer(q, Err(StoreError::Contended { store, tries }));
        return None;
    }
    shared.catch_up(revision);
    Some(q)
}

/// After a group's commit went unanswered: waits until etcd says whether its marker is there,
/// then answers every write (committed), or sends them on again (not committed); a write that
/// may not wait that long fails as unreachable.
fn settle(shared: &Arc<Shared>, mut queued: Vec<Queued>, marker: &[u8], error: &StoreError) {
    let mut waits = 0u32;
    loop {
        match shared.exists(marker) {
            Ok(true) => {
                for q in queued {
                    answer(q, Ok(()));
                }
                return;
            }
            Ok(false) => {
                queued.into_iter().for_each(alone);
                return;
            }
            Err(_) => {
                waits += 1;
                let (keep, give_up): (Vec<Queued>, Vec<Queued>) = queued
                    .into_iter()
                    .partition(|q| q.patient || q.started.elapsed() < GRACE);
                for q in give_up {
                    answer(q, Err(error.clone()));
                }
                if keep.is_empty() {
                    return;
                }
                queued = keep;
                shared.failover();
                std::thread::sleep(Duration::from_millis(50 * 2u64.pow(waits.min(5))));
            }
        }
    }
}
