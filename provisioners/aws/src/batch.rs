//! Coalesces the lookups of many nodes into one cloud call per group.
//!
//! Every node of a cluster is polled by its own task, but a cloud answers one
//! `DescribeInstances` for a whole cluster as cheaply as for one instance, and rate-limits
//! accounts that poll per instance. A lookup joins its group's next batch; a group has at
//! most one call in flight, and the lookups that arrive meanwhile form the batch after it. So
//! however many tasks poll, a group costs at most one call at a time.
//!
//! The call runs in a task of its own: a caller that gives up (its attempt timed out) does not
//! cancel the lookups of the others.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ebb_spi::ProvisionError;
use tokio::sync::oneshot;

/// One batched call: the keys to look up, answered by key (a key absent from the answer was
/// not found).
pub type Fetch<V> = Box<
    dyn FnOnce(
            Vec<String>,
        )
            -> Pin<Box<dyn Future<Output = Result<HashMap<String, V>, ProvisionError>> + Send>>
        + Send,
>;

type Reply<V> = oneshot::Sender<Result<Option<V>, ProvisionError>>;

/// The lookups waiting for a group's next call.
struct Batch<V> {
    keys: BTreeSet<String>,
    replies: Vec<(String, Reply<V>)>,
    /// The call to make, from the first lookup of the batch.
    fetch: Option<Fetch<V>>,
}

impl<V> Default for Batch<V> {
    fn default() -> Self {
        Self {
            keys: BTreeSet::new(),
            replies: Vec::new(),
            fetch: None,
        }
    }
}

/// Pending batches by group; a group present here has a runner.
type Groups<V> = Arc<Mutex<HashMap<String, Batch<V>>>>;

/// Lookups coalesced per group (an account and what is looked up in it).
pub struct Coalescer<V> {
    /// How long a runner waits for more lookups before it calls.
    gather: Duration,
    groups: Groups<V>,
}

impl<V> std::fmt::Debug for Coalescer<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("gather", &self.gather)
            .finish_non_exhaustive()
    }
}

impl<V: Clone + Send + 'static> Coalescer<V> {
    pub fn new(gather: Duration) -> Self {
        Self {
            gather,
            groups: Arc::default(),
        }
    }

    /// Looks `key` up in `group`'s next call; `fetch` makes that call if this lookup is the
    /// first of its batch.
    pub async fn get(
        &self,
        group: &str,
        key: &str,
        fetch: Fetch<V>,
    ) -> Result<Option<V>, ProvisionError> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            let start = !groups.contains_key(group);
            let batch = groups.entry(group.to_string()).or_default();
            batch.keys.insert(key.to_string());
            batch.replies.push((key.to_string(), tx));
            batch.fetch.get_or_insert(fetch);
            start
        };
        if start {
            tokio::spawn(run_group(
                Arc::clone(&self.groups),
                group.to_string(),
                self.gather,
            ));
        }
        rx.await
            .unwrap_or_else(|_| Err(ProvisionError::retryable("the batched lookup was dropped")))
    }
}

