//! Cluster reuse for a run's supervisor: taking over an IDLE cluster that matches the run
//! ([`claim`]), and making it ready for the run ([`prepare`]): what the last run's program
//! left on each node is removed, every service with a reset is reset (its last
//! applications and their files gone) and every service with a check is checked once.
//!
//! What a program left: before the first program runs on a cluster that runs reuse, the
//! entries of each node's directory are recorded ([`record_entries`]: what the services made);
//! when another run takes the cluster over, every other entry is removed, with the
//! programs' own directories. (The processes a program left are stopped when it ends, by its
//! launcher: `runtime::program`.)
//!
//! The claim is one store write ([`rules::reuse::claim`](crate::rules::reuse::claim)) that
//! commits both runs' transitions, so two runs racing for one cluster, on one server or on
//! several, never both get it: the loser's write conflicts, is retried, and finds the cluster
//! REUSED.

use std::sync::Arc;
use std::time::Duration;

use super::deps::Deps;
use super::on_node::On;
use super::transition;
use crate::model::plan::{NodeRecord, ResourceStatus};
use crate::model::run::RunRecord;
use crate::model::service::CheckOutcome;
use crate::rules::lifecycle::Transition;
use crate::rules::reuse::{self, Refusal};
use crate::store::clock;
use crate::store::{Read, StoreError, Table};

/// The most IDLE clusters one start tries to take over before it makes its own.
const MAX_TRIES: usize = 8;

/// Where the programs of runs of a profile that reuses clusters work, under their master's
/// node directory: each in `runs/<run id>`. Removed on every node before the next run takes
/// the cluster over.
pub const RUNS_DIR: &str = "runs";

/// The directory run `run`'s program works in under node directory `node_dir`, when its
/// profile reuses clusters.
pub fn program_dir(node_dir: &str, run: &str) -> String {
    format!("{}/{RUNS_DIR}/{run}", node_dir.trim_end_matches('/'))
}

/// What a claim did.
#[derive(Debug)]
pub struct Claimed {
    /// The run that left the cluster (its id).
    pub from: String,
    /// The taker's transition, committed.
    pub transition: Transition,
}

/// Takes over an IDLE cluster that matches PENDING run `run`, if there is one; `begun_ms` is
/// when the run began looking. `None`: the run makes its own.
pub async fn claim(
    deps: &Deps,
    run: &RunRecord,
    begun_ms: u64,
) -> Result<Option<Claimed>, StoreError> {
    if run.reuse.is_none() {
        return Ok(None);
    }
    let key = run.key.key();
    let won = deps
        .store
        .write(move |tx| {
            let Some(taker) = tx.get::<RunRecord>(Table::Runs, &key)? else {
                return Ok(None);
            };
            let Some((left, claim)) = find(tx, &taker, begun_ms)? else {
                return Ok(None);
            };
            commit(tx, &left, &taker, &claim)?;
            Ok::<_, StoreError>(Some((left, taker, claim)))
        })
        .await?;
    let Some((left, taker, claim)) = won else {
        return Ok(None);
    };
    announce(deps, (&left, &taker), &claim);
    Ok(Some(Claimed {
        from: left.key.run.clone(),
        transition: claim.taker,
    }))
}

/// The IDLE cluster PENDING run `taker` may take over now, read in `tx`: the run that left it
/// and the claim. `None` when no cluster matches (or every match is being taken).
pub fn find(
    tx: &impl Read,
    taker: &RunRecord,
    begun_ms: u64,
) -> Result<Option<(RunRecord, reuse::Claim)>, StoreError> {
    let Some(reuse_key) = taker.reuse_key() else {
        return Ok(None);
    };
    let offered = crate::store::idle::offered(tx, &taker.key.namespace, &reuse_key)?;
    for left_key in offered.into_iter().take(MAX_TRIES) {
        let Some(left) = tx.get::<RunRecord>(Table::Runs, &left_key)? else {
            continue;
        };
        match reuse::claim(&left, taker, clock::now_millis(), begun_ms) {
            Ok(claim) => return Ok(Some((left, claim))),
            Err(Refusal::NotIdle | Refusal::Expiring | Refusal::Mismatch | Refusal::NotPending) => {
            }
        }
    }
    Ok(None)
}

