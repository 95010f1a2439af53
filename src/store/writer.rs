//! The single writer of the store: a dedicated thread that commits queued writes in batches.
//!
//! Each wake-up takes every write waiting in the queue (up to [`MAX_BATCH`]) and runs them in
//! one redb transaction, then commits once (fsync) and answers every caller with the outcome.
//! A caller hears "done" only after its writes are durable. A closure that returns an error
//! or panics contributes no writes; a storage error while applying fails the whole batch,
//! since the transaction can no longer be trusted.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, mpsc};
use std::thread;

use redb::{Database, WriteTransaction};
use tokio::sync::oneshot;

use super::table::StoreError;
use super::txn::Txn;

/// Most writes that share one commit.
pub const MAX_BATCH: usize = 512;

/// Called with the commit's outcome once the batch is committed (or abandoned).
type Completion = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// What running one write produced: its completion, and whether the transaction is still
/// fit to commit.
pub(super) struct Ran {
    completion: Completion,
    poisoned: bool,
}

/// One queued write. Given the batch's transaction (or the error that prevented opening it).
pub(super) type Job = Box<dyn FnOnce(Result<&WriteTransaction, StoreError>) -> Ran + Send>;

type Ack = oneshot::Sender<Result<(), StoreError>>;

enum Message {
    Write(Job),
    Shutdown(Ack),
}

/// The sending side of the writer's queue.
#[derive(Debug, Clone)]
pub(super) struct Handle {
    queue: mpsc::Sender<Message>,
}

impl Handle {
    pub(super) fn submit(&self, job: Job) -> Result<(), StoreError> {
        self.queue
            .send(Message::Write(job))
            .map_err(|_| StoreError::Closed)
    }

    /// Lets every write queued so far finish, then stops the thread.
    pub(super) async fn shutdown(&self) -> Result<(), StoreError> {
        let (ack, done) = oneshot::channel();
        self.queue
            .send(Message::Shutdown(ack))
            .map_err(|_| StoreError::Closed)?;
        done.await.unwrap_or(Err(StoreError::Closed))
    }
}

/// Starts the writer thread.
pub(super) fn spawn(db: Arc<Database>) -> std::io::Result<Handle> {
    let (queue, inbox) = mpsc::channel();
    thread::Builder::new()
        .name("ebb-store-writer".into())
        .spawn(move || {
            let (outcome, ack) = run(&db, &inbox);
            // Release the database before saying we are done, so the file can be reopened.
            drop(db);
            if let Some(ack) = ack {
                let _ = ack.send(outcome);
            }
        })?;
    Ok(Handle { queue })
}

/// Wraps a write closure and its reply channel into a [`Job`].
pub(super) fn job<T, E, F>(f: F, reply: oneshot::Sender<Result<T, E>>) -> Job
where
    F: FnOnce(&mut Txn) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
{
    Box::new(move |tx| {
        let tx = match tx {
            Ok(tx) => tx,
            Err(e) => {
                let _ = reply.send(Err(e.into()));
                return Ran {
                    completion: Box::new(|_| {}),
                    poisoned: false,
                };
            }
        };
        let mut txn = Txn::new(tx);
        let outcome = catch_unwind(AssertUnwindSafe(|| f(&mut txn)));
        match outcome {
            Ok(Ok(value)) => match txn.apply() {
                Ok(()) => Ran {
                    completion: Box::new(move |commit| {
                        let _ = reply.send(commit.map(|()| value).map_err(E::from));
                    }),
                    poisoned: false,
                },
                Err(e) => Ran {
                    completion: Box::new(move |_| {
                        let _ = reply.send(Err(e.into()));
                    }),
                    poisoned: true,
                },
            },
            // A refused write stages nothing; its answer does not depend on the commit.
            Ok(Err(refused)) => Ran {
                completion: Box::new(move |_| {
                    let _ = reply.send(Err(refused));
                }),
                poisoned: false,
            },
            Err(_panic) => {
                tracing::error!("store write panicked; its writes were discarded");
                Ran {
                    completion: Box::new(move |_| {
                        let _ = reply.send(Err(StoreError::Storage(
                            "the write failed unexpectedly".into(),
                        )
                        .into()));
                    }),
                    poisoned: false,
                }
            }
        }
    })
}

/// Commits batches until told to stop (or every sender is gone); returns the final flush's
/// outcome and whom to tell.
fn run(db: &Database, inbox: &mpsc::Receiver<Message>) -> (Result<(), StoreError>, Option<Ack>) {
    let mut stop: Option<Ack> = None;
    while stop.is_none() {
        let Ok(first) = inbox.recv() else { break };
        let mut batch = Vec::new();
        match first {
            Message::Write(job) => batch.push(job),
            Message::Shutdown(ack) => stop = Some(ack),
        }
        while stop.is_none() && batch.len() < MAX_BATCH {
            match inbox.try_recv() {
                Ok(Message::Write(job)) => batch.push(job),
                Ok(Message::Shutdown(ack)) => stop = Some(ack),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            commit_batch(db, batch);
        }
    }
    (flush(db), stop)
}

fn commit_batch(db: &Database, batch: Vec<Job>) {
    let size = batch.len();
    let tx = match db.begin_write() {
        Ok(tx) => tx,
        Err(e) => {
            let e = StoreError::from(e);
            for job in batch {
                (job(Err(e.clone())).completion)(Err(e.clone()));
            }
            return;
        }
    };
    let mut completions = Vec::with_capacity(size);
    let mut poisoned = false;
    for job in batch {
        let ran = job(Ok(&tx));
        poisoned |= ran.poisoned;
        completions.push(ran.completion);
    }
    let outcome = if poisoned {
        let _ = tx.abort();
        Err(StoreError::Storage(
            "a write in the same commit failed; nothing was written".into(),
        ))
    } else {
        tx.commit().map_err(StoreError::from)
    };
    if let Err(e) = &outcome {
        tracing::error!(error = %e, batch.size = size, "store commit failed");
    } else {
        tracing::trace!(batch.size = size, "store commit");
    }
    for completion in completions {
        completion(outcome.clone());
    }
}

/// An empty durable commit: everything before it is on disk when it returns.
fn flush(db: &Database) -> Result<(), StoreError> {
    let tx = db.begin_write()?;
    tx.commit()?;
    Ok(())
}
