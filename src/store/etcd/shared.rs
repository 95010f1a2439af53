//! What every job of the etcd backend shares: the client, the runtime it runs on, the
//! installation's keys, and how a failed call becomes a store error.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{KvClient, LeaseClient, WatchClient};
use tokio::runtime::Handle;

use crate::store::table::{StoreError, Table};

/// What every job of the backend uses.
pub(super) struct Shared {
    /// One client per endpoint: a call goes to the current one, and a failure to reach it
    /// moves on to the next ([`Shared::failover`]), so a dead member is left at once.
    pub(super) clients: Vec<KvClient>,
    /// The lease and watch clients, one per endpoint like `clients`.
    pub(super) leases: Vec<LeaseClient>,
    pub(super) watches: Vec<WatchClient>,
    pub(super) current: AtomicUsize,
    /// This server's lease (0: none yet, or it ended).
    pub(super) lease: tokio::sync::watch::Sender<i64>,
    /// Until when the lease is surely live by this host's clock: its last renewal's sending
    /// time plus its time to live, less a margin.
    pub(super) lease_deadline: std::sync::Mutex<Option<std::time::Instant>>,
    /// When etcd may end the lease at the earliest: its last renewal's sending plus its time
    /// to live.
    pub(super) lease_expiry: std::sync::Mutex<Option<std::time::Instant>>,
    pub(super) handle: Handle,
    pub(super) keys: Keys,
    pub(super) describe: String,
    pub(super) closed: AtomicBool,
    pub(super) in_flight: AtomicUsize,
    /// The most operations (and compares) etcd takes in one transaction: its
    /// `--max-txn-ops`, as found at start (128 by default).
    pub(super) max_ops: AtomicUsize,
    /// The installation's records in memory, for write closures and reads.
    pub(super) cache: super::cache::Cache,
    /// The revision of this server's latest write: a run owner's read waits for the copy to
    /// hold it.
    pub(super) written: std::sync::atomic::AtomicI64,
    /// etcd's revision for reads: from a commit's answer, or asked once for all the reads
    /// waiting at a time.
    pub(super) probe: super::probe::Probe,
    /// The runs whose history grew, by any server, as the watch tells them.
    pub(super) news: tokio::sync::broadcast::Sender<String>,
}

/// The most bytes of keys and values ebb puts in one transaction: well below etcd's default
/// `--max-request-bytes` (1.5 MiB), with room for the compares.
pub(super) const MAX_TXN_BYTES: usize = 1 << 20;

/// What a request to etcd was for, as the round-trip counter says.
#[derive(Debug, Clone, Copy)]
pub(super) enum Trip {
    Read,
    /// A read of etcd's revision alone, that a read of the copy may stand for etcd's state.
    Probe,
    /// A read inside a write closure.
    WriteRead,
    Commit,
    Chunk,
    Intent,
}

/// The etcd keys of an installation.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    pub(super) root: String,
}

impl Keys {
    /// The etcd key of `key` in `table`.
    pub(super) fn of(&self, table: Table, key: &str) -> Vec<u8> {
        format!("{}/{}/{key}", self.root, table.name()).into_bytes()
    }

    /// The start of `table`'s keys in etcd, for taking the table's keys apart.
    pub(super) fn table_start(&self, table: Table) -> usize {
        self.root.len() + table.name().len() + 2
    }

    /// The key whose mod revision grows whenever a key of `table` is deleted: a write that
    /// scanned the table compares it, since a deleted key leaves no revision to compare.
    pub(super) fn deleted(&self, table: Table) -> Vec<u8> {
        format!("{}/~deleted/{}", self.root, table.name()).into_bytes()
    }

    /// Whether `key` is a table's deletion key ([`Keys::deleted`]).
    pub(super) fn is_deletion_key(&self, key: &[u8]) -> bool {
        self.inside(key)
            .and_then(|k| k.strip_prefix(b"~deleted/"))
            .and_then(|name| std::str::from_utf8(name).ok())
            .is_some_and(|name| Table::named(name).is_some())
    }

