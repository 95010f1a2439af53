//! The servers of an installation, and which of them carries each live run on.
//!
//! On the embedded store there is one server, and it owns every run. On etcd each server
//! holds a lease, kept alive while it runs, and registers under it (`Table::Servers`). A live
//! run has an owner record (`Table::Owners`) bound to its owner's lease, and every write the
//! run's actors make is fenced on it ([`crate::store::Fence`]). When a server's lease ends
//! (a crash, a partition, a long pause), etcd deletes its records; the other servers, told by
//! a watch (and every half time to live in any case), find the runs left without an owner and
//! claim them, each run first by the server it hashes to and,
//! after a time to live, by any, and resume them exactly as after a restart. A server whose
//! own lease ended abandons its runs where they are, then joins again and claims like any
//! other.

use std::collections::BTreeMap;
use std::time::Duration;

use super::deps::{Deps, Member};
use super::handle::Runtime;
use crate::model::event::EventKind;
use crate::model::run::{RUN_FORMAT, RunRecord};
use crate::model::server::{Owner, ServerRecord};
use crate::rules::claim::{self, Census, Chooser, Claim};
use crate::store::clock::{now_millis, now_secs};
use crate::store::{Read, Store, StoreError, Table};
use crate::store::{events, keys};

/// How this server takes part.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the other servers and clients reach this server's API.
    pub url: String,
    /// The time to live of its lease: how long after it stops answering its runs go to others.
    pub ttl: Duration,
}

/// Joins the installation: ends the lease of an earlier run of this server (same name), so
/// what that one owned is free at once, takes a lease and registers under it.
pub async fn join(deps: &Deps, settings: &Settings) -> Result<(), StoreError> {
    let store = &deps.store;
    let name = deps.member.name.to_string();
    let key = name.clone();
    let earlier = store
        .read(move |r| r.get::<ServerRecord>(Table::Servers, &key))
        .await?;
    if let Some(earlier) = earlier.filter(|e| e.lease != 0)
        && let Err(e) = store.end_lease(earlier.lease).await
    {
        tracing::debug!(lease = earlier.lease, error = %e, "the earlier lease was not ended");
    }
    let lease = store.take_lease(settings.ttl).await?;
    deps.member.set_ttl(settings.ttl);
    deps.member.set_lease(lease);
    // The janitor of any server takes this one's resources for the installation's.
    let tag = deps.server_name.clone();
    let now = now_secs();
    let record = ServerRecord {
        name,
        url: settings.url.clone(),
        lease,
        version: env!("CARGO_PKG_VERSION").to_string(),
        started: now,
        heartbeat: now,
        draining: deps.member.draining(),
    };
    store
        .write(move |tx| {
            if lease == 0 {
                // One server: any other record is of an earlier run under another name, and
                // it owns every live run.
                for (other, _) in tx.scan::<serde_json::Value>(Table::Servers, "")? {
                    tx.delete(Table::Servers, &other);
                }
                let owner = Owner {
                    server: record.name.clone(),
                    lease: 0,
                    since: now,
                };
                for (run, _) in tx.scan::<serde_json::Value>(Table::Active, "")? {
                    tx.put(Table::Owners, &run, &owner)?;
                }
            }
            tx.put(Table::Meta, &keys::member(&tag), &tag)?;
            tx.put(Table::Servers, &record.name, &record)
        })
        .await?;
    tracing::info!(server = %deps.member.name, lease, "joined the installation");
    Ok(())
}

/// Runs while the server does, on a store of several servers: says every half time to live
/// that this server is up, claims the runs left without an owner, and when this server's
/// lease ends abandons its runs and joins again. Returns at once on the embedded store.
pub async fn run(runtime: Runtime, settings: Settings) {
    let deps = runtime.deps().clone();
    let Some(mut lease) = deps.store.lease() else {
        return;
    };
    // The programs this server runs on its host live while it surely owns their runs.
    let member = deps.member.clone();
    tokio::spawn(super::fence::keep(
        deps.store.clone(),
        deps.member.fences.clone(),
        move || member.lease(),
    ));
    // A server's record goes with its lease, and its owner records with it: look at once.
    let Some(mut gone) = deps.store.watch_deletes(Table::Servers) else {
        return;
    };
    let mut orphaned: BTreeMap<String, u64> = BTreeMap::new();
    let mut tick = tokio::time::interval(settings.ttl / 2);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Every half time to live: a heartbeat and a look; when a server went: a look.
        let due = tokio::select! {
            _ = tick.tick() => true,
            changed = gone.changed() => {
                if changed.is_err() {
                    return;
                }
                gone.borrow_and_update();
                false
            }
            changed = lease.changed() => {
                if changed.is_err() {
                    return;
                }
                if *lease.borrow_and_update() == 0 {
                    deps.member.set_lease(0);
                    runtime.abandon_all();
                    rejoin(&deps, &settings).await;
                }
                continue;
            }
        };
        if deps.member.lease() == 0 {
            continue;
        }
        if due && let Err(e) = heartbeat(&deps).await {
            tracing::warn!(error = %e, "heartbeat not written");
        }
        if let Err(e) = claim(&runtime, &mut orphaned, settings.ttl).await {
            tracing::warn!(error = %e, "orphaned runs not claimed this time");
        }
    }
}

