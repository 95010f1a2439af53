//! Real etcd servers for tests: Debian's `etcd-server` on free loopback ports, one member or
//! several, each with its data in a temporary directory.
//!
//! With `EBB_TEST_STORE=etcd` every test server keeps its state in etcd: one etcd per test
//! process ([`shared`]), and one key prefix per data directory, so a server restarted on the
//! same data directory finds its installation again, as it would find its redb file.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Whether this test run keeps servers' state in etcd (`EBB_TEST_STORE=etcd`) rather than in
/// redb files. Any other value but `redb` (or none) fails loudly.
pub fn enabled() -> bool {
    match std::env::var("EBB_TEST_STORE").as_deref() {
        Ok("etcd") => true,
        Ok("redb") | Ok("") | Err(_) => false,
        Ok(other) => panic!("EBB_TEST_STORE={other}: use redb or etcd"),
    }
}

/// The etcd of this test process, started on first use; it ends with the process.
pub fn shared() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| Cluster::start(1))
}

/// The `ebb serve` arguments that keep a server on `data_dir` in the shared etcd.
pub fn serve_args(data_dir: &Path) -> Vec<String> {
    vec![
        "--store".into(),
        "etcd".into(),
        "--etcd-endpoints".into(),
        shared().endpoints(),
        "--etcd-prefix".into(),
        prefix_of(data_dir),
    ]
}

/// The installation's key prefix for a data directory: the same for the same directory.
pub fn prefix_of(data_dir: &Path) -> String {
    // FNV-1a: stable across runs, unlike the standard hasher.
    let hash = data_dir
        .to_string_lossy()
        .bytes()
        .fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
        });
    format!("/ebb-test/{hash:016x}")
}

/// Runs etcd with the arguments given, and SIGKILLs it on SIGTERM (a member stopped, to be
/// started again on its data) or once the test process `EBB_TEST_PID` is gone; then also
/// removes the cluster's directory `EBB_TEST_ETCD_DIR`, which a process-wide cluster never
/// drops (each member's write-ahead log takes over 60 MB).
const WATCHDOG: &str = r#"
etcd "$@" &
e=$!
trap 'kill -9 $e 2>/dev/null; wait $e; exit 0' TERM
while kill -0 "$EBB_TEST_PID" 2>/dev/null && kill -0 $e 2>/dev/null; do sleep 0.2; done
kill -9 $e 2>/dev/null
wait $e
kill -0 "$EBB_TEST_PID" 2>/dev/null || rm -rf "$EBB_TEST_ETCD_DIR"
"#;

fn ensure_installed() {
    super::process::ensure_installed(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        "tests/support/etcd/setup.sh",
        "etcd's server",
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One etcd member.
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    child: Option<Child>,
}

/// An etcd cluster of one or more members on loopback. Every member is killed when dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
    pub members: Vec<Member>,
}

impl Cluster {
    /// Starts `size` members and waits until the cluster answers.
    pub fn start(size: usize) -> Cluster {
        ensure_installed();
        // A port found free may be taken by another process before etcd binds it: etcd then
        // exits, and the cluster starts again on other ports.
        for limit in [15, 15, 30] {
            let dir = tempfile::tempdir().expect("tempdir");
            let members: Vec<Member> = (0..size)
                .map(|i| Member {
                    name: format!("m{i}"),
                    client_port: free_port(),
                    peer_port: free_port(),
                    child: None,
                })
                .collect();
            let mut cluster = Cluster { dir, members };
            for i in 0..size {
                cluster.start_member(i);
            }
            if cluster.healthy_within(Duration::from_secs(limit)) {
                return cluster;
            }
        }
        panic!("etcd never became healthy, on three sets of ports");
    }

    /// Whether every running member answers healthy within `limit` (it has a leader); false
    /// as soon as one exited.
    fn healthy_within(&mut self, limit: Duration) -> bool {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("client");
        let deadline = Instant::now() + limit;
        for m in self.members.iter_mut().filter(|m| m.child.is_some()) {
            let url = format!("http://127.0.0.1:{}/health", m.client_port);
            loop {
                let healthy = http
                    .get(&url)
                    .send()
                    .ok()
                    .and_then(|r| r.json::<serde_json::Value>().ok())
                    .is_some_and(|v| v["health"] == "true");
                if healthy {
                    break;
                }
                let exited = m
                    .child
                    .as_mut()
                    .is_none_or(|c| c.try_wait().ok().flatten().is_some());
                if exited || Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        true
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts member `i` (again) on its data directory and ports.
    pub fn start_member(&mut self, i: usize) {
        let initial = self.initial_cluster();
        let data = self.dir.path().join(&self.members[i].name);
        let m = &mut self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        // A watchdog shell runs etcd and kills it when this test process ends (a process-wide
        // etcd is never dropped) or when told to (SIGTERM).
        let child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("sh")
            .env("EBB_TEST_PID", std::process::id().to_string())
            .env("EBB_TEST_ETCD_DIR", self.dir.path())
            .args(["--name", &m.name, "--data-dir"])
            .arg(&data)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                &initial,
                "--initial-cluster-state",
                "new",
            ])
            .args(["--initial-cluster-token", "ebb-test"])
            // The transaction size ebb needs (see the README), and quick elections on loopback.
            .args(["--max-txn-ops", "1024"])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start etcd: {e}"));
        m.child = Some(child);
    }

    /// SIGKILLs member `i`.
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    /// Every member's client URL, comma-separated.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Waits until every running member says it is healthy (it has a leader).
    pub fn wait_healthy(&mut self) {
        assert!(
            self.healthy_within(Duration::from_secs(30)),
            "etcd never became healthy"
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
    }
}

/// Deletes every key of the installation under `prefix` in the shared etcd, through etcd's
/// JSON gateway: the installation's store is gone, as a deleted redb file would be.
pub fn delete_installation(prefix: &str) {
    let start = prefix.as_bytes().to_vec();
    let mut end = start.clone();
    *end.last_mut().expect("a prefix") += 1;
    let url = format!("{}/v3/kv/deleterange", shared().endpoints());
    let reply = reqwest::blocking::Client::new()
        .post(&url)
        .json(&serde_json::json!({"key": base64(&start), "range_end": base64(&end)}))
        .send()
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    drop(reply);
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// How many keys of `cluster` start with `prefix`, through etcd's JSON gateway.
pub fn count_keys(cluster: &Cluster, prefix: &str) -> u64 {
    let start = prefix.as_bytes().to_vec();
    let mut end = start.clone();
    *end.last_mut().expect("a prefix") += 1;
    let url = format!(
        "http://127.0.0.1:{}/v3/kv/range",
        cluster.members[0].client_port
    );
    let reply: serde_json::Value = reqwest::blocking::Client::new()
        .post(&url)
        .json(&serde_json::json!({
            "key": base64(&start), "range_end": base64(&end), "count_only": true
        }))
        .send()
        .and_then(|r| r.json())
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    reply["count"]
        .as_str()
        .map_or(0, |c| c.parse().expect("a count"))
}
