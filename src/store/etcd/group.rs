//! Group commit on etcd: concurrent writes whose keys do not meet share one transaction.
//!
//! One thread takes every write waiting, runs each closure over the same copy in memory
//! ([`super::cache`]), and gathers into one group the writes that neither read nor write what
//! another of the group writes. The group's transaction holds every member's compares (and
//! fence) and every member's operations: it commits all of them or none. If it fails on a
//! conflict, the members are committed one by one with their own compares, so a conflict
//! fails only the write it concerns, which runs again on a copy that has caught up.
//!
//! One group is on its way at a time, and the writes that come meanwhile gather into the next:
//! a transaction costs about the same whether it carries one write or thirty. Only when more
//! writes wait than one group takes do several go at once (at most [`MAX_FLIGHTS`]).
//!
//! A write that meets a group still committing — or appends to a history (a run's events, the
//! audit log) it appends to, since readers follow a history by sequence — is parked until that
//! group has landed and the copy holds it; only then is its closure run again.
//!
//! What the group cannot take goes the way of a single write ([`Shared::write`]): a write
//! while there has been no copy for a while, one that read a log from etcd and could not,
//! one with a value larger than a chunk, or one larger than a transaction.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use super::cache::Snapshot;
use super::commit::{CHUNK, compares, found, operations, send_from_runtime};
use super::intent::Op;
use super::shared::{GRACE, InFlight, MAX_CONFLICTS, MAX_TXN_BYTES, Shared, Trip};
use super::view::View;
use crate::store::backend::Fence;
use crate::store::job::{Verdict, WriteJob};
use crate::store::table::{StoreError, Table};
use crate::store::txn::{Staged, Txn as StoreTxn};

/// How long a round waits for the copy in memory while it is read.
const COPY_WAIT: Duration = Duration::from_secs(2);

/// Most writes one group takes.
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
    /// The logs it appends to (a run's events, a namespace's changes): their keys' prefix.
    /// Readers of a log go by sequence, so appends to one log commit in the order their
    /// closures ran: in one transaction, or one group after the other.
    logs: BTreeSet<Vec<u8>>,
}

impl Parts {
    /// What a group committing `members` touches, for later writes to keep clear of.
    fn of_group(members: &[Member]) -> Parts {
        let mut all = Parts {
            compares: Vec::new(),
            ops: Vec::new(),
            bytes: 0,
            read: BTreeSet::new(),
            scanned: Vec::new(),
            written: BTreeSet::new(),
            deletion_keys: BTreeSet::new(),
            logs: BTreeSet::new(),
        };
        for m in members {
            let p = &m.parts;
            all.read.extend(p.read.iter().cloned());
            all.scanned.extend(p.scanned.iter().cloned());
            all.written.extend(p.written.iter().cloned());
            all.deletion_keys.extend(p.deletion_keys.iter().cloned());
            all.logs.extend(p.logs.iter().cloned());
        }
        all
    }

    /// Whether it must wait for a group still committing that touched `flying`: it meets it,
    /// or appends to a log that group appends to.
    fn waits_for(&self, flying: &Parts) -> bool {
        self.meets(flying) || !self.logs.is_disjoint(&flying.logs)
    }

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

/// Most groups committing at once. A round waits for the group on its way unless the last
/// round was full (more writes wait than one group takes): the writes that come meanwhile
/// make the next group larger, and a transaction costs etcd and this server about the same
/// whether it carries one write or thirty.
const MAX_FLIGHTS: usize = 4;

/// What the committer hears.
enum Msg {
    /// A write to commit.
    Write(Queued),
    /// Group `n` is committed (or failed) and the copy holds it: writes waiting for it may go.
    Landed(u64),
    /// The store is dropped: stop once everything queued is answered.
    Stop,
}

/// The sending side of the committer's queue.
#[derive(Debug)]
pub(super) struct Committer {
    queue: mpsc::Sender<Msg>,
}

impl Committer {
    /// Starts the committer thread.
    pub(super) fn spawn(shared: Arc<Shared>) -> std::io::Result<Committer> {
        let (queue, inbox) = mpsc::channel::<Msg>();
        let outbox = queue.clone();
        std::thread::Builder::new()
            .name("ebb-etcd-writer".into())
            .spawn(move || run(&shared, &inbox, &outbox))?;
        Ok(Committer { queue })
    }