    /// `key` (an etcd key) without the installation's `<root>/`, if it has it. Taking keys
    /// apart this way formats nothing: the watch and every write do it for each key.
    fn inside<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        key.strip_prefix(self.root.as_bytes())?.strip_prefix(b"/")
    }

    /// `key` without `<root>/<table>/`, if it is a key of `table`.
    fn in_table<'k>(&self, table: Table, key: &'k [u8]) -> Option<&'k [u8]> {
        self.inside(key)?
            .strip_prefix(table.name().as_bytes())?
            .strip_prefix(b"/")
    }

    /// The prefix of the chunks of a large value under `key` in `table` (each chunk is
    /// `<base>\0<generation>\0<n>`).
    pub(super) fn chunks(&self, table: Table, key: &str) -> Vec<u8> {
        format!("{}/~chunks/{}/{key}", self.root, table.name()).into_bytes()
    }

    /// Every chunk of `key` in `table`, of any generation: from, to (excluded).
    pub(super) fn all_chunks(&self, table: Table, key: &str) -> (Vec<u8>, Vec<u8>) {
        let mut from = self.chunks(table, key);
        from.push(0);
        let mut to = from.clone();
        *to.last_mut().expect("ends with 0") = 1;
        (from, to)
    }

    /// The chunks of generation `generation` of `key` in `table`: from, to (excluded).
    pub(super) fn generation_chunks(
        &self,
        table: Table,
        key: &str,
        generation: &str,
    ) -> (Vec<u8>, Vec<u8>) {
        let (mut from, _) = self.all_chunks(table, key);
        from.extend_from_slice(generation.as_bytes());
        from.push(0);
        let mut to = from.clone();
        *to.last_mut().expect("ends with 0") = 1;
        (from, to)
    }

    /// The key the sweep of orphan chunks puts whenever it drops some: a write of chunks
    /// compares it to the revision of its first chunk.
    pub(super) fn swept(&self) -> Vec<u8> {
        format!("{}/~swept", self.root).into_bytes()
    }

    /// Where every large value's chunks are: `<root>/~chunks/`.
    pub(super) fn chunks_root(&self) -> Vec<u8> {
        format!("{}/~chunks/", self.root).into_bytes()
    }

    /// The marker a write's transaction leaves, so a write whose answer was lost can tell
    /// whether it committed. Markers sort by time and are swept after [`MARKER_LIFE`].
    pub(super) fn marker(&self, id: &str) -> Vec<u8> {
        format!("{}/~commits/{:020}-{id}", self.root, now_micros()).into_bytes()
    }

    /// Every key of the installation: `<root>/`.
    pub(super) fn root_prefix(&self) -> Vec<u8> {
        format!("{}/", self.root).into_bytes()
    }

    /// Whether `key` (an etcd key) is one the copy in memory keeps: a record of a copied table
    /// (see [`super::cache::is_copied`]), or `~pending`.
    pub(super) fn is_copied(&self, key: &[u8]) -> bool {
        let Some(rest) = self.inside(key) else {
            return false;
        };
        if rest == b"~pending" {
            return true;
        }
        let Some(name) = rest.split(|b| *b == b'/').next() else {
            return false;
        };
        std::str::from_utf8(name)
            .ok()
            .and_then(Table::named)
            .is_some_and(|t| rest.len() > name.len() && super::cache::is_copied(t))
    }

    /// Whether `key` is an entry of a log read by sequence (a run's events, a namespace's
    /// changes).
    pub(super) fn is_log(&self, key: &[u8]) -> bool {
        [Table::Events, Table::Changes]
            .into_iter()
            .any(|t| self.in_table(t, key).is_some())
    }

    /// The run whose record in `table` (`Runs` or `Owners`, keyed
    /// `<ns>/<app>/<program>/<run>`) `key` is.
    pub(super) fn record_run<'k>(&self, table: Table, key: &'k [u8]) -> Option<&'k str> {
        let rest = std::str::from_utf8(self.in_table(table, key)?).ok()?;
        rest.rsplit('/').next().filter(|run| !run.is_empty())
    }

    /// The run whose history `key` (an etcd key) is an event of, if it is one.
    pub(super) fn event_run<'k>(&self, key: &'k [u8]) -> Option<&'k str> {
        let rest = std::str::from_utf8(self.in_table(Table::Events, key)?).ok()?;
        rest.rsplit_once('/').map(|(run, _)| run)
    }

    /// The record of the intent being applied, while one is (see [`super::intent`]).
    pub(super) fn pending(&self) -> Vec<u8> {
        format!("{}/~pending", self.root).into_bytes()
    }

    /// Batch `n` of intent `id`.
    pub(super) fn intent(&self, id: &str, n: usize) -> Vec<u8> {
        format!("{}/~intents/{id}/{n:06}", self.root).into_bytes()
    }

    /// Every batch of intent `id`: from, to (excluded).
    pub(super) fn intent_range(&self, id: &str) -> (Vec<u8>, Vec<u8>) {
        (
            format!("{}/~intents/{id}/", self.root).into_bytes(),
            format!("{}/~intents/{id}0", self.root).into_bytes(),
        )
    }

    /// Every intent's batches whose id (time-ordered) sorts before `id`.
    pub(super) fn intents_before(&self, id: &str) -> (Vec<u8>, Vec<u8>) {
        (
            format!("{}/~intents/", self.root).into_bytes(),
            format!("{}/~intents/{id}", self.root).into_bytes(),
        )
    }

    pub(super) fn markers_before(&self, micros: u64) -> (Vec<u8>, Vec<u8>) {
        (
            format!("{}/~commits/", self.root).into_bytes(),
            format!("{}/~commits/{micros:020}", self.root).into_bytes(),
        )
    }
}

