//! What a backend does: run read and write jobs, and close.

use std::path::Path;

use tokio::sync::oneshot;

use super::job::{ReadJob, WriteJob};
use super::table::StoreError;

/// One store backend (redb, etcd) behind [`super::Store`].
pub(super) trait Backend: Send + Sync + std::fmt::Debug {
    /// Runs `job` over a snapshot, off the async workers. A `patient` read waits out a store
    /// that cannot be reached instead of failing.
    fn read(&self, job: Box<dyn ReadJob>, patient: bool);

    /// Runs `job` and commits what it staged, then answers it. A `patient` write waits out a
    /// store that cannot be reached instead of failing.
    fn write(&self, job: Box<dyn WriteJob>, patient: bool);

    /// Finishes every write under way; later ones fail with [`StoreError::Closed`].
    fn close(&self) -> oneshot::Receiver<Result<(), StoreError>>;

    /// The store, for messages: its file, or etcd's endpoints.
    fn describe(&self) -> String;

    /// The store's file, if it is one.
    fn file(&self) -> Option<&Path>;
}