    /// Queues a write; if the committer is gone, the write goes alone.
    pub(super) fn submit(&self, queued: Queued) {
        if let Err(mpsc::SendError(Msg::Write(queued))) = self.queue.send(Msg::Write(queued)) {
            alone(queued);
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        let _ = self.queue.send(Msg::Stop);
    }
}

/// Tells the committer that group `.0` landed when dropped, however its commit ended (a panic
/// included): the writes parked on it never wait for good.
struct Landing(u64, mpsc::Sender<Msg>);

impl Drop for Landing {
    fn drop(&mut self) {
        let _ = self.1.send(Msg::Landed(self.0));
    }
}

/// A group on its way: its number, and what it touches.
struct Flight {
    n: u64,
    parts: Parts,
}

/// What the committer keeps between messages.
#[derive(Default)]
struct Rounds {
    /// Writes for the next round, in the order they came.
    carried: Vec<Queued>,
    /// Groups committing.
    flights: Vec<Flight>,
    /// Writes waiting for a group committing (by its number) to land: their closures run
    /// again only then.
    parked: std::collections::HashMap<u64, Vec<Queued>>,
    stopping: bool,
    /// The number of the last group sent.
    sent: u64,
    /// Whether the last round left writes for the next because its group was full.
    full: bool,
}

impl Rounds {
    fn take(&mut self, msg: Msg) {
        match msg {
            Msg::Write(queued) => self.carried.push(queued),
            Msg::Landed(n) => {
                self.flights.retain(|f| f.n != n);
                // The writes that waited go first: they came before the rest.
                if let Some(mut waited) = self.parked.remove(&n) {
                    waited.append(&mut self.carried);
                    self.carried = waited;
                }
            }
            Msg::Stop => self.stopping = true,
        }
    }

