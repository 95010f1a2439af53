//! What a backend does: run read and write jobs, and close.

use std::path::Path;

use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::job::{ReadJob, WriteJob};
use super::table::StoreError;

/// How a read is to be served.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadAs {
    /// It waits out a store that cannot be reached instead of failing.
    pub(super) patient: bool,
    /// It may be served from what this server has seen: a copy that holds every write this
    /// server made. So read a run's actors (whose writes are fenced, and the only writes to
    /// their run's live records) and a long poll looking for news. Any other read sees every
    /// write acknowledged anywhere before it began, or before the request it serves began.
    pub(super) seen: bool,
    /// When the request it serves began, if it serves one: the request's reads may share one
    /// look at the store's state taken after that instant, as the request as a whole then
    /// still sees every write acknowledged before it.
    pub(super) since: Option<std::time::Instant>,
}

/// One store backend (redb, etcd) behind [`super::Store`].
pub(super) trait Backend: Send + Sync + std::fmt::Debug {
    /// Runs `job` over a snapshot, off the async workers, as `how` says.
    fn read(&self, job: Box<dyn ReadJob>, how: ReadAs);

    /// Runs `job` and commits what it staged, then answers it. A `patient` write waits out a
    /// store that cannot be reached instead of failing. A `fence`d write commits only while
    /// this server still owns the fence's run, and fails with [`StoreError::Fenced`] once it
    /// does not.
    fn write(&self, job: Box<dyn WriteJob>, patient: bool, fence: Option<&Fence>);

    /// Takes a lease of `ttl` for this server and keeps it alive; answers its id. The keys of
    /// live tables ([`super::Table::is_live`]) this server writes are bound to it. A backend
    /// of one server (redb) has no leases and answers 0.
    fn take_lease(&self, ttl: Duration) -> oneshot::Receiver<Result<i64, StoreError>>;

    /// Ends lease `id` at once (one of an earlier run of this server): the keys bound to it go
    /// now rather than when it times out.
    fn end_lease(&self, id: i64) -> oneshot::Receiver<Result<(), StoreError>>;

    /// Drops what writes older than `older_than` left behind that nothing reads (on etcd:
    /// chunks no value points to); answers how many pieces went. The server does it on its
    /// own for what is older than ten minutes.
    fn sweep_orphans(&self, older_than: Duration) -> oneshot::Receiver<Result<usize, StoreError>>;

    /// How lease `lease` stands now: live on a backend without leases.
    fn lease_state(&self, lease: i64) -> LeaseState;

    /// The lease held now (0: none, or it ended), told anew when it changes; `None` on a
    /// backend without leases.
    fn lease(&self) -> Option<watch::Receiver<i64>>;

    /// The earliest instant etcd may end lease `lease` by this host's clock (its last renewal
    /// was sent its time to live before), while it is the one held; `None` otherwise, and on
    /// a backend without leases. What this server started stops by then (fencing).
    fn lease_expiry(&self, lease: i64) -> Option<std::time::Instant> {
        let _ = lease;
        None
    }

    /// A count that grows whenever keys of `table` are deleted (by anyone), for as long as the
    /// receiver is held; `None` on a backend of one server.
    fn watch_deletes(&self, table: super::Table) -> Option<watch::Receiver<u64>>;

    /// The runs whose history grows (an event appended by any server), as they do; `None` on
    /// a backend of one server, which hears its own writes.
    fn run_news(&self) -> Option<tokio::sync::broadcast::Receiver<String>>;

    /// Finishes every write under way; later ones fail with [`StoreError::Closed`].
    fn close(&self) -> oneshot::Receiver<Result<(), StoreError>>;

    /// The store, for messages: its file, or etcd's endpoints.
    fn describe(&self) -> String;

    /// The store's file, if it is one.
    fn file(&self) -> Option<&Path>;
}

/// What a write for a run is conditional on: the run's owner record is still bound to the
/// lease this server claimed it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The run's key in `Runs` (and `Owners`).
    pub run: String,
    pub lease: i64,
}

/// How a lease this server took stands, as far as it can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Held, and renewed less than its time to live ago by this host's clock.
    Live,
    /// Held, but not renewed for its time to live (etcd unreachable, or this process was
    /// paused): it may have ended.
    Unsure,
    /// Ended, or replaced by a newer one.
    Lost,
}
