//! What the benchmarks that drive a real `ebb serve` share: their settings from the
//! environment, and a server with a sim profile and an app whose program does nothing.

use std::path::PathBuf;

use serde_json::json;

use super::profiles::{profile_body, put_profile_body};
use super::server::{Options, Server};

/// A benchmark's setting `name` from the environment, else `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A server (the binary `EBB_BENCH_BIN`, default: this build's) on a data dir under
/// `EBB_BENCH_DIR` (default: the target directory) and app
/// `bench`, whose program `p` runs `true` on `nodes` nodes of the zero-latency sim cloud, kept
/// under `EBB_BENCH_SIM_DIR` (default: beside the data dir). Both directories go when dropped.
pub struct Bench {
    pub server: Server,
    _dirs: (tempfile::TempDir, Option<tempfile::TempDir>),
}

impl Bench {
    pub fn start(nodes: usize) -> Bench {
        let base =
            std::env::var("EBB_BENCH_DIR").unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").into());
        let dir = tempfile::tempdir_in(base).expect("tempdir");
        // The simulated cloud's files are the cloud, not ebb's: they may live elsewhere.
        let sim_dir = std::env::var("EBB_BENCH_SIM_DIR")
            .ok()
            .map(|b| tempfile::tempdir_in(b).expect("sim tempdir"));
        let sim: PathBuf = sim_dir
            .as_ref()
            .map_or_else(|| dir.path().join("sim"), |d| d.path().to_path_buf());
        let options = Options {
            env: vec![bench_log()],
            unchecked: true,
            binary: other_build(),
            ..Options::default()
        };
        let server = Server::start_at(&dir.path().join("data"), options);
        let nodes = nodes.to_string();
        let sim = sim.to_str().expect("utf-8");
        put_profile_body(
            &server,
            "bench",
            profile_body("sim", &[("nodes", &nodes, false), ("stateDir", sim, false)]),
        );
        let (code, body) = server.put(
            "/v3/namespaces/default/apps/bench",
            json!({"config": {"system.profile.name": "bench"},
                   "programs": [{"type": "workflows", "name": "p", "command": ["true"]}]}),
        );
        assert_eq!(code, 200, "{body}");
        Bench {
            server,
            _dirs: (dir, sim_dir),
        }
    }
}

/// The log a benchmark's server keeps (`EBB_LOG`): warnings, and the API's requests.
pub fn bench_log() -> (String, String) {
    ("EBB_LOG".into(), "warn,ebb::server=info".into())
}

/// Server `name` of `install` for a benchmark: set up as [`Bench`]'s (its answers not
/// checked against the contract, warnings and the API's log only), so the figures of the
/// benchmarks compare.
pub fn bench_server(install: &super::installation::Installation, name: &str) -> Server {
    let (name_of, log) = bench_log();
    let options = Options {
        // And the line that says the server joined, which the start waits for.
        env: vec![(name_of, format!("{log},ebb::runtime::membership=info"))],
        unchecked: true,
        ..Options::default()
    };
    install.server_with_options(name, &[], options)
}

/// Another build's `ebb` to run instead of this one (`EBB_BENCH_BIN`), for a side-by-side.
pub fn other_build() -> Option<PathBuf> {
    std::env::var_os("EBB_BENCH_BIN").map(PathBuf::from)
}

/// Long-polls the events of run `path` until one whose message is `until`; panics on a
/// failure.
pub fn wait_for_event(server: &Server, path: &str, until: &str) {
    let mut after = 0u64;
    loop {
        let (code, events) = server.get(&format!("{path}/events?after={after}&wait=10s"));
        assert_eq!(code, 200, "{events}");
        for e in events.as_array().expect("list") {
            after = e["seq"].as_u64().unwrap_or(after);
            if e["message"] == until {
                return;
            }
            assert!(
                !e["message"].as_str().unwrap_or("").contains("FAILED"),
                "run {path} failed: {e}"
            );
        }
    }
}

