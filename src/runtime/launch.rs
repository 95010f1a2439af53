//! Launching a run's program for its supervisor, watching it, and stopping it: its launch
//! file (command, environment, working directory and `cluster.json`) on this host, or the
//! program on a remote master reached over SSH.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::deps::Deps;
use super::program::{self, LaunchFile, Started};
use crate::model::plan::{NodeRecord, ResourceStatus};
use crate::model::run::{Exit, RunRecord};
use crate::rules::lifecycle::Event;
use crate::store::keys;
use crate::store::{Read, StoreError, Table};

/// How long a stopped program gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// Where the program's attempt now keeps its state and output on this host: the run's
/// directory for the first, `attempt-<n>` in it for each later one (so a retry never
/// re-attaches to the attempt before it, and each attempt's output is kept).
pub fn attempt_dir(deps: &Deps, run: &RunRecord) -> PathBuf {
    attempt_dir_in(deps.run_dir(&run.key.run), run.attempt())
}

/// The directory of attempt `attempt` in run directory `run_dir`.
pub fn attempt_dir_in(run_dir: PathBuf, attempt: u32) -> PathBuf {
    match attempt {
        0 | 1 => run_dir,
        n => run_dir.join(format!("attempt-{n}")),
    }
}

/// What to launch for `run`: its command, environment and working directory on the master
/// node, with `cluster.json` written beside it.
pub(super) async fn launch_file(deps: &Deps, run: &RunRecord) -> std::io::Result<LaunchFile> {
    let prefix = keys::of_run(run.cluster_id());
    let me = deps.member.name.to_string();
    let (nodes, server) = deps
        .store
        .read(move |r| {
            let nodes = r.scan::<NodeRecord>(Table::Resources, &prefix)?;
            let server = r.get::<crate::model::server::ServerRecord>(Table::Servers, &me)?;
            Ok::<_, StoreError>((nodes, server.map(|s| s.url).filter(|u| !u.is_empty())))
        })
        .await
        .map_err(std::io::Error::other)?;
    let nodes: Vec<NodeRecord> = nodes
        .into_iter()
        .map(|(_, n)| n)
        .filter(|n| n.status == ResourceStatus::Created)
        .collect();
    let dir = deps.run_dir(&run.key.run);
    std::fs::create_dir_all(&dir)?;
    let cluster_file = dir.join("cluster.json");
    let endpoints =
        crate::model::endpoint::endpoints(crate::model::view::in_cluster_order(run, &nodes));
    let cluster = serde_json::json!({
        "run": run.key.run,
        "profile": run.profile,
        "provisioner": run.provisioner,
        "endpoints": endpoints,
        "nodes": nodes.iter().map(|n| serde_json::json!({
            "name": n.node,
            "id": n.id,
            "ipAddress": n.address,
            "properties": n.properties,
        })).collect::<Vec<_>>(),
    });
    std::fs::write(
        &cluster_file,
        serde_json::to_vec_pretty(&cluster).map_err(std::io::Error::other)?,
    )?;
    let master = run
        .cluster
        .nodes
        .first()
        .and_then(|m| nodes.iter().find(|n| &n.node == m));
    let node_dir = master
        .and_then(|m| m.properties.get(ebb_spi::FACT_WORK_DIR))
        .map(PathBuf::from);
    // On a cluster that outlives the run, the program works in a directory of its own, which
    // is removed before the next run takes the cluster over.
    let work_dir = match (&node_dir, run.reuse) {
        (Some(dir), Some(_)) => {
            let dir = dir.join(super::reuse::RUNS_DIR).join(&run.key.run);
            std::fs::create_dir_all(&dir)?;
            Some(dir)
        }
        (dir, _) => dir.clone(),
    };
    let mut env: BTreeMap<String, String> = run.launch.env.clone();
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    set("EBB_RUN_ID", run.key.run.clone());
    set("EBB_RUN_ATTEMPT", run.attempt().to_string());
    set("EBB_NAMESPACE", run.key.namespace.clone());
    set("EBB_APP", run.key.app.clone());
    set("EBB_PROGRAM", run.key.program.clone());
    set("EBB_CLUSTER_FILE", cluster_file.display().to_string());
    // Where the program reaches this server's API (with its run token, to resize its cluster).
    if let Some(url) = server {
        set("EBB_SERVER", url);
    }
    set(
        "EBB_ARGS",
        serde_json::to_string(&run.args).map_err(std::io::Error::other)?,
    );
    for (name, value) in &endpoints {
        set(&crate::model::endpoint::env_name(name), value.clone());
    }
    if let Some(master) = master {
        set("EBB_NODE", master.node.clone());
        if let Some(address) = &master.address {
            set("EBB_NODE_ADDRESS", address.clone());
        }
    }
    if let Some(node_dir) = &node_dir {
        set(
            ebb_local::sandbox::WORK_DIR_ENV,
            node_dir.display().to_string(),
        );
    }
    Ok(LaunchFile {
        command: run.launch.command.clone(),
        env,
        cwd: work_dir.unwrap_or_else(|| deps.program_dir(&run.key.run)),
    })
}

