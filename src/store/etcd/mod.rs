//! The distributed backend: an etcd cluster (`--store etcd`), shared by every server of an
//! installation.
//!
//! Each table is a key prefix, `<prefix>/<table>/<key>`. A read runs at one revision of etcd
//! (the first key it reads pins it), so it sees one consistent snapshot. A write closure runs
//! over such a snapshot and becomes one etcd transaction ([`commit`]) that compares the mod
//! revision of every key the closure read and of every range it scanned, so it commits only if
//! none of that changed meanwhile; if something did, the closure runs again on fresh reads.
//! A write is answered only after etcd committed it on a quorum.
//!
//! When etcd cannot be reached, an impatient caller (an API request) fails after a short
//! grace with [`StoreError::Unavailable`], which names etcd; a patient one (the runtime)
//! waits until etcd is back, so a run pauses where it is and never acts on a step it could
//! not record.

mod access;
mod cache;
mod commit;
mod endpoints;
mod follow;
mod group;
mod intent;
mod lease;
mod orphans;
mod probe;
mod read;
mod shared;
mod view;
mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, KvClient, LeaseClient, Txn, TxnOp, WatchClient};
use tokio::sync::oneshot;

use super::backend::{Backend, Fence, LeaseState, ReadAs};
use super::job::{ReadJob, Verdict, WriteJob};
use super::table::{SCHEMA_KEY, SCHEMA_VERSION, StoreError, Table};
use super::txn::Txn as StoreTxn;
use shared::{
    GRACE, InFlight, Keys, MARKER_LIFE, MAX_CONFLICTS, Shared, Trip, classify, now_micros,
};
use view::View;

pub use access::Access;
pub use endpoints::Endpoints;

/// The key prefix of an installation when none is given.
pub const DEFAULT_PREFIX: &str = "/ebb";

/// How many operations ebb asks etcd to take in one transaction, largest first: a
/// transaction over etcd's `--max-txn-ops` is refused, and etcd's default is 128. A write that
/// needs more than etcd takes is committed as an intent across several (see [`intent`]).
pub const TXN_OPS: [usize; 2] = [1024, 128];

/// Longest pause between two tries while etcd cannot be reached.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The open etcd store.
#[derive(Debug)]
pub(super) struct Etcd {
    shared: Arc<Shared>,
    /// Folds concurrent writes into one transaction (see [`group`]).
    committer: group::Committer,
    /// Stops the backend's runtime thread when dropped.
    _stop: oneshot::Sender<()>,
}

