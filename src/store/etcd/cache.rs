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
use std::time::{Duration, Instant};

use imbl::OrdMap;
use tokio::sync::watch;

use crate::store::table::{StoreError, Table};

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
    /// The runs whose whole history (`Events`) the copy holds too, and how many events each:
    /// runs the watch saw created, from then until they end (see [`super::follow`]).
    pub(super) histories: imbl::HashMap<String, usize>,
}

impl Snapshot {
    /// A copy of `entries`, at `revision`, holding no run's history.
    pub(super) fn new(revision: i64, entries: OrdMap<Vec<u8>, Entry>) -> Snapshot {
        Snapshot {
            revision,
            entries,
            histories: imbl::HashMap::new(),
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

/// etcd's revision for reads, asked once for every read waiting: a read needs a revision
/// etcd gave after the read began, and one request started after several reads began serves
/// them all (as etcd batches its own read index).
#[derive(Debug, Default)]
pub(super) struct Probe {
    state: std::sync::Mutex<ProbeState>,
    done: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct ProbeState {
    /// Requests started, the number of the latest finished one, and its answer.
    started: u64,
    finished: u64,
    in_flight: bool,
    answer: Option<Result<(i64, bool), StoreError>>,
    /// When the request in flight started, and when the one that gave `answer` did.
    in_flight_from: Option<Instant>,
    answer_from: Option<Instant>,
}

impl ProbeState {
    /// The answer of a request that started after `since`, if it succeeded.
    fn known(&self, since: Instant) -> Option<(i64, bool)> {
        match (&self.answer, self.answer_from) {
            (Some(Ok(answer)), Some(from)) if from >= since => Some(*answer),
            _ => None,
        }
    }
}

impl Probe {
    /// The answer of a request that started after `since`, if one is already known: what
    /// [`Probe::revision`] would answer at once, without asking etcd.
    pub(super) fn known(&self, since: Instant) -> Option<(i64, bool)> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .known(since)
    }

    /// etcd's revision at some instant after this call began (after `since`, if given: the
    /// start of the request the read serves), and whether a write larger than a transaction
    /// was pending then; `ask` asks etcd.
    pub(super) fn revision(
        &self,
        since: Option<Instant>,
        ask: impl Fn() -> Result<(i64, bool), StoreError>,
    ) -> Result<(i64, bool), StoreError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(answer) = since.and_then(|s| state.known(s)) {
            return Ok(answer);
        }
        let after = |from: Option<Instant>| since.is_some_and(|s| from.is_some_and(|f| f >= s));
        let wanted = if state.in_flight && after(state.in_flight_from) {
            state.started
        } else {
            state.started + 1
        };
        loop {
            if state.finished >= wanted
                && let Some(answer) = &state.answer
            {
                return answer.clone();
            }
            if !state.in_flight {
                let from = Instant::now();
                state.started += 1;
                state.in_flight = true;
                state.in_flight_from = Some(from);
                let mine = state.started;
                drop(state);
                let answer = ask();
                state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.finished = mine;
                state.answer = Some(answer);
                state.answer_from = Some(from);
                state.in_flight = false;
                self.done.notify_all();
                continue;
            }
            state = self.done.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reads of one request share a revision asked after the request began; a request
    /// that began later asks anew.
    #[test]
    fn a_requests_reads_share_a_revision_asked_after_it_began() {
        let probe = Probe::default();
        let asked = std::sync::atomic::AtomicI64::new(0);
        let ask = || {
            let n = asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            Ok((n, false))
        };
        let began = Instant::now();
        assert_eq!(probe.revision(Some(began), ask).expect("first"), (1, false));
        assert_eq!(
            probe.revision(Some(began), ask).expect("same request"),
            (1, false)
        );
        assert_eq!(probe.revision(None, ask).expect("no request"), (2, false));
        std::thread::sleep(Duration::from_millis(2));
        let later = Instant::now();
        assert_eq!(
            probe.revision(Some(later), ask).expect("a later request"),
            (3, false)
        );
        assert_eq!(
            probe.revision(Some(began), ask).expect("the first again"),
            (3, false)
        );
    }

    /// Only an answer asked after a request began is known to it without asking etcd (a read
    /// on the caller's thread relies on that).
    #[test]
    fn a_known_answer_is_one_asked_after_the_request_began() {
        let probe = Probe::default();
        let began = Instant::now();
        assert_eq!(probe.known(began), None, "nothing asked yet");
        probe
            .revision(Some(began), || Ok((7, false)))
            .expect("asked");
        assert_eq!(probe.known(began), Some((7, false)));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(
            probe.known(Instant::now()),
            None,
            "asked before this request"
        );
        let _ = probe.revision(None, || Err(StoreError::Closed));
        assert_eq!(probe.known(began), None, "a failed request is no answer");
    }

    /// Reads that wait together share one request, and each gets an answer from a request
    /// that started after it began.
    #[test]
    fn waiting_reads_share_a_request_that_began_after_them() {
        let probe = Arc::new(Probe::default());
        let asked = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let readers: Vec<_> = (0..16)
            .map(|_| {
                let (probe, asked) = (Arc::clone(&probe), Arc::clone(&asked));
                std::thread::spawn(move || {
                    let before = asked.load(std::sync::atomic::Ordering::SeqCst);
                    let (revision, _) = probe
                        .revision(None, || {
                            // The request's number, counted when it starts.
                            let n = asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                            std::thread::sleep(Duration::from_millis(20));
                            Ok((n, false))
                        })
                        .expect("answer");
                    // The request that answered started after this read began.
                    assert!(revision > before, "{revision} <= {before}");
                })
            })
            .collect();
        for r in readers {
            r.join().expect("reader");
        }
        let asked = asked.load(std::sync::atomic::Ordering::SeqCst);
        assert!(asked < 16, "{asked} requests for 16 waiting reads");
    }
}
