//! The tables of the store, its schema version and its errors: what every backend shares.

use std::path::PathBuf;

/// The layout of the store this build writes. Bump it with a migration when the layout
/// changes; a store with a newer version is refused rather than misread.
///
/// Version 3 seals records ([`Table::sealed`], `store::seal`); version 2 stores are sealed by
/// the first server that opens them with the installation's key, in one write that also
/// bumps the version.
pub const SCHEMA_VERSION: u64 = 3;

/// The first schema version whose records are sealed.
pub const SEALED_SINCE: u64 = 3;

/// The `Meta` key of the schema version.
pub const SCHEMA_KEY: &str = "schema_version";

/// How many records a write that may be split into several stages in each: so that each is
/// one etcd transaction on etcd's default flags (at most 128 operations; a record written or
/// deleted without being read is two, its value and its chunks'). A larger write is staged as
/// an intent first, which costs several round trips and holds up every other write meanwhile.
pub const SPLIT_WRITES: usize = 50;

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
    /// The state of each service on each node of a run's cluster by `<run>/<node>/<service>`.
    Services,
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
    /// What the compacted runs of each profile leave behind (`KeptUsage`), by the profile's
    /// key in `Profiles`.
    Usage,
    /// The servers of the installation that are up, by name.
    Servers,
    /// The owner of each live run (the server whose actors carry it on), by the run's key in
    /// `Runs`.
    Owners,
    /// The server that performs each installation-wide duty (the janitor's schedule, history
    /// retention), by duty: an election, won by the first to write while none holds it.
    Duties,
    /// Access tokens by name: their grants and the hash of their secret, never the secret.
    Tokens,
    /// The name of each token by the hex SHA-256 of its secret: how a request's token is found.
    TokenHashes,
    /// The audit log of changes (who did what), by `<namespace>/<sequence>`; instance-wide
    /// changes under `system/`.
    Changes,
    /// Signed-in browsers' sessions by `<token>/<hex SHA-256 of the session's secret>`.
    Sessions,
    /// Schedules by `<namespace>/<app>/<name>`.
    Schedules,
    /// Each schedule's fires by `<namespace>/<app>/<name>/<fire id>` (`t<epoch ms, 13
    /// digits>` for a time, `r<run id>` for a run's end): a fire's key existing is what makes
    /// it happen once.
    Fires,
    /// Run ends not yet offered to program-status triggers, by run id: written in the same
    /// write as the end, removed once the scheduler recorded the fires they cause.
    RunEnds,
    /// The fires waiting for a constraint, by their key in `Fires`.
    WaitingFires,
    /// The parts of each schedule's `AND` that fired and wait for the others, by the
    /// schedule's key.
    Joins,
    /// The idempotency keys of starts, by `<namespace>/<app>/<program>/<hex SHA-256 of the
    /// key>`: the run each recorded, kept a day.
    StartKeys,
    /// The QUEUED runs, oldest first in each namespace (see `store::queue`).
    Queue,
    /// The IDLE clusters a run may take over, by `<namespace>/<reuse key>/<cluster id>`, their
    /// value the key in `Runs` of the run that left them (see `store::idle`).
    Idle,
    /// The run that holds each cluster another run took over, by the cluster's id (the run
    /// that made it), its value the holder's key in `Runs`.
    Clusters,
    /// Runs' usage fixed but not yet folded into the `Ledger`, by `<namespace>/<run id>`
    /// (see `store::usage`).
    UsageEntries,
    /// The usage ledger: figures per UTC day (`d/<2026-11-27>/<namespace>/<app>/<program>/
    /// <profile>/<provisioner>`), per month (`m/<2026-11>/...`) and per namespace and month
    /// (`t/<2026-11>/<namespace>`).
    Ledger,
}

impl Table {
    /// Every table, created when the store is opened.
    pub const ALL: [Table; 34] = [
        Table::Meta,
        Table::Namespaces,
        Table::Profiles,
        Table::Preferences,
        Table::Apps,
        Table::Runs,
        Table::Active,
        Table::Resources,
        Table::Services,
        Table::Events,
        Table::Templates,
        Table::Operations,
        Table::Attempts,
        Table::SecureKeys,
        Table::RunIndex,
        Table::Usage,
        Table::Servers,
        Table::Owners,
        Table::Duties,
        Table::Tokens,
        Table::TokenHashes,
        Table::Changes,
        Table::Sessions,
        Table::Schedules,
        Table::Fires,
        Table::RunEnds,
        Table::WaitingFires,
        Table::Joins,
        Table::StartKeys,
        Table::Queue,
        Table::Idle,
        Table::Clusters,
        Table::UsageEntries,
        Table::Ledger,
    ];

