//! The `shell` automator: runs a service action's script on a node.
//!
//! On `local` nodes the script runs in the node's sandbox directory with `EBB_WORK_DIR` set,
//! so whatever it starts (a daemon for `start`) belongs to the node and is stopped when the
//! node is deleted. On a node reached over SSH it runs on that node ([`super::remote`]).
//! Elsewhere it runs in a directory for the node under the run directory.
//! The script's output is appended to the node's log in the run directory (never a pipe, so
//! a daemon it starts cannot hold the task open). An attempt whose future is dropped (it timed
//! out) has its whole process group killed. Retries, timeouts and the audit log are the task
//! runner's; this module runs one attempt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::attempt::{AttemptOutcome, Ended, TAIL, TaskSpec, parse_facts};
use super::deps::Deps;
use super::on_node::On;
use super::on_node::{cluster_doc, cluster_nodes};
use crate::model::plan::NodeRecord;
use crate::model::template::Action as Script;

/// Runs one attempt of the service task `spec` (install, configure, initialize, start, stop,
/// remove). What the script writes to `$EBB_RESULT_FILE` as `key=value` lines becomes the
/// node's properties, seen by every later task.
pub async fn run(deps: &Deps, spec: &TaskSpec) -> AttemptOutcome {
    let (Some(service), Some(kind)) =
        (spec.task.service.clone(), spec.task.action.service_action())
    else {
        return AttemptOutcome::done();
    };
    let Some(found) = spec
        .template
        .as_ref()
        .and_then(|t| t.services.get(&service))
        .and_then(|s| s.actions.get(&kind))
        .cloned()
    else {
        return AttemptOutcome::done();
    };
    let action = spec.task.action.name();
    let timeout = found.timeout();
    let script = match found {
        Script::Shell { script, .. } => script,
        Script::Plugin {
            automator, fields, ..
        } => {
            return super::plugin_automator::run(
                deps,
                spec,
                (&service, action),
                &automator,
                fields,
                timeout,
            )
            .await;
        }
    };
    let on = On::task(spec);
    let provisioner = [
        (
            "EBB_PROVISIONER".to_string(),
            spec.provisioner.spec().name.to_string(),
        ),
        // What the script is part of: a service leaving a cluster that stays (a shrink, a
        // remove-services) is told from one that is restarted or deleted with it.
        (
            "EBB_OPERATION".to_string(),
            spec.operation.name().to_string(),
        ),
    ];
    let ended = attempt_once(deps, &on, &service, action, &script, &provisioner)
        .await
        .and_then(Ended::succeeded);
    match ended {
        Ok((result, output)) => {
            if !result.is_empty() {
                let saved = super::attempt::merge_properties(
                    deps,
                    &spec.cluster,
                    spec.node(),
                    result.clone(),
                )
                .await;
                if let Err(e) = saved {
                    return AttemptOutcome::failed(format!("cannot record the result: {e}"), true);
                }
            }
            AttemptOutcome::Done {
                result,
                output: (!output.is_empty()).then_some(output),
            }
        }
        Err((message, output)) => AttemptOutcome::Failed {
            message,
            retry: true,
            output: (!output.is_empty()).then_some(output),
        },
    }
}

