//! The runtime's handle: spawns a supervisor per live run and routes commands to it.

use crate::model::access::Act;
use actix::prelude::*;

use super::deps::Deps;
use super::supervisor::{self, CancelCommand, ClusterCommand, Command, RunSupervisor, Supervisors};
use super::transition;
use crate::model::run::{RunError, RunKey, RunRecord};
use crate::model::server::{Owner, ServerRecord};
use crate::rules::lifecycle::Event;
use crate::rules::resize::Change;
use crate::runtime::error::RuntimeError;
use crate::store::{Read, Store, StoreError, Table};

/// A handle on the runtime: spawns supervisors and routes commands to them.
#[derive(Debug, Clone)]
pub struct Runtime {
    deps: Deps,
    arbiter: ArbiterHandle,
    supervisors: Supervisors,
}

impl Runtime {
    /// A runtime whose actors live on `arbiter`.
    pub fn new(deps: Deps, arbiter: ArbiterHandle) -> Self {
        Self {
            deps,
            arbiter,
            supervisors: Supervisors::default(),
        }
    }

    pub fn deps(&self) -> &Deps {
        &self.deps
    }

    /// The store as a request sees it: failing soon when the store cannot be reached, where
    /// the runtime's own store waits until it is back.
    pub fn store(&self) -> Store {
        self.deps.store.impatient()
    }

    /// Starts the supervisor of `run`.
    ///
    /// On a store shared by several servers every write its actors make is fenced on the lease
    /// this server holds now, under which it owns the run.
    pub fn spawn(&self, run: RunRecord) {
        let id = run.key.run.clone();
        let mut deps = self.deps.clone();
        let lease = deps.member.lease();
        if lease != 0 {
            deps.store = deps.store.fenced(&run.key.key(), lease);
        }
        let live = self.supervisors.clone();
        let started = self.supervisors.start_once(id.clone(), || {
            RunSupervisor::start_in_arbiter(&self.arbiter, move |_| {
                RunSupervisor::new(deps, live, run)
            })
        });
        if !started {
            tracing::debug!(run.id = %id, "the run has a supervisor already");
        }
    }

    /// Run `run`'s IDLE cluster was taken over: its supervisor here (if any) stops.
    pub fn taken_over(&self, run: &str) {
        if let Some(addr) = self.supervisors.get(run) {
            addr.do_send(supervisor::TakenOver);
        }
    }

    /// Whether this server runs a supervisor for run `run` (its id).
    pub fn supervises(&self, run: &str) -> bool {
        self.supervisors.get(run).is_some()
    }

