//! Shares of a bounded resource per claimant: a peer's requests with bodies, a token's UI
//! event streams, a namespace's running checks. A global cap alone lets one claimant take
//! everything; each claimant here holds at most its share, below the global cap, so the
//! others always find room.
//!
//! [`Shares::try_take`] answers at once (the caller refuses or falls back); [`Lanes::turn`]
//! waits in the claimant's own lane, so a claimant's backlog never holds a global slot.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many of a resource each claimant holds now, and how many each may.
#[derive(Debug)]
pub struct Shares<K: Eq + Hash> {
    each: usize,
    held: Arc<Mutex<HashMap<K, usize>>>,
}

impl<K: Eq + Hash> Clone for Shares<K> {
    fn clone(&self) -> Self {
        Shares {
            each: self.each,
            held: Arc::clone(&self.held),
        }
    }
}

/// One unit of a claimant's share, given back when dropped.
#[derive(Debug)]
pub struct Share<K: Eq + Hash + Clone> {
    shares: Shares<K>,
    key: K,
}

impl<K: Eq + Hash + Clone> Shares<K> {
    /// Shares of at most `each` per claimant.
    pub fn new(each: usize) -> Self {
        Shares {
            each,
            held: Arc::default(),
        }
    }

    /// A unit of `key`'s share, unless it holds all of it.
    pub fn try_take(&self, key: K) -> Option<Share<K>> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(key.clone()).or_insert(0);
        if *count >= self.each {
            return None;
        }
        *count += 1;
        Some(Share {
            shares: self.clone(),
            key,
        })
    }

    /// Claimants holding something now (none are kept once they hold nothing).
    pub fn claimants(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl<K: Eq + Hash + Clone> Drop for Share<K> {
    fn drop(&mut self) {
        let mut held = self.shares.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// Waiting turns at a bounded resource: each claimant queues in a lane of its own of
/// `each` places, then takes one of the `total` global places.
#[derive(Debug)]
pub struct Lanes<K: Eq + Hash> {
    each: usize,
    total: Arc<Semaphore>,
    lanes: Mutex<HashMap<K, Arc<Semaphore>>>,
}

/// A turn: a place in the claimant's lane and a global one, given back when dropped.
#[derive(Debug)]
pub struct Turn {
    _global: OwnedSemaphorePermit,
    _lane: OwnedSemaphorePermit,
}

impl<K: Eq + Hash + Clone> Lanes<K> {
    /// `total` places in all, at most `each` held by one claimant.
    pub fn new(total: usize, each: usize) -> Self {
        Lanes {
            each,
            total: Arc::new(Semaphore::new(total)),
            lanes: Mutex::default(),
        }
    }

    /// Waits for `key`'s turn.
    pub async fn turn(&self, key: &K) -> Turn {
        let lane = {
            let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(
                lanes
                    .entry(key.clone())
                    .or_insert_with(|| Arc::new(Semaphore::new(self.each))),
            )
        };
        let lane = lane
            .acquire_owned()
            .await
            .expect("a lane's semaphore is never closed");
        let global = Arc::clone(&self.total)
            .acquire_owned()
            .await
            .expect("the global semaphore is never closed");
        Turn {
            _global: global,
            _lane: lane,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimant_holds_at_most_its_share_and_gives_it_back() {
        let shares = Shares::new(2);
        let a1 = shares.try_take("a").expect("first");
        let _a2 = shares.try_take("a").expect("second");
        assert!(shares.try_take("a").is_none(), "a's share is used up");
        let b = shares.try_take("b").expect("b has its own");
        drop(a1);
        assert!(shares.try_take("a").is_some());
        drop(b);
        assert_eq!(shares.claimants(), 1, "b holds nothing and is forgotten");
    }

    #[tokio::test]
    async fn one_claimants_backlog_leaves_the_others_their_turns() {
        let lanes = Arc::new(Lanes::new(4, 2));
        // Tenant a holds its whole lane, and has more waiting.
        let held = [lanes.turn(&"a").await, lanes.turn(&"a").await];
        let more = {
            let lanes = Arc::clone(&lanes);
            tokio::spawn(async move { lanes.turn(&"a").await })
        };
        tokio::task::yield_now().await;
        assert!(!more.is_finished(), "a waits in its own lane");
        // Tenant b still gets both its turns at once.
        let b = tokio::time::timeout(std::time::Duration::from_secs(1), async {
            (lanes.turn(&"b").await, lanes.turn(&"b").await)
        })
        .await;
        assert!(b.is_ok(), "b found no place while a waited");
        drop(held);
        let _ = more.await.expect("a's turn comes");
    }
}