/// Kills a script's whole process group unless disarmed: a timed-out attempt (whose future is
/// dropped) leaves nothing running.
struct GroupGuard(Option<rustix::process::Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// The variable a service script finds its cluster's secret in.
pub const CLUSTER_SECRET_ENV: &str = "EBB_CLUSTER_SECRET";

/// Runs the check script of `service` on `on`'s node once, to its end: how it ended, or why
/// it could not run. Its time limit is the caller's: dropping the future kills the script.
pub async fn check(deps: &Deps, on: &On<'_>, service: &str, script: &str) -> Result<Ended, String> {
    once(deps, on, service, "check", script).await
}

/// Runs `script`, the `action` of `service` that no operation plans (`check`, `reset`), on
/// `on`'s node once, to its end: how it ended, or why it could not run. Its time limit is the
/// caller's: dropping the future kills the script.
pub async fn once(
    deps: &Deps,
    on: &On<'_>,
    service: &str,
    action: &str,
    script: &str,
) -> Result<Ended, String> {
    attempt_once(deps, on, service, action, script, &[])
        .await
        .map_err(|(message, _)| message)
}

/// Runs the script once: how it ended, or why it could not run and its output.
async fn attempt_once(
    deps: &Deps,
    on: &On<'_>,
    service: &str,
    action: &str,
    script: &str,
    extra: &[(String, String)],
) -> Result<Ended, (String, String)> {
    let fail = |m: String| (m, String::new());
    let nodes = cluster_nodes(deps, on.cluster)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let me = nodes.iter().find(|n| n.node == on.node);
    let work_dir: Option<PathBuf> = me
        .and_then(|n| n.properties.get(ebb_spi::FACT_WORK_DIR))
        .map(PathBuf::from);
    let files = NodeFiles::of(deps, on, service);
    let cluster = cluster_doc(on, &nodes);
    let paths = (files.result.as_path(), files.cluster.as_path());
    let mut env = script_env(on, service, action, &nodes, paths, work_dir.as_deref());
    env.extend(extra.iter().cloned());
    // A secret of the cluster's, the same for each of its scripts and never shown: for its
    // services to authenticate one another (ZooKeeper's super user for a reconfiguration).
    // Programs do not get it.
    env.insert(
        CLUSTER_SECRET_ENV.to_string(),
        deps.cipher.cluster_secret(on.cluster),
    );
    if let Some(node) = me.and_then(|me| super::remote::Node::of(on.context, on.cluster, me)) {
        let node = node.map_err(fail)?;
        let env = env
            .into_iter()
            .filter(|(k, _)| !matches!(k.as_str(), "EBB_RESULT_FILE" | "EBB_CLUSTER_FILE"))
            .collect();
        let cluster_json =
            serde_json::to_string_pretty(&cluster).map_err(|e| fail(e.to_string()))?;
        let name = format!("{service}.{action}");
        return super::remote::attempt(deps, &node, &name, script, &cluster_json, &env, &files.log)
            .await;
    }
    let cwd = work_dir.unwrap_or_else(|| deps.node_work_dir(on.cluster, on.node));
    run_local(script, &cwd, env, cluster, files).await
}

/// A node's files on the server: the cluster document and result file a script is given, the
/// log its output is appended to, and the lock one attempt at a time holds.
struct NodeFiles {
    dir: PathBuf,
    cluster: PathBuf,
    /// This attempt's own: an earlier attempt still running writes to its own.
    result: PathBuf,
    log: PathBuf,
    lock: PathBuf,
}

impl NodeFiles {
    /// A task's files on `on`'s node; a check of `service` has a cluster document and result
    /// file of its own.
    fn of(deps: &Deps, on: &On<'_>, service: &str) -> NodeFiles {
        let dir = deps.run_dir(on.run).join("nodes");
        let node = on.node;
        let own = if on.check {
            format!("{node}.{service}.check")
        } else {
            node.to_string()
        };
        let nonce = format!("{:016x}", fastrand::u64(..));
        NodeFiles {
            cluster: dir.join(format!("{own}.cluster.json")),
            result: dir.join(format!("{own}.{nonce}.result")),
            log: dir.join(format!("{node}.log")),
            lock: dir.join(format!("{own}.lock")),
            dir,
        }
    }

    /// Makes the node's directories, writes `cluster` (aside, then renamed in: an earlier
    /// attempt still running reads a whole one) and opens the log for appending.
    fn prepare(&self, cwd: &Path, cluster: &serde_json::Value) -> std::io::Result<std::fs::File> {
        std::fs::create_dir_all(&self.dir)?;
        std::fs::create_dir_all(cwd)?;
        let aside = self.result.with_extension("cluster.json");
        std::fs::write(
            &aside,
            serde_json::to_vec_pretty(cluster).map_err(std::io::Error::other)?,
        )?;
        std::fs::rename(&aside, &self.cluster)?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
    }

    /// Whether an earlier attempt holds the lock now (it began under a server that was lost,
    /// and runs on).
    fn held(&self) -> bool {
        let Ok(file) = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)
        else {
            return false;
        };
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err()
    }
}

