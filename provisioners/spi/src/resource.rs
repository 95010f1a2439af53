//! The resource half of the contract: the small, stateless calls a provisioner answers.
//!
//! The framework owns each resource's lifecycle and persists it before and after every call
//! here; a provisioner only makes one outside call per method and reports what it saw. Every
//! call may be repeated after a crash, so `find` (by the deterministic [`ResourceKey`]) is how
//! the framework learns whether an interrupted create went through.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::capacity::{ErrorKind, Placement};
use crate::{Properties, PropertyKind, PropertySpec};

/// Tag carrying the run id on every resource ebb creates.
pub const TAG_RUN: &str = "ebb:run";
/// Tag carrying the node's name within its cluster.
pub const TAG_NODE: &str = "ebb:node";

/// The retry budget property every provisioner that makes resources offers: how long one
/// resource step may keep failing with retryable errors before the operation gives up.
pub const RETRY_BUDGET: PropertySpec = PropertySpec::optional(
    "retryBudget",
    PropertyKind::Duration {
        min: Duration::ZERO,
        max: Duration::from_secs(24 * 3600),
    },
);

/// The cluster template a profile's clusters are built from: its services are installed,
/// configured and started on the nodes (`SYSTEM:<name>`, `USER:<name>` or `<name>`).
pub const TEMPLATE: PropertySpec =
    PropertySpec::optional("template", PropertyKind::Text).author_only();

/// Values over the template's default `config` for the profile's clusters (a JSON object
/// whose top-level entries replace the template's: `{"javaHome": "/opt/java"}`).
pub const TEMPLATE_CONFIG: PropertySpec = PropertySpec::optional(
    "templateConfig",
    PropertyKind::JsonObject {
        max_bytes: 16 * 1024,
    },
);

/// The services a profile's clusters run, comma-separated (`spark-master,spark-worker,
/// spark-history`): any the template allows, in place of its default services.
pub const TEMPLATE_SERVICES: PropertySpec =
    PropertySpec::optional("templateServices", PropertyKind::Text);

/// How a live cluster's checked services are healed, for every service of the template
/// (`none`, `restart` or `replace-node`); when left out, each service's own `heal` in the
/// template holds.
pub const HEAL: PropertySpec = PropertySpec::optional(
    "heal",
    PropertyKind::OneOf(&["none", "restart", "replace-node"]),
);
/// Most heals of one service on one node in one `healWindow`.
pub const HEAL_ATTEMPTS: PropertySpec =
    PropertySpec::optional("healAttempts", PropertyKind::Integer { min: 1, max: 100 });
/// The window `healAttempts` counts in.
pub const HEAL_WINDOW: PropertySpec = PropertySpec::optional(
    "healWindow",
    PropertyKind::Duration {
        min: Duration::from_secs(1),
        max: Duration::from_secs(24 * 3600),
    },
);

/// The user ebb logs in as on a node it reaches over SSH.
pub const SSH_USER: PropertySpec =
    PropertySpec::optional("sshUser", PropertyKind::Text).author_only();
/// The private key (OpenSSH or PEM text) ebb logs in with: a `${secure(name)}` reference.
pub const SSH_PRIVATE_KEY: PropertySpec = PropertySpec::secret("sshPrivateKey", PropertyKind::Text);
/// How a node's SSH host key is checked, in OpenSSH's words: `yes` (it must be listed in
/// `sshKnownHosts`), `accept-new` (the first key a node shows is pinned in its record and no
/// other is accepted later) or `no` (any key; a man in the middle goes unnoticed).
pub const SSH_HOST_KEY_CHECKING: PropertySpec = PropertySpec::optional(
    "sshHostKeyChecking",
    PropertyKind::OneOf(&["yes", "accept-new", "no"]),
)
.author_only();
/// Host keys in `known_hosts` format (`host[,host] type base64` lines; `[host]:port` for a
/// port other than 22), for `sshHostKeyChecking=yes`.
pub const SSH_KNOWN_HOSTS: PropertySpec =
    PropertySpec::optional("sshKnownHosts", PropertyKind::Text).author_only();

/// The port sshd listens on at a cloud node (default 22).
pub const SSH_PORT: PropertySpec =
    PropertySpec::optional("sshPort", PropertyKind::Integer { min: 1, max: 65535 }).author_only();