/// Writes claim `claim` of `left`'s cluster by `taker` (as stored before it) in `tx`.
pub fn commit(
    tx: &mut crate::store::Txn<'_>,
    left: &RunRecord,
    taker: &RunRecord,
    claim: &reuse::Claim,
) -> Result<(), StoreError> {
    transition::write(tx, left, &claim.left, None)?;
    transition::write(tx, taker, &claim.taker, None)?;
    crate::store::idle::hold(tx, left.cluster_id(), &claim.taker.run)
}

/// After claim `claim` of `left`'s cluster by `taker` committed: their news, the counts, and
/// the left run's supervisor on this server told to stop.
pub fn announce(deps: &Deps, (left, taker): (&RunRecord, &RunRecord), claim: &reuse::Claim) {
    deps.notifier.notify(&left.key.run);
    deps.notifier.notify(&taker.key.run);
    transition::count(left, &claim.left.run);
    transition::count(taker, &claim.taker.run);
    counted(claim.taker.run.cluster.origin.as_ref());
}

/// Counts a start on a reusing profile: a hit (with how long its claim took) or a miss.
pub fn counted(origin: Option<&crate::model::run::Origin>) {
    use crate::model::metrics::{CLUSTER_REUSE, CLUSTER_REUSE_SECONDS};
    match origin {
        Some(origin) => {
            metrics::counter!(CLUSTER_REUSE.name, "result" => "hit").increment(1);
            metrics::histogram!(CLUSTER_REUSE_SECONDS.name).record(origin.claim_ms as f64 / 1000.0);
        }
        None => metrics::counter!(CLUSTER_REUSE.name, "result" => "miss").increment(1),
    }
}

/// Why IDLE run `run`'s cluster is no longer wanted, if it is not: its profile is gone or
/// DISABLED (its pool drains), or its pool holds more IDLE clusters than its `max` and this
/// one is among the soonest to expire.
pub async fn unwanted(deps: &Deps, run: &RunRecord) -> Result<Option<String>, StoreError> {
    let Ok(id) = crate::model::profile::ProfileId::parse_scoped(&run.key.namespace, &run.profile)
    else {
        return Ok(None);
    };
    let (reuse_key, me) = (run.cluster.reuse_key.clone(), run.key.key());
    deps.store
        .read(move |r| {
            use crate::model::profile::{ProfileStatus, StoredProfile};
            let Some(stored) = r.get::<StoredProfile>(Table::Profiles, &id.key())? else {
                return Ok(Some(format!("its profile {id} was deleted")));
            };
            if stored.profile.status == ProfileStatus::Disabled {
                return Ok(Some(format!(
                    "its profile {id} is DISABLED: its IDLE clusters are deprovisioned"
                )));
            }
            let (Some(pool), Some(reuse_key)) = (stored.profile.pool, reuse_key.as_deref()) else {
                return Ok(None);
            };
            let offered = crate::store::idle::offered(r, &id.namespace, reuse_key)?;
            if offered.len() <= pool.max as usize {
                return Ok(None);
            }
            let mut idle: Vec<(Option<u64>, String)> = Vec::new();
            for key in offered {
                if let Some(run) = r.get::<RunRecord>(Table::Runs, &key)? {
                    idle.push((run.cluster.expires_at, key));
                }
            }
            idle.sort();
            let extra = idle.len().saturating_sub(pool.max as usize);
            Ok(idle[..extra].iter().any(|(_, k)| *k == me).then(|| {
                format!(
                    "the pool of {id} holds more than its max of {} IDLE clusters",
                    pool.max
                )
            }))
        })
        .await
}

/// How long the clean-up of one node may take.
const CLEAN_TIMEOUT: Duration = Duration::from_secs(60);

/// Makes the cluster `run` took over ready for it: the directories the last runs' programs
/// left are removed on every node, then every service with a check is checked once, under its own
/// time limit. Why it is not ready, if it is not.
pub async fn prepare(
    deps: &Deps,
    run: &RunRecord,
    context: ebb_spi::Context,
) -> Result<(), String> {
    let context =
        match super::planner::resolve_context(deps, &run.key.namespace, Arc::new(context)).await {
            Ok(Ok(c)) => c,
            Ok(Err(why)) => return Err(why),
            Err(e) => return Err(format!("cannot read the store: {e}")),
        };
    let nodes = cluster_nodes(deps, run).await?;
    for name in &run.cluster.nodes {
        let Some(node) = nodes.iter().find(|n| &n.node == name) else {
            return Err(format!("node {name} has no record"));
        };
        if node.status != ResourceStatus::Created {
            return Err(format!("node {name} is {:?}", node.status));
        }
        tokio::time::timeout(CLEAN_TIMEOUT, clean(deps, run, &context, node))
            .await
            .map_err(|_| format!("cleaning node {name} took longer than {CLEAN_TIMEOUT:?}"))??;
    }
    each_service(deps, run, &context, Once::Reset).await?;
    each_service(deps, run, &context, Once::Check).await
}

