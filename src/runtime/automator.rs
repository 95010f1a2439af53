//! The `shell` automator: runs a service action's script on a node.
//!
//! On `local` nodes the script runs in the node's sandbox directory with `EBB_WORK_DIR` set,
//! so whatever it starts (a daemon for `start`) belongs to the node and is stopped when the
//! node is deleted. Elsewhere it runs in a directory for the node under the run directory.
//! The script's output is appended to the node's log in the run directory (never a pipe, so
//! a daemon it starts cannot hold the task open); a timed-out attempt has its whole process
//! group killed. Each completed task is recorded in the store, so a resumed operation does
//! not run it again. When a cluster is being deleted, a service that fails to stop is noted
//! and its node deleted anyway.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Deps;
use super::task::{TaskOutcome, TaskSpec};
use crate::plan::Operation;
use crate::plan::cluster::Action;
use crate::plan::resource::NodeRecord;
use crate::run::events::{self, EventKind};
use crate::store::{Read, StoreError, Table};
use crate::template::Action as Script;

/// Attempts of one service task before the operation fails.
const ATTEMPTS: u32 = 3;
/// How long one attempt may run.
const TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes of a failed attempt's output quoted in its error.
const TAIL: usize = 2048;

/// A service task's record in the `Tasks` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub status: String,
    pub attempts: u32,
    pub error: Option<String>,
}