    /// The table's name in every backend: a redb table, an etcd key prefix.
    pub fn name(self) -> &'static str {
        match self {
            Table::Meta => "meta",
            Table::Namespaces => "namespaces",
            Table::Profiles => "profiles",
            Table::Preferences => "preferences",
            Table::Apps => "apps",
            Table::Runs => "runs",
            Table::Active => "active",
            Table::Resources => "resources",
            Table::Services => "services",
            Table::Events => "events",
            Table::Templates => "templates",
            Table::Operations => "operations",
            Table::Attempts => "attempts",
            Table::SecureKeys => "secure_keys",
            Table::RunIndex => "run_index",
            Table::Usage => "usage",
            Table::Servers => "servers",
            Table::Owners => "owners",
            Table::Duties => "duties",
            Table::Tokens => "tokens",
            Table::TokenHashes => "token_hashes",
            Table::Changes => "changes",
            Table::Sessions => "sessions",
            Table::Schedules => "schedules",
            Table::Fires => "fires",
            Table::RunEnds => "run_ends",
            Table::WaitingFires => "waiting_fires",
            Table::Joins => "joins",
            Table::StartKeys => "start_keys",
            Table::Queue => "queue",
            Table::Idle => "idle",
            Table::Clusters => "clusters",
            Table::UsageEntries => "usage_entries",
            Table::Ledger => "ledger",
        }
    }

    /// Whether the table says who is up now rather than what the installation holds. On etcd
    /// its keys are bound to the writing server's lease, so they go when that server does; a
    /// copy of the installation leaves them out.
    pub fn is_live(self) -> bool {
        matches!(self, Table::Servers | Table::Owners | Table::Duties)
    }

    /// Whether the record under `key` is kept sealed with the installation's key (see
    /// `store::seal`): every record whose content decides what runs where, who may do what,
    /// or what a run may spend, so that one written into the store by anyone but a server of
    /// the installation (someone who can write etcd's keys) is refused. Left out: the logs
    /// (events, audit, changes), which decide nothing; the run index, whose values only name
    /// a run record (itself sealed); and the schema version, which the backends read before
    /// any key is loaded.
    pub fn sealed(self, key: &str) -> bool {
        match self {
            Table::Meta => key != SCHEMA_KEY,
            Table::Events | Table::Attempts | Table::Changes | Table::RunIndex => false,
            Table::Namespaces
            | Table::Profiles
            | Table::Preferences
            | Table::Apps
            | Table::Runs
            | Table::Active
            | Table::Resources
            | Table::Services
            | Table::Templates
            | Table::Operations
            | Table::SecureKeys
            | Table::Usage
            | Table::Servers
            | Table::Owners
            | Table::Duties
            | Table::Tokens
            | Table::TokenHashes
            | Table::Sessions
            | Table::Schedules
            | Table::Fires
            | Table::RunEnds
            | Table::WaitingFires
            | Table::Joins
            | Table::StartKeys
            | Table::Queue
            | Table::Idle
            | Table::Clusters
            | Table::UsageEntries
            | Table::Ledger => true,
        }
    }

    /// The table named `name`.
    pub fn named(name: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// Errors of the store layer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open {store}: {message}")]
    Open { store: String, message: String },
    #[error(
        "the store at {path} is in use by another process; stop the other ebb server or choose another --data-dir"
    )]
    InUse { path: PathBuf },
    #[error(
        "{store} has schema version {found}, but this ebb understands versions up to {supported}; run a newer ebb"
    )]
    SchemaTooNew {
        store: String,
        found: u64,
        supported: u64,
    },
    #[error("storage error: {0}")]
    Storage(String),
    /// The store's server cannot be reached (etcd down or partitioned away); nothing was
    /// written. Worth retrying.
    #[error("{store} cannot be reached: {message}")]
    Unavailable { store: String, message: String },
    /// Other writers kept changing what a write read, through every retry.
    #[error("{store} is busy: a write conflicted with others {tries} times; try again")]
    Contended { store: String, tries: u32 },
    #[error("stored value {table:?}/{key} cannot be read: {message}")]
    Corrupt {
        table: Table,
        key: String,
        message: String,
    },
    #[error("the store is shut down")]
    Closed,
    /// A write for a run this server no longer owns (its lease ended and another server may
    /// have claimed the run): nothing was written, and nothing more may be done for the run.
    #[error("run {run} is no longer owned by this server")]
    Fenced { run: String },
}

impl StoreError {
    /// Whether the store could not be reached at all, so waiting may help.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}
