//! The durable store: one redb file, `<data-dir>/ebb.redb`.
//!
//! Values are JSON documents in a few string-keyed tables ([`Table`]). Reads run on tokio's
//! blocking pool in their own read transactions. Writes go to one writer thread
//! ([`writer`]), which gathers every write queued while the previous commit ran into one
//! transaction (group commit), and answers each caller only after that transaction is durable
//! on disk.
//!
//! A write is a closure over a [`Txn`]: it reads, decides, and stages puts and deletes. The
//! staged writes are applied only if the closure returns `Ok`, so a write that fails changes
//! nothing, even when it shares a commit with others. This module never decides what is valid;
//! the services above it do, inside their write closures, so check-then-write is atomic.

pub mod audit;
pub mod events;
pub mod keys;
pub mod secure;
mod table;
mod txn;
mod writer;
pub use table::{StoreError, Table};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redb::{Database, ReadableDatabase};
use tokio::sync::oneshot;

pub use txn::{Page, Read, Reader, Txn};

/// The layout of the store this build writes. Bump it with a migration when the layout
/// changes; a store with a newer version is refused rather than misread.
pub const SCHEMA_VERSION: u64 = 2;

/// File name of the store inside the data directory.
pub const FILE_NAME: &str = "ebb.redb";

const SCHEMA_KEY: &str = "schema_version";

/// A handle on the open store. Cheap to clone; all clones share one writer.
#[derive(Debug, Clone)]
pub struct Store {
    db: Arc<Database>,
    writer: writer::Handle,
    path: PathBuf,
    closed: Arc<AtomicBool>,
}

impl Store {
    /// Opens (or creates) the store in `data_dir`, checks its schema version and starts the
    /// writer thread. Blocking: call it before serving, not from an async worker.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        let path = data_dir.join(FILE_NAME);
        let open_err = |message: String| StoreError::Open {
            path: path.clone(),
            message,
        };
        std::fs::create_dir_all(data_dir).map_err(|e| open_err(e.to_string()))?;
        let db = match Database::create(&path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::InUse { path });
            }
            Err(e) => return Err(open_err(e.to_string())),
        };
        prepare(&db, &path)?;
        let db = Arc::new(db);
        let writer = writer::spawn(Arc::clone(&db)).map_err(|e| open_err(e.to_string()))?;
        Ok(Store {
            db,
            writer,
            path,
            closed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Path of the store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in a read transaction on the blocking pool.
    pub async fn read<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&Reader) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        let task = tokio::task::spawn_blocking(move || {
            let tx = db.begin_read().map_err(StoreError::from)?;
            f(&Reader::new(&tx))
        });
        match task.await {
            Ok(result) => result,
            Err(join) => Err(StoreError::Storage(format!("read task failed: {join}")).into()),
        }
    }

    /// Queues `f` for the writer thread and waits until its writes are durable.
    ///
    /// `f` may read (its reads see the writes of earlier closures in the same commit and its
    /// own staged writes), then stage writes; if it returns `Err`, none of its writes happen.
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut Txn) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.writer.submit(writer::job(f, reply))?;
        match answer.await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Closed.into()),
        }
    }

    /// Finishes every queued write, stops the writer and flushes the file. Later writes fail
    /// with [`StoreError::Closed`]. Calling it twice is harmless.
    pub async fn close(&self) -> Result<(), StoreError> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.writer.shutdown().await
    }
}

/// Creates missing tables and checks or records the schema version, in one transaction.
fn prepare(db: &Database, path: &Path) -> Result<(), StoreError> {
    let tx = db.begin_write()?;
    let found: Option<u64> =
        {
            let meta = tx.open_table(Table::Meta.def())?;
            let value = redb::ReadableTable::get(&meta, SCHEMA_KEY)?;
            match value {
                None => None,
                Some(bytes) => Some(serde_json::from_slice(bytes.value()).map_err(|e| {
                    StoreError::Corrupt {
                        table: Table::Meta,
                        key: SCHEMA_KEY.into(),
                        message: e.to_string(),
                    }
                })?),
            }
        };
    match found {
        Some(found) if found > SCHEMA_VERSION => {
            tx.abort()?;
            return Err(StoreError::SchemaTooNew {
                path: path.to_path_buf(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        Some(SCHEMA_VERSION) => {}
        Some(_) => migrate_to_2(&tx)?,
        None => {
            let mut meta = tx.open_table(Table::Meta.def())?;
            let version = serde_json::to_vec(&SCHEMA_VERSION).expect("a number serializes");
            meta.insert(SCHEMA_KEY, version.as_slice())?;
        }
    }
    for table in Table::ALL {
        tx.open_table(table.def())?;
    }
    tx.commit()?;
    Ok(())
}

/// Version 1 to 2: the run index, built from every run there is.
fn migrate_to_2(tx: &redb::WriteTransaction) -> Result<(), StoreError> {
    let runs: Vec<String> = {
        let t = tx.open_table(Table::Runs.def())?;
        let mut found = Vec::new();
        for entry in redb::ReadableTable::iter(&t)? {
            found.push(entry?.0.value().to_string());
        }
        found
    };
    let mut index = tx.open_table(Table::RunIndex.def())?;
    for key in runs {
        if let Some(entry) = keys::run_index_of(&key) {
            let value = serde_json::to_vec(&key).expect("a string serializes");
            index.insert(entry.as_str(), value.as_slice())?;
        }
    }
    let mut meta = tx.open_table(Table::Meta.def())?;
    let version = serde_json::to_vec(&2u64).expect("a number serializes");
    meta.insert(SCHEMA_KEY, version.as_slice())?;
    Ok(())
}

/// Writes a schema version into the store at `data_dir` (which must not be open). For tests
/// of the version check and for future migrations.
pub fn write_schema_version(data_dir: &Path, version: u64) -> Result<(), StoreError> {
    let db = Database::create(data_dir.join(FILE_NAME)).map_err(|e| StoreError::Open {
        path: data_dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let tx = db.begin_write()?;
    {
        let mut meta = tx.open_table(Table::Meta.def())?;
        let bytes = serde_json::to_vec(&version).expect("a number serializes");
        meta.insert(SCHEMA_KEY, bytes.as_slice())?;
    }
    tx.commit()?;
    Ok(())
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
        assert_eq!(version, Some(SCHEMA_VERSION));
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