/// The `p` quantile (0 to 1) of `sorted`; zero when empty.
pub fn percentile(sorted: &[std::time::Duration], p: f64) -> std::time::Duration {
    if sorted.is_empty() {
        return std::time::Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// The CPU time process `pid` has used so far, and that of its children it has reaped (the
/// programs a server ran), from `/proc` (Linux; `None` elsewhere).
pub fn cpu_of(pid: u32) -> Option<(std::time::Duration, std::time::Duration)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<u64> = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // utime, stime, cutime, cstime: fields 14 to 17 of proc(5), in ticks of USER_HZ (100).
    let ticks = |n: u64| std::time::Duration::from_millis(n * 10);
    let field = |i: usize| fields.get(i - 3).copied();
    Some((
        ticks(field(14)? + field(15)?),
        ticks(field(16)? + field(17)?),
    ))
}

/// CPU time so far of the server, the programs it ran, and the benchmark's etcd member (on
/// etcd), for [`cpu_per_run`].
pub fn cpu_now(server: &Server) -> Vec<(&'static str, std::time::Duration)> {
    let etcd = super::etcd::enabled()
        .then(|| super::etcd::shared().member_pid(0))
        .flatten();
    cpu_of_all(&[server], etcd)
}

/// CPU time so far of `servers` together, of the programs they ran, and of the etcd member
/// whose process is `etcd`, for [`cpu_per_run`].
pub fn cpu_of_all(
    servers: &[&Server],
    etcd: Option<u32>,
) -> Vec<(&'static str, std::time::Duration)> {
    let (mut own, mut children) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    for (o, c) in servers.iter().filter_map(|s| cpu_of(s.pid())) {
        own += o;
        children += c;
    }
    let mut cpu = if servers.len() > 1 {
        vec![("servers", own), ("the programs they ran", children)]
    } else {
        vec![("server", own), ("the programs it ran", children)]
    };
    if let Some((etcd, _)) = etcd.and_then(cpu_of) {
        cpu.push(("etcd", etcd));
    }
    cpu
}

/// What the CPU time between `before` and `after` comes to per lifecycle, as one line: a
/// figure the other work on a shared machine disturbs much less than a rate does.
pub fn cpu_per_run(
    before: &[(&'static str, std::time::Duration)],
    after: &[(&'static str, std::time::Duration)],
    runs: usize,
) -> Option<String> {
    if after.is_empty() || runs == 0 {
        return None;
    }
    let per: Vec<(&str, f64)> = after
        .iter()
        .map(|(what, a)| {
            let b = before
                .iter()
                .find(|(w, _)| w == what)
                .map_or(std::time::Duration::ZERO, |(_, b)| *b);
            (*what, a.saturating_sub(b).as_secs_f64() * 1e3 / runs as f64)
        })
        .collect();
    let total: f64 = per.iter().map(|(_, ms)| ms).sum();
    let parts: Vec<String> = per
        .iter()
        .map(|(what, ms)| format!("{what} {ms:.1} ms"))
        .collect();
    Some(format!(
        "CPU per lifecycle: {total:.1} ms ({})",
        parts.join(", ")
    ))
}

/// The server's figures so far, from its `/metrics`: the API requests it answered
/// (`requests`), its requests to etcd by kind (`ebb_store_round_trips_total`, `trip <kind>`;
/// none on redb), and its store's commits
/// (`commits` that succeeded and the `writes` they carried; all `commit attempts` and the
/// `commit seconds` they took).
pub fn server_figures(server: &Server) -> std::collections::BTreeMap<String, f64> {
    let text = reqwest::blocking::Client::new()
        .get(format!("{}/metrics", server.url))
        .bearer_auth(server.token().expect("token"))
        .send()
        .and_then(|r| r.text())
        .expect("metrics");
    let figure = |l: &str| -> Option<(String, f64)> {
        // One line per route, method and status: their sum is every request answered.
        if let Some(l) = l.strip_prefix("ebb_http_requests_total{") {
            let (_, value) = l.rsplit_once(' ')?;
            return Some(("requests".to_string(), value.trim().parse().ok()?));
        }
        if let Some(l) = l.strip_prefix("ebb_store_round_trips_total{kind=\"") {
            let (kind, rest) = l.split_once("\"}")?;
            return Some((format!("trip {kind}"), rest.trim().parse().ok()?));
        }
        let (name, value) = l.split_once(' ')?;
        let name = match name.split_once('{').map_or(name, |(n, _)| n) {
            "ebb_store_commit_batch_size_count" => "commits",
            "ebb_store_commit_batch_size_sum" => "writes",
            "ebb_store_commit_seconds_count" => "commit attempts",
            "ebb_store_commit_seconds_sum" => "commit seconds",
            _ => return None,
        };
        Some((name.to_string(), value.trim().parse().ok()?))
    };
    let mut figures = std::collections::BTreeMap::new();
    for (name, value) in text.lines().filter_map(figure) {
        *figures.entry(name).or_insert(0.0) += value;
    }
    figures
}

/// What `after - before` comes to per lifecycle, as lines: the API requests the server
/// answered, the store's commits (writes per commit, mean commit time) and, on etcd, its
/// round trips.
pub fn figures_per_run(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
    runs: usize,
) -> Option<String> {
    let delta = |kind: &str| {
        after.get(kind).copied().unwrap_or(0.0) - before.get(kind).copied().unwrap_or(0.0)
    };
    let commits = delta("commits");
    if commits <= 0.0 {
        return None;
    }
    let mut lines = vec![format!(
        "API requests per lifecycle: {:.1}",
        delta("requests") / runs as f64
    )];
    lines.push(format!(
        "store commits per lifecycle: {:.1}, carrying {:.1} writes ({:.1} per commit, {:.2} ms each on average)",
        commits / runs as f64,
        delta("writes") / runs as f64,
        delta("writes") / commits,
        delta("commit seconds") * 1e3 / delta("commit attempts").max(1.0),
    ));
    let trips: Vec<&str> = after
        .keys()
        .filter_map(|k| k.strip_prefix("trip "))
        .collect();
    if !trips.is_empty() {
        let per = |kind: &str| delta(&format!("trip {kind}")) / runs as f64;
        let kinds: Vec<String> = trips.iter().map(|k| format!("{k} {:.1}", per(k))).collect();
        let total: f64 = trips.iter().map(|k| per(k)).sum();
        lines.push(format!(
            "etcd round trips per lifecycle: {total:.1} ({})",
            kinds.join(", ")
        ));
    }
    Some(lines.join("\n"))
}