/// Whether this host has `flock` (util-linux), looked up once.
fn has_flock() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("flock").is_file()))
    })
}

/// Runs `script` under `sh -c` on this machine in `cwd`, in its own process group, its output
/// appended to the node's log; how it ended.
///
/// One attempt of a node's tasks (or of a check) at a time: the script runs under `flock` on
/// the node's lock file, held by `flock` itself (so a daemon the script starts does not hold
/// it). An attempt begun by a server that was killed goes on after it; the same server
/// restarted waits for it to end before it runs the task again, rather than starting a second
/// daemon beside it, and says so in the node's log.
async fn run_local(
    script: &str,
    cwd: &Path,
    env: BTreeMap<String, String>,
    cluster: serde_json::Value,
    files: NodeFiles,
) -> Result<Ended, (String, String)> {
    let fail = |m: String| (m, String::new());
    let dir = cwd.to_path_buf();
    let (files, log) = tokio::task::spawn_blocking(move || {
        let log = files.prepare(&dir, &cluster);
        (files, log)
    })
    .await
    .map_err(|e| fail(e.to_string()))?;
    let mut log = log.map_err(|e| fail(format!("cannot prepare the node directory: {e}")))?;
    let start_len = log.metadata().map(|m| m.len()).unwrap_or(0);
    let locked = has_flock();
    if locked && files.held() {
        use std::io::Write as _;
        let _ = writeln!(
            log,
            "ebb: an earlier attempt on this node still runs (its server may have been lost): waiting for it to end"
        );
    }
    let err = log.try_clone().map_err(|e| fail(e.to_string()))?;
    let mut command = if locked {
        let mut c = tokio::process::Command::new("flock");
        c.arg("-o").arg(&files.lock).arg("sh");
        c
    } else {
        tokio::process::Command::new("sh")
    };
    let mut child = command
        .arg("-c")
        .arg(script)
        .current_dir(cwd)
        .env_clear()
        .envs(super::program::passed_env())
        .envs(env)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| fail(format!("cannot start sh: {e}")))?;
    let mut guard = GroupGuard(
        child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32)),
    );
    let status = child.wait().await;
    // Finished: whatever it started in the background (a daemon) keeps running.
    guard.0 = None;
    let status = status.map_err(|e| fail(e.to_string()))?;
    let tail = tokio::task::spawn_blocking(move || {
        let tail = output_since(&files.log, start_len);
        let facts = read_head(&files.result, super::attempt::RESULT_MAX)
            .map(|text| parse_facts(&text))
            .unwrap_or_default();
        let _ = std::fs::remove_file(&files.result);
        (tail, facts)
    })
    .await
    .unwrap_or_default();
    let (tail, facts) = tail;
    Ok(Ended {
        code: status.code(),
        facts,
        tail,
        status: format!("exited with {status}"),
    })
}