/// Makes `group`'s calls until no lookup is waiting.
async fn run_group<V: Clone + Send + 'static>(groups: Groups<V>, group: String, gather: Duration) {
    loop {
        tokio::time::sleep(gather).await;
        let batch = {
            let mut all = groups.lock().unwrap_or_else(|e| e.into_inner());
            let Some(batch) = all.get_mut(&group) else {
                return;
            };
            if batch.replies.is_empty() {
                all.remove(&group);
                return;
            }
            std::mem::take(batch)
        };
        let Some(fetch) = batch.fetch else {
            continue;
        };
        let answer = fetch(batch.keys.into_iter().collect()).await;
        for (key, reply) in batch.replies {
            let _ = reply.send(match &answer {
                Ok(found) => Ok(found.get(&key).cloned()),
                Err(e) => Err(e.clone()),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    //! On a current-thread runtime: `join!` polls every lookup, and so registers it, before
    //! any runner gets to run, which makes the batches deterministic without pausing time.

    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::Semaphore;

    type Calls = Arc<Mutex<Vec<Vec<String>>>>;

    /// A call that records its keys, waits for `gate`, and finds every key but "missing".
    fn counting(calls: &Calls, gate: &Arc<Semaphore>) -> Fetch<String> {
        let (calls, gate) = (Arc::clone(calls), Arc::clone(gate));
        Box::new(move |keys: Vec<String>| {
            calls.lock().expect("calls").push(keys.clone());
            Box::pin(async move {
                drop(gate.acquire().await.expect("gate"));
                Ok(keys
                    .into_iter()
                    .filter(|k| k != "missing")
                    .map(|k| (k.clone(), format!("value of {k}")))
                    .collect())
            })
        })
    }

    fn open() -> Arc<Semaphore> {
        Arc::new(Semaphore::new(Semaphore::MAX_PERMITS))
    }

    #[tokio::test]
    async fn concurrent_lookups_share_one_call() {
        let c = Coalescer::new(Duration::from_millis(5));
        let (calls, gate) = (Calls::default(), open());
        let answers = tokio::join!(
            c.get("g", "a", counting(&calls, &gate)),
            c.get("g", "b", counting(&calls, &gate)),
            c.get("g", "c", counting(&calls, &gate)),
            c.get("g", "missing", counting(&calls, &gate)),
        );
        assert_eq!(answers.0, Ok(Some("value of a".to_string())));
        assert_eq!(answers.1, Ok(Some("value of b".to_string())));
        assert_eq!(answers.2, Ok(Some("value of c".to_string())));
        assert_eq!(answers.3, Ok(None));
        assert_eq!(*calls.lock().expect("calls"), [["a", "b", "c", "missing"]]);
    }

    #[tokio::test]
    async fn lookups_during_a_call_form_the_next_batch_and_groups_are_apart() {
        let c = Coalescer::new(Duration::from_millis(5));
        let calls = Calls::default();
        let gate = Arc::new(Semaphore::new(0));
        let first = c.get("g", "a", counting(&calls, &gate));
        let later = async {
            // Wait until the first call is in flight (held at the gate).
            while calls.lock().expect("calls").is_empty() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let arrivals = async {
                tokio::join!(
                    c.get("g", "b", counting(&calls, &gate)),
                    c.get("g", "c", counting(&calls, &gate)),
                    c.get("h", "a", counting(&calls, &gate)),
                )
            };
            let release = async {
                gate.add_permits(Semaphore::MAX_PERMITS);
            };
            tokio::join!(arrivals, release).0
        };
        let (a, (b, cc, ha)) = tokio::join!(first, later);
        for answer in [a, b, cc, ha] {
            assert!(answer.expect("lookup").is_some());
        }
        let mut calls = calls.lock().expect("calls").clone();
        calls.sort();
        assert_eq!(calls, [vec!["a"], vec!["a"], vec!["b", "c"]]);
    }

    #[tokio::test]
    async fn a_failed_call_fails_every_lookup_of_its_batch_and_the_group_recovers() {
        let c = Coalescer::<String>::new(Duration::from_millis(5));
        let tries = Arc::new(AtomicUsize::new(0));
        let failing = |tries: Arc<AtomicUsize>| -> Fetch<String> {
            Box::new(move |_keys: Vec<String>| {
                let n = tries.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    if n == 0 {
                        Err(ProvisionError::retryable("throttled"))
                    } else {
                        Ok([("a".to_string(), "ok".to_string())].into())
                    }
                })
            })
        };
        let (a, b) = tokio::join!(
            c.get("g", "a", failing(Arc::clone(&tries))),
            c.get("g", "b", failing(Arc::clone(&tries)))
        );
        assert_eq!(a, Err(ProvisionError::retryable("throttled")));
        assert_eq!(b, Err(ProvisionError::retryable("throttled")));
        let again = c.get("g", "a", failing(Arc::clone(&tries))).await;
        assert_eq!(again, Ok(Some("ok".to_string())));
    }
}