/// Connects to etcd, checks that it takes transactions as large as ebb's and the store's
/// schema version, and starts the backend's runtime. Blocking.
pub(super) fn open(endpoints: &Endpoints) -> Result<Etcd, StoreError> {
    let describe = endpoints.describe();
    let open_err = |message: String| StoreError::Open {
        store: describe.clone(),
        message,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("ebb-etcd")
        .enable_all()
        .build()
        .map_err(|e| open_err(e.to_string()))?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("ebb-etcd-runtime".into())
        .spawn(move || {
            runtime.block_on(async {
                let _ = stopped.await;
            });
            runtime.shutdown_timeout(Duration::from_secs(1));
        })
        .map_err(|e| open_err(e.to_string()))?;
    let (clients, leases, watches) = handle
        .block_on(connect_each(endpoints))
        .map_err(|e| open_err(e.explain(endpoints)))?;
    let shared = Arc::new(Shared {
        clients,
        leases,
        watches,
        current: AtomicUsize::new(0),
        lease: tokio::sync::watch::Sender::new(0),
        lease_deadline: std::sync::Mutex::new(None),
        lease_expiry: std::sync::Mutex::new(None),
        handle,
        keys: Keys {
            root: endpoints.prefix.clone(),
        },
        describe: describe.clone(),
        closed: AtomicBool::new(false),
        in_flight: AtomicUsize::new(0),
        max_ops: AtomicUsize::new(TXN_OPS[TXN_OPS.len() - 1]),
        cache: cache::Cache::default(),
        written: std::sync::atomic::AtomicI64::new(0),
        news: tokio::sync::broadcast::Sender::new(1024),
        probe: probe::Probe::default(),
    });
    shared
        .probe(&endpoints.urls[0])
        .map_err(|e| open_err(e.explain(endpoints)))?;
    shared
        .learn_txn_limit()
        .map_err(|e| open_err(e.to_string()))?;
    shared.prepare()?;
    let sweeper = Arc::clone(&shared);
    shared
        .handle
        .spawn(async move { sweeper.sweep_markers().await });
    let keeper = Arc::clone(&shared);
    shared
        .handle
        .spawn(async move { keeper.keep_cache().await });
    let committer =
        group::Committer::spawn(Arc::clone(&shared)).map_err(|e| open_err(e.to_string()))?;
    Ok(Etcd {
        shared,
        committer,
        _stop: stop,
    })
}

/// Why the store could not be opened: the access options are wrong, or etcd refused them.
enum OpenFailure {
    Options(String),
    /// etcd at this URL failed so.
    Etcd(etcd_client::Error, String),
}

impl OpenFailure {
    fn explain(&self, endpoints: &Endpoints) -> String {
        match self {
            OpenFailure::Options(message) => message.clone(),
            OpenFailure::Etcd(e, url) => endpoints.access.explain(e, url, &endpoints.prefix),
        }
    }
}

/// The clients of each endpoint.
async fn connect_each(endpoints: &Endpoints) -> Result<Clients, OpenFailure> {
    let mut clients = Vec::with_capacity(endpoints.urls.len());
    let mut leases = Vec::with_capacity(endpoints.urls.len());
    let mut watches = Vec::with_capacity(endpoints.urls.len());
    for url in &endpoints.urls {
        let client = connect(std::slice::from_ref(url), &endpoints.access).await?;
        leases.push(client.lease_client());
        watches.push(client.watch_client());
        clients.push(
            client
                .kv_client()
                .max_decoding_message_size(view::MAX_RESPONSE),
        );
    }
    Ok((clients, leases, watches))
}

/// Every endpoint's key-value, lease and watch clients.
type Clients = (Vec<KvClient>, Vec<LeaseClient>, Vec<WatchClient>);

/// A client of `urls`, with TLS and the user of `access`.
async fn connect(urls: &[String], access: &Access) -> Result<Client, OpenFailure> {
    let options = access
        .connect_options()
        .map_err(OpenFailure::Options)?
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5))
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
        .with_require_leader(true);
    Client::connect(urls, Some(options))
        .await
        .map_err(|e| OpenFailure::Etcd(e, urls.join(",")))
}

/// Writes a schema version into the installation at `endpoints`; see
/// [`crate::store::write_schema_version_at`].
pub(super) fn write_schema_version(endpoints: &Endpoints, version: u64) -> Result<(), StoreError> {
    let describe = endpoints.describe();
    let failed = |e: etcd_client::Error| classify(&describe, &e);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StoreError::Storage(e.to_string()))?;
    let keys = Keys {
        root: endpoints.prefix.clone(),
    };
    runtime.block_on(async {
        let mut kv = connect(&endpoints.urls, &endpoints.access)
            .await
            .map_err(|e| StoreError::Open {
                store: describe.clone(),
                message: e.explain(endpoints),
            })?
            .kv_client();
        let value = serde_json::to_vec(&version).expect("a number serializes");
        kv.put(keys.of(Table::Meta, SCHEMA_KEY), value, None)
            .await
            .map_err(failed)?;
        Ok(())
    })
}

impl Shared {
    /// One read of the schema version: the first call over the connection, so a certificate
    /// or user etcd refuses is told at start.
    fn probe(&self, url: &str) -> Result<(), OpenFailure> {
        let key = self.keys.of(Table::Meta, SCHEMA_KEY);
        let mut kv = self.kv();
        self.handle
            .block_on(async move { kv.get(key, None).await })
            .map(|_| ())
            .map_err(|e| OpenFailure::Etcd(e, url.to_string()))
    }

