//! Crash safety: SIGKILL the server at each point of a run's life, start it again on the same
//! data dir, and check the run ends right, its program ran once, and the sim cloud saw each
//! instance created once and deleted once.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::profiles::sim_profile;
use crate::support::runs::*;
use crate::support::server::{Options, Server};

/// A data dir, a sim cloud, and a marker file each program run appends its run id to.
struct Scenario {
    _dir: tempfile::TempDir,
    data: PathBuf,
    sim: PathBuf,
    marker: PathBuf,
}

impl Scenario {
    fn new() -> Scenario {
        let dir = tempfile::tempdir().expect("tempdir");
        let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
        let marker = dir.path().join("ran");
        Scenario {
            _dir: dir,
            data,
            sim,
            marker,
        }
    }

    fn server(&self) -> Server {
        Server::start_at(&self.data, Options::default())
    }

    /// Starts a server with sim profile `p` (`props`, `keepalive.failed` seconds) and app `a`
    /// whose program records itself, then runs `then`.
    fn begin(&self, props: &[(&str, &str)], keepalive_failed: u64, then: &str) -> Server {
        let server = self.server();
        sim_profile(&server, "p", &self.sim, props, keepalive_failed, None);
        let script = format!(
            "echo \"$EBB_RUN_ID\" >> '{}'; {then}",
            self.marker.display()
        );
        deploy(&server, "a", &script, json!({}));
        server
    }

    fn start(&self, server: &Server) -> String {
        start(server, "a", json!({"system.profile.name": "p"}))
    }

