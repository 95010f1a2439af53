//! A run's history as recorded and shown: what each event is about, when, and on which node.
//! The store appends them (`store::events`); the API and the CLI read them.

use serde::{Deserialize, Serialize};

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum EventKind {
    /// The run or its cluster changed status.
    Status,
    /// A node-level task did something.
    Task,
    /// A call failed and will be retried.
    Retry,
    /// Something failed.
    Error,
    /// The program started, ended or was signalled.
    Program,
    /// A check found a service in another state, or healing began or gave up.
    Service,
}

/// One entry of a run's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunEvent {
    /// Orders events; pass the last one seen as `after` to read only newer ones.
    pub seq: u64,
    /// Epoch seconds, with milliseconds.
    pub time: f64,
    pub kind: EventKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub message: String,
    /// The token whose request caused it (a start, a stop, an operation); none for what the
    /// server did on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
}
