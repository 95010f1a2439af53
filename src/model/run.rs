//! Runs: one execution of a program on a cluster made for it.
//!
//! This module holds the run record (what the store keeps and the API shows) and its
//! statuses. `rules::lifecycle` decides its transitions, `service::runs` starts runs and
//! answers queries, and the actors in `runtime` drive each run through its lifecycle.

use std::collections::BTreeMap;
use std::fmt;

use ebb_spi::Properties;
use serde::{Deserialize, Serialize};

use crate::model::invalid::Invalid;
use crate::model::profile::{Keepalive, Reuse};
use crate::model::property::{EffectiveProperty, Values};
use crate::model::template::NodeTypes;
use crate::model::{names, namespace};

/// Program status, as CDAP names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ProgramStatus {
    /// Waiting in its namespace's queue for a limit to allow it (no cluster yet).
    Queued,
    /// Recorded; the supervisor has not begun.
    Pending,
    /// The cluster is being made, then the program launched.
    Starting,
    /// The program runs.
    Running,
    Completed,
    Failed,
    Killed,
    /// Refused before it began (a limit, a full queue, or too long in the queue).
    Rejected,
}

impl ProgramStatus {
    /// Whether the program can no longer change.
    pub fn is_end(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Killed | Self::Rejected
        )
    }
}

/// Cluster status, as CDAP names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ClusterStatus {
    Provisioning,
    Provisioned,
    /// Kept after the program ended, until `expiresAt`.
    Waiting,
    /// Kept after the program completed, for the next run that matches to take over (cluster
    /// reuse), until `expiresAt`.
    Idle,
    /// Taken over by a later run (`reusedBy`): this run no longer holds it.
    Reused,
    Deprovisioning,
    Deprovisioned,
    /// Deprovisioning gave up; resources may be left. Counts as active.
    Orphaned,
}

display_as_serde!(ProgramStatus, ClusterStatus, FailureKind);

/// What kind of failure ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FailureKind {
    Provisioning,
    Program,
    /// The program ran on the host of a server that died; no other server can reach it.
    #[serde(rename = "server-lost")]
    ServerLost,
    Timeout,
    Deprovisioning,
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

/// Why the program was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// `POST .../stop`.
    Requested,
    /// The profile's timeout passed.
    Timeout,
}

/// A stop asked for and not yet finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stop {
    pub reason: StopReason,
    /// Keep the cluster for `keepalive.killed` afterwards.
    pub keepalive: bool,
}

/// How a program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct Exit {
    /// The exit code, when it exited by itself.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
}

impl Exit {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exited with code {code}"),
            (None, Some(sig)) => write!(f, "was ended by signal {sig}"),
            (None, None) => write!(f, "ended without a status"),
        }
    }
}

/// Identifies a run in the store and in paths.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RunKey {
    pub namespace: String,
    pub app: String,
    pub program: String,
    pub run: String,
}

impl RunKey {
    /// Checks every part of the key, before anything is keyed, allocated or a path is made
    /// with it.
    pub fn check(&self) -> Result<(), Invalid> {
        namespace::check_name(&self.namespace)?;
        names::check("app", &self.app)?;
        names::check("program", &self.program)?;
        names::check("run", &self.run)
    }

    /// Key of the run in `Runs` and `Active`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.namespace, self.app, self.program, self.run
        )
    }

    /// Parses a key made by [`RunKey::key`].
    pub fn from_key(key: &str) -> Option<RunKey> {
        let mut parts = key.splitn(4, '/');
        Some(RunKey {
            namespace: parts.next()?.to_string(),
            app: parts.next()?.to_string(),
            program: parts.next()?.to_string(),
            run: parts.next()?.to_string(),
        })
    }
}

impl fmt::Display for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.app, self.program)?;
        write!(f, " run {}", self.run)
    }
}

/// What the program of a run is, copied at start so a redeploy does not change a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// The engine the program submits an application to (`spark`), whose id is looked for
    /// in its output while it runs; none for a plain command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

/// The engine application a run's program submitted (a Spark application): its id, as the
/// engine's own pages and tools name it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Application {
    /// `spark`.
    pub engine: String,
    /// `app-20261129083012-0000`.
    pub id: String,
}

impl Application {
    /// The Spark application id in `text` (the driver's "Connected to Spark cluster with app
    /// ID app-…" line), if it holds one.
    pub fn spark_in(text: &str) -> Option<Application> {
        const SAID: &str = "Connected to Spark cluster with app ID ";
        let at = text.find(SAID)? + SAID.len();
        let id: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(64)
            .collect();
        id.starts_with("app-").then(|| Application {
            engine: crate::model::app::SPARK.to_string(),
            id,
        })
    }
}