/// The run's program on its master, when the master is reached over SSH; secure references
/// in `context` are resolved here, in memory.
pub(super) async fn remote_program(
    deps: &Deps,
    run: &RunRecord,
    context: ebb_spi::Context,
) -> Option<Result<super::remote::Program, String>> {
    let master = run.cluster.nodes.first()?.clone();
    let key = keys::node(run.cluster_id(), &master);
    let (cipher, namespace) = (Arc::clone(&deps.cipher), run.key.namespace.clone());
    let found = deps
        .store
        .read(move |r| {
            let Some(record) = r.get::<NodeRecord>(Table::Resources, &key)? else {
                return Ok(None);
            };
            if !record.properties.contains_key(ebb_spi::FACT_SSH) {
                return Ok(None);
            }
            let resolved =
                crate::store::secure::resolve(r, &cipher, &namespace, &context.properties)
                    .map(|res| res.into_context(context.clone()));
            Ok::<_, StoreError>(Some((record, resolved)))
        })
        .await;
    let (record, context) = match found {
        Ok(None) => return None,
        Ok(Some(x)) => x,
        Err(e) => return Some(Err(format!("cannot read the master's record: {e}"))),
    };
    let context = match context {
        Ok(c) => c,
        Err(e) => return Some(Err(e)),
    };
    let node = super::remote::Node::of(&context, run.cluster_id(), &record)?;
    let attempt = run.attempt();
    Some(node.map(|mut node| {
        if run.reuse.is_some() {
            node.dir = super::reuse::program_dir(&node.dir, &run.key.run);
        }
        if attempt > 1 {
            node.dir = format!("{}/attempt-{attempt}", node.dir);
        }
        super::remote::Program {
            node,
            run_dir: attempt_dir(deps, run),
        }
    }))
}

/// Launches the run's program on its remote master (unless it was launched before), trying
/// a few times when the master cannot be reached; fenced `fence` ahead, when given.
pub(super) async fn launch_remote(
    deps: &Deps,
    run: &RunRecord,
    program: &super::remote::Program,
    fence: Option<Duration>,
) -> Result<(), String> {
    let launch = launch_file(deps, run).await.map_err(|e| e.to_string())?;
    let cluster_json = std::fs::read_to_string(deps.run_dir(&run.key.run).join("cluster.json"))
        .map_err(|e| format!("cannot read cluster.json: {e}"))?;
    let mut env = launch.env;
    env.remove("EBB_CLUSTER_FILE");
    // Only the node's SSH user reads the launch script that holds it (umask 077).
    env.insert(
        program::RUN_TOKEN_ENV.to_string(),
        deps.cipher.run_token(&run.key.namespace, &run.key.run),
    );
    let mut tries = 0;
    loop {
        tries += 1;
        match program
            .launch(deps, &launch.command, &env, &cluster_json, fence)
            .await
        {
            Ok(launched) => {
                tracing::info!(run.id = %run.key.run, node = %program.node.target, ?launched, "program on a remote master");
                return Ok(());
            }
            Err(e) if tries >= 5 => return Err(e),
            Err(e) => {
                tracing::warn!(run.id = %run.key.run, error = %e, "cannot launch the program yet");
                tokio::time::sleep(Duration::from_secs(2 * tries)).await;
            }
        }
    }
}

