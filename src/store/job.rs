//! A read or write closure on its way to a backend, with the channel its answer goes back on.
//!
//! A backend may run a closure more than once (an etcd write that conflicted with another, or
//! a read cut off while etcd was unreachable), so closures are `Fn`; only the last run's
//! outcome is answered.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use tokio::sync::oneshot;

use super::cipher::Cipher;
use super::table::StoreError;
use super::txn::{Reader, Source, Txn};

/// What one run of a write closure asks of the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The closure succeeded: commit what it staged.
    Apply,
    /// The closure refused (or panicked): it stages nothing, and its answer does not depend on
    /// the commit.
    Refused,
}

/// A queued write.
pub(super) trait WriteJob: Send {
    /// Runs the closure once over `txn`.
    fn run(&mut self, txn: &mut Txn<'_>) -> Verdict;

    /// Answers the caller with the last run's outcome, given how its commit went (or why the
    /// closure could not run at all).
    fn finish(self: Box<Self>, commit: Result<(), StoreError>);
}

/// A queued read.
pub(super) trait ReadJob: Send {
    /// Runs the closure once over a snapshot.
    fn run(&mut self, src: &dyn Source);

    /// Answers the caller with the last run's outcome, or `failed` if it never ran.
    fn finish(self: Box<Self>, failed: Option<StoreError>);
}

struct Write<F, T, E> {
    f: F,
    seal: Option<Arc<Cipher>>,
    outcome: Option<Result<T, E>>,
    reply: oneshot::Sender<Result<T, E>>,
}

/// Wraps a write closure and its reply channel; what it writes is sealed with `seal`.
pub(super) fn write<T, E, F>(
    f: F,
    reply: oneshot::Sender<Result<T, E>>,
    seal: Option<Arc<Cipher>>,
) -> Box<dyn WriteJob>
where
    F: Fn(&mut Txn) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
{
    Box::new(Write {
        f,
        seal,
        outcome: None,
        reply,
    })
}

fn panicked<E: From<StoreError>>(what: &str) -> E {
    tracing::error!("a store {what} panicked; it was discarded");
    StoreError::Storage(format!("the {what} failed unexpectedly")).into()
}

impl<F, T, E> WriteJob for Write<F, T, E>
where
    F: Fn(&mut Txn) -> Result<T, E> + Send,
    T: Send,
    E: From<StoreError> + Send,
{
    fn run(&mut self, txn: &mut Txn<'_>) -> Verdict {
        txn.seal_with(self.seal.clone());
        let (outcome, verdict) = match catch_unwind(AssertUnwindSafe(|| (self.f)(txn))) {
            Ok(Ok(value)) => (Ok(value), Verdict::Apply),
            Ok(Err(refused)) => (Err(refused), Verdict::Refused),
            Err(_) => (Err(panicked("write")), Verdict::Refused),
        };
        self.outcome = Some(outcome);
        verdict
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        let answer = match (self.outcome, commit) {
            (Some(Err(refused)), _) => Err(refused),
            (Some(Ok(value)), Ok(())) => Ok(value),
            (_, Err(e)) => Err(e.into()),
            (None, Ok(())) => Err(StoreError::Storage("the write never ran".into()).into()),
        };
        let _ = self.reply.send(answer);
    }
}

struct ReadOf<F, T, E> {
    f: F,
    seal: Option<Arc<Cipher>>,
    outcome: Option<Result<T, E>>,
    reply: oneshot::Sender<Result<T, E>>,
}

/// Wraps a read closure and its reply channel; it reads only records sealed with `seal`.
pub(super) fn read<T, E, F>(
    f: F,
    reply: oneshot::Sender<Result<T, E>>,
    seal: Option<Arc<Cipher>>,
) -> Box<dyn ReadJob>
where
    F: Fn(&Reader) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
{
    Box::new(ReadOf {
        f,
        seal,
        outcome: None,
        reply,
    })
}

impl<F, T, E> ReadJob for ReadOf<F, T, E>
where
    F: Fn(&Reader) -> Result<T, E> + Send,
    T: Send,
    E: From<StoreError> + Send,
{
    fn run(&mut self, src: &dyn Source) {
        let reader = Reader::new(src, self.seal.clone());
        self.outcome = Some(match catch_unwind(AssertUnwindSafe(|| (self.f)(&reader))) {
            Ok(outcome) => outcome,
            Err(_) => Err(panicked("read")),
        });
    }

    fn finish(self: Box<Self>, failed: Option<StoreError>) {
        let answer = match (self.outcome, failed) {
            (_, Some(e)) => Err(e.into()),
            (Some(outcome), None) => outcome,
            (None, None) => Err(StoreError::Storage("the read never ran".into()).into()),
        };
        let _ = self.reply.send(answer);
    }
}