/// Hands this server's runs to the others (marking it draining first) and returns once it
/// owns none. A run whose program does not run on this host is let go at once: its
/// supervisor stopped where it is, its owner record deleted, so another server resumes it as
/// after a restart. A run whose program this server launched is let go once the program has
/// ended, so no run fails for the drain. Then ends the lease, so the others hear at once.
/// Does nothing on the embedded store (its one server keeps its runs, which resume when it
/// starts again).
pub async fn drain(runtime: &Runtime) -> Result<(), StoreError> {
    let deps = runtime.deps();
    if !deps.store.shared() {
        return Ok(());
    }
    deps.member.start_draining();
    heartbeat(deps).await?;
    tracing::info!(server = %deps.member.name, "draining: handing runs to the other servers");
    let mut pause = tokio::time::interval(Duration::from_millis(200));
    loop {
        pause.tick().await;
        let lease = deps.member.lease();
        if lease == 0 {
            // The lease ended: the others have the runs already.
            break;
        }
        let me = deps.member.name.to_string();
        let owned: Vec<(String, RunRecord)> = deps
            .store
            .read(move |r| {
                let mut owned = Vec::new();
                for (key, owner) in r.scan::<Owner>(Table::Owners, "")? {
                    if owner.server == me
                        && let Some(run) = r.get::<RunRecord>(Table::Runs, &key)?
                    {
                        owned.push((key, run));
                    }
                }
                Ok::<_, StoreError>(owned)
            })
            .await?;
        if owned.is_empty() {
            break;
        }
        for (key, run) in owned {
            // Launched here (or being launched) and not ended: its program is on this host.
            let launched_here =
                !run.status.is_end() && run.launcher.as_deref() == Some(&*deps.member.name);
            if launched_here {
                continue;
            }
            runtime.abandon(&run.key.run).await;
            let handed = key.clone();
            deps.store
                .fenced(&key, lease)
                .write(move |tx| {
                    tx.delete(Table::Owners, &handed);
                    Ok::<_, StoreError>(())
                })
                .await
                .or_else(|e| match e {
                    StoreError::Fenced { .. } => Ok(()),
                    e @ (StoreError::Open { .. }
                    | StoreError::InUse { .. }
                    | StoreError::SchemaTooNew { .. }
                    | StoreError::Storage(_)
                    | StoreError::Unavailable { .. }
                    | StoreError::Contended { .. }
                    | StoreError::Corrupt { .. }
                    | StoreError::Closed) => Err(e),
                })?;
            tracing::info!(run.id = %run.key.run, "run handed to the other servers");
        }
    }
    let lease = deps.member.lease();
    if lease != 0 {
        deps.store.end_lease(lease).await?;
    }
    tracing::info!(server = %deps.member.name, "drained: this server owns no run");
    Ok(())
}

/// An installation-wide duty that one server at a time performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duty {
    /// The janitor's scheduled sweeps.
    Janitor,
    /// Compacting the history of ended runs.
    Retention,
    /// Firing schedules.
    Scheduler,
    /// Starting queued runs as limits allow.
    Queue,
    /// Keeping warm pools at their size.
    Pools,
    /// Folding settled runs' usage into the usage ledger.
    Usage,
}

impl Duty {
    /// Its key in the duties' table, and its name in logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Duty::Janitor => "janitor",
            Duty::Retention => "retention",
            Duty::Scheduler => "scheduler",
            Duty::Queue => "queue",
            Duty::Pools => "pools",
            Duty::Usage => "usage",
        }
    }
}

/// Whether this server performs `duty` now: it holds the duty, or takes it because no server
/// does. The record is bound to the holder's lease, so the duty moves when the holder dies.
/// The one server of the embedded store always does.
pub async fn leads(store: &Store, member: &Member, duty: Duty) -> Result<bool, StoreError> {
    let lease = member.lease();
    if !store.shared() {
        return Ok(true);
    }
    if lease == 0 {
        return Ok(false);
    }
    let me = member.name.to_string();
    store
        .write(
            move |tx| match tx.get::<Owner>(Table::Duties, duty.name())? {
                Some(holder) => Ok(holder.server == me && holder.lease == lease),
                None => {
                    let holder = Owner {
                        server: me.clone(),
                        lease,
                        since: now_secs(),
                    };
                    tx.put(Table::Duties, duty.name(), &holder)?;
                    Ok(true)
                }
            },
        )
        .await
}

