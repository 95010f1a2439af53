//! etcd's revision for reads that must see every write acknowledged before them.
//!
//! A read needs a revision etcd gave after the read (or the request it serves) began; the
//! copy in memory answers it once it has caught up with that revision. Any answer of etcd
//! given to a request sent after the read began will do: a revision request (a keys-only
//! read of one key, shared by every read waiting at the time, as etcd batches its own read
//! index) or the answer to one of this server's commits. A commit goes through the same
//! quorum as a read, so its answer carries etcd's revision at a point after it was sent. On
//! a busy server, commits are on their way most of the time, and the reads ride on them
//! instead of asking etcd again.
//!
//! Reads wait for the answer as tasks on the etcd client's runtime (or block on one): the
//! task that reads etcd's answer wakes them, with no thread parked for it.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Instant;

use crate::store::table::StoreError;

/// What etcd answered: its revision, and whether a write larger than a transaction was
/// pending then.
pub(super) type Answer = (i64, bool);

/// The revisions etcd gave, and the requests on their way that will give one.
#[derive(Debug, Default)]
pub(super) struct Probe {
    state: std::sync::Mutex<State>,
    /// Told whenever a request on its way is answered (or is not, after all).
    done: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    /// The latest answer (by when its request was sent), and when that was.
    answer: Option<Result<Answer, StoreError>>,
    answer_from: Option<Instant>,
    /// When the revision request on its way was sent (at most one is).
    asking_from: Option<Instant>,
    /// This server's commits on their way: when each was sent.
    commits: BTreeMap<u64, Instant>,
    next_commit: u64,
}

impl State {
    /// The answer of a request sent after `since`, if it succeeded.
    fn known(&self, since: Instant) -> Option<Answer> {
        match (&self.answer, self.answer_from) {
            (Some(Ok(answer)), Some(from)) if from >= since => Some(*answer),
            _ => None,
        }
    }

    /// Keeps `answer` of a request sent at `from` if it is the latest.
    fn keep(&mut self, from: Instant, answer: Result<Answer, StoreError>) {
        if self.answer_from.is_none_or(|latest| from >= latest) {
            self.answer = Some(answer);
            self.answer_from = Some(from);
        }
    }

    /// Whether a request will answer soon without this caller asking: a revision request on
    /// its way (sent after `since`, or else the one to wait for before asking again), or a
    /// commit sent after `since`.
    fn coming(&self, since: Instant) -> bool {
        self.asking_from.is_some() || self.commits.values().any(|sent| *sent >= since)
    }
}

/// A commit on its way, registered with [`Probe::commit_sent`]: reads that began before it
/// was sent may wait for its answer. Dropped unanswered, it leaves them to ask etcd.
#[derive(Debug)]
pub(super) struct Sent<'p> {
    probe: &'p Probe,
    id: u64,
    at: Instant,
}

impl Sent<'_> {
    /// The commit was answered (`None`: it was not); reads waiting on it go on.
    pub(super) fn answered(self, answer: Option<Answer>) {
        let mut state = self.probe.lock();
        state.commits.remove(&self.id);
        if let Some(answer) = answer {
            state.keep(self.at, Ok(answer));
        }
        drop(state);
        self.probe.done.notify_waiters();
    }
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        let mut state = self.probe.lock();
        if state.commits.remove(&self.id).is_some() {
            drop(state);
            self.probe.done.notify_waiters();
        }
    }
}

/// The revision request on its way, sent at `.1`: answered with [`Asking::answered`]; dropped
/// unanswered (its task was dropped), it leaves the reads waiting on it to ask again.
struct Asking<'p>(&'p Probe, Instant);

impl Asking<'_> {
    fn answered(self, answer: Result<Answer, StoreError>) {
        let mut state = self.0.lock();
        state.keep(self.1, answer);
        drop(state);
        drop(self);
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.0.lock().asking_from = None;
        self.0.done.notify_waiters();
    }
}

impl Probe {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The answer of a request sent after `since`, if one is already known: what
    /// [`Probe::revision`] would answer at once, without asking etcd.
    pub(super) fn known(&self, since: Instant) -> Option<Answer> {
        self.lock().known(since)
    }

    /// A commit is being sent now.
    pub(super) fn commit_sent(&self) -> Sent<'_> {
        let mut state = self.lock();
        let id = state.next_commit;
        state.next_commit += 1;
        let at = Instant::now();
        state.commits.insert(id, at);
        Sent {
            probe: self,
            id,
            at,
        }
    }

    /// etcd's revision at some instant after this call began (after `since`, if given: the
    /// start of the request the read serves); `ask` asks etcd. Waits for a request on its way
    /// that was sent late enough (a revision request or a commit), or asks.
    pub(super) async fn revision<F, A>(
        &self,
        since: Option<Instant>,
        ask: F,
    ) -> Result<Answer, StoreError>
    where
        F: Fn() -> A,
        A: Future<Output = Result<Answer, StoreError>>,
    {
        let called = Instant::now();
        let since = since.unwrap_or(called);
        loop {
            // Listening before looking: an answer given in between still wakes this read.
            let told = self.done.notified();
            match self.next(since, called) {
                Next::Answer(answer) => return answer,
                Next::Wait => told.await,
                Next::Ask(asking) => asking.answered(ask().await),
            }
        }
    }

    /// What a read that began at `since` (its call at `called`) does next.
    fn next(&self, since: Instant, called: Instant) -> Next<'_> {
        let mut state = self.lock();
        if let Some(answer) = state.known(since) {
            return Next::Answer(Ok(answer));
        }
        // A failed request sent during this call is the answer: etcd did not give one.
        if let (Some(Err(e)), Some(from)) = (&state.answer, state.answer_from)
            && from >= called
        {
            return Next::Answer(Err(e.clone()));
        }
        if state.coming(since) {
            return Next::Wait;
        }
        let from = Instant::now();
        state.asking_from = Some(from);
        Next::Ask(Asking(self, from))
    }
}