/// The cluster part of a run record.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterState {
    pub status: Option<ClusterStatus>,
    /// When a `WAITING` cluster will be deprovisioned.
    pub expires_at: Option<u64>,
    /// When the cluster reached `DEPROVISIONED` or `ORPHANED`.
    pub end: Option<u64>,
    /// The planned nodes, master first.
    pub nodes: Vec<String>,
    /// Set when an operation on the cluster failed and so did its rollback: the cluster is in
    /// a state nobody planned, and only a `repair` may run on it until one succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<Attention>,
    /// The cluster's id, when another run made it (reuse): its resources and services are
    /// kept under this id, and the cloud's tags carry it. `None`: the run's own id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Where the run's cluster came from, when it did not make it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// The run that took the cluster over (`REUSED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_by: Option<String>,
    /// What a run must match to take an `IDLE` cluster over ([`RunRecord::reuse_key`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse_key: Option<String>,
    /// When the cluster became IDLE, and when it stopped being so (taken over, or on its way
    /// to deprovisioning): the time it cost with no program on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_until: Option<u64>,
    /// When the cluster began WAITING after a failed or killed run, and when it stopped
    /// (on its way to deprovisioning): the keepalive's cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_since: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_until: Option<u64>,
    /// Nodes its create gave up for want of capacity anywhere (the cluster kept `minNodes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub given_up: Vec<String>,
}

impl ClusterState {
    /// The node-seconds the cluster spent IDLE while this run held it, up to `now`.
    pub fn idle_node_seconds(&self, now: u64) -> u64 {
        let Some(since) = self.idle_since else {
            return 0;
        };
        let until = self.idle_until.unwrap_or(now);
        until
            .saturating_sub(since)
            .saturating_mul(self.nodes.len() as u64)
    }
}

/// Where a run's cluster came from when the run did not make it.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema
)]
#[serde(rename_all = "camelCase")]
pub struct Origin {
    /// The run that held it before (an `IDLE` cluster it left).
    pub from: String,
    /// When the run took it over (epoch milliseconds).
    pub claimed_at: u64,
    /// How long the claim took, from the run's begin to its commit (milliseconds).
    pub claim_ms: u64,
    /// Whether the cluster was made clean and its services checked for this run.
    #[serde(default)]
    pub ready: bool,
    /// Why it could not be used, when it could not: the run deprovisions it, then makes its
    /// own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discarded: Option<String>,
    /// Whether the cluster was made ahead of demand, for the profile's pool.
    #[serde(default)]
    pub pooled: bool,
}

/// Why a cluster needs an administrator's attention.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema
)]
#[serde(rename_all = "camelCase")]
pub struct Attention {
    /// The operation that failed, its task, and how its rollback failed.
    pub reason: String,
    /// Since when (epoch seconds).
    pub since: u64,
}

/// A run as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub key: RunKey,
    pub status: ProgramStatus,
    /// When the run was requested (epoch seconds).
    pub starting: u64,
    /// When the program began running.
    pub start: Option<u64>,
    /// When the program ended.
    pub end: Option<u64>,
    /// The runtime arguments.
    pub args: Values,
    /// `SCOPE:name` of the profile used.
    pub profile: String,
    pub provisioner: String,
    /// The resolved properties, unredacted (the API redacts).
    pub profile_properties: Vec<EffectiveProperty>,
    pub keepalive: Keepalive,
    /// The profile's timeout: the cluster must be gone `timeout` seconds after `starting`.
    pub timeout: Option<u64>,
    pub launch: Launch,
    pub cluster: ClusterState,
    pub failure: Option<Failure>,
    pub stop: Option<Stop>,
    pub exit: Option<Exit>,
    /// The cluster template, copied at start, when the profile names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<crate::model::template::Template>,
    /// The services of each node, from the layout solver (empty without a template).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub layout: BTreeMap<String, std::collections::BTreeSet<String>>,
    /// Each node's hardware and image type, from the layout solver.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_types: BTreeMap<String, NodeTypes>,
    /// The cluster's config, once a `configure` operation set it (else the template's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
    /// The server that launched (or is launching) the program, recorded before it does: a
    /// program on that server's own host is out of reach of any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<String>,
    /// The schedule fire that started it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<crate::model::schedule::StartedBy>,
    /// Its stay in the admission queue, when a limit made it wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueStay>,
    /// How a failed program is tried again (the program's policy, else the profile's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::model::retry::Retry>,
    /// The program's attempts that failed and were tried again, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<ProgramAttempt>,
    /// When the next attempt is launched (epoch seconds), while the run waits out the
    /// retry's backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relaunch_at: Option<u64>,
    /// Set when the profile reuses clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<Reuse>,
    /// The engine application the program's attempt now submitted (a Spark application),
    /// once its output named it; an earlier attempt's is in its entry of `attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<Application>,
    /// A run without a program that makes a cluster ahead of demand for its profile's pool
    /// (app [`POOL_APP`], the profile's name as its program): IDLE once made.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pooled: bool,
    /// Set in the write that fixed the run's usage in the usage ledger (`store::usage`), so
    /// it is counted once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settled: bool,
    /// The [`RUN_FORMAT`] of the build that last wrote the record (0: before formats were
    /// recorded).
    #[serde(default)]
    pub format: u32,
}

