//! The embedded backend: one redb file, `<data-dir>/ebb.redb`.
//!
//! Reads run on tokio's blocking pool in their own read transactions. Writes go to one writer
//! thread ([`writer`]), which gathers every write queued while the previous commit
//! ran into one transaction (group commit) and answers each caller only after that transaction
//! is durable on disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, WriteTransaction};
use tokio::sync::oneshot;

use super::backend::{Backend, Fence, LeaseState, ReadAs};
use super::job::{ReadJob, WriteJob};
use super::table::{SCHEMA_KEY, SCHEMA_VERSION, StoreError, Table};

mod tables;
mod writer;

use tables::{Snapshot, def};

/// File name of the store inside the data directory.
pub const FILE_NAME: &str = "ebb.redb";

/// The open redb file and its writer.
#[derive(Debug)]
pub(super) struct Redb {
    db: Arc<Database>,
    writer: writer::Handle,
    path: PathBuf,
}

/// Opens (or creates) the store in `data_dir`, checks its schema version and starts the
/// writer thread. Blocking.
pub(super) fn open(data_dir: &Path) -> Result<Redb, StoreError> {
    let path = data_dir.join(FILE_NAME);
    let open_err = |message: String| StoreError::Open {
        store: describe(&path),
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
    Ok(Redb { db, writer, path })
}

fn describe(path: &Path) -> String {
    format!("the store at {}", path.display())
}

impl Backend for Redb {
    fn read(&self, mut job: Box<dyn ReadJob>, _how: ReadAs) {
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || match db.begin_read() {
            Ok(tx) => {
                job.run(&Snapshot(&tx));
                job.finish(None);
            }
            Err(e) => job.finish(Some(e.into())),
        });
    }

    // One server: it owns every run, and nothing can fence it.
    fn write(&self, job: Box<dyn WriteJob>, _patient: bool, _fence: Option<&Fence>) {
        self.writer.submit(job);
    }

    fn close(&self) -> oneshot::Receiver<Result<(), StoreError>> {
        self.writer.shutdown()
    }

    fn run_news(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        None
    }

    fn take_lease(&self, _ttl: std::time::Duration) -> oneshot::Receiver<Result<i64, StoreError>> {
        let (done, answer) = oneshot::channel();
        let _ = done.send(Ok(0));
        answer
    }

    fn sweep_orphans(
        &self,
        _older_than: std::time::Duration,
    ) -> oneshot::Receiver<Result<usize, StoreError>> {
        let (done, answer) = oneshot::channel();
        let _ = done.send(Ok(0));
        answer
    }

    fn end_lease(&self, _id: i64) -> oneshot::Receiver<Result<(), StoreError>> {
        let (done, answer) = oneshot::channel();
        let _ = done.send(Ok(()));
        answer
    }

    fn lease(&self) -> Option<tokio::sync::watch::Receiver<i64>> {
        None
    }

    fn lease_state(&self, _lease: i64) -> LeaseState {
        LeaseState::Live
    }

    fn watch_deletes(&self, _table: Table) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    fn describe(&self) -> String {
        describe(&self.path)
    }

    fn file(&self) -> Option<&Path> {
        Some(&self.path)
    }
}

/// Creates missing tables and checks or records the schema version, in one transaction.
fn prepare(db: &Database, path: &Path) -> Result<(), StoreError> {
    let tx = db.begin_write()?;
    let found: Option<u64> =
        {
            let meta = tx.open_table(def(Table::Meta))?;
            let value = ReadableTable::get(&meta, SCHEMA_KEY)?;
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
                store: describe(path),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        // Version 2 is sealed by the server, which has the key (`store::seal`).
        Some(2 | SCHEMA_VERSION) => {}
        Some(_) => migrate_to_2(&tx)?,
        None => {
            let mut meta = tx.open_table(def(Table::Meta))?;
            let version = serde_json::to_vec(&SCHEMA_VERSION).expect("a number serializes");
            meta.insert(SCHEMA_KEY, version.as_slice())?;
        }
    }
    for table in Table::ALL {
        tx.open_table(def(table))?;
    }
    tx.commit()?;
    Ok(())
}

/// Version 1 to 2: the run index, built from every run there is.
fn migrate_to_2(tx: &WriteTransaction) -> Result<(), StoreError> {
    let runs: Vec<String> = {
        let t = tx.open_table(def(Table::Runs))?;
        let mut found = Vec::new();
        for entry in ReadableTable::iter(&t)? {
            found.push(entry?.0.value().to_string());
        }
        found
    };
    let mut index = tx.open_table(def(Table::RunIndex))?;
    for key in runs {
        if let Some(entry) = super::keys::run_index_of(&key) {
            let value = serde_json::to_vec(&key).expect("a string serializes");
            index.insert(entry.as_str(), value.as_slice())?;
        }
    }
    let mut meta = tx.open_table(def(Table::Meta))?;
    let version = serde_json::to_vec(&2u64).expect("a number serializes");
    meta.insert(SCHEMA_KEY, version.as_slice())?;
    Ok(())
}

/// Writes a schema version into the store at `data_dir` (which must not be open). For tests
/// of the version check and for future migrations.
pub fn write_schema_version(data_dir: &Path, version: u64) -> Result<(), StoreError> {
    let path = data_dir.join(FILE_NAME);
    let db = Database::create(&path).map_err(|e| StoreError::Open {
        store: describe(&path),
        message: e.to_string(),
    })?;
    let tx = db.begin_write()?;
    {
        let mut meta = tx.open_table(def(Table::Meta))?;
        let bytes = serde_json::to_vec(&version).expect("a number serializes");
        meta.insert(SCHEMA_KEY, bytes.as_slice())?;
    }
    tx.commit()?;
    Ok(())
}
