//! What every handler reaches (the server's state) and the helpers they share.

use actix_web::web;

use std::sync::Arc;

use serde::Deserialize;

use crate::runtime::handle::Runtime;
use crate::runtime::registry::Registry;
use crate::store::Store;

/// Each handler's view of the server.
/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Store,
    pub registry: Arc<Registry>,
    pub runtime: Runtime,
    /// Seals the data of secure keys.
    pub cipher: Arc<crate::store::secure::Cipher>,
    pub janitor: crate::runtime::janitor::Janitor,
    /// How callers are told apart: tokens, or none at all (`--no-auth`).
    pub access: Access,
    /// Host names (besides IP addresses and `localhost`) a request may be addressed to.
    pub allowed_hosts: Arc<[String]>,
    /// Sends commands for runs other servers own on to them.
    pub forwarder: reqwest::Client,
    /// Told when the server should stop (after a drain asked over the API).
    pub shutdown: Arc<tokio::sync::Notify>,
    /// The server answers over HTTPS: the UI's session cookie is marked `Secure`.
    pub https: bool,
    /// Bounds the UI's open event streams, and each token's and address's share of them.
    pub streams: crate::api::streams::Streams,
    /// Each token's bucket of UI sign-ins.
    pub sign_ins: Arc<crate::service::tokens::sessions::SignIns>,
    /// Renders the recorded metrics (`None` when this process could not install the
    /// recorder).
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
}

/// How the server tells who calls.
#[derive(Debug, Clone)]
pub enum Access {
    /// `--no-auth` (loopback binds only): every request is an instance admin's.
    Open,
    /// Bearer tokens from the store, and the fixed token `ebb serve` was given, if any.
    Tokens {
        fixed: Option<crate::service::tokens::FixedToken>,
    },
}

pub type State = web::Data<AppState>;
#[derive(Debug, Deserialize)]
pub struct ProgramPath {
    pub ns: String,
    pub app: String,
    pub program: String,
}

#[derive(Debug, Deserialize)]
pub struct RunPath {
    pub ns: String,
    pub app: String,
    pub program: String,
    pub run: String,
}

/// The path of a service's logs on a run's cluster (`.../runs/{run}/services/{service}/logs`).
#[derive(Debug, Deserialize)]
pub struct ServiceLogsPath {
    pub ns: String,
    pub app: String,
    pub program: String,
    pub run: String,
    pub service: String,
}

/// The path of one operation on a run's cluster (`.../runs/{run}/operations/{op}`).
#[derive(Debug, Deserialize)]
pub struct OperationPath {
    pub ns: String,
    pub app: String,
    pub program: String,
    pub run: String,
    pub op: String,
}

impl OperationPath {
    /// The run, and the operation's id as given.
    pub fn split(self) -> (crate::model::run::RunKey, String) {
        let key = crate::model::run::RunKey {
            namespace: self.ns,
            app: self.app,
            program: self.program,
            run: self.run,
        };
        (key, self.op)
    }
}

#[derive(Debug, Deserialize)]
pub struct AppPath {
    pub ns: String,
    pub app: String,
}