/// The app of the runs a pool makes clusters with; no app may be deployed under it.
pub const POOL_APP: &str = "_pool";

/// The format of run records this build writes. During a rolling upgrade servers of two
/// builds share an installation: a server never takes over a run whose record a newer
/// format wrote, since it might misread it. 2: runs may be QUEUED, with their stay. 3: a
/// cluster may be IDLE or REUSED, and kept under another run's id.
pub const RUN_FORMAT: u32 = 3;

/// An attempt of a run's program that failed and was tried again.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgramAttempt {
    /// Its number, from 1.
    pub attempt: u32,
    /// The engine application it submitted, when its output named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<Application>,
    /// How it ended; none when it was lost with its server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<Exit>,
    pub failure: Failure,
    /// When it ended (epoch seconds).
    pub ended: u64,
}

/// A run's stay in its namespace's admission queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStay {
    /// When it was queued (epoch milliseconds).
    pub since: u64,
    /// When it is REJECTED if still queued (epoch milliseconds): the namespace's
    /// `maxQueueTime` after `since`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// The limit it waits on, in words.
    pub reason: String,
    /// When it left the queue to start (epoch milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted: Option<u64>,
}

impl RunRecord {
    /// The cluster's config: the template's default config (an empty object without one).
    pub fn config(&self) -> serde_json::Value {
        if let Some(c) = &self.config {
            return c.clone();
        }
        self.template
            .as_ref()
            .map(|t| serde_json::to_value(&t.defaults.config).unwrap_or_default())
            .filter(|c| !c.is_null())
            .unwrap_or_else(|| serde_json::json!({}))
    }

    /// The effective provisioner properties by name.
    pub fn properties(&self) -> Properties {
        crate::model::property::by_name(&self.profile_properties)
    }

    /// When the profile's timeout ends the cluster's life, if it has one.
    pub fn deadline(&self) -> Option<u64> {
        self.timeout.map(|t| self.began().saturating_add(t))
    }

    /// The number of the program's attempt now (from 1).
    pub fn attempt(&self) -> u32 {
        u32::try_from(self.attempts.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1)
    }

    /// When its cluster's life began to count (epoch seconds): when it was requested, or,
    /// for a run that waited in the queue, when it left it.
    pub fn began(&self) -> u64 {
        match self.queue.as_ref().and_then(|q| q.admitted) {
            Some(admitted) => admitted / 1000,
            None => self.starting,
        }
    }

    /// What a run must match to take over this run's cluster once it is IDLE: its namespace,
    /// profile, provisioner, resolved properties (a secret by its reference, never its value;
    /// whichever level set a value), the template, and each node's name, services and types.
    /// Runs that differ in any of them never share a cluster. `None` when the profile does
    /// not reuse clusters.
    pub fn reuse_key(&self) -> Option<String> {
        self.reuse?;
        let shape = serde_json::json!({
            "namespace": self.key.namespace,
            "profile": self.profile,
            "provisioner": self.provisioner,
            "properties": self.properties(),
            "template": self.template,
            "layout": self.layout,
            "nodeTypes": self.node_types,
            "nodes": self.cluster.nodes,
        });
        Some(sha256_hex(shape.to_string().as_bytes()))
    }

    /// The id its cluster's resources and services are kept under: the run that made it.
    pub fn cluster_id(&self) -> &str {
        self.cluster.id.as_deref().unwrap_or(&self.key.run)
    }

    /// Whether the run still holds (or may hold) a cluster.
    pub fn is_active(&self) -> bool {
        !matches!(
            self.cluster.status,
            Some(ClusterStatus::Deprovisioned | ClusterStatus::Reused)
        ) && self.status != ProgramStatus::Rejected
    }