/// The shell command that prints the entries of directory `dir`, each ended by a NUL.
fn list_command(dir: &str) -> String {
    format!(
        "cd {} 2>/dev/null || exit 0; for f in * .[!.]* ..?*; do if [ -e \"$f\" ] || [ -L \"$f\" ]; then printf '%s\\0' \"$f\"; fi; done",
        ebb_ssh::quote(dir)
    )
}

/// The shell command that removes every entry of directory `dir` but `kept`.
fn prune_command(dir: &str, kept: &[String]) -> String {
    let keep: Vec<String> = kept.iter().map(|k| ebb_ssh::quote(k)).collect();
    let case = match keep.is_empty() {
        true => String::new(),
        false => format!("{}) ;; ", keep.join("|")),
    };
    format!(
        "cd {} 2>/dev/null || exit 0; for f in * .[!.]* ..?*; do if [ -e \"$f\" ] || [ -L \"$f\" ]; then case \"$f\" in {case}*) rm -rf -- \"./$f\" ;; esac; fi; done",
        ebb_ssh::quote(dir)
    )
}

/// The directory of `node` of `run`'s cluster on this host, for a node that is not reached
/// over SSH.
fn local_dir(deps: &Deps, run: &RunRecord, node: &NodeRecord) -> std::path::PathBuf {
    node.properties
        .get(ebb_spi::FACT_WORK_DIR)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| deps.node_work_dir(run.cluster_id(), &node.node))
}

/// Records, before the first program runs on `run`'s cluster, the entries of each node's
/// directory (what its services made), for a run whose profile reuses clusters. Done once
/// per cluster; a node already recorded keeps its record.
pub async fn record_entries(
    deps: &Deps,
    run: &RunRecord,
    context: &ebb_spi::Context,
) -> Result<(), String> {
    if run.reuse.is_none() {
        return Ok(());
    }
    let nodes = cluster_nodes(deps, run).await?;
    if nodes.iter().all(|n| n.entries.is_some()) {
        return Ok(());
    }
    // Nodes reached over SSH are reached with the profile's key, a secure key's reference.
    let context =
        match super::planner::resolve_context(deps, &run.key.namespace, Arc::new(context.clone()))
            .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(why)) => return Err(why),
            Err(e) => return Err(format!("cannot read the store: {e}")),
        };
    let mut found = Vec::new();
    for node in nodes.iter().filter(|n| n.entries.is_none()) {
        if node.status != ResourceStatus::Created {
            continue;
        }
        let entries = match super::remote::Node::of(&context, run.cluster_id(), node) {
            Some(remote) => {
                let remote = remote?;
                let session = remote.connect(deps).await?;
                let out = session.exec(&list_command(&remote.dir), b"").await;
                session.close().await;
                let out = out.map_err(|e| format!("cannot list node {}: {e}", node.node))?;
                out.stdout
                    .split(|b| *b == 0)
                    .filter(|n| !n.is_empty())
                    .map(|n| String::from_utf8_lossy(n).into_owned())
                    .collect()
            }
            None => {
                let dir = local_dir(deps, run, node);
                tokio::task::spawn_blocking(move || list_dir(&dir))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("cannot list node {}: {e}", node.node))?
            }
        };
        found.push((node.node.clone(), entries));
    }
    if found.is_empty() {
        return Ok(());
    }
    let cluster = run.cluster_id().to_string();
    deps.store
        .write(move |tx| {
            for (name, entries) in &found {
                let key = crate::store::keys::node(&cluster, name);
                let Some(mut node) = tx.get::<NodeRecord>(Table::Resources, &key)? else {
                    continue;
                };
                if node.entries.is_none() {
                    node.entries = Some(entries.clone());
                    tx.put(Table::Resources, &key, &node)?;
                }
            }
            Ok::<_, StoreError>(())
        })
        .await
        .map_err(|e| format!("cannot record the nodes' entries: {e}"))
}

/// The names in directory `dir` (none if it is not there), but ebb's own directory of the
/// programs' work.
fn list_dir(dir: &std::path::Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != RUNS_DIR)
        .collect();
    names.sort();
    Ok(names)
}

