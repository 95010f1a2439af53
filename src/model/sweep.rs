//! The janitor's records: its settings, and what a sweep saw and did. The runtime's janitor
//! makes them, the store keeps the last sweep, the API and the CLI show them.

use serde::{Deserialize, Serialize};

/// How the janitor runs on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    /// Seconds between scheduled sweeps; `None`: no scheduled sweeps.
    pub interval: Option<u64>,
    /// Whether scheduled sweeps delete what they find (else they only report).
    pub delete: bool,
}

/// What one sweep saw and did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sweep {
    /// Epoch seconds.
    pub started: u64,
    pub finished: u64,
    /// `schedule` or `request`.
    pub trigger: String,
    /// Whether orphans were only reported.
    pub dry_run: bool,
    pub accounts: Vec<AccountSweep>,
    pub orphans: Vec<Orphan>,
}

/// One account listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountSweep {
    pub provisioner: String,
    pub account: String,
    /// The profiles (and runs) that point at it: the first [`SOURCES_SHOWN`].
    pub sources: Vec<String>,
    /// How many more point at it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_sources: usize,
    /// Resources carrying ebb's tags seen there.
    pub listed: usize,
    /// Why it could not be listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How many sources an account lists by name.
pub const SOURCES_SHOWN: usize = 20;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A resource nothing in the store accounts for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Orphan {
    pub provisioner: String,
    pub account: String,
    pub id: String,
    pub run: String,
    pub node: Option<String>,
    pub reason: String,
    /// `reported`, `deleted`, or `delete failed: ...`.
    pub action: String,
}

/// The janitor as `GET /v3/janitor` shows it: its settings and its last sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JanitorView {
    pub settings: Settings,
    pub last: Option<Sweep>,
}