    /// Whether a supervisor has work to do for this run.
    pub fn needs_supervisor(&self) -> bool {
        self.status != ProgramStatus::Rejected
            && !matches!(
                self.cluster.status,
                Some(
                    ClusterStatus::Deprovisioned | ClusterStatus::Orphaned | ClusterStatus::Reused
                )
            )
    }
}

impl RunError {
    /// The limit a refusal names, in words, when waiting would lift it (a program's
    /// `maxConcurrentRuns`, a namespace's `maxLiveRuns` or `maxLiveNodes`).
    pub fn limit(&self) -> Option<String> {
        match self {
            RunError::ConcurrencyLimit {
                program, active, ..
            } => Some(format!(
                "program '{program}' has {active} run(s) holding a cluster, its maximum (maxConcurrentRuns)"
            )),
            RunError::Quota {
                namespace, reason, ..
            } => Some(format!("namespace '{namespace}' is at its quota: {reason}")),
            RunError::WrongState { .. }
            | RunError::QueueFull { .. }
            | RunError::HostPrograms { .. }
            | RunError::ExpireInPast { .. }
            | RunError::ExpireBeyondTimeout { .. }
            | RunError::ExpireTooFar { .. }
            | RunError::ExtendShortens { .. }
            | RunError::BadProperty { .. }
            | RunError::NotCancellable { .. } => None,
        }
    }
}

/// A command refused because of the run's state (409), or a bad command value (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("run '{run}' cannot be {action}: {reason}")]
    WrongState {
        run: String,
        action: &'static str,
        reason: String,
    },
    #[error(
        "program '{program}' already has {active} run(s) holding a cluster, its maximum (maxConcurrentRuns); run {run} was recorded as REJECTED"
    )]
    ConcurrencyLimit {
        program: String,
        active: usize,
        run: String,
    },
    #[error(
        "namespace '{namespace}' is at its quota: {reason}; run {run} was recorded as REJECTED"
    )]
    Quota {
        namespace: String,
        reason: String,
        run: String,
    },
    #[error(
        "namespace '{namespace}' already has {max} run(s) queued, its maximum (maxQueued), and {waits_on}; run {run} was recorded as REJECTED"
    )]
    QueueFull {
        namespace: String,
        max: u32,
        /// What the run would have waited on.
        waits_on: String,
        run: String,
    },
    #[error(
        "{part} may not run programs on the server's own host (profile {profile}): {}; an instance admin must write it, or set allowHostPrograms on namespace '{namespace}'; run {run} was recorded as REJECTED",
        written(.written_by)
    )]
    HostPrograms {
        namespace: String,
        /// The part refused: `app 'x'`, `profile 'p' in namespace 'ns'`, `template 't'`.
        part: String,
        /// Who wrote it; `None` for an app (a namespace admin deployed it).
        written_by: Option<crate::model::access::Trust>,
        /// The profile and its provisioner: `SYSTEM:native, provisioner native`.
        profile: String,
        run: String,
    },
    #[error("expireAt: must be in the future (now is {now}, got {given})")]
    ExpireInPast { now: u64, given: u64 },
    #[error(
        "expireAt: the profile's timeout ends this cluster's life at {deadline}; choose a time up to then"
    )]
    ExpireBeyondTimeout { deadline: u64 },
    #[error("expireAt: must be at most ten years from now ({limit}), got {given}")]
    ExpireTooFar { limit: u64, given: u64 },
    #[error(
        "expireAt: {given} is before the cluster's deadline {current}, which would shorten its keepalive; to shorten it, ask with \"shorten\": true (ebb run extend --until T --shorten), or move it later with \"by\""
    )]
    ExtendShortens { current: u64, given: u64 },
    #[error("property '{property}': {message}")]
    BadProperty { property: String, message: String },
    #[error("operation {id} of run '{run}' cannot be cancelled: {reason}")]
    NotCancellable {
        run: String,
        id: u32,
        reason: String,
    },
}

/// The hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Who made a part of a run refused on the server's host.
fn written(by: &Option<crate::model::access::Trust>) -> String {
    match by {
        None => "it was deployed by a namespace admin".into(),
        Some(by) => format!("it was written by a {by}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_keys_round_trip() {
        let key = RunKey {
            namespace: "default".into(),
            app: "hello".into(),
            program: "main".into(),
            run: "0190-abc".into(),
        };
        assert_eq!(RunKey::from_key(&key.key()), Some(key));
    }
}