    fn ran(&self) -> usize {
        std::fs::read_to_string(&self.marker)
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// Waits (up to 30 s) until the sim's call log has a call `op`.
    #[track_caller]
    fn wait_for_call(&self, op: &str) {
        wait_for_call(&self.sim, op);
    }

    /// After a restart: the run ends `status`/DEPROVISIONED, ran once, and the sim is clean.
    fn assert_ended(&self, server: &Server, run: &str, status: &str, nodes: usize) -> Value {
        let done = wait_deprovisioned(server, run);
        assert_eq!(done["status"], status, "{done}");
        assert_eq!(self.ran(), 1);
        assert_clean(&self.sim, &[run], nodes);
        done
    }
}

#[test]
fn killed_mid_provisioning_resumes_without_creating_twice() {
    let s = Scenario::new();
    let server = s.begin(&[("nodes", "3"), ("createLatency", "1s")], 0, "true");
    let run = s.start(&server);
    s.wait_for_call("create");
    server.kill();
    s.assert_ended(&s.server(), &run, "COMPLETED", 3);
}

#[test]
fn killed_while_the_program_runs_reattaches_to_it() {
    let s = Scenario::new();
    let server = s.begin(&[("nodes", "3")], 0, "sleep 2; exit 0");
    let run = s.start(&server);
    wait_until(&server, &run, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    server.kill();

    let server = s.server();
    let running = server.get(&run).1;
    assert_eq!(
        running["status"], "RUNNING",
        "the program outlived the server: {running}"
    );
    let done = s.assert_ended(&server, &run, "COMPLETED", 3);
    assert_eq!(done["exit"]["code"], 0);
}

#[test]
fn killed_while_waiting_still_expires_on_time() {
    let s = Scenario::new();
    let server = s.begin(&[("nodes", "2")], 3, "exit 7");
    let run = s.start(&server);
    let waiting = wait_until(&server, &run, Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    assert_eq!(waiting["failure"]["kind"], "program");
    let expires = waiting["cluster"]["expiresAt"].as_u64().expect("expiresAt");
    server.kill();

    let server = s.server();
    assert_eq!(server.get(&run).1["cluster"]["status"], "WAITING");
    let done = s.assert_ended(&server, &run, "FAILED", 2);
    assert!(
        done["cluster"]["end"].as_u64().expect("end") >= expires,
        "{done}"
    );
}

#[test]
fn killed_mid_deprovisioning_deletes_each_instance_once() {
    let s = Scenario::new();
    let server = s.begin(&[("nodes", "3"), ("deleteLatency", "1s")], 0, "true");
    let run = s.start(&server);
    s.wait_for_call("delete");
    server.kill();
    s.assert_ended(&s.server(), &run, "COMPLETED", 3);
}

#[test]
fn repeated_kills_across_many_runs_leak_nothing() {
    let s = Scenario::new();
    let props = [
        ("nodes", "2"),
        ("createLatency", "200ms"),
        ("deleteLatency", "200ms"),
        ("lostCreateRate", "0.3"),
        ("transientErrorRate", "0.2"),
    ];
    let mut server = s.begin(&props, 0, "sleep 0.3");
    let runs: Vec<String> = (0..6).map(|_| s.start(&server)).collect();
    for pause in [150, 400, 250] {
        std::thread::sleep(Duration::from_millis(pause));
        server.kill();
        server = s.server();
    }
    for run in &runs {
        let done = wait_deprovisioned(&server, run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
    }
    assert_eq!(s.ran(), runs.len(), "each program ran exactly once");
    let ids: Vec<&str> = runs.iter().map(String::as_str).collect();
    assert_clean(&s.sim, &ids, 2);
}

/// SIGKILL in the middle of a template create: the restarted server resumes the same operation,
/// does not run again any task that had succeeded, and redoes only what the kill cut short.
#[test]
fn killed_mid_operation_resumes_without_redoing_completed_tasks() {
    let s = Scenario::new();
    let server = s.server();
    let trace = s._dir.path().join("trace");
    // Every action appends "<action> <service> <node>" to the trace, slowly enough to be killed
    // in the middle.
    let step = |action: &str| {
        json!({"type": "shell", "script": format!(
            "sleep 0.2; echo \"{action} $EBB_SERVICE $EBB_NODE\" >> '{}'", trace.display())})
    };
    let template = json!({
        "services": {
            "base": {"actions": {"install": step("install")}},
            "db": {"dependencies": {"install": {"requires": ["base"]}},
                   "actions": {"install": step("install"), "configure": step("configure"), "start": step("start")}},
            "web": {"dependencies": {"runtime": {"requires": ["db"]}},
                    "actions": {"install": step("install"), "start": step("start")}}
        },
        "hardwareTypes": {"any": {"sim": {}}}, "imageTypes": {"any": {"sim": {}}},
        "defaults": {"services": ["base", "db", "web"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/slow", template);
    assert_eq!(code, 200, "{body}");
    sim_profile(
        &server,
        "p",
        &s.sim,
        &[("nodes", "3"), ("template", "slow")],
        0,
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let run = s.start(&server);
    // Kill once a few actions have finished, well before all of them have.
    let started = Instant::now();
    while std::fs::read_to_string(&trace)
        .unwrap_or_default()
        .lines()
        .count()
        < 4
    {
        assert!(started.elapsed() < Duration::from_secs(30), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    let before: Vec<Value> = operations(&server, &run);
    server.kill();
    assert_eq!(
        before[0]["status"], "RUNNING",
        "killed too late: {before:?}"
    );
    let done_before: Vec<u64> = before[0]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter(|t| t["status"] == "SUCCEEDED")
        .map(|t| t["id"].as_u64().expect("id"))
        .collect();
    assert!(!done_before.is_empty(), "nothing had completed: {before:?}");

    let server = s.server();
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let ops = operations(&server, &run);
    assert_eq!(
        ops.len(),
        2,
        "the create was resumed, not started anew: {ops:?}"
    );
    let create = &ops[0];
    assert_eq!(create["status"], "SUCCEEDED");
    let lines = std::fs::read_to_string(&trace).unwrap_or_default();
    let mut redone = 0;
    for t in create["tasks"].as_array().expect("tasks") {
        let attempts = t["attempts"].as_array().expect("attempts");
        let id = t["id"].as_u64().expect("id");
        assert_eq!(t["status"], "SUCCEEDED", "{t}");
        if done_before.contains(&id) {
            assert_eq!(attempts.len(), 1, "a completed task ran again: {t}");
        }
        for a in &attempts[..attempts.len() - 1] {
            assert_eq!(a["error"], "interrupted by a restart", "{t}");
        }
        redone += attempts.len() - 1;
        if let Some(service) = t["service"].as_str() {
            let line = format!(
                "{} {service} {}",
                t["action"].as_str().expect("action"),
                t["node"].as_str().expect("node")
            );
            let ran = lines.lines().filter(|l| *l == line).count();
            // Once; twice only when the kill cut an attempt short (its script ran on).
            assert!(
                ran == 1 || (ran == 2 && attempts.len() == 2),
                "{line} ran {ran} times: {t}"
            );
        }
    }
    assert!(
        redone <= 3,
        "at most one task per node was in flight: {redone}"
    );
    assert_clean(&s.sim, &[&run], 3);
}

/// SIGKILL while an admin's expand runs: after the restart the same operation carries on, the
/// new nodes are made once each, and the run takes the cluster's new shape.
#[test]
fn killed_mid_expand_resumes_the_operation() {
    let s = Scenario::new();
    let server = s.server();
    let slow = json!({"type": "shell", "script": "sleep 0.3"});
    let template = json!({
        "services": {"svc": {"actions": {"configure": slow, "start": {"type": "shell", "script": "true"}}}},
        "hardwareTypes": {"any": {"sim": {}}}, "imageTypes": {"any": {"sim": {}}},
        "defaults": {"services": ["svc"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/t", template);
    assert_eq!(code, 200, "{body}");
    sim_profile(
        &server,
        "p",
        &s.sim,
        &[("nodes", "2"), ("template", "t")],
        0,
        None,
    );
    deploy(&server, "a", "sleep 120", json!({}));
    let run = s.start(&server);
    wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    let (code, reply) = server.post_json(
        &format!("{run}/cluster"),
        json!({"operation": "expand", "nodes": 2}),
    );
    assert_eq!(code, 200, "{reply}");
    let id = reply["id"].as_u64().expect("id");
    // Kill once the new instances exist, while their services are being configured.
    let started = Instant::now();
    while instances(&s.sim).len() < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no new instances"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    server.kill();

    let server = s.server();
    let done = wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["cluster"]["numNodes"] == 4
    });
    assert_eq!(done["status"], "RUNNING", "{done}");
    let ops = operations(&server, &run);
    assert_eq!(ops.len(), 2, "resumed, not started anew: {ops:?}");
    assert_eq!(ops[1]["id"], id);
    assert_eq!(ops[1]["status"], "SUCCEEDED", "{}", ops[1]);
    let (code, _) = server.post_json(&format!("{run}/stop"), json!({}));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &run);
    assert_clean(&s.sim, &[&run], 4);
}

/// A template whose service `svc` starts a beating daemon (`<pid> <epoch ns>` lines in
/// `beats`) unless one runs already, slowly: after it checks and before it starts, it sleeps
/// six seconds, so two start attempts at once would start two daemons. `trace` gets a line
/// each time a start goes past its check. The daemon stops by itself once `halt` exists or
/// its directory is gone.
pub(crate) fn put_slow_start_template(
    server: &Server,
    provisioner: &str,
    trace: &std::path::Path,
    beats: &std::path::Path,
    halt: &std::path::Path,
) {
    let daemon = format!(
        "while [ ! -e '{halt}' ] && [ -d '{dir}' ]; do echo \"$$ $(date +%s%N)\" >> '{beats}'; sleep 0.1; done",
        halt = halt.display(),
        beats = beats.display(),
        dir = halt.parent().expect("a directory").display(),
    );
    let start = format!(
        "if [ -s svc.pid ] && kill -0 \"$(cat svc.pid)\" 2>/dev/null; then echo 'svc runs already'; exit 0; fi\n\
         echo begun >> '{trace}'\n\
         sleep 6\n\
         nohup sh -c '{daemon}' > /dev/null 2>&1 &\n\
         echo $! > svc.pid\n",
        trace = trace.display(),
        daemon = daemon.replace('\'', "'\\''"),
    );
    let template = json!({
        "services": {
            "svc": {"actions": {
                "start": {"type": "shell", "script": start},
                "stop": {"type": "shell", "script": "kill \"$(cat svc.pid)\" 2>/dev/null; rm -f svc.pid"}
            }}
        },
        "hardwareTypes": {"any": {provisioner: {}}}, "imageTypes": {"any": {provisioner: {}}},
        "defaults": {"services": ["svc"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/slow-start", template);
    assert_eq!(code, 200, "{body}");
}

/// Stops the test's daemons however the test ends (its `halt` file).
pub(crate) struct Halt(pub std::path::PathBuf);

impl Drop for Halt {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "");
    }
}

/// Waits until `trace` has `n` lines.
#[track_caller]
pub(crate) fn wait_for_lines(trace: &std::path::Path, n: usize) {
    let began = Instant::now();
    while std::fs::read_to_string(trace)
        .unwrap_or_default()
        .lines()
        .count()
        < n
    {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "{} never had {n} line(s)",
            trace.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILLed while a service's start runs on a `local` node: the start goes on without its
/// server; the server started again runs the task again only once that start has ended (it
/// waits, and says so), finds the daemon it started and starts no second one.
#[test]
fn killed_mid_start_waits_for_the_start_it_began_and_starts_no_second_daemon() {
    let s = Scenario::new();
    let (trace, beats_file) = (s.data.join("../trace"), s.data.join("../beats"));
    let _halt = Halt(s.data.join("../halt"));
    let server = s.server();
    put_slow_start_template(&server, "local", &trace, &beats_file, &_halt.0);
    let profile = crate::support::profiles::profile_body(
        "local",
        &[("nodes", "1", true), ("template", "slow-start", true)],
    );
    let (code, body) = server.put("/v3/namespaces/default/profiles/slow", profile);
    assert_eq!(code, 200, "{body}");
    deploy(&server, "a", "true", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "slow"}));
    wait_for_lines(&trace, 1);
    server.kill();

    let server = s.server();
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let seen = beats(&beats_file);
    assert_eq!(seen.len(), 1, "two daemons: {seen:?}");
    assert!(
        said_in(&s.data, "waiting for it to end"),
        "the restarted server did not say it waited"
    );
}

/// Whether a file under `dir` holds `text` (a node's log on the server).
pub(crate) fn said_in(dir: &std::path::Path, text: &str) -> bool {
    std::process::Command::new("grep")
        .args(["-rqF", text])
        .arg(dir)
        .status()
        .expect("grep")
        .success()
}