/// The `EBB_*` environment of `service`'s `action` script on `on`'s node (one of `nodes`),
/// with its result and cluster files `(result, cluster)`: the run, the node, the cluster's
/// nodes, those with the service (`EBB_SERVICE_NODES`) and their addresses
/// (`EBB_SERVICE_ADDRESSES`, `node=address` joined by commas), the endpoints the cluster's
/// services published so far (`EBB_ENDPOINT_<NAME>`), and each top-level value of the cluster's config that is a
/// string, a number or a boolean as `EBB_CONFIG_<NAME>` (`sparkHome` as
/// `EBB_CONFIG_SPARK_HOME`).
fn script_env(
    on: &On<'_>,
    service: &str,
    action: &str,
    nodes: &[NodeRecord],
    (result_file, cluster_file): (&Path, &Path),
    work_dir: Option<&Path>,
) -> BTreeMap<String, String> {
    let layout = on.layout;
    let with = |f: &str| {
        layout
            .iter()
            .filter(|(_, s)| s.contains(f))
            .map(|(n, _)| n.clone())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut env: BTreeMap<String, String> = config_env(on.config);
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    set("EBB_RUN_ID", on.run.to_string());
    set("EBB_NODE", on.node.to_string());
    set("EBB_CONFIG", on.config.to_string());
    set("EBB_RESULT_FILE", result_file.display().to_string());
    set("EBB_SERVICE", service.to_string());
    set("EBB_ACTION", action.to_string());
    set(
        "EBB_NODES",
        layout.keys().cloned().collect::<Vec<_>>().join(","),
    );
    set("EBB_SERVICE_NODES", with(service));
    let addresses: Vec<String> = layout
        .iter()
        .filter(|(_, s)| s.contains(service))
        .filter_map(|(n, _)| {
            let address = nodes.iter().find(|r| &r.node == n)?.address.as_ref()?;
            Some(format!("{n}={address}"))
        })
        .collect();
    set("EBB_SERVICE_ADDRESSES", addresses.join(","));
    // What the cluster's services published so far (a worker's start finds its master's).
    for (name, value) in crate::model::endpoint::endpoints(nodes.iter()) {
        set(&crate::model::endpoint::env_name(&name), value);
    }
    let me = nodes.iter().find(|n| n.node == on.node);
    set("EBB_CLUSTER_FILE", cluster_file.display().to_string());
    if let Some(address) = me.and_then(|n| n.address.clone()) {
        set("EBB_NODE_ADDRESS", address);
    }
    if let Some(dir) = work_dir {
        set(ebb_local::sandbox::WORK_DIR_ENV, dir.display().to_string());
    }
    env
}

/// `EBB_CONFIG_<NAME>` for each top-level value of `config` that is a string, a number or a
/// boolean and whose name is a letter then letters and digits (camelCase words become
/// upper-case words joined by `_`).
fn config_env(config: &serde_json::Value) -> BTreeMap<String, String> {
    let Some(map) = config.as_object() else {
        return BTreeMap::new();
    };
    map.iter()
        .filter(|(k, _)| {
            k.len() <= 64
                && k.starts_with(|c: char| c.is_ascii_alphabetic())
                && k.chars().all(|c| c.is_ascii_alphanumeric())
        })
        .filter_map(|(k, v)| {
            let value = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                serde_json::Value::Null
                | serde_json::Value::Array(_)
                | serde_json::Value::Object(_) => return None,
            };
            let mut name = String::from("EBB_CONFIG_");
            for (i, c) in k.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            Some((name, value))
        })
        .collect()
}

/// The end (at most [`TAIL`] bytes) of what was appended to `log` after byte `from`.
/// The first `max` bytes of the file at `path`, as text (a script may write a result file
/// of any size).
fn read_head(path: &std::path::Path, max: usize) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(max as u64)
        .read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_config_values_become_variables() {
        let config = serde_json::json!({
            "sparkHome": "/opt/spark", "workers": 2, "historyServer": true,
            "nested": {"a": 1}, "list": [1], "bad-name": "x", "none": null,
        });
        assert_eq!(
            config_env(&config),
            BTreeMap::from([
                ("EBB_CONFIG_HISTORY_SERVER".into(), "true".into()),
                ("EBB_CONFIG_SPARK_HOME".into(), "/opt/spark".into()),
                ("EBB_CONFIG_WORKERS".into(), "2".into()),
            ])
        );
    }
}
