//! The local stand-in for the Compute Engine and Dataproc REST APIs
//! (`tests/support/gcp/server.py`, Python's standard library only), started per test.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use super::harness::Server;

pub const PROJECT: &str = "ebb-test";
pub const ZONE: &str = "us-central1-a";
pub const REGION: &str = "us-central1";

/// A running stand-in. Killed when dropped.
pub struct Gcp {
    child: Child,
    pub url: String,
    http: reqwest::blocking::Client,
}

impl Gcp {
    pub fn start() -> Gcp {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/gcp/server.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .args(["--delay", "0.3"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the tests need python3 for the Google Cloud stand-in");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the stand-in prints its port");
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the stand-in did not start: {line}"));
        Gcp {
            child,
            url: format!("http://127.0.0.1:{port}"),
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

    /// Changes the stand-in's settings (`delay`, `natPrefix`/`natStart`).
    pub fn config(&self, settings: Value) {
        self.control(reqwest::Method::POST, "config", settings);
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
}

impl Drop for Gcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    super::runs_support::put_profile(server, name, provisioner, &base, props, timeout);
}
