//! The messages of plugin protocol 1, as they travel: one JSON object per line.
//!
//! ebb writes a request to the plugin's stdin and reads one answer from its stdout, carrying
//! the request's `call` number; stdout carries nothing else (a plugin logs to stderr). The
//! full contract, for plugin authors, is `docs/src/plugins/protocol.md`.

use std::collections::BTreeMap;

use ebb_spi::{Properties, ResourceKey, ResourceState, Tags};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The largest message either side may send, in bytes: a `list` of thousands of resources
/// fits; a runaway plugin is cut off here.
pub const MAX_MESSAGE: usize = 16 << 20;

/// A request to the plugin.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Request<'a> {
    /// Numbers the request; the answer carries it back.
    pub call: u64,
    pub method: Method,
    /// The run's view of the world (every method but `hello`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextMessage<'a>>,
    /// `create`, `find`: the resource's deterministic identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<&'a ResourceKey>,
    /// `create`: every tag the resource must carry (the key's and the framework's labels).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Tags>,
    /// `create`: the idempotency token. The same token must never make a second resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// `describe`, `delete`: the provider's id of the resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    /// `lookup`: the run whose cluster's resources are asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<&'a str>,
    /// `hello`: the protocol ebb speaks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u32>,
    /// `run` (automators): the service action to run, with its template fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<Value>,
    /// `run`: the node it runs on (its address, facts, and how to reach it over SSH).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<Value>,
    /// `run`: the cluster (the run, its config, every node and its services).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Value>,
    /// `run`: how many seconds the call may take before ebb kills the plugin's process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

impl<'a> Request<'a> {
    pub fn new(method: Method) -> Self {
        Self {
            call: 0,
            method,
            context: None,
            key: None,
            tags: None,
            token: None,
            id: None,
            run: None,
            protocol: None,
            action: None,
            node: None,
            cluster: None,
            timeout: None,
        }
    }
}

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Method {
    Hello,
    Validate,
    Create,
    Find,
    Describe,
    Delete,
    List,
    /// Every live resource of one cluster, in one call (a plugin whose descriptor says
    /// `lookups`).
    Lookup,
    /// An automator's one method: run a service action on a node.
    Run,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Hello => "hello",
            Method::Validate => "validate",
            Method::Create => "create",
            Method::Find => "find",
            Method::Describe => "describe",
            Method::Delete => "delete",
            Method::List => "list",
            Method::Lookup => "lookup",
            Method::Run => "run",
        }
    }
}

/// What every call but `hello` carries about the run.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextMessage<'a> {
    /// The profile's resolved properties, secrets included: they travel only here.
    pub properties: &'a Properties,
    /// A directory the plugin may keep files in (its own, under the server's work dir).
    pub work_dir: String,
    /// The tags every resource carries besides its key's.
    pub labels: &'a Tags,
    /// When the cluster's maximum lifetime ends (epoch seconds), for a cloud-side fail-safe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
}

/// An answer from the plugin: `result` or `error`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    pub call: u64,
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default)]
    pub error: Option<ErrorMessage>,
}

/// A failed call, as the plugin reports it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorMessage {
    pub message: String,
    /// Whether trying again may help (throttling, a lost connection, a resource not ready).
    #[serde(default)]
    pub retryable: bool,
    /// `validate`: the property at fault.
    #[serde(default)]
    pub property: Option<String>,
    /// What kind of failure it is, when the plugin knows: `capacity` (the zone asked for has
    /// no room: ebb tries the next place), `capacity-region` (no zone of the region has),
    /// `quota` (fatal) or `throttled` (ebb slows down; `retryAfter` seconds when given).
    #[serde(default)]
    pub kind: Option<ErrorCode>,
    #[serde(default, rename = "retryAfter")]
    pub retry_after: Option<f64>,
}

/// [`ErrorMessage::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    Capacity,
    CapacityRegion,
    Quota,
    Throttled,
}

impl ErrorMessage {
    /// The kind as the SPI has it (a `retryAfter` bounded to an hour).
    pub fn kind(&self) -> ebb_spi::ErrorKind {
        use ebb_spi::{CapacityScope, ErrorKind};
        match self.kind {
            None => ErrorKind::Other,
            Some(ErrorCode::Capacity) => ErrorKind::Capacity(CapacityScope::Zone),
            Some(ErrorCode::CapacityRegion) => ErrorKind::Capacity(CapacityScope::Region),
            Some(ErrorCode::Quota) => ErrorKind::Quota,
            Some(ErrorCode::Throttled) => ErrorKind::Throttled(
                self.retry_after
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(|s| std::time::Duration::from_secs_f64(s.min(3600.0))),
            ),
        }
    }
}

/// `run`'s answer: facts for the node, and what the action printed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunResult {
    #[serde(default)]
    pub facts: BTreeMap<String, String>,
    #[serde(default)]
    pub output: String,
}

/// `hello`'s answer (its `version` is the plugin's own, for its logs; the descriptor's is
/// the one ebb shows).
#[derive(Debug, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    pub name: String,
}

/// A resource as a plugin reports it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceMessage {
    pub id: String,
    pub state: ResourceState,
    #[serde(default)]
    pub tags: Tags,
    #[serde(default)]
    pub address: Option<String>,
    /// Facts merged into the node's properties.
    #[serde(default)]
    pub facts: BTreeMap<String, String>,
}

/// The most tags or facts one resource may carry, and the longest of each.
pub const MAX_ENTRIES: usize = 128;
pub const MAX_VALUE: usize = 4096;

impl ResourceMessage {
    /// The resource, once its sizes are checked.
    pub fn into_resource(self) -> Result<ebb_spi::Resource, String> {
        if self.id.is_empty() || self.id.len() > 256 {
            return Err("a resource id must be 1 to 256 characters".into());
        }
        for (what, map) in [("tags", &self.tags), ("facts", &self.facts)] {
            if map.len() > MAX_ENTRIES {
                return Err(format!("a resource has more than {MAX_ENTRIES} {what}"));
            }
            if map
                .iter()
                .any(|(k, v)| k.is_empty() || k.len() > 256 || v.len() > MAX_VALUE)
            {
                return Err(format!(
                    "a resource's {what} have a name or value out of bounds"
                ));
            }
        }
        if self.address.as_ref().is_some_and(|a| a.len() > 256) {
            return Err("a resource address must be at most 256 characters".into());
        }
        Ok(ebb_spi::Resource {
            id: self.id,
            state: self.state,
            tags: self.tags,
            address: self.address,
            properties: self.facts,
        })
    }
}
