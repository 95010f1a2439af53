//! A copy in memory of the installation's records, read once at one revision and kept current
//! by a watch from that revision on (as Kubernetes' watch cache is): write closures read it
//! instead of asking etcd, so a write costs one round trip, its commit.
//!
//! The copy is never believed over etcd. A closure that read it is committed with the compares
//! of what it read (each key's mod revision as the copy had it, each scanned range unchanged
//! since the copy's revision), so a copy that is behind can only make the commit fail and the
//! closure run again, once the copy has caught up with the revision etcd answered; never a
//! wrong write. The logs (`Events`, `Attempts`, `Changes`), large and only appended to, are
//! not copied: a closure reads them from etcd at the copy's revision.
//!
//! A snapshot is an immutable map (`imbl::OrdMap`, shared structure): taking one is a clone of
//! a pointer, and the watch makes the next one beside it.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use imbl::OrdMap;
use tokio::sync::watch;

use crate::store::table::Table;

/// One key of the copy: its value as stored (a chunked value's pointer) and its mod revision.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) value: Arc<Vec<u8>>,
    pub(super) mod_revision: i64,
}

/// Most events of one run the copy holds; a run whose history grows past it is read from
/// etcd again.
pub(super) const MAX_HELD_EVENTS: usize = 512;

/// The copy at one revision of etcd.
#[derive(Debug, Clone)]
pub(super) struct Snapshot {
    pub(super) revision: i64,
    pub(super) entries: OrdMap<Vec<u8>, Entry>,
    /// The runs whose whole history (`Events`) the copy holds too: runs the watch saw
    /// created, from then until a while after they end (see [`super::follow`]).
    pub(super) histories: imbl::HashMap<String, Held>,
    /// The runs that ended whose history the copy still holds, the first to end first: the
    /// last looks of the runs' pollers find it here. At most [`HELD_ENDED`].
    pub(super) ended: imbl::Vector<String>,
}

/// Of a run's history the copy holds: how many events, and whether the run ended.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Held {
    pub(super) events: usize,
    pub(super) ended: bool,
}

/// Most runs that ended whose history the copy holds; the history of the first of them to end
/// is let go when another ends.
pub(super) const HELD_ENDED: usize = 256;

impl Snapshot {
    /// A copy of `entries`, at `revision`, holding no run's history.
    pub(super) fn new(revision: i64, entries: OrdMap<Vec<u8>, Entry>) -> Snapshot {
        Snapshot {
            revision,
            entries,
            histories: imbl::HashMap::new(),
            ended: imbl::Vector::new(),
        }
    }

    /// Whether the copy holds what a read of `table` from key (or prefix) `from` up to `to`
    /// covers: a copied table, or the history of one run it holds.
    pub(super) fn holds(&self, table: Table, from: &str, to: &str) -> bool {
        if is_copied(table) {
            return true;
        }
        fn run_of(key: &str) -> Option<&str> {
            key.split_once('/').map(|(run, _)| run)
        }
        table == Table::Events
            && run_of(from).is_some_and(|run| {
                self.histories.contains_key(run) && (to.is_empty() || run_of(to) == Some(run))
            })
    }

    pub(super) fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// The entries from `from` up to `to` (excluded), in key order.
    pub(super) fn range(&self, from: &[u8], to: &[u8]) -> Vec<(Vec<u8>, Entry)> {
        self.entries
            .range(from.to_vec()..to.to_vec())
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect()
    }

    /// At most `count` entries from `from` up to `to` (excluded), last key first.
    pub(super) fn range_back(&self, from: &[u8], to: &[u8], count: usize) -> Vec<(Vec<u8>, Entry)> {
        self.entries
            .range(from.to_vec()..to.to_vec())
            .rev()
            .take(count)
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect()
    }
}

/// The tables a closure reads from etcd rather than from the copy.
pub(super) fn is_copied(table: Table) -> bool {
    !matches!(table, Table::Events | Table::Attempts | Table::Changes)
}

/// The copy, and the revision it is at for whoever waits on it.
#[derive(Debug)]
pub(super) struct Cache {
    /// `None` until the copy is read, and again while it is read anew after its watch failed.
    latest: RwLock<Option<Snapshot>>,
    revision: watch::Sender<i64>,
}

impl Default for Cache {
    fn default() -> Self {
        Cache {
            latest: RwLock::new(None),
            revision: watch::Sender::new(0),
        }
    }
}

impl Cache {
    /// The copy as it is now, if there is one.
    pub(super) fn snapshot(&self) -> Option<Snapshot> {
        self.latest
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether there is a copy now.
    pub(super) fn ready(&self) -> bool {
        self.latest
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Makes `snapshot` the copy (`None`: there is none for now).
    pub(super) fn set(&self, snapshot: Option<Snapshot>) {
        let revision = snapshot.as_ref().map_or(0, |s| s.revision);
        *self.latest.write().unwrap_or_else(|e| e.into_inner()) = snapshot;
        self.revision.send_replace(revision);
    }

    /// Waits (at most `limit`) until the copy has caught up with `revision`; whether it has.
    pub(super) async fn caught_up(&self, revision: i64, limit: Duration) -> bool {
        let mut seen = self.revision.subscribe();
        tokio::time::timeout(limit, seen.wait_for(|r| *r >= revision))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}