    /// Stops run `run`'s supervisor where it is, and waits until it has stopped: another
    /// server carries the run on.
    pub async fn abandon(&self, run: &str) {
        if let Some(addr) = self.supervisors.get(run) {
            let _ = addr.send(supervisor::Abandon).await;
            while self.supervisors.get(run).is_some() {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }

    /// Stops every supervisor where it is: this server lost the lease it owned their runs
    /// under.
    pub fn abandon_all(&self) {
        for addr in self.supervisors.all() {
            addr.do_send(supervisor::Abandon);
        }
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
        change: Change,
        act: Act,
    ) -> Result<u32, RuntimeError> {
        self.store().reachable().await?;
        let addr = self.supervisors.get(&run.key.run);
        let refused = || RunError::WrongState {
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
            self.owned_here(run).await?;
            return Err(refused().into());
        };
        match addr.send(ClusterCommand(change, act)).await {
            Ok(answer) => answer,
            Err(_) => Err(refused().into()),
        }
    }

    /// An operator cancels operation `id` on `run`'s cluster: recorded, then its tasks stop
    /// and what it did is rolled back.
    pub async fn cancel_operation(
        &self,
        run: &RunRecord,
        id: u32,
        act: Act,
    ) -> Result<(), RuntimeError> {
        self.store().reachable().await?;
        let not_running = || RunError::NotCancellable {
            run: run.key.run.clone(),
            id,
            reason: "it is not running".into(),
        };
        let Some(addr) = self.supervisors.get(&run.key.run) else {
            self.owned_here(run).await?;
            return Err(not_running().into());
        };
        match addr.send(CancelCommand(id, act)).await {
            Ok(answer) => answer,
            Err(_) => Err(not_running().into()),
        }
    }

    /// Run `key`'s owner and the owner's server record.
    async fn owner(
        &self,
        key: &RunKey,
    ) -> Result<(Option<Owner>, Option<ServerRecord>), StoreError> {
        let key = key.key();
        self.store()
            .read(move |r| {
                let owner = r.get::<Owner>(Table::Owners, &key)?;
                let server = match &owner {
                    Some(o) => r.get::<ServerRecord>(Table::Servers, &o.server)?,
                    None => None,
                };
                Ok::<_, StoreError>((owner, server))
            })
            .await
    }

    /// The server a command for run `key` must go to, with the URL it is reached at, when
    /// another server owns the run; `None` when it is this server's to take (it supervises
    /// the run, the store is its own, or no other server owns it): the command's own checks
    /// then answer.
    pub async fn owned_elsewhere(
        &self,
        key: &RunKey,
    ) -> Result<Option<(String, String)>, StoreError> {
        self.held_elsewhere(key, false).await
    }

    /// The server that holds run `key`'s program output, with its URL, when that is another
    /// live server: the run's owner while it has one, else the server that launched the
    /// program. `None`: this server's own copy is the one to read (a store of one server,
    /// a run it supervises or launched, or one whose holder is gone).
    pub async fn output_elsewhere(
        &self,
        key: &RunKey,
    ) -> Result<Option<(String, String)>, StoreError> {
        self.held_elsewhere(key, true).await
    }

    /// The other server that holds run `key` (its owner; with `or_launcher`, else the server
    /// that launched its program), and the URL it is reached at.
    async fn held_elsewhere(
        &self,
        key: &RunKey,
        or_launcher: bool,
    ) -> Result<Option<(String, String)>, StoreError> {
        if !self.deps.store.shared() || self.supervises(&key.run) {
            return Ok(None);
        }
        let (run_key, me) = (key.key(), self.deps.member.name.to_string());
        self.store()
            .read(move |r| {
                let holder = match r.get::<Owner>(Table::Owners, &run_key)? {
                    Some(owner) => Some(owner.server),
                    None if or_launcher => r
                        .get::<RunRecord>(Table::Runs, &run_key)?
                        .and_then(|run| run.launcher),
                    None => None,
                };
                let Some(holder) = holder.filter(|h| **h != *me) else {
                    return Ok(None);
                };
                Ok(r.get::<ServerRecord>(Table::Servers, &holder)?
                    .filter(|s| !s.url.is_empty())
                    .map(|s| (holder, s.url)))
            })
            .await
    }

    /// Whether this server may change `run`, which it does not supervise: not when another
    /// server owns it ([`RuntimeError::Elsewhere`]), nor while a live run on a shared store
    /// waits for a new owner.
    async fn owned_here(&self, run: &RunRecord) -> Result<(), RuntimeError> {
        match self.owner(&run.key).await? {
            (Some(owner), server) if *owner.server != *self.deps.member.name => {
                Err(RuntimeError::Elsewhere {
                    run: run.key.run.clone(),
                    url: server.map(|s| s.url).unwrap_or_default(),
                    server: owner.server,
                })
            }
            (None, _) if run.is_active() && self.deps.store.shared() => {
                Err(RuntimeError::Unowned(run.key.run.clone()))
            }
            _ => Ok(()),
        }
    }

    /// Sends a command (`Stop`, `Deprovision`, `Extend`, `ForceDeprovision`) to run `key`.
    /// A run without a supervisor (ended or orphaned) is changed here directly.
    ///
    /// When the store cannot be reached the command fails soon, before a supervisor takes it:
    /// a supervisor writes patiently and would hold the request until the store is back.
    pub async fn command(
        &self,
        key: RunKey,
        event: Event,
        act: Act,
    ) -> Result<RunRecord, RuntimeError> {
        self.store().reachable().await?;
        let addr = self.supervisors.get(&key.run);
        if let Some(addr) = addr
            && let Ok(answer) = addr.send(Command(event.clone(), act.clone())).await
        {
            return answer;
        }
        let store_key = key.key();
        let run: RunRecord = self
            .store()
            .read(move |r| r.get(Table::Runs, &store_key))
            .await?
            .ok_or_else(|| RuntimeError::RunNotFound(key.run.clone()))?;
        // A queued run has no owner yet: any server changes it, in a write that makes sure
        // it is still queued. One that left the queue meanwhile has an owner to ask.
        if run.status == crate::model::run::ProgramStatus::Queued {
            let deps = Deps {
                store: self.store(),
                ..self.deps.clone()
            };
            if let Some(run) = transition::withdraw(&deps, &key, event.clone(), &act).await? {
                return Ok(run);
            }
            return Box::pin(self.command(key, event, act)).await;
        }
        self.owned_here(&run).await?;
        let deps = Deps {
            store: self.store(),
            ..self.deps.clone()
        };
        transition::apply(&deps, &run, event, &act).await
    }
}
