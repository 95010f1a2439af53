//! The state of each service on each node of a live cluster: what the operations that ran its
//! actions and the checks that looked at it last said. Changed only by
//! [`rules::service`](crate::rules::service)'s transition function.

use serde::{Deserialize, Serialize};

/// What ebb last knew of a service on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ServiceState {
    /// Running, with the cluster's configuration.
    Up,
    /// Not running: installed and not yet started, stopped, or found stopped by its check.
    Down,
    /// Its last start (or install, configure, initialize) failed.
    Failed,
    /// Nobody knows: its check failed in another way or timed out, or a stop or remove failed
    /// half-way.
    Unknown,
    /// Running, but with a configuration older than the cluster's (a `configure` changed it
    /// and the service does not restart on configure).
    Outdated,
}

display_as_serde!(ServiceState);

/// What a check of a service found: its script's exit status, or its time running out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CheckOutcome {
    /// Exit 0.
    Up,
    /// Exit 3.
    Down,
    /// Any other exit, a check that could not run, or one that ran out of time.
    Unknown,
}

impl CheckOutcome {
    /// The outcome of a check script that exited with `code` (`None`: killed, or out of time).
    pub fn of_exit(code: Option<i32>) -> CheckOutcome {
        match code {
            Some(0) => CheckOutcome::Up,
            Some(3) => CheckOutcome::Down,
            _ => CheckOutcome::Unknown,
        }
    }
}

/// A service's state on a node as the store keeps it, by `<run>/<node>/<service>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceRecord {
    pub node: String,
    pub service: String,
    pub state: ServiceState,
    /// When it entered `state` (epoch milliseconds).
    pub since_ms: u64,
    /// What put it there: the operation and action, or the check.
    pub reason: String,
    /// Set when a check found it in this state; an operation's action clears it. A service an
    /// operation stopped is down on purpose and is not healed; one a check found down is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub found: bool,
}
