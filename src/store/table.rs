//! The tables of the store and its errors: what every backend shares.

use std::path::PathBuf;

use redb::TableDefinition;

/// The tables of the store. Keys are strings; values are JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// Store-wide facts such as the schema version.
    Meta,
    /// Namespaces by name.
    Namespaces,
    /// Profiles by `<namespace>/<name>`; SYSTEM profiles live under the `system` namespace.
    Profiles,
    /// Preference maps by scope key (see `preferences::Scope::key`).
    Preferences,
    /// Apps by `<namespace>/<app>`.
    Apps,
    /// Run records by `<namespace>/<app>/<program>/<run>`.
    Runs,
    /// The runs whose cluster is not yet deprovisioned, by the same key as `Runs`.
    Active,
    /// Per-node resource state by `<run>/<node>`.
    Resources,
    /// Each run's event history by `<run>/<sequence>`.
    Events,
    /// Cluster templates by `<namespace>/<name>`; SYSTEM ones under `system`.
    Templates,
    /// Cluster operations by `<run>/<operation id, 6 digits>`.
    Operations,
    /// The audit log: every task attempt by `<run>/<operation>/<task, 6 digits>/<attempt, 3 digits>`.
    Attempts,
    /// Secure keys by `<namespace>/<name>`, their data encrypted.
    SecureKeys,
    /// Every run of a namespace by `<namespace>/<run>` (run ids follow time), its value the
    /// run's key in `Runs`: lists a namespace's runs newest first, a page at a time.
    RunIndex,
}

impl Table {
    /// Every table, created when the store is opened.
    pub const ALL: [Table; 14] = [
        Table::Meta,
        Table::Namespaces,
        Table::Profiles,
        Table::Preferences,
        Table::Apps,
        Table::Runs,
        Table::Active,
        Table::Resources,
        Table::Events,
        Table::Templates,
        Table::Operations,
        Table::Attempts,
        Table::SecureKeys,
        Table::RunIndex,
    ];

    pub(super) fn def(self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        TableDefinition::new(match self {
            Table::Meta => "meta",
            Table::Namespaces => "namespaces",
            Table::Profiles => "profiles",
            Table::Preferences => "preferences",
            Table::Apps => "apps",
            Table::Runs => "runs",
            Table::Active => "active",
            Table::Resources => "resources",
            Table::Events => "events",
            Table::Templates => "templates",
            Table::Operations => "operations",
            Table::Attempts => "attempts",
            Table::SecureKeys => "secure_keys",
            Table::RunIndex => "run_index",
        })
    }
}

/// Errors of the store layer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the store at {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error(
        "the store at {path} is in use by another process; stop the other ebb server or choose another --data-dir"
    )]
    InUse { path: PathBuf },
    #[error(
        "the store at {path} has schema version {found}, but this ebb understands versions up to {supported}; run a newer ebb"
    )]
    SchemaTooNew {
        path: PathBuf,
        found: u64,
        supported: u64,
    },
    #[error("storage error: {0}")]
    Storage(String),
    #[error("stored value {table:?}/{key} cannot be read: {message}")]
    Corrupt {
        table: Table,
        key: String,
        message: String,
    },
    #[error("the store is shut down")]
    Closed,
}

impl From<redb::Error> for StoreError {
    fn from(e: redb::Error) -> Self {
        StoreError::Storage(e.to_string())
    }
}

macro_rules! storage_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Storage(e.to_string())
            }
        }
    )*};
}
storage_errors!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);
