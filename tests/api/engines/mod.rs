//! Real engines on ebb's clusters: each shipped engine template forms its cluster from real
//! daemons on `local` nodes, a job whose answer is known is checked, and a daemon killed is
//! healed. These test engines, not the store: they run once, on redb.

mod dask;
mod spark;
mod zookeeper;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::profile_body;
use crate::support::server::Server;

/// Installs the engines (Java, ZooKeeper, and a virtualenv with Dask and PySpark) when they
/// are missing; fails loudly when it cannot.
pub fn setup() {
    setup_python();
}

/// [`setup`]; the virtualenv with the engines' Python packages.
pub fn setup_python() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("sh")
        .arg(root.join("tests/support/engines/setup.sh"))
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "these tests need Java 17, Debian's ZooKeeper, distributed and pyspark (tests/support/engines/setup.sh installs them): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// Ends every process a test's SSH nodes still run (their daemons) when dropped.
pub struct RemoteDaemons(pub PathBuf);

impl Drop for RemoteDaemons {
    fn drop(&mut self) {
        crate::support::process::end_started_under(&self.0);
    }
}

/// Deploys the example app `examples/<file>` under the name `app`.
pub fn deploy_example(server: &Server, app: &str, file: &str) {
    let path = format!("{}/examples/{file}", env!("CARGO_MANIFEST_DIR"));
    let body: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the example")).expect("json");
    let (code, reply) = server.put(&format!("/v3/namespaces/default/apps/{app}"), body);
    assert_eq!(code, 200, "{reply}");
}

/// Makes USER profile `name`: `local` nodes with template `template` and `more` properties.
pub fn local_profile(
    server: &Server,
    name: &str,
    nodes: u32,
    template: &str,
    more: &[(&str, &str)],
) {
    let nodes = nodes.to_string();
    let mut props = vec![
        ("nodes", nodes.as_str(), true),
        ("template", template, true),
    ];
    props.extend(more.iter().map(|(k, v)| (*k, *v, true)));
    let (code, body) = server.put(
        &format!("/v3/namespaces/default/profiles/{name}"),
        profile_body("local", &props),
    );
    assert_eq!(code, 200, "{body}");
}

/// The sandbox directory of `node` of run `run` (its path) under data dir `dir`.
pub fn sandbox(dir: &Path, run: &str, node: &str) -> PathBuf {
    let id = run.rsplit('/').next().expect("id");
    crate::support::server::work_dir(dir)
        .join("local")
        .join(id)
        .join(node)
}

/// Sends a four-letter word to the ZooKeeper member at `address` and returns its answer
/// (empty when it does not answer).
pub fn four_letters(address: &str, word: &str) -> String {
    let Ok(addr) = address.parse() else {
        return String::new();
    };
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(word.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The run's program output (stdout and stderr).
pub fn output(server: &Server, run: &str) -> (String, String) {
    let (code, logs) = server.get(&format!("{run}/logs"));
    assert_eq!(code, 200, "{logs}");
    (
        logs["stdout"].as_str().unwrap_or_default().to_string(),
        logs["stderr"].as_str().unwrap_or_default().to_string(),
    )
}

/// The run's events' messages, each after its node.
pub fn events(server: &Server, run: &str) -> String {
    let (_, events) = server.get(&format!("{run}/events"));
    events
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        e["node"].as_str().unwrap_or("-"),
                        e["message"].as_str().unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Starts program `program` of app `app` with no arguments (the example's own profile): the
/// run's path and its id.
pub fn start_program(server: &Server, app: &str, program: &str) -> (String, String) {
    let path = format!("/v3/namespaces/default/apps/{app}/workflows/{program}");
    let (code, started) = server.post_json(&format!("{path}/start"), json!({}));
    assert_eq!(code, 200, "{started}");
    let id = started["runId"].as_str().expect("runId").to_string();
    (format!("{path}/runs/{id}"), id)
}

/// Waits until the program of run `run` has ended (at most `limit`): the run.
#[track_caller]
pub fn ended(server: &Server, run: &str, limit: Duration) -> Value {
    crate::support::runs::wait_until(server, run, limit, |r| {
        !matches!(
            r["status"].as_str(),
            Some("PENDING" | "STARTING" | "RUNNING")
        )
    })
}

/// The heals of `run` (operations a check's finding started) that have ended.
pub fn heals(server: &Server, run: &str) -> usize {
    crate::support::runs::operations(server, run)
        .into_iter()
        .filter(|o| o["request"]["trigger"].is_object() && o["status"] != "RUNNING")
        .count()
}

/// `json!` for a start's runtime arguments picking profile `profile`.
pub fn on(profile: &str) -> Value {
    json!({"system.profile.name": profile})
}

/// Makes USER profile `name`: three `local` nodes on template `template` with the tests'
/// Python and `more` properties, whose completed runs leave their cluster IDLE for ten
/// minutes for the next run.
pub fn reusing_profile(server: &Server, name: &str, template: &str, more: &[(&str, &str)]) {
    let config = json!({"pythonEnv": setup_python()}).to_string();
    let mut properties = vec![
        ("nodes", "3", true),
        ("template", template, true),
        ("templateConfig", config.as_str(), true),
    ];
    properties.extend(more.iter().map(|(n, v)| (*n, *v, true)));
    let mut body = profile_body("local", &properties);
    body["clusterReuse"] = json!(true);
    body["reuseIdle"] = json!("10m");
    crate::support::profiles::put_profile_body(server, name, body);
}

/// Three machines reached over SSH (the tests' sshd on `addresses`, which no `local` node and
/// no other SSH test claims) and a server whose USER profile `name` makes clusters of them on
/// template `template` with the tests' Python. Declared in this order, they go in reverse:
/// the server, its directory, what the machines still run, the sshd.
pub fn over_ssh(
    addresses: &[&str],
    name: &str,
    template: &str,
) -> (
    crate::support::sshd::Sshd,
    RemoteDaemons,
    tempfile::TempDir,
    Server,
) {
    let venv = setup_python();
    let sshd = crate::support::sshd::Sshd::start(addresses);
    let daemons = RemoteDaemons(sshd.remote_dir());
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    crate::hosts::put_key(&server, &sshd);
    let config = json!({"pythonEnv": venv}).to_string();
    crate::hosts::hosts_profile(
        &server,
        &sshd,
        name,
        &[
            ("template", template),
            ("templateConfig", config.as_str()),
            ("sshHostKeyChecking", "no"),
        ],
    );
    (sshd, daemons, dir, server)
}

/// Waits (at most `limit`: a JVM engine's create, job and delete take their time on two busy
/// cores) until the run's cluster is DEPROVISIONED.
#[track_caller]
pub fn deprovisioned(server: &Server, run: &str, limit: Duration) -> Value {
    crate::support::runs::wait_until(server, run, limit, |r| {
        r["cluster"]["status"] == "DEPROVISIONED"
    })
}

/// The standard output of `run`, whose view `done` says it ended, asserted COMPLETED (else the
/// failure shows its output and events).
#[track_caller]
pub fn completed_output(server: &Server, run: &str, done: &Value) -> String {
    let (stdout, stderr) = output(server, run);
    assert_eq!(
        done["status"],
        "COMPLETED",
        "{stdout}\n{stderr}\n{}",
        events(server, run)
    );
    stdout
}

/// SIGKILLs the process whose pid file (a daemon's, in its node's sandbox) is `path`; its pid.
#[track_caller]
pub fn kill_by_pid_file(path: &Path) -> u32 {
    let pid: u32 = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .expect("a pid");
    crate::support::server::signal(pid, "KILL");
    pid
}
