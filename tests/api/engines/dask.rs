//! The shipped `dask` template: a real Dask cluster (`distributed` from PyPI) on three `local`
//! nodes, a scheduler with two registered workers, runs the shipped example's computation
//! with its checked answer, and heals a killed worker, which registers again.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;
use crate::support::runs::{deploy, start, wait_until, while_the_test_runs};
use crate::support::server::Server;

const LIMIT: Duration = Duration::from_secs(120);

/// The profile `name` of `nodes` `local` nodes on the `dask` template, with the tests' Python.
fn profile(server: &Server, name: &str, nodes: u32) {
    let config = serde_json::json!({"pythonEnv": setup_python()}).to_string();
    local_profile(
        server,
        name,
        nodes,
        "dask",
        &[("templateConfig", config.as_str())],
    );
}

/// The workers the scheduler whose dashboard is `dashboard` lists: (name, host).
fn workers(dashboard: &str) -> Vec<(String, String)> {
    let url = format!(
        "{}/json/identity.json",
        dashboard.trim_end_matches("/status")
    );
    let Ok(reply) = reqwest::blocking::get(&url) else {
        return Vec::new();
    };
    let Ok(identity) = reply.json::<Value>() else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = identity["workers"]
        .as_object()
        .map(|w| {
            w.values()
                .map(|w| {
                    (
                        w["name"].as_str().unwrap_or_default().to_string(),
                        w["host"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn a_scheduler_with_two_workers_runs_the_example_with_its_checked_answer() {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    profile(&server, "held", 3);
    deploy(
        &server,
        "hold",
        &while_the_test_runs(),
        serde_json::json!({}),
    );
    let run = start(&server, "hold", on("held"));
    let view = wait_until(&server, &run, LIMIT, |r| r["status"] == "RUNNING");
    let endpoints = &view["cluster"]["endpoints"];
    let master = view["cluster"]["nodes"][0]["ipAddress"]
        .as_str()
        .expect("address");
    assert_eq!(
        endpoints["dask-scheduler"],
        format!("tcp://{master}:8786"),
        "{view}"
    );
    let dashboard = endpoints["dask-dashboard"].as_str().expect("dashboard");
    let hosts: Vec<(String, String)> = view["cluster"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["name"] != "master")
        .map(|n| {
            (
                n["name"].as_str().expect("name").to_string(),
                n["ipAddress"].as_str().expect("address").to_string(),
            )
        })
        .collect();
    assert_eq!(workers(dashboard), hosts, "two registered workers");

    // The example on a cluster that installs Dask itself, as a node ebb made in a cloud does
    // (`install: always`; a virtualenv and distributed, pinned, from PyPI), into a directory
    // of the test's: the three nodes share this machine, and install it once between them.
    let installed = dir.path().join("opt/dask");
    let config = serde_json::json!({"install": "always", "installDir": installed}).to_string();
    local_profile(
        &server,
        "dask",
        3,
        "dask",
        &[("templateConfig", config.as_str())],
    );
    deploy_example(&server, "dask", "dask.json");
    let (run, _) = start_program(&server, "dask", "squares");
    let done = ended(&server, &run, LIMIT);
    let stdout = completed_output(&server, &run, &done);
    assert_eq!(
        stdout.lines().next(),
        Some("sum of squares of 0..999: 332833500 (expected 332833500)"),
        "{stdout}"
    );
    assert!(stdout.contains("1000 tasks on"), "{stdout}");
    let python = format!("{}/bin/python3", installed.display());
    assert_eq!(
        done["cluster"]["endpoints"]["dask-python"], python,
        "{done}"
    );
    let version = std::process::Command::new(&python)
        .args(["-c", "import distributed; print(distributed.__version__)"])
        .output()
        .expect("the installed Python");
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), "2026.8.0");
}

#[test]
fn a_killed_worker_is_healed_and_registers_again() {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    profile(&server, "held", 3);
    deploy(
        &server,
        "hold",
        &while_the_test_runs(),
        serde_json::json!({}),
    );
    let run = start(&server, "hold", on("held"));
    let view = wait_until(&server, &run, LIMIT, |r| r["status"] == "RUNNING");
    let dashboard = view["cluster"]["endpoints"]["dask-dashboard"]
        .as_str()
        .expect("dashboard")
        .to_string();
    assert_eq!(workers(&dashboard).len(), 2);
    kill_by_pid_file(&sandbox(dir.path(), &run, "worker-1").join("dask/worker.pid"));
    let started = Instant::now();
    loop {
        let heals = heals(&server, &run);
        if heals >= 1 && workers(&dashboard).len() == 2 {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the worker was not healed: {:?}\n{}",
            workers(&dashboard),
            events(&server, &run)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = events(&server, &run);
    assert!(text.contains("worker-1: dask-worker is down"), "{text}");
}

#[test]
fn a_warm_pool_keeps_a_dask_cluster_ready_and_a_run_computes_on_it_at_once() {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let config = serde_json::json!({"pythonEnv": setup_python()}).to_string();
    let mut body = crate::support::profiles::profile_body(
        "local",
        &[
            ("nodes", "3", true),
            ("template", "dask", true),
            ("templateConfig", config.as_str(), true),
        ],
    );
    body["pool"] = serde_json::json!({"min": 1, "max": 1, "idle": "10m"});
    crate::support::profiles::put_profile_body(&server, "dask", body);
    // Made ahead of any run, its engine up: a scheduler and two workers.
    let started = Instant::now();
    loop {
        let (code, pool) = server.get("/v3/namespaces/default/profiles/dask/pool");
        assert_eq!(code, 200, "{pool}");
        if pool["ready"].as_array().is_some_and(|r| r.len() == 1) {
            break;
        }
        assert!(started.elapsed() < LIMIT, "no cluster ready: {pool}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let engine =
        crate::support::process::started_under(&crate::support::server::work_dir(dir.path()));
    let count = |what: &str| engine.iter().filter(|(_, c)| c.contains(what)).count();
    assert_eq!(
        (count("dask scheduler"), count("dask worker")),
        (1, 2),
        "{engine:#?}"
    );
    deploy_example(&server, "dask", "dask.json");
    let (run, _) = start_program(&server, "dask", "squares");
    let done = ended(&server, &run, LIMIT);
    let (stdout, stderr) = output(&server, &run);
    let said = events(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{stdout}\n{stderr}\n{said}");
    assert_eq!(
        stdout.lines().next(),
        Some("sum of squares of 0..999: 332833500 (expected 332833500)"),
        "{stdout}"
    );
    // The run took the pool's cluster: nothing made, no engine started for it.
    assert_eq!(done["cluster"]["origin"], "pooled", "{done}");
    let ops = crate::support::runs::operations(&server, &run);
    assert!(ops.iter().all(|o| o["operation"] != "create"), "{ops:?}");
    assert!(!said.contains("start dask-"), "{said}");
}

#[test]
fn over_ssh_a_scheduler_and_two_workers_on_three_machines_compute_the_examples_sum() {
    setup();
    let (sshd, _daemons, _dir, server) =
        over_ssh(&["127.0.2.31", "127.0.2.32", "127.0.2.33"], "dask", "dask");
    deploy_example(&server, "dask", "dask.json");
    let (run, _) = start_program(&server, "dask", "squares");
    let done = deprovisioned(&server, &run, LIMIT);
    let stdout = completed_output(&server, &run, &done);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "sum of squares of 0..999: 332833500 (expected 332833500)",
            "1000 tasks on 2 of 2 workers"
        ],
        "{stdout}"
    );
    let left = crate::support::process::started_under(&sshd.remote_dir());
    assert!(left.is_empty(), "left running: {left:#?}");
}

#[test]
fn a_reused_cluster_waits_until_the_last_runs_tasks_are_gone() {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    reusing_profile(&server, "dask", "dask", &[]);
    // `leave` fires a 4-second task and forgets it; `look` says how many tasks the scheduler
    // holds as it begins.
    let leave = "import os, time\nfrom distributed import Client, fire_and_forget\nc = Client(os.environ['EBB_ENDPOINT_DASK_SCHEDULER'])\nfire_and_forget(c.submit(time.sleep, 4, pure=False))\nprint('left one')\n";
    let look = "import json, os, urllib.request\nurl = os.environ['EBB_ENDPOINT_DASK_DASHBOARD'].rsplit('/status', 1)[0] + '/json/counts.json'\nprint('tasks', json.load(urllib.request.urlopen(url))['tasks'])\n";
    let app = |code: &str| serde_json::json!({"type": "workflows", "name": "p", "command": ["sh", "-c", "exec \"$EBB_ENDPOINT_DASK_PYTHON\" -c \"$CODE\""], "env": {"CODE": code}});
    for (name, code) in [("leave", leave), ("look", look)] {
        let (code_, reply) = server.put(
            &format!("/v3/namespaces/default/apps/{name}"),
            serde_json::json!({"config": {"system.profile.name": "dask"}, "programs": [app(code)]}),
        );
        assert_eq!(code_, 200, "{reply}");
    }
    let finished = |app: &str| {
        let (run, _) = start_program(&server, app, "p");
        let done = wait_until(&server, &run, LIMIT, |r| {
            r["status"] == "FAILED"
                || (r["status"] == "COMPLETED" && r["cluster"]["status"] == "IDLE")
        });
        let (stdout, stderr) = output(&server, &run);
        let said = events(&server, &run);
        assert_eq!(done["status"], "COMPLETED", "{stdout}\n{stderr}\n{said}");
        (done, stdout)
    };
    let (_, stdout) = finished("leave");
    assert_eq!(stdout.trim(), "left one");
    // The next run takes the cluster once the scheduler's reset finds the task gone.
    let (done, stdout) = finished("look");
    let run = format!(
        "/v3/namespaces/default/apps/look/workflows/p/runs/{}",
        done["runid"].as_str().expect("runid")
    );
    assert_eq!(
        done["cluster"]["origin"],
        "reused",
        "{done}\n{}",
        events(&server, &run)
    );
    assert_eq!(stdout.trim(), "tasks 0", "{done}");
}
