//! A run's history: timestamped events, appended in the same transaction as the state change
//! they describe, so the history and the state never disagree.
//!
//! [`Notifier`] wakes long-polling readers (`GET .../events?after=N&wait=30s`) when a run's
//! history grows; it holds no state that matters across a restart.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::model::event::{EventKind, RunEvent};
use crate::store::keys;
use crate::store::{Read, StoreError, Table, Txn};

static LAST_SEQ: AtomicU64 = AtomicU64::new(0);

fn now_micros() -> u64 {
    crate::store::clock::now_micros()
}

/// A sequence number larger than every earlier one, also across restarts (it follows the
/// clock in microseconds).
pub(crate) fn next_seq() -> u64 {
    let now = now_micros();
    let prev = LAST_SEQ
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(last.max(now.saturating_sub(1)) + 1)
        })
        .unwrap_or(now);
    prev.max(now.saturating_sub(1)) + 1
}

/// Stages an event for run `run`.
pub fn append(
    tx: &mut Txn,
    run: &str,
    kind: EventKind,
    node: Option<&str>,
    message: impl Into<String>,
) -> Result<(), StoreError> {
    append_by(tx, run, kind, node, message, None)
}

/// Stages an event for run `run` that a request of `actor` (a token's name) caused.
pub fn append_by(
    tx: &mut Txn,
    run: &str,
    kind: EventKind,
    node: Option<&str>,
    message: impl Into<String>,
    actor: Option<&str>,
) -> Result<(), StoreError> {
    let seq = next_seq();
    let event = RunEvent {
        seq,
        time: seq as f64 / 1e6,
        kind,
        node: node.map(str::to_string),
        message: message.into(),
        actor: actor.map(str::to_string),
    };
    tx.put(Table::Events, &keys::event(run, seq), &event)
}

/// The events of run `run` after sequence `after`, oldest first.
pub fn list(r: &impl Read, run: &str, after: u64) -> Result<Vec<RunEvent>, StoreError> {
    // An event's key holds its sequence number: those up to `after` are not decoded.
    let from = keys::event(run, after.saturating_add(1));
    Ok(
        r.scan_from::<RunEvent>(Table::Events, &keys::of_run(run), &from)?
            .into_iter()
            .map(|(_, e)| e)
            .filter(|e| e.seq > after)
            .collect(),
    )
}

/// Wakes readers waiting for a run's history to grow.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    waiters: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl Notifier {
    /// A subscription to run `run`'s history. Create its `notified()` future before reading
    /// the store, so a change between the read and the wait is not missed. Dropping it
    /// unsubscribes: a run nobody waits on holds no entry.
    pub fn subscribe(&self, run: &str) -> Subscription {
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        let notify = Arc::clone(waiters.entry(run.to_string()).or_default());
        Subscription {
            waiters: Arc::clone(&self.waiters),
            run: run.to_string(),
            notify,
        }
    }

    /// Wakes everyone waiting on run `run`.
    pub fn notify(&self, run: &str) {
        let waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(notify) = waiters.get(run) {
            notify.notify_waiters();
        }
    }

    /// Wakes everyone waiting on any run (news was missed: each looks again).
    pub fn notify_all(&self) {
        let waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        for notify in waiters.values() {
            notify.notify_waiters();
        }
    }

    /// Passes on `news` (runs whose history grew on any server) to the readers waiting on
    /// them, until the store closes.
    pub async fn follow(&self, mut news: tokio::sync::broadcast::Receiver<String>) {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match news.recv().await {
                Ok(run) => self.notify(&run),
                Err(RecvError::Lagged(_)) => self.notify_all(),
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// How many runs have someone waiting on them.
    pub fn len(&self) -> usize {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether nobody waits on any run.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One reader waiting on a run's history; see [`Notifier::subscribe`].
#[derive(Debug)]
pub struct Subscription {
    waiters: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
    run: String,
    pub notify: Arc<Notify>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        // The map's handle and this one: nobody else waits on the run.
        if waiters
            .get(&self.run)
            .is_some_and(|n| Arc::ptr_eq(n, &self.notify) && Arc::strong_count(n) == 2)
        {
            waiters.remove(&self.run);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_ends_with_its_last_reader() {
        let notifier = Notifier::default();
        let a = notifier.subscribe("r1");
        let b = notifier.subscribe("r1");
        let c = notifier.subscribe("r2");
        assert_eq!(notifier.len(), 2);
        drop(a);
        assert_eq!(notifier.len(), 2, "b still waits on r1");
        drop(b);
        drop(c);
        assert!(notifier.is_empty());
        notifier.notify("r1");
        assert!(notifier.is_empty(), "notifying creates nothing");
    }

    /// A history read after a sequence number holds the later events only, in a read and in
    /// a write (which sees its own staged event), and none of another run's.
    #[test]
    fn a_history_after_a_sequence_number_holds_the_later_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let store = crate::store::Store::open(dir.path()).expect("open");
            for (run, n) in [("r1", 3), ("r10", 1)] {
                for i in 0..n {
                    store
                        .write(move |tx| {
                            append(tx, run, EventKind::Task, None, format!("{run} {i}"))
                        })
                        .await
                        .expect("append");
                }
            }
            let all = store.read(|r| list(r, "r1", 0)).await.expect("read");
            let messages =
                |events: &[RunEvent]| events.iter().map(|e| e.message.clone()).collect::<Vec<_>>();
            assert_eq!(messages(&all), ["r1 0", "r1 1", "r1 2"]);
            let after = all[0].seq;
            let later = store
                .read(move |r| list(r, "r1", after))
                .await
                .expect("read");
            assert_eq!(messages(&later), ["r1 1", "r1 2"]);
            let seen = store
                .write(move |tx| {
                    append(tx, "r1", EventKind::Task, None, "r1 3")?;
                    list(tx, "r1", after)
                })
                .await
                .expect("write");
            assert_eq!(messages(&seen), ["r1 1", "r1 2", "r1 3"]);
            let last = seen[2].seq;
            let none = store
                .read(move |r| list(r, "r1", last))
                .await
                .expect("read");
            assert!(none.is_empty(), "{none:?}");
            store.close().await.expect("close");
        });
    }

    #[test]
    fn sequence_numbers_always_grow() {
        let mut last = 0;
        for _ in 0..10_000 {
            let seq = next_seq();
            assert!(seq > last);
            last = seq;
        }
    }
}
