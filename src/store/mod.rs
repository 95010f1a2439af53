//! The durable store: JSON documents in a few string-keyed tables ([`Table`]), on one of two
//! backends behind one [`Backend`] trait:
//!
//! - **redb** ([`redb`], the embedded default): one file `<data-dir>/ebb.redb`, one writer
//!   thread that commits every write queued meanwhile in one fsync'd transaction (group commit).
//! - **etcd** ([`etcd`], for several servers): the same tables as key prefixes; each write is
//!   one etcd transaction that compares the mod revision of everything it read (optimistic
//!   concurrency, retried on conflict), answered once a quorum committed it.
//!
//! A write is a closure over a [`Txn`]: it reads, decides, and stages puts and deletes. The
//! staged writes are applied only if the closure returns `Ok`, so a write that fails changes
//! nothing, even when it shares a commit with others. A backend may run a closure again (a
//! conflict on etcd), so closures are `Fn` and must not act outside the store. This module
//! never decides what is valid; the services above it do, inside their write closures, so
//! check-then-write is atomic.

pub mod audit;
mod backend;
pub mod changes;
pub mod cipher;
pub mod clock;
pub mod copy;
pub mod ends;
pub mod etcd;
pub mod events;
pub mod generation;
pub mod idle;
mod job;
pub mod keys;
pub mod migrate;
pub mod queue;
pub mod redb;
pub mod seal;
pub mod secure;
mod table;
mod txn;
pub mod usage;
pub use table::{SCHEMA_KEY, SCHEMA_VERSION, SEALED_SINCE, SPLIT_WRITES, StoreError, Table};

use std::path::Path;
use std::sync::Arc;

use backend::Backend;
pub use backend::Fence;
use backend::LeaseState;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::oneshot;

pub use redb::{FILE_NAME, write_schema_version};

/// Writes a schema version into the store at `location` (which no server may have open): for
/// tests of the version check and for future migrations. Blocking.
pub fn write_schema_version_at(location: &Location, version: u64) -> Result<(), StoreError> {
    match location {
        Location::Redb(dir) => write_schema_version(dir, version),
        Location::Etcd(endpoints) => etcd::write_schema_version(endpoints, version),
    }
}
pub use txn::{Page, Read, Reader, Txn};

tokio::task_local! {
    /// When the request being served began (see [`serving_request`]).
    static REQUEST_BEGAN: std::time::Instant;
}

/// Runs `f`, the serving of one request that begins now. Its reads see every write
/// acknowledged before it began, and may therefore share one look at etcd's revision taken
/// after that instant instead of asking anew each (a request is linearizable as a whole).
pub async fn serving_request<F: std::future::Future>(f: F) -> F::Output {
    REQUEST_BEGAN.scope(std::time::Instant::now(), f).await
}

/// When the request being served began, if one is.
fn request_began() -> Option<std::time::Instant> {
    REQUEST_BEGAN.try_with(|began| *began).ok()
}

/// Which backend to open, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The redb file in this data directory.
    Redb(std::path::PathBuf),
    /// An etcd cluster: its client endpoints and the key prefix of this installation.
    Etcd(etcd::Endpoints),
}

/// A handle on the open store. Cheap to clone; all clones share one backend.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    closed: Arc<AtomicBool>,
    patient: bool,
    /// What every write of this handle is conditional on, if anything.
    fence: Option<Arc<Fence>>,
    /// The installation's key, which seals the records written and checks those read
    /// ([`seal`]); none in a store opened by a tool or test without it.
    seal: Option<Arc<cipher::Cipher>>,
}

/// The store's answer to a read or write; `None` if it was dropped. In the crate's own tests
/// it is awaited on the blocking pool: a test that pauses tokio's clock must not see the clock
/// jump ahead while the store works on its own thread (tokio holds a paused clock still while
/// a blocking task runs, not while a channel waits).
async fn answered<T: Send + 'static>(answer: oneshot::Receiver<T>) -> Option<T> {
    #[cfg(test)]
    if tokio::runtime::Handle::try_current().is_ok() {
        return tokio::task::spawn_blocking(move || answer.blocking_recv().ok())
            .await
            .ok()
            .flatten();
    }
    answer.await.ok()
}