    /// Finds how many operations etcd takes in one transaction (its `--max-txn-ops`), among
    /// [`TXN_OPS`]; refuses an etcd that takes fewer than its own default.
    fn learn_txn_limit(&self) -> Result<(), StoreError> {
        let key = self.keys.of(Table::Meta, SCHEMA_KEY);
        for ops in TXN_OPS {
            let compares: Vec<Compare> = (0..ops)
                .map(|_| Compare::mod_revision(key.clone(), CompareOp::Greater, -1))
                .collect();
            let mut kv = self.kv();
            match self
                .handle
                .block_on(async move { kv.txn(Txn::new().when(compares)).await })
            {
                Ok(_) => {
                    self.max_ops.store(ops, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) if e.to_string().contains("too many operations") => {}
                Err(e) => return Err(self.unavailable(&e)),
            }
        }
        let least = TXN_OPS[TXN_OPS.len() - 1];
        Err(StoreError::Storage(format!(
            "etcd refuses transactions of {least} operations (its default); start every etcd member with --max-txn-ops={least} or more"
        )))
    }

    /// Records the schema version in an empty store, or checks the one recorded.
    fn prepare(&self) -> Result<(), StoreError> {
        let key = self.keys.of(Table::Meta, SCHEMA_KEY);
        let version = serde_json::to_vec(&SCHEMA_VERSION).expect("a number serializes");
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), version, None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let mut kv = self.kv();
        let response = self
            .handle
            .block_on(async move { kv.txn(txn).await })
            .map_err(|e| self.unavailable(&e))?;
        if response.succeeded() {
            return Ok(());
        }
        let found = response
            .op_responses()
            .into_iter()
            .find_map(|r| match r {
                etcd_client::TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
                etcd_client::TxnOpResponse::Put(_)
                | etcd_client::TxnOpResponse::Delete(_)
                | etcd_client::TxnOpResponse::Txn(_) => None,
            })
            .unwrap_or_default();
        let found: u64 = serde_json::from_slice(&found).map_err(|e| StoreError::Corrupt {
            table: Table::Meta,
            key: SCHEMA_KEY.into(),
            message: e.to_string(),
        })?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                store: self.describe.clone(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        // Version 2 is sealed by the server, which has the key (`store::seal`).
        if found < 2 {
            return Err(StoreError::Open {
                store: self.describe.clone(),
                message: format!(
                    "it has schema version {found}, older than any etcd store ebb wrote; copy the installation anew with `ebb store copy`"
                ),
            });
        }
        Ok(())
    }

    /// Deletes commit markers, uncommitted intents and orphan chunks (see [`orphans`]) older
    /// than [`MARKER_LIFE`], once a minute.
    async fn sweep_markers(self: Arc<Self>) {
        let mut every = tokio::time::interval(Duration::from_secs(60));
        loop {
            every.tick().await;
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            let cutoff = now_micros().saturating_sub(MARKER_LIFE.as_micros() as u64);
            let (from, to) = self.keys.markers_before(cutoff);
            let options = etcd_client::DeleteOptions::new().with_range(to);
            if let Err(e) = self.kv().delete(from, Some(options)).await {
                tracing::debug!(error = %e, "commit markers not swept this time");
            }
            // Batches of intents never committed (their writer died first, or conflicted and
            // could not drop them): ids are time-ordered, so the old ones are a range. Never
            // while an intent is pending, whose batches may be among them.
            let (from, to) = self.keys.intents_before(&format!("{:012x}", cutoff / 1000));
            let sweep = Txn::new()
                .when([self.none_pending()])
                .and_then([TxnOp::delete(
                    from,
                    Some(etcd_client::DeleteOptions::new().with_range(to)),
                )]);
            if let Err(e) = self.kv().txn(sweep).await {
                tracing::debug!(error = %e, "stale intents not swept this time");
            }
            if let Err(e) = self.sweep_chunks(cutoff / 1000).await {
                tracing::debug!(error = %e, "orphan chunks not swept this time");
            }
        }
    }

    /// Runs a write until it commits, is refused, or fails for good.
    fn write(&self, mut job: Box<dyn WriteJob>, patient: bool, fence: Option<&Fence>) {
        let started = Instant::now();
        let mut conflicts = 0u32;
        let mut waits = 0u32;
        // A commit whose answer was lost: its marker tells whether it went through.
        let mut unsure: Option<Vec<u8>> = None;
        loop {
            if let Some(marker) = unsure.take() {
                match self.exists(&marker) {
                    Ok(true) => return job.finish(Ok(())),
                    Ok(false) => {}
                    Err(e) => {
                        if self.wait(&e, patient, started, &mut waits) {
                            unsure = Some(marker);
                            continue;
                        }
                        return job.finish(Err(e));
                    }
                }
            }
            // The closure reads the copy in memory when there is one; while it shows a write
            // larger than a transaction pending, that is finished first.
            let view = match self.cache.snapshot() {
                Some(copy) if copy.get(&self.keys.pending()).is_some() => {
                    if let Err(e) = self.finish_pending()
                        && !self.wait(&e, patient, started, &mut waits)
                    {
                        return job.finish(Err(e));
                    }
                    self.catch_up(copy.revision + 1);
                    continue;
                }
                Some(copy) => View::cached(self, copy, Trip::WriteRead),
                None => View::for_write(self),
            };
            let mut txn = StoreTxn::new(&view);
            let verdict = job.run(&mut txn);
            let staged = txn.into_staged();
            if let Some(e) = view.failure() {
                if self.wait(&e, patient, started, &mut waits) {
                    continue;
                }
                return job.finish(Err(e));
            }
            if verdict == Verdict::Refused {
                return job.finish(Ok(()));
            }
            match commit::commit(self, &view, staged, fence) {
                Ok(commit::Outcome::Committed(revision)) => {
                    // What this server reads next (from the copy) includes this write.
                    self.written.fetch_max(revision, Ordering::SeqCst);
                    self.catch_up(revision);
                    return job.finish(Ok(()));
                }
                Ok(commit::Outcome::Pending) => {
                    conflicts += 1;
                    if let Err(e) = self.finish_pending()
                        && !self.wait(&e, patient, started, &mut waits)
                    {
                        return job.finish(Err(e));
                    }
                }
                Ok(commit::Outcome::Conflict(revision)) => {
                    // Run again on a copy at least as new as what etcd has.
                    self.catch_up(revision);
                    conflicts += 1;
                    if conflicts >= MAX_CONFLICTS {
                        return job.finish(Err(StoreError::Contended {
                            store: self.describe.clone(),
                            tries: conflicts,
                        }));
                    }
                    std::thread::sleep(Duration::from_micros(fastrand::u64(
                        0..1_000 * u64::from(conflicts.min(20)),
                    )));
                }
                Err(commit::Failed { error, marker }) => {
                    if self.wait(&error, patient, started, &mut waits) {
                        unsure = marker;
                        continue;
                    }
                    return job.finish(Err(error));
                }
            }
        }
    }

    /// Waits (a little) until the copy in memory, if there is one, has reached `revision`.
    fn catch_up(&self, revision: i64) {
        self.handle.block_on(self.copy_reaches(revision));
    }

    /// [`Shared::catch_up`], for a task on the etcd client's runtime.
    async fn copy_reaches(&self, revision: i64) {
        if self.cache.ready() {
            self.cache.caught_up(revision, Duration::from_secs(1)).await;
        }
    }

    /// Whether to try again after `e`: only when etcd could not be reached, and then after a
    /// pause, for ever if `patient`, else within [`GRACE`].
    fn wait(&self, e: &StoreError, patient: bool, started: Instant, waits: &mut u32) -> bool {
        if !e.is_unavailable() || self.closed.load(Ordering::SeqCst) {
            return false;
        }
        if !patient && started.elapsed() >= GRACE {
            return false;
        }
        *waits += 1;
        self.failover();
        if *waits == 1 || (*waits).is_multiple_of(30) {
            tracing::warn!(error = %e, patient, "waiting for etcd");
        }
        let pause = Duration::from_millis(50 * 2u64.pow((*waits).min(6)));
        std::thread::sleep(pause.min(MAX_BACKOFF));
        true
    }
}

impl Backend for Etcd {
    fn read(&self, mut job: Box<dyn ReadJob>, how: ReadAs) {
        let Some(guard) = InFlight::enter(&self.shared) else {
            return job.finish(Some(StoreError::Closed));
        };
        // A read the copy answers now runs here, on the caller's thread: no hop to the
        // blocking pool and back. One that needs etcd after all runs again the long way.
        if let Some(view) = self.shared.view_now(&how) {
            job.run(&view);
            if !view.bailed() {
                drop(view);
                job.finish(None);
                return drop(guard);
            }
        }
        // One that must wait for etcd's revision or for the copy waits as a task; one that
        // needs etcd itself after all runs again the long way, on a blocking thread.
        self.shared.handle.spawn(async move {
            let shared = Arc::clone(&guard.0);
            if let Some(view) = shared.view_from_runtime(&how).await {
                job.run(&view);
                if !view.bailed() {
                    drop(view);
                    job.finish(None);
                    return drop(guard);
                }
            }
            shared.handle.spawn_blocking(move || {
                guard.0.read(job, how);
                drop(guard);
            });
        });
    }