/// Fact of a node ebb reaches over SSH: `user@host:port`. Service scripts and the program of
/// a node with this fact run there, not on the server's host.
pub const FACT_SSH: &str = "ssh";
/// Fact: the SHA-256 fingerprint of the node's SSH host key, pinned at first contact.
pub const FACT_SSH_HOST_KEY: &str = "sshHostKey";
/// Fact: the node's directory for this run on its machine (relative to the login directory
/// when not absolute). Defaults to `.ebb/<run>/<node>`.
pub const FACT_REMOTE_DIR: &str = "remoteDir";
/// Fact of a node on the server's host: its directory there (a `local` sandbox).
pub const FACT_WORK_DIR: &str = "workDir";

/// The facts that steer where and how ebb reaches a node: only a provisioner (and ebb
/// itself) sets them, never a script or program on the node, whose results could otherwise
/// point ebb's SSH, with the run's key, at another host, or its scripts at another directory.
pub const RESERVED_FACTS: &[&str] = &[FACT_SSH, FACT_SSH_HOST_KEY, FACT_REMOTE_DIR, FACT_WORK_DIR];

/// `r` with the `ssh` fact (`user@address:port`, port `sshPort` or 22) when the profile sets
/// `sshUser`: a cloud node ebb then reaches over SSH to run service scripts and the program on
/// it.
pub fn with_ssh(ctx: &Context, mut r: Resource) -> Resource {
    if let (Some(user), Some(address)) = (ctx.property(SSH_USER.name), &r.address) {
        let host = if address.contains(':') {
            format!("[{address}]")
        } else {
            address.clone()
        };
        let port = ctx.property(SSH_PORT.name).unwrap_or("22");
        r.properties
            .insert(FACT_SSH.to_string(), format!("{user}@{host}:{port}"));
    }
    r
}

/// The directory of `node` of `run` on a remote machine, under `base` (`.ebb` by default).
pub fn remote_dir(base: Option<&str>, run: &str, node: &str) -> String {
    let base = base
        .map(|b| b.trim_end_matches('/'))
        .filter(|b| !b.is_empty());
    format!("{}/{run}/{node}", base.unwrap_or(".ebb"))
}

/// The budget used when a profile does not set `retryBudget`.
pub const DEFAULT_RETRY_BUDGET: Duration = Duration::from_secs(300);

/// A boxed future, so that provisioners can be used as trait objects.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, ProvisionError>> + Send + 'a>>;

/// Tag naming the ebb server that made a resource; its janitor only looks at its own.
pub const TAG_SERVER: &str = "ebb:server";
/// Tag carrying the namespace of the run.
pub const TAG_NAMESPACE: &str = "ebb:namespace";
/// Tag carrying the profile the run's cluster was made with.
pub const TAG_PROFILE: &str = "ebb:profile";

/// What every call gets: the run's effective properties (secure references resolved), the
/// server's work directory (provisioners that keep files default to a folder in it; never
/// the data directory, which holds the store and the secure key), the labels every resource
/// carries and the cluster's maximum lifetime.
///
/// Its `Debug` shows property names only: values may be secrets.
#[derive(Clone)]
pub struct Context {
    pub properties: Properties,
    pub work_dir: PathBuf,
    /// Tags the framework puts on every resource besides its key's ([`TAG_SERVER`],
    /// [`TAG_NAMESPACE`], [`TAG_PROFILE`]).
    pub labels: Tags,
    /// When the profile's `timeout` ends the cluster's life: a provisioner that can should
    /// make its resources end themselves some time after it, even if ebb is gone (a
    /// cloud-side fail-safe).
    pub deadline: Option<SystemTime>,
    /// Where a create is to put its resource (the framework's pick among the profile's zones
    /// and markets); other calls carry the default.
    pub placement: Placement,
    /// Secret values the properties hold (resolved secure references), masked by
    /// [`Context::redact`] in what is shown or kept (errors, logs), never in a value that is
    /// used (an address, a fact).
    secrets: Vec<String>,
}

impl Context {
    /// A context with no labels and no deadline.
    pub fn new(properties: Properties, work_dir: PathBuf) -> Self {
        Self {
            properties,
            work_dir,
            labels: Tags::new(),
            deadline: None,
            placement: Placement::default(),
            secrets: Vec::new(),
        }
    }

    /// This context with `properties` (secure references resolved) and the secret values
    /// they hold.
    pub fn with_resolved(mut self, properties: Properties, secrets: Vec<String>) -> Self {
        self.properties = properties;
        self.secrets = secrets;
        self
    }

