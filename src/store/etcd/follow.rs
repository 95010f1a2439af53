//! The watch that keeps the copy in memory ([`super::cache`]): the copy is read once at one
//! revision, then every event from the next revision on is applied to it, a response at a
//! time (etcd sends a revision's events together), and the runs whose history grew are told.
//! When the watch breaks (etcd away, its history compacted past the copy), the copy is
//! dropped, so everything reads etcd meanwhile, and read anew.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions};
use imbl::OrdMap;

use super::cache::{Entry, HELD_ENDED, Held, MAX_HELD_EVENTS, Snapshot, is_copied};
use super::shared::{Shared, prefix_end};
use crate::model::run::RunRecord;
use crate::store::table::{StoreError, Table};

impl Shared {
    /// Keeps the copy: reads it, then follows the watch; reads it anew whenever the watch
    /// breaks (etcd away, its history compacted past the copy). Runs until the store closes.
    pub(super) async fn keep_cache(self: Arc<Self>) {
        loop {
            if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let outcome = match self.load().await {
                Ok(snapshot) => {
                    let from = snapshot.revision;
                    self.cache.set(Some(snapshot));
                    self.follow(from).await
                }
                Err(e) => Err(e),
            };
            self.cache.set(None);
            if let Err(e) = outcome {
                tracing::debug!(error = %e, "the store's copy in memory is read anew");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Reads every copied table at one revision.
    async fn load(&self) -> Result<Snapshot, StoreError> {
        let mut entries = OrdMap::new();
        let mut revision = 0;
        let mut ranges: Vec<(Vec<u8>, Vec<u8>)> = Table::ALL
            .into_iter()
            .filter(|t| is_copied(*t))
            .map(|t| {
                let from = self.keys.of(t, "");
                let to = prefix_end(&from);
                (from, to)
            })
            .collect();
        let pending = self.keys.pending();
        ranges.push((pending.clone(), {
            let mut end = pending;
            end.push(0);
            end
        }));
        for (from, to) in ranges {
            let mut start = from;
            loop {
                let mut options = GetOptions::new().with_range(to.clone()).with_limit(1000);
                if revision != 0 {
                    options = options.with_revision(revision);
                }
                let response = self
                    .kv()
                    .get(start.clone(), Some(options))
                    .await
                    .map_err(|e| self.unavailable(&e))?;
                if revision == 0 {
                    revision = response.header().map_or(0, |h| h.revision());
                }
                let kvs = response.kvs();
                for kv in kvs {
                    entries.insert(
                        kv.key().to_vec(),
                        Entry {
                            value: Arc::new(kv.value().to_vec()),
                            mod_revision: kv.mod_revision(),
                        },
                    );
                }
                match kvs.last() {
                    Some(last) if response.more() => {
                        start = last.key().to_vec();
                        start.push(0);
                    }
                    _ => break,
                }
            }
        }
        Ok(Snapshot::new(revision, entries))
    }

    /// Applies the watch's events from `after` on, until the watch breaks.
    async fn follow(&self, after: i64) -> Result<(), StoreError> {
        let root = self.keys.root_prefix();
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(after + 1);
        let mut stream = self
            .watch_client()
            .watch(root, Some(options))
            .await
            .map_err(|e| self.unavailable(&e))?;
        let mut current = self.cache.snapshot().ok_or(StoreError::Closed)?;
        loop {
            if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
                return Ok(());
            }
            let Some(response) = stream.message().await.map_err(|e| self.unavailable(&e))? else {
                return Err(StoreError::Storage("etcd ended the watch".into()));
            };
            if response.canceled() || response.compact_revision() > 0 {
                return Err(StoreError::Storage(format!(
                    "the watch was cancelled (compacted at {})",
                    response.compact_revision()
                )));
            }
            let events = response.events();
            if events.is_empty() {
                continue;
            }
            // The runs this response creates with this server as their owner: the copy holds
            // their history from its first event on (a run's events are written with or after
            // its record), for the long polls of the server that runs them.
            let lease = *self.lease.borrow();
            let created_here: Vec<&str> = events
                .iter()
                .filter(|e| e.event_type() == EventType::Put)
                .filter_map(|e| e.kv())
                .filter(|kv| lease != 0 && kv.lease() == lease)
                .filter_map(|kv| self.keys.record_run(Table::Owners, kv.key()))
                .collect();
            for event in events {
                if event.event_type() == EventType::Put
                    && let Some(kv) = event.kv()
                    && kv.version() == 1
                    && let Some(run) = self.keys.record_run(Table::Runs, kv.key())
                    && created_here.contains(&run)
                {
                    current.histories.insert(run.to_string(), Held::default());
                }
            }
            // Runs whose history grew: told once the copy holds their news.
            let mut news = Vec::new();
            for event in events {
                let Some(kv) = event.kv() else { continue };
                current.revision = current.revision.max(kv.mod_revision());
                let put = event.event_type() == EventType::Put;
                if let Some(run) = self.keys.event_run(kv.key()) {
                    if put {
                        news.push(run.to_string());
                    }
                    self.hold_event(&mut current, run, kv, put);
                    continue;
                }
                if !self.keys.is_copied(kv.key()) {
                    continue;
                }
                if put {
                    current.entries.insert(
                        kv.key().to_vec(),
                        Entry {
                            value: Arc::new(kv.value().to_vec()),
                            mod_revision: kv.mod_revision(),
                        },
                    );
                } else {
                    current.entries.remove(kv.key());
                }
                // A run that went no longer needs its history at hand; one that ended, only
                // for its pollers' last looks.
                if let Some(run) = self.keys.record_run(Table::Runs, kv.key())
                    && let Some(held) = current.histories.get(run).copied()
                {
                    if !put {
                        self.drop_history(&mut current, run);
                        if held.ended {
                            current.ended.retain(|r| r != run);
                        }
                    } else if !held.ended && !live(kv.value()) {
                        self.hold_ended(&mut current, run);
                    }
                }
            }
            self.cache.set(Some(current.clone()));
            news.dedup();
            for run in news {
                // Nobody listening is no failure.
                let _ = self.news.send(run);
            }
        }
    }

    /// Applies a put or delete of event `kv` of run `run` to the copy, if it holds the run's
    /// history; a history grown past [`MAX_HELD_EVENTS`] is let go.
    fn hold_event(&self, current: &mut Snapshot, run: &str, kv: &etcd_client::KeyValue, put: bool) {
        let Some(held) = current.histories.get_mut(run) else {
            return;
        };
        if put {
            held.events += 1;
            let over = held.events > MAX_HELD_EVENTS;
            current.entries.insert(
                kv.key().to_vec(),
                Entry {
                    value: Arc::new(kv.value().to_vec()),
                    mod_revision: kv.mod_revision(),
                },
            );
            if over {
                self.drop_history(current, run);
            }
        } else {
            held.events = held.events.saturating_sub(1);
            current.entries.remove(kv.key());
        }
    }

    /// Marks run `run`'s history as one of a run that ended, and lets go of the history of the
    /// first of them to end past [`HELD_ENDED`].
    fn hold_ended(&self, current: &mut Snapshot, run: &str) {
        if let Some(held) = current.histories.get_mut(run) {
            held.ended = true;
        }
        current.ended.push_back(run.to_string());
        while current.ended.len() > HELD_ENDED {
            if let Some(first) = current.ended.pop_front() {
                self.drop_history(current, &first);
            }
        }
    }

    /// Lets go of run `run`'s history: reads of it go to etcd again.
    fn drop_history(&self, current: &mut Snapshot, run: &str) {
        current.histories.remove(run);
        let from = self
            .keys
            .of(Table::Events, &crate::store::keys::of_run(run));
        let to = prefix_end(&from);
        let held: Vec<Vec<u8>> = current
            .entries
            .range(from..to)
            .map(|(k, _)| k.clone())
            .collect();
        for key in held {
            current.entries.remove(&key);
        }
    }
}

/// Whether a stored run record is of a run still live (a supervisor has work to do for it);
/// a value that does not read as one (a large record kept in chunks) counts as ended.
fn live(stored: &[u8]) -> bool {
    serde_json::from_slice::<RunRecord>(crate::store::seal::unchecked(stored))
        .is_ok_and(|run| run.needs_supervisor())
}