    fn write(&self, job: Box<dyn WriteJob>, patient: bool, fence: Option<&Fence>) {
        let Some(guard) = InFlight::enter(&self.shared) else {
            return job.finish(Err(StoreError::Closed));
        };
        self.committer.submit(group::Queued {
            job,
            patient,
            fence: fence.cloned(),
            started: Instant::now(),
            conflicts: 0,
            guard,
        });
    }

    fn take_lease(&self, ttl: Duration) -> oneshot::Receiver<Result<i64, StoreError>> {
        let (done, answer) = oneshot::channel();
        let shared = Arc::clone(&self.shared);
        self.shared.handle.spawn(async move {
            let _ = done.send(shared.take_lease(ttl).await);
        });
        answer
    }

    fn sweep_orphans(&self, older_than: Duration) -> oneshot::Receiver<Result<usize, StoreError>> {
        let (done, answer) = oneshot::channel();
        let shared = Arc::clone(&self.shared);
        let before_ms = (now_micros() / 1000).saturating_sub(older_than.as_millis() as u64);
        self.shared.handle.spawn(async move {
            let _ = done.send(shared.sweep_chunks(before_ms).await);
        });
        answer
    }

    fn end_lease(&self, id: i64) -> oneshot::Receiver<Result<(), StoreError>> {
        let (done, answer) = oneshot::channel();
        let shared = Arc::clone(&self.shared);
        self.shared.handle.spawn(async move {
            let _ = done.send(shared.revoke(id).await);
        });
        answer
    }