    /// `text` with every secret value of the properties masked: for anything shown or kept
    /// (errors, logs, events).
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in self.secrets.iter().filter(|s| s.len() >= 4) {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "***");
            }
        }
        out
    }

    /// The value of property `name`, if set.
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties.get(name).map(String::as_str)
    }

    /// Every tag a resource with identity `key` carries: the key's and the labels.
    pub fn tags(&self, key: &ResourceKey) -> Tags {
        let mut tags = self.labels.clone();
        tags.extend(key.tags());
        tags
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("properties", &self.properties.keys().collect::<Vec<_>>())
            .field("work_dir", &self.work_dir)
            .field("labels", &self.labels)
            .field("deadline", &self.deadline)
            .field("placement", &self.placement)
            .finish()
    }
}

/// The deterministic identity of one resource: the run it belongs to and the node it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResourceKey {
    pub run: String,
    pub node: String,
    /// Which incarnation of the node: 0 for the first; each later one (a failed confirm's
    /// replacement, a replace, a name taken again after a shrink) has its own. A create for
    /// the same key and generation must not make a second resource (clouds take it into their
    /// idempotency tokens); a new generation may.
    #[serde(default)]
    pub generation: u32,
}

impl ResourceKey {
    /// The first incarnation of `node` in `run`.
    pub fn new(run: impl Into<String>, node: impl Into<String>) -> Self {
        Self {
            run: run.into(),
            node: node.into(),
            generation: 0,
        }
    }

    /// The tags a resource with this identity carries.
    pub fn tags(&self) -> Tags {
        [
            (TAG_RUN.to_string(), self.run.clone()),
            (TAG_NODE.to_string(), self.node.clone()),
        ]
        .into_iter()
        .collect()
    }

    /// Whether `tags` name this identity.
    pub fn matches(&self, tags: &Tags) -> bool {
        tags.get(TAG_RUN) == Some(&self.run) && tags.get(TAG_NODE) == Some(&self.node)
    }
}

/// Tags on a resource.
pub type Tags = BTreeMap<String, String>;

/// Where a resource is in its life, as the outside world reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ResourceState {
    /// Being created; poll again.
    Pending,
    /// Ready for use.
    Running,
    /// Being deleted; poll again.
    Deleting,
}

/// One resource as a provisioner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    /// The provider's id (an instance id, a sandbox path).
    pub id: String,
    pub state: ResourceState,
    pub tags: Tags,
    /// The address other nodes and the program reach it at.
    pub address: Option<String>,
    /// Facts to merge into the node's properties (hostname, zone, `workDir`...).
    pub properties: BTreeMap<String, String>,
}

/// A failed call: retryable (try again after a backoff) or fatal (give up the step), and of
/// which [`ErrorKind`] (a place without room, a used quota, throttling).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProvisionError {
    pub retryable: bool,
    pub message: String,
    pub kind: ErrorKind,
}

impl ProvisionError {
    /// A failure worth retrying: a network error, a lost response.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            retryable: true,
            message: message.into(),
            kind: ErrorKind::Other,
        }
    }

    /// A failure that retrying cannot fix: bad credentials, an invalid request.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            retryable: false,
            message: message.into(),
            kind: ErrorKind::Other,
        }
    }
}

/// The node names of a cluster of `count` nodes; the first is the master, where the program
/// runs.
pub fn node_names(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| match i {
            0 => "master".to_string(),
            n => format!("worker-{n}"),
        })
        .collect()
}

/// The `nodes` property as a count, `default` when unset or unreadable (validation has
/// already rejected bad values).
pub fn node_count(properties: &Properties, default: usize) -> usize {
    properties
        .get("nodes")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_master_first() {
        assert_eq!(node_names(3), ["master", "worker-1", "worker-2"]);
        assert!(node_names(0).is_empty());
    }

    #[test]
    fn a_context_masks_its_secrets_and_never_prints_values() {
        let props = crate::properties([("user", "u"), ("password", "hunter22")]);
        let ctx = Context::new(props.clone(), PathBuf::from("/tmp"))
            .with_resolved(props, vec!["hunter22".into()]);
        assert_eq!(ctx.redact("login hunter22 refused"), "login *** refused");
        let shown = format!("{ctx:?}");
        assert!(
            shown.contains("password") && !shown.contains("hunter22"),
            "{shown}"
        );
    }

    #[test]
    fn keys_match_their_own_tags_only() {
        let key = ResourceKey::new("r1", "master");
        assert!(key.matches(&key.tags()));
        let other = ResourceKey::new("r1", "worker-1");
        assert!(!key.matches(&other.tags()));
    }
}