/// Gives `duty` up if this server holds it (a draining server), so another takes it at once
/// instead of when this server's lease ends.
pub async fn resign(store: &Store, member: &Member, duty: Duty) -> Result<(), StoreError> {
    if !store.shared() {
        return Ok(());
    }
    let (me, lease) = (member.name.to_string(), member.lease());
    store
        .write(move |tx| {
            if tx
                .get::<Owner>(Table::Duties, duty.name())?
                .is_some_and(|h| h.server == me && h.lease == lease)
            {
                tx.delete(Table::Duties, duty.name());
            }
            Ok(())
        })
        .await
}

/// Joins again after this server's lease ended, until it works.
async fn rejoin(deps: &Deps, settings: &Settings) {
    let mut pause = Duration::from_millis(200);
    loop {
        match join(deps, settings).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot join the installation again yet");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(settings.ttl);
            }
        }
    }
}

async fn heartbeat(deps: &Deps) -> Result<(), StoreError> {
    let name = deps.member.name.to_string();
    let lease = deps.member.lease();
    let draining = deps.member.draining();
    deps.store
        .write(move |tx| {
            let Some(mut record) = tx.get::<ServerRecord>(Table::Servers, &name)? else {
                return Ok(());
            };
            if record.lease != lease {
                return Ok(());
            }
            record.heartbeat = now_secs();
            record.draining = draining;
            tx.put(Table::Servers, &name, &record)
        })
        .await
}

async fn census(store: &Store) -> Result<Census, StoreError> {
    store
        .read(|r| {
            let active = r
                .scan::<serde_json::Value>(Table::Active, "")?
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            let owners = r.scan::<Owner>(Table::Owners, "")?.into_iter().collect();
            // A draining server takes no run.
            let servers = r
                .scan::<ServerRecord>(Table::Servers, "")?
                .into_iter()
                .filter(|(_, s)| !s.draining)
                .map(|(k, _)| k)
                .collect();
            Ok(Census {
                active,
                owners,
                servers,
            })
        })
        .await
}

/// One claim round ([`claim::claims`] chooses): the live runs without an owner this server
/// may take, and those it owns but does not supervise.
async fn claim(
    runtime: &Runtime,
    orphaned: &mut BTreeMap<String, u64>,
    ttl: Duration,
) -> Result<(), StoreError> {
    let deps = runtime.deps();
    if deps.member.draining() {
        return Ok(());
    }
    let me = deps.member.name.to_string();
    let lease = deps.member.lease();
    let census = census(&deps.store).await?;
    let chooser = Chooser {
        name: &me,
        lease,
        ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
    };
    let (claims, waiting) = claim::claims(
        &census,
        &chooser,
        |run| runtime.supervises(run),
        orphaned,
        now_millis(),
    );
    *orphaned = waiting;
    for claim in claims {
        match claim {
            Claim::Resupervise(key) => take(runtime, &key, None).await?,
            Claim::Take(key) => {
                let owner = Owner {
                    server: me.clone(),
                    lease,
                    since: now_secs(),
                };
                take(runtime, &key, Some(owner)).await?;
            }
        }
    }
    Ok(())
}

/// The provisioner whose nodes live on the making server's own host.
const LOCAL: &str = "local";

/// Whether run `run` has nodes that may exist.
fn made_nodes(r: &impl Read, run: &str) -> Result<bool, StoreError> {
    Ok(
        r.scan::<crate::model::plan::NodeRecord>(Table::Resources, &keys::of_run(run))?
            .iter()
            .any(|(_, n)| n.may_exist()),
    )
}

/// Takes run `key` on: records `claim` as its owner if given (only while it has none), then
/// starts its supervisor, which resumes it as after a restart.
async fn take(runtime: &Runtime, key: &str, claim: Option<Owner>) -> Result<(), StoreError> {
    let key = key.to_string();
    let run = runtime
        .deps()
        .store
        .write(move |tx| {
            if tx.get::<serde_json::Value>(Table::Active, &key)?.is_none() {
                return Ok(None);
            }
            let Some(run) = tx.get::<RunRecord>(Table::Runs, &key)? else {
                return Ok(None);
            };
            if run.format > RUN_FORMAT {
                // Written by a newer build (a rolling upgrade): left to a server of that build.
                return Ok(None);
            }
            if let Some(owner) = &claim {
                if tx.get::<Owner>(Table::Owners, &key)?.is_some() {
                    return Ok(None);
                }
                tx.put(Table::Owners, &key, owner)?;
                events::append(
                    tx,
                    &run.key.run,
                    EventKind::Status,
                    None,
                    format!("server {} took the run over", owner.server),
                )?;
                if run.provisioner == LOCAL && made_nodes(tx, run.cluster_id())? {
                    events::append(
                        tx,
                        &run.key.run,
                        EventKind::Status,
                        None,
                        "its local sandboxes are on the host of the server that made them, out of this server's reach: they stay there, and their nodes count as deleted",
                    )?;
                }
            }
            Ok::<_, StoreError>(Some(run))
        })
        .await?;
    if let Some(run) = run.filter(RunRecord::needs_supervisor) {
        tracing::info!(run.id = %run.key.run, "taking the run over");
        runtime.spawn(run);
    }
    Ok(())
}
