//! Helpers for run tests: apps, starting runs, waiting, and reading the sim
//! cloud's state directory.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::server::Server;

/// A program's script that runs as long as this test's process does, and no longer: for a
/// program that must keep running through the test. (`sleep 600` outlived the test by
/// minutes: a program outlives its server by design.)
pub fn while_the_test_runs() -> String {
    format!(
        "while kill -0 {} 2>/dev/null; do sleep 0.5; done",
        std::process::id()
    )
}

/// Deploys app `app` in `default` with one program `p` running `script` under `sh -c`.
pub fn deploy(server: &Server, app: &str, script: &str, extra: Value) -> Value {
    deploy_in(server, "default", app, script, extra)
}

/// Deploys app `app` in namespace `ns` with one program `p` running `script` under `sh -c`.
pub fn deploy_in(server: &Server, ns: &str, app: &str, script: &str, extra: Value) -> Value {
    let mut program = json!({"type": "workflows", "name": "p", "command": ["sh", "-c", script]});
    if let (Some(p), Some(e)) = (program.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let (code, body) = server.put(
        &format!("/v3/namespaces/{ns}/apps/{app}"),
        json!({ "programs": [program] }),
    );
    assert_eq!(code, 200, "{body}");
    body
}

/// The path of program `p` of `app`.
pub fn program(app: &str) -> String {
    program_in("default", app)
}

/// The path of program `p` of `app` in namespace `ns`.
pub fn program_in(ns: &str, app: &str) -> String {
    format!("/v3/namespaces/{ns}/apps/{app}/workflows/p")
}

/// Starts a run of `app`'s program with `args`; returns the run's path.
pub fn start(server: &Server, app: &str, args: Value) -> String {
    start_in(server, "default", app, args)
}

/// Starts a run of program `p` of `app` in namespace `ns` with `args`; returns the run's
/// path.
pub fn start_in(server: &Server, ns: &str, app: &str, args: Value) -> String {
    let program = program_in(ns, app);
    let (code, body) = server.post_json(&format!("{program}/start"), args);
    assert_eq!(code, 200, "{body}");
    format!("{program}/runs/{}", body["runId"].as_str().expect("runId"))
}

/// Polls run `path` until `done` holds (or panics after `limit`); returns the run.
#[track_caller]
pub fn wait_until(
    server: &Server,
    path: &str,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let (code, run) = server.get(path);
        assert_eq!(code, 200, "{run}");
        if done(&run) {
            return run;
        }
        if started.elapsed() > limit {
            let (_, events) = server.get(&format!("{path}/events"));
            panic!("run never reached the expected state: {run}\nevents: {events}");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Waits until the run's cluster is DEPROVISIONED.
#[track_caller]
pub fn wait_deprovisioned(server: &Server, path: &str) -> Value {
    wait_until(server, path, Duration::from_secs(60), |r| {
        r["cluster"]["status"] == "DEPROVISIONED"
    })
}

/// Deploys app `a`, whose program waits until file `gate` exists and then runs `then` (shell;
/// may be empty), starts it on profile `profile`, and waits (up to 60 s) until it runs.
/// Answers the run's path.
pub fn gated_run(server: &Server, profile: &str, gate: &Path, then: &str) -> String {
    let script = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done; {then}",
        gate.display()
    );
    deploy(server, "a", script.trim_end_matches("; "), json!({}));
    let run = start(server, "a", json!({"system.profile.name": profile}));
    wait_until(server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    run
}

/// Waits (up to 30 s) until the sim's call log holds `count` calls that `matches` (`what`
/// names them in the failure).
#[track_caller]
pub fn wait_for_calls(
    state_dir: &Path,
    count: usize,
    what: &str,
    matches: impl Fn(&Value) -> bool,
) {
    let started = Instant::now();
    while calls(state_dir).iter().filter(|c| matches(c)).count() < count {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never saw {count} {what} call(s)"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits (up to 30 s) until the sim's call log has a call `op`.
#[track_caller]
pub fn wait_for_call(state_dir: &Path, op: &str) {
    wait_for_calls(state_dir, 1, op, |c| c["op"] == op);
}

/// Waits until every one of `runs` is DEPROVISIONED and COMPLETED, then checks the sim cloud
/// as [`assert_clean`] does.
#[track_caller]
pub fn assert_all_completed(server: &Server, runs: &[String], state_dir: &Path, nodes: usize) {
    for run in runs {
        let done = wait_deprovisioned(server, run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
    let ids: Vec<&str> = runs.iter().map(String::as_str).collect();
    assert_clean(state_dir, &ids, nodes);
}

/// The time now, in epoch seconds (as the sim and the run events give it).
pub fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The time now, in nanoseconds since the epoch (as a beating program's `date +%s%N`).
pub fn epoch_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_nanos()
}

/// The copies of a beating program in `path` (`<pid> <epoch ns>` lines): each pid with its
/// first and last beat, in order of first beat.
pub fn beats(path: &Path) -> Vec<(String, u128, u128)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out: Vec<(String, u128, u128)> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(pid), Some(at)) = (words.next(), words.next().and_then(|t| t.parse().ok()))
        else {
            continue;
        };
        match out.iter_mut().find(|(p, ..)| p == pid) {
            Some(seen) => seen.2 = at,
            None => out.push((pid.to_string(), at, at)),
        }
    }
    out
}

/// Waits until the `copy`-th copy (pid) of a beating program has beaten for 0.4 s; answers
/// the beats.
#[track_caller]
pub fn wait_for_beats(path: &Path, copy: usize, limit: Duration) -> Vec<(String, u128, u128)> {
    let start = std::time::Instant::now();
    loop {
        let seen = beats(path);
        if seen.len() > copy && seen[copy].2 >= seen[copy].1 + 400_000_000 {
            return seen;
        }
        assert!(
            start.elapsed() < limit,
            "copy {copy} did not beat: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the program's copies have all stopped beating for a second (up to `limit`);
/// answers the beats.
#[track_caller]
pub fn wait_for_silence(file: &Path, limit: Duration) -> Vec<(String, u128, u128)> {
    let began = std::time::Instant::now();
    loop {
        let seen = beats(file);
        let last = seen.iter().map(|b| b.2).max().unwrap_or(0);
        if epoch_ns().saturating_sub(last) > 1_000_000_000 {
            return seen;
        }
        assert!(began.elapsed() < limit, "the program beats on: {seen:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One line of the sim's call log.
pub fn calls(state_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(state_dir.join("calls.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("call log line"))
        .collect()
}

/// Every instance the sim holds. A file the sim has just created and not yet written (it
/// writes under its own lock, which this does not take) is one it does not hold yet.
pub fn instances(state_dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(state_dir.join("resources")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| std::fs::read(p).expect("read"))
        .filter(|bytes| !bytes.is_empty())
        .map(|bytes| serde_json::from_slice(&bytes).expect("instance"))
        .collect()
}

/// The sim instances of `run`'s node `node`, oldest first.
pub fn instances_of(sim: &Path, run: &str, node: &str) -> Vec<Value> {
    let id = run.rsplit('/').next().expect("id");
    let mut found: Vec<Value> = instances(sim)
        .into_iter()
        .filter(|i| i["tags"]["ebb:run"] == id && i["tags"]["ebb:node"] == node)
        .collect();
    let at = |i: &Value| i["createdAt"].as_f64().unwrap_or_default();
    found.sort_by(|a, b| at(a).total_cmp(&at(b)));
    found
}

/// What a sim cloud was asked, by kind of call: successful creates, deletes and describes, a
/// cluster's shared lookups (a list by the run's tag alone), a node's finds (a list naming the
/// node), and the calls it throttled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    pub creates: usize,
    pub deletes: usize,
    pub describes: usize,
    pub lookups: usize,
    pub finds: usize,
    pub throttled: usize,
}

/// The calls of the sim cloud in `state_dir`, counted by kind.
pub fn call_counts(state_dir: &Path) -> CallCounts {
    let mut counts = CallCounts::default();
    for c in calls(state_dir) {
        if c["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("RequestLimitExceeded"))
        {
            counts.throttled += 1;
        }
        if c["ok"] != true {
            continue;
        }
        let named = |tag: &str| c["tags"].get(tag).is_some();
        match c["op"].as_str() {
            Some("create") => counts.creates += 1,
            Some("delete") => counts.deletes += 1,
            Some("describe") => counts.describes += 1,
            Some("list") if named("ebb:node") => counts.finds += 1,
            Some("list") if named("ebb:run") => counts.lookups += 1,
            Some(_) | None => {}
        }
    }
    counts
}

/// A temporary directory with a server's data dir and a sim cloud's state dir in it.
pub fn sim_scenario() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let sim = dir.path().join("sim");
    std::fs::create_dir_all(&data).expect("data");
    std::fs::create_dir_all(&sim).expect("sim");
    (dir, data, sim)
}

/// Checks the sim cloud after every run is over: each node got exactly one instance, every
/// instance was deleted exactly once and is terminated.
#[track_caller]
pub fn assert_clean(state_dir: &Path, runs: &[&str], nodes: usize) {
    let all = instances(state_dir);
    for run in runs {
        let run_id = run.rsplit('/').next().expect("id");
        let mine: Vec<&Value> = all
            .iter()
            .filter(|i| i["tags"]["ebb:run"] == run_id)
            .collect();
        let mut names: Vec<&str> = mine
            .iter()
            .map(|i| i["tags"]["ebb:node"].as_str().expect("node"))
            .collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(
            before,
            names.len(),
            "a node of run {run_id} was created twice: {mine:?}"
        );
        assert_eq!(names.len(), nodes, "run {run_id}: {mine:?}");
    }
    let log = calls(state_dir);
    for instance in &all {
        let id = instance["id"].as_str().expect("id");
        assert_eq!(
            instance["state"], "terminated",
            "instance left behind: {instance}"
        );
        // Counted by the sim in the same write as the deletion itself.
        assert_eq!(
            instance["deleteCalls"], 1,
            "instance {id} deleted more or less than once: {instance}"
        );
        let logged = log
            .iter()
            .filter(|c| c["op"] == "delete" && c["id"] == id && c["ok"] == true)
            .count();
        assert!(logged <= 1, "instance {id} deleted {logged} times");
    }
}

/// Asserts the `local` provisioner left no sandbox in the work dir of the server on `data_dir`.
#[track_caller]
pub fn assert_no_sandboxes(data_dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(super::server::work_dir(data_dir).join("local"))
        .expect("local dir")
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    assert!(left.is_empty(), "sandboxes left behind: {left:?}");
}

/// A fresh directory under `dir`.
pub fn sub(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::create_dir_all(&p).expect("mkdir");
    p
}

/// The operations on run `path`'s cluster.
pub fn operations(server: &Server, path: &str) -> Vec<Value> {
    let (code, body) = server.get(&format!("{path}/operations"));
    assert_eq!(code, 200, "{body}");
    body.as_array().cloned().expect("operations")
}

/// The tasks of operation `op` matching `action` and `service` (`None` for node tasks).
pub fn tasks<'a>(op: &'a Value, action: &str, service: Option<&str>) -> Vec<&'a Value> {
    op["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter(|t| t["action"] == action && t["service"].as_str() == service)
        .collect()
}

/// When a task's last attempt started and finished.
pub fn span(task: &Value) -> (f64, f64) {
    let last = task["attempts"]
        .as_array()
        .and_then(|a| a.last())
        .unwrap_or_else(|| panic!("no attempt: {task}"));
    (
        last["started"].as_f64().expect("started"),
        last["finished"].as_f64().expect("finished"),
    )
}

/// Asserts every task of `first` finished before any task of `then` started.
#[track_caller]
pub fn assert_before(first: &[&Value], then: &[&Value]) {
    assert!(!first.is_empty() && !then.is_empty(), "nothing to compare");
    let done = first.iter().map(|t| span(t).1).fold(f64::MIN, f64::max);
    let begun = then.iter().map(|t| span(t).0).fold(f64::MAX, f64::min);
    assert!(
        done <= begun,
        "{first:?} did not finish before {then:?} began"
    );
}

/// Every file under `dir`, read as bytes.
pub fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path, bytes));
            }
        }
    }
    out
}

/// A run of app `app` (deployed here, its program failing) whose cluster of `nodes` sim nodes
/// is kept WAITING for an hour, under USER profile `kept` (its cloud in `dir`); returns the
/// run's path.
pub fn kept_failed_run(server: &Server, dir: &tempfile::TempDir, app: &str, nodes: &str) -> String {
    super::profiles::sim_profile(
        server,
        "kept",
        &sub(dir, "sim"),
        &[("nodes", nodes)],
        3600,
        None,
    );
    deploy(server, app, "echo broken >&2; exit 3", json!({}));
    let run = start(server, app, json!({"system.profile.name": "kept"}));
    wait_until(server, &run, Duration::from_secs(60), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    run
}

/// Polls operation `id` of run `run` until it has ended (within a minute); returns it.
pub fn wait_op(server: &Server, run: &str, id: u64) -> Value {
    wait_op_within(server, run, id, std::time::Duration::from_secs(60))
}

/// Polls operation `id` of run `run` until it has ended, for at most `limit`; returns it.
pub fn wait_op_within(server: &Server, run: &str, id: u64, limit: std::time::Duration) -> Value {
    let started = std::time::Instant::now();
    loop {
        let (code, op) = server.get(&format!("{run}/operations/{id}"));
        assert_eq!(code, 200, "{op}");
        if op["status"] != "RUNNING" {
            return op;
        }
        assert!(started.elapsed() < limit, "{op}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Posts an operation on run `run`'s cluster; returns its id.
#[track_caller]
pub fn cluster_op(server: &Server, run: &str, body: Value) -> u64 {
    let (code, reply) = server.post_json(&format!("{run}/cluster"), body);
    assert_eq!(code, 200, "{reply}");
    reply["id"].as_u64().expect("id")
}

/// The state of each service on each node of `run`, as the run shows it.
pub fn service_states(server: &Server, run: &str) -> Vec<(String, String, String)> {
    let (code, view) = server.get(run);
    assert_eq!(code, 200, "{view}");
    let mut states = Vec::new();
    for node in view["cluster"]["nodes"].as_array().expect("nodes") {
        let name = node["name"].as_str().expect("name");
        for (service, state) in node["services"].as_object().into_iter().flatten() {
            let state = state.as_str().expect("a state").to_string();
            states.push((name.to_string(), service.clone(), state));
        }
    }
    states
}

/// Asserts every node of `run` has exactly `expected` (service, state) pairs.
#[track_caller]
pub fn assert_states(server: &Server, run: &str, nodes: usize, expected: &[(&str, &str)]) {
    let states = service_states(server, run);
    assert_eq!(states.len(), nodes * expected.len(), "{states:?}");
    for (_, service, state) in &states {
        let want = expected
            .iter()
            .find(|(s, _)| s == service)
            .unwrap_or_else(|| panic!("{service} is not expected: {states:?}"));
        assert_eq!(state, want.1, "{service}: {states:?}");
    }
}

/// What `ebb run get` prints for run `api` (its API path), with the server's admin token.
#[track_caller]
pub fn cli_run_get(server: &Server, api: &str) -> String {
    // /v3/namespaces/{ns}/apps/{app}/workflows/{program}/runs/{run}
    let parts: Vec<&str> = api.trim_start_matches('/').split('/').collect();
    let run = format!("{}/{}/{}/{}", parts[2], parts[4], parts[6], parts[8]);
    let token = server.token().unwrap_or_default();
    let (code, out, err) = super::server::run_ebb(
        &["--server", &server.url, "run", "get", &run],
        &[("EBB_TOKEN", token.as_str())],
        None,
    );
    assert_eq!(code, 0, "{err}");
    out
}
