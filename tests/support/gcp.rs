//! The local stand-in for the Compute Engine and Dataproc REST APIs
//! (`tests/support/gcp/server.py`, Python's standard library only), started per test.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::process::{Process, start_listener};
use super::profiles::put_profile;
use super::server::Server;

pub const PROJECT: &str = "ebb-test";
pub const ZONE: &str = "us-central1-a";
pub const REGION: &str = "us-central1";

/// A running stand-in. Killed when dropped.
pub struct Gcp {
    _process: Process,
    pub url: String,
    http: reqwest::blocking::Client,
}

impl Gcp {
    pub fn start() -> Gcp {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/gcp/server.py");
        let mut cmd = Command::new("python3");
        cmd.arg(&script)
            .args(["--delay", "0.3"])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit());
        let (process, url) = start_listener(cmd, "listening on ", Duration::from_secs(30));
        Gcp {
            _process: process,
            url,
            http: reqwest::blocking::Client::new(),
        }
    }

    fn control(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let request = self
            .http
            .request(method.clone(), format!("{}/_ebb/{path}", self.url));
        let request = if method == reqwest::Method::GET {
            request
        } else {
            request.json(&body)
        };
        request
            .send()
            .and_then(|r| r.json())
            .expect("stand-in control")
    }

    /// Changes the stand-in's settings (`delay`, `natPrefix`/`natStart`, `capacity`).
    pub fn config(&self, settings: Value) {
        self.control(reqwest::Method::POST, "config", settings);
    }

    /// Compute Engine preempts Spot VM `name` in `zone`; answers whether it was one.
    pub fn preempt(&self, zone: &str, name: &str) -> bool {
        let answer = self.control(
            reqwest::Method::POST,
            "preempt",
            json!({"zone": zone, "name": name}),
        );
        answer["preempted"] == true
    }

    pub fn fault(&self, rule: Value) {
        self.control(reqwest::Method::POST, "faults", rule);
    }

    pub fn calls(&self) -> Vec<Value> {
        let calls = self.control(reqwest::Method::GET, "calls", json!({}));
        calls.as_array().cloned().unwrap_or_default()
    }

    /// Calls of `method` on paths ending with `suffix`.
    pub fn count(&self, method: &str, suffix: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| {
                c["method"] == method && c["path"].as_str().is_some_and(|p| p.ends_with(suffix))
            })
            .count()
    }

    pub fn resources(&self) -> Value {
        self.control(reqwest::Method::GET, "resources", json!({}))
    }

    /// The stand-in's resources under `keys` (`instances`, `deletedInstances`, `clusters`,
    /// `deletedClusters`) labelled with run id `run`.
    pub fn of_run(&self, keys: &[&str], run: &str) -> Vec<Value> {
        let all = self.resources();
        keys.iter()
            .flat_map(|k| all[k].as_array().cloned().unwrap_or_default())
            .filter(|i| i["labels"]["ebb-run"] == run)
            .collect()
    }

    /// Waits until every instance is deleted: ebb counts a STOPPING instance as going (the
    /// delete was asked for), and the stand-in finishes it at its own pace. Fails on an
    /// instance that is not going.
    pub fn wait_deleted(&self) {
        let started = std::time::Instant::now();
        loop {
            let live = self.resources()["instances"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if live.is_empty() {
                return;
            }
            assert!(
                live.iter().all(|i| i["status"] == "STOPPING"),
                "an instance was left: {live:?}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "never deleted: {live:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A stand-in and a server on a fresh data dir (kept in the returned directory).
pub fn gcp_and_server() -> (Gcp, tempfile::TempDir, Server) {
    let gcp = Gcp::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&dir.path().join("data"), super::server::Options::default());
    (gcp, dir, server)
}

/// Creates USER profile `name` for `provisioner` against the stand-in; `props` add or replace.
pub fn gcp_profile(
    server: &Server,
    gcp: &Gcp,
    provisioner: &str,
    name: &str,
    props: &[(&str, &str)],
    timeout: Option<u64>,
) {
    let mut base = vec![
        ("projectId", PROJECT),
        ("endpoint", gcp.url.as_str()),
        ("anonymous", "true"),
    ];
    if provisioner == "gcp-compute" {
        base.extend([("zone", ZONE), ("machineType", "e2-small"), ("nodes", "3")]);
    } else {
        base.extend([("region", REGION), ("zone", ZONE)]);
    }
    put_profile(server, name, provisioner, &base, props, timeout);
}