    fn lease(&self) -> Option<tokio::sync::watch::Receiver<i64>> {
        Some(self.shared.lease.subscribe())
    }

    fn lease_state(&self, lease: i64) -> LeaseState {
        self.shared.lease_state(lease)
    }

    fn lease_expiry(&self, lease: i64) -> Option<std::time::Instant> {
        self.shared.lease_expiry(lease)
    }

    fn run_news(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        Some(self.shared.news.subscribe())
    }

    fn watch_deletes(&self, table: Table) -> Option<tokio::sync::watch::Receiver<u64>> {
        let (deleted, heard) = tokio::sync::watch::channel(0);
        let shared = Arc::clone(&self.shared);
        self.shared
            .handle
            .spawn(async move { shared.watch_deletes(table, deleted).await });
        Some(heard)
    }

    fn close(&self) -> oneshot::Receiver<Result<(), StoreError>> {
        let (done, answer) = oneshot::channel();
        self.shared.closed.store(true, Ordering::SeqCst);
        let shared = Arc::clone(&self.shared);
        self.shared.handle.spawn(async move {
            while shared.in_flight.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let _ = done.send(Ok(()));
        });
        answer
    }

    fn describe(&self) -> String {
        self.shared.describe.clone()
    }

    fn file(&self) -> Option<&std::path::Path> {
        None
    }
}