/// The node records of `run`'s cluster.
async fn cluster_nodes(deps: &Deps, run: &RunRecord) -> Result<Vec<NodeRecord>, String> {
    let cluster = run.cluster_id().to_string();
    deps.store
        .read(move |r| super::planner::node_records(r, &cluster))
        .await
        .map_err(|e| format!("cannot read the cluster's nodes: {e}"))
}

/// Removes what the last runs' programs left on `node`: their directories, and every entry of
/// the node's directory its services did not make (when those were recorded).
async fn clean(
    deps: &Deps,
    run: &RunRecord,
    context: &ebb_spi::Context,
    node: &NodeRecord,
) -> Result<(), String> {
    if let Some(remote) = super::remote::Node::of(context, run.cluster_id(), node) {
        let remote = remote?;
        let session = remote.connect(deps).await?;
        let dir = format!("{}/{RUNS_DIR}", remote.dir.trim_end_matches('/'));
        let mut command = format!("rm -rf -- {}", ebb_ssh::quote(&dir));
        if let Some(kept) = &node.entries {
            command = format!(
                "{command} && {{ {}; }}",
                prune_command(&remote.dir, kept.as_slice())
            );
        }
        let done = session.exec(&command, b"").await;
        session.close().await;
        return match done {
            Ok(out) if out.status == Some(0) => Ok(()),
            Ok(out) => Err(format!(
                "cannot clean node {}: rm exited with {:?}",
                node.node, out.status
            )),
            Err(e) => Err(format!("cannot clean node {}: {e}", node.node)),
        };
    }
    let base = local_dir(deps, run, node);
    let name = node.node.clone();
    let kept = node.entries.clone();
    tokio::task::spawn_blocking(move || {
        remove_dir(&base.join(RUNS_DIR))?;
        match kept {
            Some(kept) => prune(&base, kept.as_slice()),
            None => Ok(()),
        }
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("cannot clean node {name}: {e}"))
}

/// Removes every entry of directory `dir` but those named in `kept` (links removed, never
/// followed).
fn prune(dir: &std::path::Path, kept: &[String]) -> std::io::Result<()> {
    for name in list_dir(dir)? {
        if !kept.contains(&name) {
            remove_dir(&dir.join(&name))?;
        }
    }
    Ok(())
}

/// Removes directory `dir` and what is in it, if it is there; a symbolic link in its place is
/// removed itself, never followed.
fn remove_dir(dir: &std::path::Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(dir),
        Ok(_) => std::fs::remove_file(dir),
    }
}

/// What [`prepare`] runs on every node for each service that has it: its reset, or its check.
#[derive(Clone, Copy)]
enum Once {
    Reset,
    Check,
}

/// Runs `once` (the script of that action, where a service has one) for every service on
/// every node, one after another, each under its own time limit: a reset must exit 0, a
/// check must find its service up. Why the cluster is not ready, if it is not.
async fn each_service(
    deps: &Deps,
    run: &RunRecord,
    context: &Arc<ebb_spi::Context>,
    once: Once,
) -> Result<(), String> {
    let Some(template) = &run.template else {
        return Ok(());
    };
    let action = match once {
        Once::Reset => "reset",
        Once::Check => "check",
    };
    let config = run.config();
    for node in &run.cluster.nodes {
        for service in run.layout.get(node).into_iter().flatten() {
            let found = template.services.get(service).and_then(|s| match once {
                Once::Reset => s.reset(),
                Once::Check => s.check().map(|(script, _, timeout)| (script, timeout)),
            });
            let Some((script, timeout)) = found else {
                continue;
            };
            let on = On {
                run: &run.key.run,
                cluster: run.cluster_id(),
                node,
                context,
                config: &config,
                layout: &run.layout,
                check: true,
            };
            let ran = super::automator::once(deps, &on, service, action, script);
            let ended = match tokio::time::timeout(timeout, ran).await {
                Err(_) => return Err(format!("the {action} of {service} on {node} did not end")),
                Ok(Err(why)) => {
                    return Err(format!(
                        "the {action} of {service} on {node} could not run: {why}"
                    ));
                }
                Ok(Ok(ended)) => ended,
            };
            let passed = match once {
                Once::Reset => ended.code == Some(0),
                Once::Check => CheckOutcome::of_exit(ended.code) == CheckOutcome::Up,
            };
            if !passed {
                return Err(format!(
                    "the {action} of {service} on {node} {}: {}",
                    ended.status, ended.tail
                ));
            }
        }
    }
    Ok(())
}
