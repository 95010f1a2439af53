//! What the benchmarks that drive a real `ebb serve` share: starting it, and JSON calls.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A running `ebb serve` on a loopback port, killed when dropped.
pub struct Server {
    child: Child,
    pub url: String,
    pub http: reqwest::blocking::Client,
}

impl Server {
    /// Starts `ebb serve` on `data` and waits until it listens.
    pub fn start(data: &Path, clients: usize) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ebb"))
            .args(["serve", "--bind", "127.0.0.1:0", "--log-format", "json"])
            .arg("--data-dir")
            .arg(data)
            .arg("--work-dir")
            .arg(data.join("work"))
            .env("EBB_LOG", "warn,ebb::server=info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ebb serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let url = loop {
            let line = lines.next().expect("server exited").expect("read log");
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if v["message"] == "listening" {
                break v["url"].as_str().expect("url").to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(120))
            .pool_max_idle_per_host(clients)
            .build()
            .expect("client");
        Server { child, url, http }
    }

    /// PUTs `body` at `path`, panicking on an error reply.
    pub fn put(&self, path: &str, body: Value) {
        let res = self
            .http
            .put(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .expect("put");
        assert!(
            res.status().is_success(),
            "{path}: {}",
            res.text().unwrap_or_default()
        );
    }

    /// GETs `path` as JSON.
    pub fn get(&self, path: &str) -> Value {
        self.http
            .get(format!("{}{path}", self.url))
            .send()
            .expect("get")
            .json()
            .expect("json reply")
    }

    /// POSTs `body` to `path`; the reply as JSON.
    pub fn post(&self, path: &str, body: Value) -> Value {
        self.http
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .expect("post")
            .json()
            .expect("json reply")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Long-polls run `run`'s events (under `program`, a path) until one whose message is `until`;
/// panics on a failure.
pub fn wait_for_event(server: &Server, program: &str, run: &str, until: &str) {
    let mut after = 0u64;
    loop {
        let events = server.get(&format!(
            "{program}/runs/{run}/events?after={after}&wait=30s"
        ));
        for e in events.as_array().expect("list") {
            after = e["seq"].as_u64().unwrap_or(after);
            if e["message"] == until {
                return;
            }
            assert!(
                !e["message"].as_str().unwrap_or("").contains("FAILED"),
                "run {run} failed: {e}"
            );
        }
    }
}