/// What a read waiting for a revision does next.
enum Next<'p> {
    Answer(Result<Answer, StoreError>),
    /// Waits for a request on its way.
    Wait,
    /// Asks etcd itself.
    Ask(Asking<'p>),
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::Duration;

    use super::*;

    /// Runs `f` to its end on this thread.
    fn wait<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    /// The reads of one request share a revision asked after the request began; a request
    /// that began later asks anew.
    #[test]
    fn a_requests_reads_share_a_revision_asked_after_it_began() {
        let probe = Probe::default();
        let asked = AtomicI64::new(0);
        let ask = || std::future::ready(Ok((asked.fetch_add(1, Ordering::SeqCst) + 1, false)));
        let began = Instant::now();
        assert_eq!(
            wait(probe.revision(Some(began), ask)).expect("first"),
            (1, false)
        );
        assert_eq!(
            wait(probe.revision(Some(began), ask)).expect("same request"),
            (1, false)
        );
        assert_eq!(
            wait(probe.revision(None, ask)).expect("no request"),
            (2, false)
        );
        std::thread::sleep(Duration::from_millis(2));
        let later = Instant::now();
        assert_eq!(
            wait(probe.revision(Some(later), ask)).expect("a later request"),
            (3, false)
        );
        assert_eq!(
            wait(probe.revision(Some(began), ask)).expect("the first again"),
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
        wait(probe.revision(Some(began), || std::future::ready(Ok((7, false))))).expect("asked");
        assert_eq!(probe.known(began), Some((7, false)));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(
            probe.known(Instant::now()),
            None,
            "asked before this request"
        );
        let _ = wait(probe.revision(None, || std::future::ready(Err(StoreError::Closed))));
        assert_eq!(probe.known(began), None, "a failed request is no answer");
        assert_eq!(
            wait(probe.revision(Some(began), || std::future::ready(Ok((8, false)))))
                .expect("asks again"),
            (8, false),
            "a failure before this call is not its answer"
        );
    }

    /// Reads that wait together share one request, and each gets an answer from a request
    /// that started after it began.
    #[test]
    fn waiting_reads_share_a_request_that_began_after_them() {
        let probe = Arc::new(Probe::default());
        let asked = Arc::new(AtomicI64::new(0));
        let readers: Vec<_> = (0..16)
            .map(|_| {
                let (probe, asked) = (Arc::clone(&probe), Arc::clone(&asked));
                std::thread::spawn(move || {
                    let before = asked.load(Ordering::SeqCst);
                    let (revision, _) = wait(probe.revision(None, || {
                        // The request's number, counted when it starts.
                        let n = asked.fetch_add(1, Ordering::SeqCst) + 1;
                        async move {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            Ok((n, false))
                        }
                    }))
                    .expect("answer");
                    // The request that answered started after this read began.
                    assert!(revision > before, "{revision} <= {before}");
                })
            })
            .collect();
        for r in readers {
            r.join().expect("reader");
        }
        let asked = asked.load(Ordering::SeqCst);
        assert!(asked < 16, "{asked} requests for 16 waiting reads");
    }

    /// A commit sent after a read began answers it: the read waits for the commit instead of
    /// asking etcd. A commit sent before the read began does not, nor one that failed.
    #[test]
    fn a_commit_sent_after_a_read_began_answers_it() {
        let probe = Arc::new(Probe::default());
        let never = || -> std::future::Ready<Result<Answer, StoreError>> { panic!("asked etcd") };

        let began = Instant::now();
        let sent = probe.commit_sent();
        let reader = {
            let probe = Arc::clone(&probe);
            std::thread::spawn(move || wait(probe.revision(Some(began), never)))
        };
        std::thread::sleep(Duration::from_millis(20));
        sent.answered(Some((42, false)));
        assert_eq!(reader.join().expect("reader").expect("answer"), (42, false));
        assert_eq!(probe.known(began), Some((42, false)));

        // Sent before this read began: no answer for it.
        let early = probe.commit_sent();
        std::thread::sleep(Duration::from_millis(2));
        let later = Instant::now();
        early.answered(Some((43, false)));
        assert_eq!(probe.known(later), None);
        assert_eq!(
            wait(probe.revision(Some(later), || std::future::ready(Ok((44, false)))))
                .expect("asked"),
            (44, false)
        );

        // A commit that got no answer leaves the waiting read to ask.
        let began = Instant::now();
        let lost = probe.commit_sent();
        let reader = {
            let probe = Arc::clone(&probe);
            std::thread::spawn(move || {
                wait(probe.revision(Some(began), || std::future::ready(Ok((45, true)))))
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        drop(lost);
        assert_eq!(reader.join().expect("reader").expect("answer"), (45, true));
    }
}