/// The first key after every key that starts with `prefix`.
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Only 0xff bytes: everything from the prefix on.
    vec![0]
}

/// How long an impatient read or write rides out an unreachable etcd (a leader election
/// takes about a second) before it fails.
pub(super) const GRACE: Duration = Duration::from_secs(3);

/// How many times a write runs again after conflicting with other writers.
pub(super) const MAX_CONFLICTS: u32 = 64;

/// Counts a job in flight while it lives, so closing can wait for it.
pub(super) struct InFlight(pub(super) Arc<Shared>);

impl InFlight {
    pub(super) fn enter(shared: &Arc<Shared>) -> Option<InFlight> {
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        if shared.closed.load(Ordering::SeqCst) {
            shared.in_flight.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(InFlight(Arc::clone(shared)))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long a commit marker is kept.
pub(super) const MARKER_LIFE: Duration = Duration::from_secs(600);

pub(super) fn now_micros() -> u64 {
    crate::store::clock::now_micros()
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("store", &self.describe)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Counts one request to etcd.
    pub(super) fn trip(&self, trip: Trip) {
        let kind = match trip {
            Trip::Read => "read",
            Trip::Probe => "probe",
            Trip::WriteRead => "write_read",
            Trip::Commit => "commit",
            Trip::Chunk => "chunk",
            Trip::Intent => "intent",
        };
        metrics::counter!(crate::model::metrics::STORE_ROUND_TRIPS.name, "kind" => kind)
            .increment(1);
    }

    /// A read of `key` as etcd has it now (not at a view's revision), counted as `trip`.
    pub(super) fn get_now(
        &self,
        key: Vec<u8>,
        options: Option<etcd_client::GetOptions>,
        trip: Trip,
    ) -> Result<etcd_client::GetResponse, StoreError> {
        self.handle
            .block_on(self.get_from_runtime(key, options, trip))
    }

    /// [`Shared::get_now`], for a task on the etcd client's runtime.
    pub(super) async fn get_from_runtime(
        &self,
        key: Vec<u8>,
        options: Option<etcd_client::GetOptions>,
        trip: Trip,
    ) -> Result<etcd_client::GetResponse, StoreError> {
        let mut kv = self.kv();
        self.trip(trip);
        kv.get(key, options).await.map_err(|e| self.unavailable(&e))
    }

    /// The most operations one transaction may hold.
    pub(super) fn max_ops(&self) -> usize {
        self.max_ops.load(Ordering::Relaxed)
    }

    pub(super) fn unavailable(&self, e: &etcd_client::Error) -> StoreError {
        classify(&self.describe, e)
    }

    pub(super) fn kv(&self) -> KvClient {
        let i = self.current.load(Ordering::Relaxed) % self.clients.len();
        self.clients[i].clone()
    }

    pub(super) fn lease_client(&self) -> LeaseClient {
        let i = self.current.load(Ordering::Relaxed) % self.leases.len();
        self.leases[i].clone()
    }

    pub(super) fn watch_client(&self) -> WatchClient {
        let i = self.current.load(Ordering::Relaxed) % self.watches.len();
        self.watches[i].clone()
    }

    /// Moves calls to the next endpoint, after the current one could not be reached.
    pub(super) fn failover(&self) {
        if self.clients.len() > 1 {
            self.current.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A failed call to etcd as a store error: unreachable (worth waiting for) or not.
#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "etcd-client's errors, not ebb's"
)]
pub(super) fn classify(describe: &str, e: &etcd_client::Error) -> StoreError {
    use tonic::Code;
    let transient = match e {
        etcd_client::Error::GRpcStatus(status) => !matches!(
            status.code(),
            Code::InvalidArgument
                | Code::FailedPrecondition
                | Code::OutOfRange
                | Code::ResourceExhausted
                | Code::PermissionDenied
                | Code::Unauthenticated
                | Code::NotFound
                | Code::AlreadyExists
                | Code::Unimplemented
        ),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        // The client's own mistakes (bad endpoints, encodings, a lock or election error).
        _ => false,
    };
    let message = match e {
        etcd_client::Error::GRpcStatus(status) => status.message().to_string(),
        other => other.to_string(),
    };
    if transient {
        StoreError::Unavailable {
            store: describe.to_string(),
            message,
        }
    } else if message.contains("request is too large") {
        StoreError::Storage(format!(
            "{describe} refused a write as too large ({message}); start etcd with a larger --max-request-bytes"
        ))
    } else {
        StoreError::Storage(format!("{describe}: {message}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A generation's range holds its chunks and nothing of another generation, of another
    /// key (one the key is a prefix of), or the value itself; the key's whole range holds them
    /// all.
    #[test]
    fn a_generations_chunks_are_its_own() {
        let keys = Keys {
            root: "/ebb".into(),
        };
        let chunk = |key: &str, generation: &str, n: u32| {
            let mut k = keys.chunks(Table::Operations, key);
            k.push(0);
            k.extend_from_slice(generation.as_bytes());
            k.push(0);
            k.extend_from_slice(format!("{n:06}").as_bytes());
            k
        };
        let (from, to) = keys.generation_chunks(Table::Operations, "r/1", "g1");
        let inside = |k: &[u8]| from.as_slice() <= k && k < to.as_slice();
        assert!(inside(&chunk("r/1", "g1", 0)) && inside(&chunk("r/1", "g1", 999_999)));
        for outside in [
            chunk("r/1", "g2", 0),
            chunk("r/1", "g10", 0),
            chunk("r/10", "g1", 0),
            keys.of(Table::Operations, "r/1"),
        ] {
            assert!(!inside(&outside), "{}", String::from_utf8_lossy(&outside));
        }
        let (all_from, all_to) = keys.all_chunks(Table::Operations, "r/1");
        for k in [chunk("r/1", "g1", 0), chunk("r/1", "g2", 3)] {
            assert!(all_from <= k && k < all_to);
        }
        assert!(chunk("r/10", "g1", 0) >= all_to);
    }

    /// The tests a commit makes of every key it writes tell the same keys apart as the keys
    /// themselves do.
    #[test]
    fn deletion_keys_and_logs_are_told_from_records() {
        let keys = Keys {
            root: "/ebb".into(),
        };
        for table in Table::ALL {
            assert!(keys.is_deletion_key(&keys.deleted(table)), "{table:?}");
            assert!(!keys.is_deletion_key(&keys.of(table, "x")), "{table:?}");
            let log = matches!(table, Table::Events | Table::Changes);
            assert_eq!(keys.is_log(&keys.of(table, "run/000001")), log, "{table:?}");
        }
        assert!(!keys.is_deletion_key(b"/ebb/~deleted/nosuchtable"));
        assert!(!keys.is_deletion_key(b"/other/~deleted/events"));
        assert!(!keys.is_log(b"/ebb/eventsx/1"));
        assert!(!keys.is_log(b"/other/events/1"));
        let run = "ns/app/p/01a2";
        assert_eq!(
            keys.record_run(Table::Runs, &keys.of(Table::Runs, run)),
            Some("01a2")
        );
        assert_eq!(
            keys.record_run(Table::Runs, &keys.of(Table::Owners, run)),
            None
        );
        let event = keys.of(Table::Events, "01a2/00001795805447445039");
        assert_eq!(keys.event_run(&event), Some("01a2"));
        assert_eq!(keys.event_run(&keys.of(Table::Runs, run)), None);
    }
}