    /// Whether a round can go: a write waits, and no group commits, or the last round was
    /// full and fewer than [`MAX_FLIGHTS`] groups commit.
    fn ready(&self) -> bool {
        !self.carried.is_empty()
            && (self.flights.is_empty() || self.full && self.flights.len() < MAX_FLIGHTS)
    }
}

/// Commits rounds until the store is dropped and every write is answered. A round goes when
/// [`Rounds::ready`]; a write that meets a group committing (or appends to a log it appends
/// to) waits for it to land.
fn run(shared: &Arc<Shared>, inbox: &mpsc::Receiver<Msg>, outbox: &mpsc::Sender<Msg>) {
    let mut rounds = Rounds::default();
    loop {
        if !rounds.ready() {
            if rounds.stopping && rounds.carried.is_empty() && rounds.flights.is_empty() {
                return;
            }
            match inbox.recv() {
                Ok(msg) => rounds.take(msg),
                Err(_) => return,
            }
        }
        while let Ok(msg) = inbox.try_recv() {
            rounds.take(msg);
        }
        if !rounds.ready() {
            continue;
        }
        let n = rounds.sent + 1;
        let round = std::mem::take(&mut rounds.carried);
        let (later, group, parked) = round_of(shared, round, &rounds.flights, n);
        rounds.full = !later.is_empty() && !group.is_empty();
        rounds.carried = later;
        for (on, queued) in parked {
            rounds.parked.entry(on).or_default().push(queued);
        }
        if group.is_empty() {
            continue;
        }
        rounds.sent = n;
        rounds.flights.push(Flight {
            n,
            parts: Parts::of_group(&group),
        });
        let (committing, landing) = (Arc::clone(shared), Landing(n, outbox.clone()));
        // A task on the client's runtime, not a blocking thread parked on the answer: the
        // worker that reads etcd's answer goes on to answer the writes, with no thread woken
        // in between.
        shared.handle.spawn(async move {
            for queued in commit_group(&committing, group).await {
                if let Err(mpsc::SendError(Msg::Write(queued))) = landing.1.send(Msg::Write(queued))
                {
                    alone(queued);
                }
            }
            drop(landing);
        });
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

/// One round: runs the closures over one copy and gathers group `n` to commit. Answers the
/// writes left for the next round (once the group is full, the rest are not run), and those
/// parked until a group lands: one committing in `flights` that they meet, or this one.
fn round_of(
    shared: &Arc<Shared>,
    round: Vec<Queued>,
    flights: &[Flight],
    n: u64,
) -> (Vec<Queued>, Vec<Member>, Vec<(u64, Queued)>) {
    // While the copy is read (at start, after its watch broke), wait for it a little: writes
    // that go alone commit in no set order, and a log's readers go by sequence.
    let copy = shared.cache.snapshot().or_else(|| {
        shared
            .handle
            .block_on(shared.cache.caught_up(1, COPY_WAIT))
            .then(|| shared.cache.snapshot())
            .flatten()
    });
    let Some(copy) = copy else {
        round.into_iter().for_each(alone);
        return (Vec::new(), Vec::new(), Vec::new());
    };
    if copy.get(&shared.keys.pending()).is_some() {
        // A write larger than a transaction is being applied: finish it first.
        if shared.finish_pending().is_err() {
            round.into_iter().for_each(alone);
            return (Vec::new(), Vec::new(), Vec::new());
        }
        shared.catch_up(copy.revision + 1);
        return (round, Vec::new(), Vec::new());
    }
    let mut group: Vec<Member> = Vec::new();
    let mut later = Vec::new();
    let mut parked = Vec::new();
    let (mut ops, mut compared, mut bytes) = (1usize, 1usize, 0usize);
    let max = shared.max_ops();
    let mut round = round.into_iter();
    while let Some(queued) = round.next() {
        let member = match run_closure(shared, &copy, queued) {
            Ran::Answered => continue,
            Ran::Alone(queued) => {
                alone(queued);
                continue;
            }
            Ran::Member(member) => member,
        };
        let p = &member.parts;
        if let Some(flight) = flights.iter().find(|f| p.waits_for(&f.parts)) {
            parked.push((flight.n, member.queued));
            continue;
        }
        if group.iter().any(|m| m.parts.meets(p)) {
            parked.push((n, member.queued));
            continue;
        }
        let fits = group.len() < MAX_GROUP
            && ops + p.ops.len() < max
            && compared + p.compares.len() < max
            && bytes + p.bytes <= MAX_TXN_BYTES;
        if !fits && group.is_empty() {
            // Too large for a group even alone.
            alone(member.queued);
            continue;
        }
        if !fits {
            later.push(member.queued);
            later.extend(round);
            break;
        }
        ops += p.ops.len();
        compared += p.compares.len();
        bytes += p.bytes;
        group.push(member);
    }
    (later, group, parked)
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
    let (ops, unswept) = operations(shared, view, staged).map_err(|f| f.error)?;
    if unswept.is_some() {
        // Chunked values go alone (see `run_closure`); one that got here commits alone too.
        return Err(StoreError::Storage("a chunked value commits alone".into()));
    }
    let mut written = BTreeSet::new();
    let mut deletion_keys = BTreeSet::new();
    for op in &ops {
        match op {
            Op::Put { key, .. } | Op::Delete { key, end: None } => {
                if shared.keys.is_deletion_key(key) {
                    deletion_keys.insert(key.clone());
                } else {
                    written.insert(key.clone());
                }
            }
            // Chunks' ranges: nobody compares them.
            Op::Delete { end: Some(_), .. } => {}
        }
    }
    let logs = written
        .iter()
        .filter(|k| shared.keys.is_log(k))
        .filter_map(|k| k.iter().rposition(|b| *b == b'/').map(|i| k[..=i].to_vec()))
        .collect();
    let bytes = ops.iter().map(Op::size).sum();
    Ok(Parts {
        logs,
        compares,
        ops,
        bytes,
        read,
        scanned,
        written,
        deletion_keys,
    })
}

/// Commits `group` as one transaction; answers the writes carried to the next round. Runs on
/// the etcd client's runtime: what must block (finishing a pending write, settling a lost
/// answer) goes to its blocking pool.
async fn commit_group(shared: &Arc<Shared>, group: Vec<Member>) -> Vec<Queued> {
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
    match send_from_runtime(shared, txn, group.len(), false).await {
        Ok(response) if response.succeeded() => {
            let revision = response.header().map_or(0, |h| h.revision());
            shared
                .written
                .fetch_max(revision, std::sync::atomic::Ordering::SeqCst);
            shared.copy_reaches(revision).await;
            for m in group {
                answer(m.queued, Ok(()));
            }
            Vec::new()
        }
        Ok(response) => {
            if found(&response, &shared.keys.pending()).is_some() {
                let finisher = Arc::clone(shared);
                let _ = shared
                    .handle
                    .spawn_blocking(move || finisher.finish_pending())
                    .await;
                return group.into_iter().map(|m| m.queued).collect();
            }
            if group.len() > 1 {
                // Split: each member on its own, with its own compares.
                let mut carried = Vec::new();
                for m in group {
                    carried.extend(Box::pin(commit_group(shared, vec![m])).await);
                }
                return carried;
            }
            let revision = response.header().map_or(0, |h| h.revision());
            let mut carried = Vec::new();
            for m in group {
                if let Some(q) = conflicted(shared, &response, m.queued) {
                    shared.copy_reaches(revision).await;
                    carried.push(q);
                }
            }
            carried
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

/// A write whose own commit failed (its transaction's `response`): answered when its run is
/// no longer this server's (the owner record read back is not bound to its fence's lease) or
/// when it conflicted too often, else answered back, to be carried to the next round (on a
/// copy at least at the revision of the response).
fn conflicted(
    shared: &Shared,
    response: &etcd_client::TxnResponse,
    mut q: Queued,
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