impl Store {
    /// Opens (or creates) the store at `location`, checks its schema version and starts what
    /// it needs. Blocking: call it before serving, not from an async worker.
    pub fn open_at(location: &Location) -> Result<Store, StoreError> {
        let backend: Arc<dyn Backend> = match location {
            Location::Redb(dir) => Arc::new(redb::open(dir)?),
            Location::Etcd(endpoints) => Arc::new(etcd::open(endpoints)?),
        };
        Ok(Store {
            backend,
            closed: Arc::new(AtomicBool::new(false)),
            patient: false,
            fence: None,
            seal: None,
        })
    }

    /// Opens (or creates) the redb store in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        Store::open_at(&Location::Redb(data_dir.to_path_buf()))
    }

    /// The same store, sealing every record it writes with the installation's key `cipher`
    /// and reading only the records sealed with it ([`seal`]). The server uses the store
    /// only so, once [`migrate::seal_installation`] has sealed what an older version left.
    pub fn sealed(&self, cipher: Arc<cipher::Cipher>) -> Store {
        Store {
            seal: Some(cipher),
            ..self.clone()
        }
    }

    /// The same store, but every read and write waits while the store cannot be reached
    /// instead of failing: for the runtime, whose runs pause until it is back.
    pub fn patient(&self) -> Store {
        Store {
            patient: true,
            ..self.clone()
        }
    }

    /// The same store, failing soon when the store cannot be reached: for requests.
    pub fn impatient(&self) -> Store {
        Store {
            patient: false,
            ..self.clone()
        }
    }

    /// The same store, whose writes commit only while run `run` (its key in `Runs`) is still
    /// owned under `lease`; see [`Fence`]. For a run's actors.
    pub fn fenced(&self, run: &str, lease: i64) -> Store {
        Store {
            fence: Some(Arc::new(Fence {
                run: run.to_string(),
                lease,
            })),
            ..self.clone()
        }
    }

    /// For a fenced store, right before an outside call another owner must not repeat: waits
    /// until the fence's lease is surely live by this host's clock (renewed within its time
    /// to live: not so while etcd cannot be reached, or right after this process was paused),
    /// and fails with [`StoreError::Fenced`] once it is gone.
    pub async fn still_owned(&self) -> Result<(), StoreError> {
        let Some(fence) = &self.fence else {
            return Ok(());
        };
        loop {
            match self.backend.lease_state(fence.lease) {
                LeaseState::Live => return Ok(()),
                LeaseState::Lost => {
                    return Err(StoreError::Fenced {
                        run: fence.run.clone(),
                    });
                }
                LeaseState::Unsure => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Takes this server's lease of `ttl` and keeps it alive; answers its id (0 on a store of
    /// one server).
    pub async fn take_lease(&self, ttl: std::time::Duration) -> Result<i64, StoreError> {
        self.backend
            .take_lease(ttl)
            .await
            .unwrap_or(Err(StoreError::Closed))
    }

    /// Drops what writes older than `older_than` left behind that nothing reads (on etcd:
    /// chunks no value points to); answers how many pieces went. The server sweeps what is ten
    /// minutes old every minute; this is for a sweep now.
    pub async fn sweep_orphans(
        &self,
        older_than: std::time::Duration,
    ) -> Result<usize, StoreError> {
        self.backend
            .sweep_orphans(older_than)
            .await
            .unwrap_or(Err(StoreError::Closed))
    }

    /// Ends lease `id` of an earlier run of this server, so what it owned is free at once.
    pub async fn end_lease(&self, id: i64) -> Result<(), StoreError> {
        self.backend
            .end_lease(id)
            .await
            .unwrap_or(Err(StoreError::Closed))
    }

    /// Whether several servers may share this store (etcd, with leases), rather than one
    /// owning everything in it (redb).
    pub fn shared(&self) -> bool {
        self.backend.lease().is_some()
    }

    /// The lease held now, told anew when it changes (0: it ended); `None` on a store of one
    /// server.
    pub fn lease(&self) -> Option<tokio::sync::watch::Receiver<i64>> {
        self.backend.lease()
    }

    /// The earliest instant etcd may end this server's lease `lease`, by this host's
    /// monotonic clock, while it is held; `None` on a store of one server.
    pub fn lease_expiry(&self, lease: i64) -> Option<std::time::Instant> {
        self.backend.lease_expiry(lease)
    }

    /// A count that grows whenever keys of `table` are deleted, by any server; `None` on a
    /// store of one server.
    pub fn watch_deletes(&self, table: Table) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.backend.watch_deletes(table)
    }

    /// The runs whose history grows, by any server's write, as they do; `None` on a store of
    /// one server.
    pub fn run_news(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        self.backend.run_news()
    }

    /// The store's file, if it is one (redb).
    pub fn file(&self) -> Option<&Path> {
        self.backend.file()
    }

    /// The store, for messages.
    pub fn describe(&self) -> String {
        self.backend.describe()
    }

    /// Runs `f` over a snapshot, off the async workers. `f` may run more than once (a read
    /// cut off while the store could not be reached); its last outcome is answered. Inside
    /// [`serving_request`], it sees every write acknowledged before the request began.
    pub async fn read<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: Fn(&Reader) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.read_as(f, self.fence.is_some(), request_began()).await
    }

    /// Runs `f` over what this server has seen of the store: a consistent state that holds
    /// every write this server made, but may not yet hold another server's latest (on etcd,
    /// the copy in memory as it stands; on redb, the same as [`Store::read`]). For a long
    /// poll's look for news: what it finds it may answer, as the poller asks again; that there
    /// is none, it answers only from a [`Store::read`].
    pub async fn read_seen<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: Fn(&Reader) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.read_as(f, true, request_began()).await
    }

    /// Runs `f` over a state that holds every write acknowledged anywhere at least `lag`
    /// before the request it serves began (or before now), and every write this server made:
    /// for a check asked so often that a look at etcd's revision for each would cost more
    /// than its answer being up to `lag` late elsewhere is worth (a token's). On etcd, a
    /// revision etcd gave in that time (most often the answer to a commit) is enough; on redb,
    /// it is the same as [`Store::read`].
    pub async fn read_within<T, E, F>(&self, lag: std::time::Duration, f: F) -> Result<T, E>
    where
        F: Fn(&Reader) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let began = request_began().unwrap_or_else(std::time::Instant::now);
        let since = began.checked_sub(lag).unwrap_or(began);
        self.read_as(f, self.fence.is_some(), Some(since)).await
    }

    async fn read_as<T, E, F>(
        &self,
        f: F,
        seen: bool,
        since: Option<std::time::Instant>,
    ) -> Result<T, E>
    where
        F: Fn(&Reader) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let how = backend::ReadAs {
            patient: self.patient,
            seen,
            since,
        };
        self.backend
            .read(job::read(f, reply, self.seal.clone()), how);
        answered(answer)
            .await
            .unwrap_or_else(|| Err(StoreError::Storage("the read was dropped".into()).into()))
    }

    /// Whether the store answers now: one read of the schema version. An impatient store
    /// fails soon with `Unavailable` when it cannot be reached.
    pub async fn reachable(&self) -> Result<(), StoreError> {
        self.read(|r| r.get::<u32>(Table::Meta, SCHEMA_KEY).map(|_| ()))
            .await
    }

    /// Runs `f` in a write and waits until its writes are committed.
    ///
    /// `f` may read (its reads see its own staged writes, and on redb the writes of earlier
    /// closures in the same commit), then stage writes; if it returns `Err`, none of its
    /// writes happen. It may run more than once; its last outcome is answered.
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: Fn(&mut Txn) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.backend.write(
            job::write(f, reply, self.seal.clone()),
            self.patient,
            self.fence.as_deref(),
        );
        answered(answer)
            .await
            .unwrap_or_else(|| Err(StoreError::Closed.into()))
    }

    /// The keys of `table` under `prefix`.
    pub async fn keys_under(&self, table: Table, prefix: &str) -> Result<Vec<String>, StoreError> {
        let prefix = prefix.to_string();
        let entries = self
            .read(move |r| r.scan::<serde_json::Value>(table, &prefix))
            .await?;
        Ok(entries.into_iter().map(|(key, _)| key).collect())
    }

    /// Deletes `keys` of `table`, [`SPLIT_WRITES`] per write: for clean-ups that need not be
    /// one transaction (and could pass the size of one on etcd).
    pub async fn delete_in_batches(&self, table: Table, keys: &[String]) -> Result<(), StoreError> {
        for part in keys.chunks(SPLIT_WRITES) {
            let part = part.to_vec();
            self.write(move |tx| {
                for key in &part {
                    tx.delete(table, key);
                }
                Ok::<_, StoreError>(())
            })
            .await?;
        }
        Ok(())
    }

    /// Finishes every queued write and stops the backend. Later writes fail with
    /// [`StoreError::Closed`]. Calling it twice is harmless.
    pub async fn close(&self) -> Result<(), StoreError> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.backend
            .close()
            .await
            .unwrap_or(Err(StoreError::Closed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum TestError {
        #[error("refused")]
        Refused,
        #[error(transparent)]
        Store(#[from] StoreError),
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn writes_are_durable_and_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        rt().block_on(async {
            let store = Store::open(dir.path()).expect("open");
            store
                .write(|tx| tx.put(Table::Namespaces, "a", &"one"))
                .await
                .expect("write");
            store.close().await.expect("close");
        });
        rt().block_on(async {
            let store = Store::open(dir.path()).expect("reopen");
            let v: Option<String> = store
                .read(|r| r.get(Table::Namespaces, "a"))
                .await
                .expect("read");
            assert_eq!(v.as_deref(), Some("one"));
            store.close().await.expect("close");
        });
    }

    #[test]
    fn a_failed_write_changes_nothing_even_in_a_shared_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        rt().block_on(async {
            let store = Store::open(dir.path()).expect("open");
            let mut handles = Vec::new();
            for i in 0..50 {
                let store = store.clone();
                handles.push(tokio::spawn(async move {
                    store
                        .write(move |tx| {
                            tx.put(Table::Namespaces, &format!("k{i:02}"), &i)?;
                            if i % 2 == 1 {
                                return Err(TestError::Refused);
                            }
                            Ok(())
                        })
                        .await
                }));
            }
            for (i, h) in handles.into_iter().enumerate() {
                let result = h.await.expect("join");
                assert_eq!(result.is_ok(), i % 2 == 0, "write {i}");
            }
            let all: Vec<(String, i32)> = store
                .read(|r| r.scan(Table::Namespaces, "k"))
                .await
                .expect("scan");
            assert_eq!(all.len(), 25);
            assert!(all.iter().all(|(_, v)| v % 2 == 0));
            store.close().await.expect("close");
        });
    }

    #[test]
    fn reads_inside_a_write_see_staged_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        rt().block_on(async {
            let store = Store::open(dir.path()).expect("open");
            let seen = store
                .write(|tx| {
                    tx.put(Table::Profiles, "ns/a", &1)?;
                    tx.put(Table::Profiles, "ns/b", &2)?;
                    tx.delete(Table::Profiles, "ns/a");
                    let one: Option<i32> = tx.get(Table::Profiles, "ns/a")?;
                    let all: Vec<(String, i32)> = tx.scan(Table::Profiles, "ns/")?;
                    Ok::<_, StoreError>((one, all))
                })
                .await
                .expect("write");
            assert_eq!(seen, (None, vec![("ns/b".to_string(), 2)]));
            store.close().await.expect("close");
        });
    }

    /// A scan from a key reads what sorts at or after it under the prefix, in a snapshot and in
    /// a write (its staged writes included), whether the key is before, inside or past the
    /// prefix.
    #[test]
    fn a_scan_from_a_key_starts_there_and_stays_under_its_prefix() {
        let dir = tempfile::tempdir().expect("tempdir");
        rt().block_on(async {
            let store = Store::open(dir.path()).expect("open");
            store
                .write(|tx| {
                    for k in ["a/1", "a/2", "a/3", "b/1"] {
                        tx.put(Table::Profiles, k, &k)?;
                    }
                    Ok::<_, StoreError>(())
                })
                .await
                .expect("write");
            let keys = |all: Vec<(String, String)>| -> Vec<String> {
                all.into_iter().map(|(k, _)| k).collect()
            };
            let read = store
                .read(|r| {
                    Ok::<_, StoreError>([
                        r.scan_from(Table::Profiles, "a/", "a/2")?,
                        r.scan_from(Table::Profiles, "a/", "")?,
                        r.scan_from(Table::Profiles, "a/", "b/")?,
                    ])
                })
                .await
                .expect("read");
            let [from, all, past] = read.map(keys);
            assert_eq!(from, ["a/2", "a/3"]);
            assert_eq!(all, ["a/1", "a/2", "a/3"]);
            assert!(past.is_empty(), "{past:?}");
            let staged = store
                .write(|tx| {
                    tx.put(Table::Profiles, "a/25", &"a/25")?;
                    tx.delete(Table::Profiles, "a/3");
                    tx.scan_from(Table::Profiles, "a/", "a/2")
                })
                .await
                .expect("write");
            assert_eq!(keys(staged), ["a/2", "a/25"]);
            store.close().await.expect("close");
        });
    }

    #[test]
    fn refuses_a_newer_schema_and_a_second_opener() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let store = Store::open(dir.path()).expect("open");
            match Store::open(dir.path()) {
                Err(StoreError::InUse { .. }) => {}
                other => panic!("expected InUse, got {other:?}"),
            }
            rt().block_on(store.close()).expect("close");
        }
        write_schema_version(dir.path(), SCHEMA_VERSION + 1).expect("bump");
        match Store::open(dir.path()) {
            Err(e @ StoreError::SchemaTooNew { .. }) => {
                let found = format!("schema version {}", SCHEMA_VERSION + 1);
                assert!(e.to_string().contains(&found), "{e}");
            }
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
    }

    #[test]
    fn a_version_1_store_gets_its_run_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let store = Store::open(dir.path()).expect("open");
            rt().block_on(store.write(|tx| {
                tx.put(Table::Runs, "ns/app/prog/0190-a", &serde_json::json!({}))?;
                tx.put(Table::Runs, "ns/app/prog/0190-b", &serde_json::json!({}))?;
                Ok::<_, StoreError>(())
            }))
            .expect("runs");
            rt().block_on(store.close()).expect("close");
        }
        write_schema_version(dir.path(), 1).expect("version 1");
        let store = Store::open(dir.path()).expect("migrated");
        let index: Vec<(String, String)> = rt()
            .block_on(store.read(|r| r.scan::<String>(Table::RunIndex, "ns/")))
            .expect("index");
        assert_eq!(
            index,
            [
                ("ns/0190-a".to_string(), "ns/app/prog/0190-a".to_string()),
                ("ns/0190-b".to_string(), "ns/app/prog/0190-b".to_string()),
            ]
        );
        rt().block_on(store.close()).expect("close");
        drop(store);
        let store = Store::open(dir.path()).expect("reopened");
        let version: Option<u64> = rt()
            .block_on(store.read(|r| r.get(Table::Meta, SCHEMA_KEY)))
            .expect("meta");
        // Version 2: what comes after (sealing) needs the installation's key, which a server
        // has (`seal::seal_installation`).
        assert_eq!(version, Some(2));
        rt().block_on(store.close()).expect("close");
    }

    #[test]
    fn writes_after_close_fail() {
        let dir = tempfile::tempdir().expect("tempdir");
        rt().block_on(async {
            let store = Store::open(dir.path()).expect("open");
            store.close().await.expect("close");
            let r = store.write(|tx| tx.put(Table::Meta, "x", &1)).await;
            assert!(matches!(r, Err(StoreError::Closed)), "{r:?}");
        });
    }
}
