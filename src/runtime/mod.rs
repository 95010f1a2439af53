//! The runtime: the actors that drive runs, on their own arbiter (thread).
//!
//! - [`supervisor`]: one `RunSupervisor` per live run, the only writer of its record; it also
//!   keeps the run's deadline (keepalive expiry, profile timeout) as a timer re-armed from the
//!   record, so deadlines survive restarts.
//! - [`planner`]: one `Planner` per cluster operation, running the plan's tasks.
//! - [`task`]: one `TaskRunner` per node-level task, persisting the resource state around
//!   every outside call.
//! - [`program`]: launching the program detached, re-attaching after a restart.
//! - [`remote`]: the same, and service scripts, on nodes reached over SSH.
//!
//! The runtime never decides a transition itself; `rules::lifecycle` and `rules::plan` do. It never
//! touches HTTP.

pub mod automator;
pub mod confine;
pub mod error;
pub mod janitor;
pub mod native;
pub mod planner;
pub mod program;
pub mod registry;
pub mod remote;
pub mod supervisor;
pub mod task;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use actix::prelude::*;

use crate::model::run::{RunKey, RunRecord};
use crate::model::time;
use crate::rules::lifecycle::{self, Event};
use crate::runtime::error::RuntimeError;
use crate::runtime::registry::Registry;
use crate::store::events::Notifier;
use crate::store::{Read, Store, StoreError, Table};
use supervisor::{ClusterCommand, Command, RunSupervisor};

/// What the actors share.
#[derive(Debug, Clone)]
pub struct Deps {
    pub store: Store,
    pub registry: Arc<Registry>,
    pub data_dir: PathBuf,
    /// Where programs and provisioners work (programs' working directories, `local`
    /// sandboxes, the `sim` cloud): apart from the store and the secure key.
    pub work_dir: PathBuf,
    pub notifier: Notifier,
    /// The `ebb` executable, which also serves as the program launcher (`ebb shim`).
    pub exe: PathBuf,
    /// This server's name, tagged on every resource it makes ([`ebb_spi::TAG_SERVER`]): its
    /// janitor only touches resources carrying it.
    pub server_name: String,
    /// Opens the secure store, to resolve `${secure(name)}` properties.
    pub cipher: Arc<crate::store::secure::Cipher>,
}

impl Deps {
    /// Where run `run` keeps its program's files (launch, exit status, logs, cluster.json).
    pub fn run_dir(&self, run: &str) -> PathBuf {
        self.data_dir.join("runs").join(run)
    }

    /// The working directory of run `run`'s program when no node gives it one.
    pub fn program_dir(&self, run: &str) -> PathBuf {
        self.work_dir.join("runs").join(run).join("program")
    }

    /// The working directory of service scripts on `node` of run `run` when the node gives
    /// none.
    pub fn node_work_dir(&self, run: &str, node: &str) -> PathBuf {
        self.work_dir
            .join("runs")
            .join(run)
            .join("nodes")
            .join(node)
    }
}

/// A handle on the runtime: spawns supervisors and routes commands to them.
#[derive(Debug, Clone)]
pub struct Runtime {
    deps: Deps,
    arbiter: ArbiterHandle,
    supervisors: Arc<Mutex<HashMap<String, Addr<RunSupervisor>>>>,
}

impl Runtime {
    /// A runtime whose actors live on `arbiter`.
    pub fn new(deps: Deps, arbiter: ArbiterHandle) -> Self {
        Self {
            deps,
            arbiter,
            supervisors: Arc::default(),
        }
    }

    pub fn deps(&self) -> &Deps {
        &self.deps
    }

    fn supervisors(&self) -> std::sync::MutexGuard<'_, HashMap<String, Addr<RunSupervisor>>> {
        self.supervisors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the supervisor of `run`.
    pub fn spawn(&self, run: RunRecord) {
        let id = run.key.run.clone();
        let (deps, runtime) = (self.deps.clone(), self.clone());
        let addr = RunSupervisor::start_in_arbiter(&self.arbiter, move |_| {
            RunSupervisor::new(deps, runtime, run)
        });
        self.supervisors().insert(id, addr);
    }

    /// Called by a supervisor when it stops.
    pub(crate) fn forget(&self, run: &str) {
        self.supervisors().remove(run);
    }

    /// Starts a supervisor for every run the store says is live. Returns how many.
    pub async fn resume(&self) -> Result<usize, StoreError> {
        let runs: Vec<RunRecord> = self
            .deps
            .store
            .read(|r| {
                let mut runs = Vec::new();
                for (key, _) in r.scan::<serde_json::Value>(Table::Active, "")? {
                    if let Some(run) = r.get::<RunRecord>(Table::Runs, &key)? {
                        runs.push(run);
                    }
                }
                Ok::<_, StoreError>(runs)
            })
            .await?;
        let live: Vec<RunRecord> = runs
            .into_iter()
            .filter(RunRecord::needs_supervisor)
            .collect();
        let count = live.len();
        for run in live {
            self.spawn(run);
        }
        Ok(count)
    }

    /// Starts an admin's operation on run `key`'s cluster; returns the operation's id. A run
    /// without a supervisor has no cluster to work on.
    pub async fn cluster(
        &self,
        run: &RunRecord,
        change: crate::rules::resize::Change,
    ) -> Result<u32, RuntimeError> {
        let addr = self.supervisors().get(&run.key.run).cloned();
        let refused = || crate::model::run::RunError::WrongState {
            run: run.key.run.clone(),
            action: "changed",
            reason: format!(
                "its cluster is {}; operations need a PROVISIONED or WAITING cluster",
                run.cluster
                    .status
                    .map_or("not started".to_string(), |s| s.to_string())
            ),
        };
        let Some(addr) = addr else {
            return Err(refused().into());
        };
        match addr.send(ClusterCommand(change)).await {
            Ok(answer) => answer,
            Err(_) => Err(refused().into()),
        }
    }

    /// Sends a command (`Stop`, `Deprovision`, `Extend`, `ForceDeprovision`) to run `key`.
    /// A run without a supervisor (ended or orphaned) is changed here directly.
    pub async fn command(&self, key: RunKey, event: Event) -> Result<RunRecord, RuntimeError> {
        let addr = self.supervisors().get(&key.run).cloned();
        if let Some(addr) = addr
            && let Ok(answer) = addr.send(Command(event.clone())).await
        {
            return answer;
        }
        let store_key = key.key();
        let run: RunRecord = self
            .deps
            .store
            .read(move |r| r.get(Table::Runs, &store_key))
            .await?
            .ok_or_else(|| RuntimeError::RunNotFound(key.run.clone()))?;
        let leftovers = event == Event::ForceDeprovision;
        let t = lifecycle::on(&run, event, time::now_secs())?;
        supervisor::persist(&self.deps, &t, leftovers).await?;
        Ok(t.run)
    }
}