/// Launches `run`'s program, on its cluster's master over SSH or on this host, or re-attaches
/// to it after a restart, and tells `news` what becomes of it: launched (or not), then its
/// exit. A program that ran on another server's host, which is gone, is lost: counted dead
/// once its launcher has stopped it (see [`super::fence`]). On a store of several servers a
/// program on this host lives while `owned` (its supervisor) does and the lease holds.
pub async fn watch(
    deps: &Deps,
    run: &RunRecord,
    context: ebb_spi::Context,
    owned: std::sync::Weak<()>,
    news: impl Fn(Event),
) {
    let dir = attempt_dir(deps, run);
    let engine = run.launch.engine.as_deref();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return news(Event::LaunchFailed(format!(
            "cannot make the attempt's directory: {e}"
        )));
    }
    // What the services made, before the first program runs on a cluster runs will reuse.
    if let Err(e) = super::reuse::record_entries(deps, run, &context).await {
        tracing::warn!(run.id = %run.key.run, error = %e, "cannot record what the cluster's services made: a run that takes it over removes only the programs' own directories");
    }
    match remote_program(deps, run, context).await {
        None => {
            if let Some(other) = run.launcher.as_deref().filter(|l| **l != *deps.member.name) {
                // This server claimed the run once etcd had ended the other's lease, by when
                // the program's launcher stops it; a margin for its look and the kill, and the
                // program is counted dead (a retry never runs beside it).
                tokio::time::sleep(super::fence::MARGIN).await;
                return news(Event::ProgramLost(format!(
                    "the program ran on the host of server {other}, which is gone; no other server can reach it, and its launcher stopped it when {other}'s lease ran out"
                )));
            }
        }
        Some(Err(e)) => return news(Event::LaunchFailed(e)),
        Some(Ok(program)) => {
            // The program on the node is fenced from the start (a program launched before keeps
            // its own fence; the looks move it on).
            let fence = match launch_fence(deps).await {
                Ok(fence) => fence.map(|until| super::remote::ahead(until, deps.member.ttl())),
                Err(e) => return news(Event::LaunchFailed(e)),
            };
            return match launch_remote(deps, run, &program, fence).await {
                Ok(()) => {
                    news(Event::Launched);
                    let wait = program.wait(deps);
                    match super::application::watched(engine, dir, &news, wait).await {
                        Ok(exit) => news(Event::Exited(exit)),
                        Err(super::remote::Fenced) => {
                            news(Event::ProgramLost(FENCED_ON_NODE.into()))
                        }
                    }
                }
                Err(e) => news(Event::LaunchFailed(e)),
            };
        }
    }
    // The program lives while this server surely owns its run: its fence is there before its
    // launcher starts, and moves on from then.
    let fence = match launch_fence(deps).await {
        Ok(fence) => fence,
        Err(e) => return news(Event::LaunchFailed(e)),
    };
    let started = match launch_file(deps, run).await {
        Ok(launch) => {
            let (exe, dir) = (deps.exe.clone(), dir.clone());
            let token = deps.cipher.run_token(&run.key.namespace, &run.key.run);
            tokio::task::spawn_blocking(move || {
                if let Some(until) = fence {
                    std::fs::create_dir_all(&dir)?;
                    super::fence::write(&dir, until)?;
                }
                program::start(&exe, &dir, &launch, &token)
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        }
        Err(e) => Err(e),
    };
    let child = match started {
        Ok(Started::Child(child)) => Some(child),
        Ok(Started::Running) => None,
        Ok(Started::Ended(exit)) => {
            news(Event::Launched);
            news(Event::Exited(exit));
            return;
        }
        Ok(Started::Lost) => {
            news(Event::Launched);
            news(Event::Exited(Exit {
                code: None,
                signal: None,
            }));
            return;
        }
        Ok(Started::Fenced) => {
            news(Event::Launched);
            news(Event::ProgramLost(FENCED.into()));
            return;
        }
        Err(e) => {
            news(Event::LaunchFailed(e.to_string()));
            return;
        }
    };
    if fence.is_some() {
        deps.member.fences.hold(&dir, owned);
    }
    news(Event::Launched);
    let wait = async {
        match program::wait(dir.clone(), child).await {
            Ok(Started::Ended(exit)) => Ok(exit),
            Ok(Started::Fenced) => Err(()),
            Ok(_) | Err(_) => Ok(Exit {
                code: None,
                signal: None,
            }),
        }
    };
    let ended = super::application::watched(engine, dir.clone(), &news, wait).await;
    deps.member.fences.release(&dir);
    match ended {
        Ok(exit) => news(Event::Exited(exit)),
        // Stopped for want of a confirmed owner: lost as on a lost server (tried again under
        // a retry), not a failure of the program's own.
        Err(()) => news(Event::ProgramLost(FENCED.into())),
    }
}

/// The fence a program launched now starts under: on a store of several servers, the end of
/// this server's lease once it lies far enough ahead ([`super::fence::confirmed`]); `None`
/// on a store of one server (nothing to fence); an error when this server holds no lease.
async fn launch_fence(deps: &Deps) -> Result<Option<u64>, String> {
    if !deps.store.shared() {
        return Ok(None);
    }
    super::fence::confirmed(&deps.store, || deps.member.lease())
        .await
        .map(Some)
        .ok_or_else(|| "this server holds no lease now: the program is not launched".into())
}

/// What a program on a node its guard stopped (fenced) is recorded lost with.
const FENCED_ON_NODE: &str = "its guard on the node stopped it: no server that held the run confirmed it in time (they were stopped, paused, or cut off from etcd or from the node)";

/// What a program its launcher stopped (fenced) is recorded lost with.
const FENCED: &str = "its launcher stopped it: this server's hold on the run could not be confirmed in time (it was paused, or cut off from etcd)";

/// Signals `run`'s program to stop (SIGTERM, then SIGKILL after [`KILL_GRACE`]), wherever it
/// runs.
pub async fn kill(deps: &Deps, run: &RunRecord, context: ebb_spi::Context) {
    let dir = attempt_dir(deps, run);
    let killed = match remote_program(deps, run, context).await {
        Some(Ok(program)) => program.kill(deps, KILL_GRACE).await,
        Some(Err(e)) => Err(e),
        None => program::kill(dir, KILL_GRACE)
            .await
            .map_err(|e| e.to_string()),
    };
    if let Err(e) = killed {
        tracing::warn!(run.id = %run.key.run, error = %e, "cannot signal a program");
    }
}