fn action_name(action: Action) -> String {
    serde_json::to_value(action)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Runs the service task `spec` (install, configure, initialize, start, stop, remove).
pub async fn run(deps: &Deps, spec: &TaskSpec) -> TaskOutcome {
    let (Some(service), Some(kind)) = (spec.service.clone(), spec.action.service_action()) else {
        return TaskOutcome::Done;
    };
    let action = action_name(spec.action);
    let key = format!(
        "{}/{:?}/{}/{action}/{service}",
        spec.run, spec.operation, spec.node
    );
    let k = key.clone();
    match deps
        .store
        .read(move |r| r.get::<TaskRecord>(Table::Tasks, &k))
        .await
    {
        Ok(Some(done)) if done.status == "SUCCEEDED" => return TaskOutcome::Done,
        Ok(_) => {}
        Err(e) => return TaskOutcome::Failed(format!("cannot read task state: {e}")),
    }
    let Some(Script::Shell { script }) = spec
        .template
        .as_ref()
        .and_then(|t| t.services.get(&service))
        .and_then(|s| s.actions.get(&kind))
        .cloned()
    else {
        return TaskOutcome::Done;
    };
    let what = format!("{action} {service}");
    let mut last_error = String::new();
    for attempt in 1..=ATTEMPTS {
        if spec.cancel.load(std::sync::atomic::Ordering::SeqCst) {
            return TaskOutcome::Cancelled;
        }
        let started = Instant::now();
        let _ = save(
            deps,
            spec,
            &key,
            "RUNNING",
            attempt,
            None,
            Some(format!("{what} started")),
        )
        .await;
        match attempt_once(deps, spec, &service, &action, &script).await {
            Ok(()) => {
                let note = format!("{what} done in {:.2}s", started.elapsed().as_secs_f64());
                return match save(deps, spec, &key, "SUCCEEDED", attempt, None, Some(note)).await {
                    Ok(()) => TaskOutcome::Done,
                    Err(e) => TaskOutcome::Failed(format!("cannot record progress: {e}")),
                };
            }
            Err(e) => {
                last_error = e;
                let note = format!("{what} failed (attempt {attempt} of {ATTEMPTS}): {last_error}");
                let _ = save(
                    deps,
                    spec,
                    &key,
                    "FAILED",
                    attempt,
                    Some(last_error.clone()),
                    Some(note),
                )
                .await;
                if attempt < ATTEMPTS {
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                }
            }
        }
    }
    if spec.operation == Operation::Delete {
        // Tearing down: the node goes away regardless; a failed stop must not keep it alive.
        let note = format!("{what} failed; deleting the node anyway");
        let _ = save(
            deps,
            spec,
            &key,
            "FAILED",
            ATTEMPTS,
            Some(last_error),
            Some(note),
        )
        .await;
        return TaskOutcome::Done;
    }
    TaskOutcome::Failed(format!(
        "node {}: {what} failed {ATTEMPTS} times: {last_error}",
        spec.node
    ))
}

async fn attempt_once(
    deps: &Deps,
    spec: &TaskSpec,
    service: &str,
    action: &str,
    script: &str,
) -> Result<(), String> {
    let prefix = format!("{}/", spec.run);
    let nodes: Vec<NodeRecord> = deps
        .store
        .read(move |r| r.scan::<NodeRecord>(Table::Resources, &prefix))
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    let me = nodes.iter().find(|n| n.node == spec.node);
    let run_dir = deps.run_dir(&spec.run);
    let node_dir = run_dir.join("nodes");
    let work_dir: Option<PathBuf> = me
        .and_then(|n| n.properties.get("workDir"))
        .map(PathBuf::from);
    let cwd = work_dir
        .clone()
        .unwrap_or_else(|| node_dir.join(&spec.node));
    let cluster_file = node_dir.join(format!("{}.cluster.json", spec.node));
    let log_path = node_dir.join(format!("{}.log", spec.node));
    let layout = &spec.layout;
    let cluster = serde_json::json!({
        "run": spec.run,
        "nodes": nodes.iter().map(|n| serde_json::json!({
            "name": n.node, "id": n.id, "ipAddress": n.address, "properties": n.properties,
            "services": layout.get(&n.node).cloned().unwrap_or_default(),
        })).collect::<Vec<_>>(),
    });
    let with = |f: &str| {
        layout
            .iter()
            .filter(|(_, s)| s.contains(f))
            .map(|(n, _)| n.clone())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut env: BTreeMap<&str, String> = BTreeMap::new();
    env.insert("EBB_RUN_ID", spec.run.clone());
    env.insert("EBB_NODE", spec.node.clone());
    env.insert("EBB_SERVICE", service.to_string());
    env.insert("EBB_ACTION", action.to_string());
    env.insert(
        "EBB_NODES",
        layout.keys().cloned().collect::<Vec<_>>().join(","),
    );
    env.insert("EBB_SERVICE_NODES", with(service));
    env.insert("EBB_CLUSTER_FILE", cluster_file.display().to_string());
    if let Some(address) = me.and_then(|n| n.address.clone()) {
        env.insert("EBB_NODE_ADDRESS", address);
    }
    if let Some(dir) = &work_dir {
        env.insert(ebb_local::sandbox::WORK_DIR_ENV, dir.display().to_string());
    }
    let (nodes_dir, dir, log_file) = (node_dir.clone(), cwd.clone(), log_path.clone());
    let log = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
        std::fs::create_dir_all(&nodes_dir)?;
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            &cluster_file,
            serde_json::to_vec_pretty(&cluster).map_err(std::io::Error::other)?,
        )?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_file)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("cannot prepare the node directory: {e}"))?;
    let start_len = log.metadata().map(|m| m.len()).unwrap_or(0);
    let err = log.try_clone().map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(&cwd)
        .env_clear()
        .envs(super::program::passed_env())
        .envs(env)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start sh: {e}"))?;
    let pid = child.id();
    let status = match tokio::time::timeout(TIMEOUT, child.wait()).await {
        Ok(status) => status.map_err(|e| e.to_string())?,
        Err(_) => {
            if let Some(pid) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            return Err(format!("timed out after {}s", TIMEOUT.as_secs()));
        }
    };
    if status.success() {
        return Ok(());
    }
    let tail = tokio::task::spawn_blocking(move || output_since(&log_path, start_len))
        .await
        .unwrap_or_default();
    Err(format!(
        "the script exited with {status}{}",
        if tail.is_empty() {
            String::new()
        } else {
            format!(": {tail}")
        }
    ))
}

/// The end (at most [`TAIL`] bytes) of what was appended to `log` after byte `from`.
fn output_since(log: &std::path::Path, from: u64) -> String {
    use std::io::{Read as _, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(log) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = from.max(len.saturating_sub(TAIL as u64));
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_ok() {
        let _ = file.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).trim().to_string()
}

#[allow(clippy::too_many_arguments)]
async fn save(
    deps: &Deps,
    spec: &TaskSpec,
    key: &str,
    status: &str,
    attempts: u32,
    error: Option<String>,
    note: Option<String>,
) -> Result<(), StoreError> {
    let record = TaskRecord {
        status: status.to_string(),
        attempts,
        error,
    };
    let (key, run, node) = (key.to_string(), spec.run.clone(), spec.node.clone());
    let kind = if status == "FAILED" {
        EventKind::Error
    } else {
        EventKind::Task
    };
    deps.store
        .write(move |tx| {
            tx.put(Table::Tasks, &key, &record)?;
            if let Some(note) = note {
                events::append(tx, &run, kind, Some(&node), note)?;
            }
            Ok::<_, StoreError>(())
        })
        .await?;
    deps.notifier.notify(&spec.run);
    Ok(())
}
