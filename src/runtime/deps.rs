//! What the actors share: the store, the provisioners, the directories, this server's name.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::runtime::registry::Registry;
use crate::store::Store;
use crate::store::events::Notifier;
use crate::store::secure::Cipher;

/// What the actors share.
#[derive(Debug, Clone)]
pub struct Deps {
    pub store: Store,
    pub registry: Arc<Registry>,
    pub data_dir: PathBuf,
    /// Where programs and provisioners work (programs' working directories, `local`
    /// sandboxes, the `sim` cloud): apart from the store and the secure key.
    pub work_dir: PathBuf,
    pub notifier: Notifier,
    /// The program launcher: `ebb-shim` beside the `ebb` executable, or else `ebb` itself
    /// (each is started as `<exe> shim <run-dir>`; see [`crate::runtime::program::launcher`]).
    pub exe: PathBuf,
    /// This server's name, tagged on every resource it makes ([`ebb_spi::TAG_SERVER`]): its
    /// janitor only touches resources carrying it.
    pub server_name: String,
    /// Opens the secure store, to resolve `${secure(name)}` properties.
    pub cipher: Arc<Cipher>,
    /// This server among the servers of its installation.
    pub member: Member,
    /// Bounds the services' checks this server runs at once, over all its runs, and each
    /// namespace's share of them.
    pub check_slots: Arc<crate::runtime::shares::Lanes<String>>,
    /// What the dispatcher of queued runs hears from this server: runs queued, slots freed.
    pub queue_news: Arc<QueueNews>,
    /// This server's calls to clouds: their accounts' buckets and the clusters' lookups.
    pub calls: Arc<crate::runtime::calls::Calls>,
}

/// News for the dispatcher of queued runs, from this server.
#[derive(Debug, Default)]
pub struct QueueNews {
    /// Wakes it: a run was queued, or a run let go of its cluster (a slot a limit counts).
    pub wake: tokio::sync::Notify,
    /// Grows with every run this server queues, so it knows to read the queue again.
    queued: std::sync::atomic::AtomicU64,
}

impl QueueNews {
    /// A run was queued here.
    pub fn queued(&self) {
        self.queued
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// A run here let go of what a limit counts.
    pub fn freed(&self) {
        self.wake.notify_one();
    }

    /// How many runs were queued here so far.
    pub fn queued_so_far(&self) -> u64 {
        self.queued.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A server among the servers of an installation: its name, and the lease it holds now.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: Arc<str>,
    lease: Arc<AtomicI64>,
    /// Its lease's time to live, in milliseconds (0 on the embedded store).
    ttl: Arc<AtomicU64>,
    draining: Arc<AtomicBool>,
    /// The programs on this host whose fences this server keeps moving.
    pub fences: super::fence::Fences,
}

impl Member {
    pub fn new(name: &str) -> Member {
        Member {
            name: Arc::from(name),
            lease: Arc::default(),
            ttl: Arc::default(),
            draining: Arc::default(),
            fences: super::fence::Fences::default(),
        }
    }

    /// The lease held now: 0 on the embedded store, or while none is held.
    pub fn lease(&self) -> i64 {
        self.lease.load(Ordering::SeqCst)
    }

    pub fn set_lease(&self, lease: i64) {
        self.lease.store(lease, Ordering::SeqCst);
    }

    /// The time to live of the leases this server takes: zero on the embedded store.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl.load(Ordering::SeqCst))
    }

    pub fn set_ttl(&self, ttl: Duration) {
        self.ttl.store(
            u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    /// Whether the server is handing its runs to the others before it stops: it takes no new
    /// run then.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Starts draining; false if it had started already.
    pub fn start_draining(&self) -> bool {
        !self.draining.swap(true, Ordering::SeqCst)
    }
}

impl Deps {
    /// Where run `run` keeps its program's files (launch, exit status, logs, cluster.json).
    pub fn run_dir(&self, run: &str) -> PathBuf {
        self.data_dir.join("runs").join(run)
    }

    /// The working directory of run `run`'s program when no node gives it one.
    pub fn program_dir(&self, run: &str) -> PathBuf {
        self.work_dir.join("runs").join(run).join("program")
    }

    /// The working directory of service scripts on `node` of run `run` when the node gives
    /// none.
    pub fn node_work_dir(&self, run: &str, node: &str) -> PathBuf {
        self.work_dir
            .join("runs")
            .join(run)
            .join("nodes")
            .join(node)
    }
}
