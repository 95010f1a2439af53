//! The single writer of the redb store: a dedicated thread that commits queued writes in
//! batches.
//!
//! Each wake-up takes every write waiting in the queue (up to [`MAX_BATCH`]) and runs them in
//! one redb transaction, then commits once (fsync) and answers every caller with the outcome.
//! A caller hears "done" only after its writes are durable. A closure that returns an error
//! or panics contributes no writes; a storage error while applying fails the whole batch,
//! since the transaction can no longer be trusted.

use std::sync::{Arc, mpsc};
use std::thread;

use redb::Database;
use tokio::sync::oneshot;

use super::tables::{Live, apply};
use crate::store::job::{Verdict, WriteJob};
use crate::store::table::StoreError;
use crate::store::txn::Txn;

/// Most writes that share one commit.
pub const MAX_BATCH: usize = 512;

type Ack = oneshot::Sender<Result<(), StoreError>>;

enum Message {
    Write(Box<dyn WriteJob>),
    Shutdown(Ack),
}

/// The sending side of the writer's queue.
#[derive(Debug, Clone)]
pub(super) struct Handle {
    queue: mpsc::Sender<Message>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Message::Write(_) => "Write",
            Message::Shutdown(_) => "Shutdown",
        })
    }
}

impl Handle {
    /// Queues `job`; if the writer is gone, answers it so.
    pub(super) fn submit(&self, job: Box<dyn WriteJob>) {
        if let Err(mpsc::SendError(Message::Write(job))) = self.queue.send(Message::Write(job)) {
            job.finish(Err(StoreError::Closed));
        }
    }

    /// Lets every write queued so far finish, then stops the thread.
    pub(super) fn shutdown(&self) -> oneshot::Receiver<Result<(), StoreError>> {
        let (ack, done) = oneshot::channel();
        if let Err(mpsc::SendError(Message::Shutdown(ack))) =
            self.queue.send(Message::Shutdown(ack))
        {
            let _ = ack.send(Err(StoreError::Closed));
        }
        done
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
    // Whatever was queued behind the shutdown is answered, not dropped.
    while let Ok(message) = inbox.try_recv() {
        match message {
            Message::Write(job) => job.finish(Err(StoreError::Closed)),
            Message::Shutdown(ack) => {
                let _ = ack.send(Ok(()));
            }
        }
    }
    (flush(db), stop)
}

fn commit_batch(db: &Database, mut batch: Vec<Box<dyn WriteJob>>) {
    let size = batch.len();
    let started = std::time::Instant::now();
    let tx = match db.begin_write() {
        Ok(tx) => tx,
        Err(e) => {
            let e = StoreError::from(e);
            for job in batch {
                job.finish(Err(e.clone()));
            }
            return;
        }
    };
    let mut failed = None;
    let live = Live(&tx);
    for job in &mut batch {
        let mut txn = Txn::new(&live);
        if job.run(&mut txn) == Verdict::Apply
            && let Err(e) = apply(&tx, txn.into_staged())
        {
            failed.get_or_insert(e);
        }
    }
    let outcome = match failed {
        Some(e) => {
            let _ = tx.abort();
            tracing::error!(error = %e, "a store write failed to apply; its commit is abandoned");
            Err(StoreError::Storage(
                "a write in the same commit failed; nothing was written".into(),
            ))
        }
        None => tx.commit().map_err(StoreError::from),
    };
    if let Err(e) = &outcome {
        tracing::error!(error = %e, batch.size = size, "store commit failed");
    } else {
        tracing::trace!(batch.size = size, "store commit");
        use crate::model::metrics::{STORE_COMMIT_BATCH, STORE_COMMIT_SECONDS};
        metrics::histogram!(STORE_COMMIT_SECONDS.name, "store" => "redb")
            .record(started.elapsed().as_secs_f64());
        metrics::histogram!(STORE_COMMIT_BATCH.name, "store" => "redb").record(size as f64);
    }
    for job in batch {
        job.finish(outcome.clone());
    }
}

/// An empty durable commit: everything before it is on disk when it returns.
fn flush(db: &Database) -> Result<(), StoreError> {
    let tx = db.begin_write()?;
    tx.commit()?;
    Ok(())
}
