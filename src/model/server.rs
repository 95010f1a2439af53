//! The servers of an installation and the runs each owns.

use serde::{Deserialize, Serialize};

/// A server that is up, as it registers itself (`Table::Servers`, by name).
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerRecord {
    pub name: String,
    /// Where the other servers (and clients) reach its API.
    pub url: String,
    /// Its etcd lease (0 on the embedded store, which has one server).
    pub lease: i64,
    /// The ebb version it runs.
    pub version: String,
    /// When it joined, and when it last said it is up (epoch seconds).
    pub started: u64,
    pub heartbeat: u64,
    /// Handing its runs to the others before it stops: it takes no new run.
    #[serde(default)]
    pub draining: bool,
}

/// Who carries a live run on (`Table::Owners`, by the run's key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    pub server: String,
    /// The lease the server claimed the run under: its writes for the run are fenced on it.
    pub lease: i64,
    /// When it took the run (epoch seconds).
    pub since: u64,
}

/// A server as the API shows it: its record and how many runs it owns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerView {
    #[serde(flatten)]
    pub record: ServerRecord,
    pub runs: usize,
}
