//! The shipped `spark` template: a real Apache Spark standalone cluster (Spark from PyPI's
//! pyspark, on Java 17) on three `local` nodes, a master with two ALIVE workers, runs the
//! shipped word count (its counts checked against the same count made here), and heals a
//! worker whose JVM was killed: it registers with the master again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;
use crate::support::runs::{deploy, start, wait_until, while_the_test_runs};
use crate::support::server::{Server, signal};

const LIMIT: Duration = Duration::from_secs(180);

/// The profile `name` of `nodes` `local` nodes on the `spark` template, with the tests' Python.
fn profile(server: &Server, name: &str, nodes: u32) {
    let config = serde_json::json!({"pythonEnv": setup_python()}).to_string();
    local_profile(
        server,
        name,
        nodes,
        "spark",
        &[("templateConfig", config.as_str())],
    );
}

/// The workers the master whose web UI is `ui` lists: (host, state), sorted.
fn workers(ui: &str) -> Vec<(String, String)> {
    let Ok(reply) = reqwest::blocking::get(format!("{ui}/json/")) else {
        return Vec::new();
    };
    let Ok(state) = reply.json::<Value>() else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = state["workers"]
        .as_array()
        .map(|w| {
            w.iter()
                .map(|w| {
                    (
                        w["host"].as_str().unwrap_or_default().to_string(),
                        w["state"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A held 3-node Spark cluster: the run's path, its view, and the master's web UI.
fn held(server: &Server) -> (String, Value, String) {
    profile(server, "held", 3);
    deploy(
        server,
        "hold",
        &while_the_test_runs(),
        serde_json::json!({}),
    );
    let run = start(server, "hold", on("held"));
    let view = wait_until(server, &run, LIMIT, |r| r["status"] == "RUNNING");
    let ui = view["cluster"]["endpoints"]["spark-ui"]
        .as_str()
        .unwrap_or_else(|| panic!("no spark-ui endpoint: {view}"))
        .to_string();
    (run, view, ui)
}

/// The addresses of the cluster's worker nodes, sorted, each with `ALIVE`.
fn alive(view: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = view["cluster"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["name"] != "master")
        .map(|n| {
            (
                n["ipAddress"].as_str().expect("address").to_string(),
                "ALIVE".to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_master_with_two_alive_workers_counts_the_examples_words() {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (held_run, view, ui) = held(&server);
    let master = view["cluster"]["nodes"][0]["ipAddress"]
        .as_str()
        .expect("address");
    assert_eq!(
        view["cluster"]["endpoints"]["spark-master"],
        format!("spark://{master}:7077"),
        "{view}"
    );
    assert_eq!(workers(&ui), alive(&view), "two ALIVE workers");
    // The run's page links the master's web UI; `ebb run get` lists the endpoints.
    let page = crate::ui::run_page(&server, &held_run);
    assert!(page.contains(&format!("href=\"{ui}\"")), "{page}");
    assert!(page.contains("EBB_ENDPOINT_SPARK_MASTER"), "{page}");
    let token = server.token().expect("token");
    let path = held_run.trim_start_matches("/v3/namespaces/");
    let parts: Vec<&str> = path.split('/').collect();
    let id = format!("{}/{}/{}/{}", parts[0], parts[2], parts[4], parts[6]);
    let (code, out, err) = crate::support::server::run_ebb(
        &["run", "get", &id, "--server", &server.url],
        &[("EBB_TOKEN", token.as_str())],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines().any(|l| l.starts_with("spark-master")
            && l.contains("EBB_ENDPOINT_SPARK_MASTER")
            && l.contains(&format!("spark://{master}:7077"))),
        "{out}"
    );

    profile(&server, "spark", 3);
    deploy_example(&server, "spark", "spark.json");
    let example: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/spark.json"))
            .expect("the example"),
    )
    .expect("json");
    let (run, _) = start_program(&server, "spark", "wordcount");
    let done = ended(&server, &run, LIMIT);
    let (stdout, stderr) = output(&server, &run);
    assert_eq!(
        done["status"],
        "COMPLETED",
        "{stdout}\n{stderr}\n{}",
        events(&server, &run)
    );
    // The same count, made here.
    let text = example["programs"][0]["env"]["TEXT"]
        .as_str()
        .expect("TEXT");
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for word in text.to_lowercase().split_whitespace() {
        let word = word.trim_matches(|c: char| ".,;:!?'\"".contains(c));
        if !word.is_empty() {
            *expected.entry(word.to_string()).or_default() += 1;
        }
    }
    let counted: BTreeMap<String, u64> = stdout
        .lines()
        .filter_map(|l| {
            let (n, word) = l.split_once(' ')?;
            Some((word.to_string(), n.parse().ok()?))
        })
        .collect();
    assert_eq!(counted, expected, "{stdout}");
    assert!(stdout.contains("application app-"), "{stdout}");
}

#[test]
fn a_killed_worker_is_healed_and_registers_with_the_master_again() {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (run, view, ui) = held(&server);
    assert_eq!(workers(&ui), alive(&view));
    let pid: u32 =
        std::fs::read_to_string(sandbox(dir.path(), &run, "worker-1").join("spark/worker.pid"))
            .expect("the worker's pid")
            .trim()
            .parse()
            .expect("a pid");
    signal(pid, "KILL");
    let started = Instant::now();
    loop {
        let heals = heals(&server, &run);
        // The master keeps a dead worker listed (DEAD) beside its new registration.
        let now = workers(&ui);
        let alive_now: Vec<(String, String)> =
            now.iter().filter(|(_, s)| s == "ALIVE").cloned().collect();
        if heals >= 1 && alive_now == alive(&view) {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the worker was not healed: {now:?}\n{}",
            events(&server, &run)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let text = events(&server, &run);
    assert!(text.contains("worker-1: spark-worker is down"), "{text}");
}

/// The application directories under each worker's `spark/work`.
fn app_dirs(dir: &std::path::Path, cluster_run: &str, node: &str) -> Vec<String> {
    let mut out: Vec<String> =
        std::fs::read_dir(sandbox(dir, cluster_run, node).join("spark/work"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("app-"))
            .collect();
    out.sort();
    out
}

#[test]
fn a_reused_cluster_runs_the_next_job_on_the_same_master_with_the_last_ones_files_gone() {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let config = serde_json::json!({"pythonEnv": setup_python()}).to_string();
    let mut body = crate::support::profiles::profile_body(
        "local",
        &[
            ("nodes", "3", true),
            ("template", "spark", true),
            ("templateConfig", config.as_str(), true),
        ],
    );
    body["clusterReuse"] = serde_json::json!(true);
    body["reuseIdle"] = serde_json::json!("10m");
    crate::support::profiles::put_profile_body(&server, "spark", body);
    deploy_example(&server, "spark", "spark.json");
    let program = "/v3/namespaces/default/apps/spark/workflows/wordcount";
    let run_one = |expect: &str| -> (String, Value) {
        let (code, started) = server.post_json(&format!("{program}/start"), serde_json::json!({}));
        assert_eq!(code, 200, "{started}");
        let run = format!(
            "{program}/runs/{}",
            started["runId"].as_str().expect("runId")
        );
        let done = wait_until(&server, &run, LIMIT, |r| {
            r["status"] == "FAILED"
                || (r["status"] == "COMPLETED" && r["cluster"]["status"] == "IDLE")
        });
        assert_eq!(
            done["status"],
            "COMPLETED",
            "{done}\n{}",
            events(&server, &run)
        );
        assert_eq!(done["cluster"]["origin"], expect, "{done}");
        (run, done)
    };
    let (first, done) = run_one("fresh");
    let ui = done["cluster"]["endpoints"]["spark-ui"]
        .as_str()
        .map(str::to_string);
    assert_eq!(
        app_dirs(dir.path(), &first, "worker-1").len(),
        1,
        "the first job's directory"
    );
    let (second, done) = run_one("reused");
    // The same master and workers: no engine started for the second run.
    assert_eq!(
        done["cluster"]["id"],
        first.rsplit('/').next().expect("id"),
        "{done}"
    );
    let ops = crate::support::runs::operations(&server, &second);
    assert!(
        ops.iter().all(|o| o["operation"] != "create"),
        "the second run made a cluster: {ops:?}"
    );
    let master = ui.expect("spark-ui");
    let (_, state) = server.get(&second);
    assert_eq!(state["cluster"]["endpoints"]["spark-ui"], master.as_str());
    // The first job's application directory went before the second ran: one is left, the
    // second's.
    for node in ["worker-1", "worker-2"] {
        let apps = app_dirs(dir.path(), &first, node);
        assert_eq!(apps.len(), 1, "{node}: {apps:?}");
    }
    let completed: Vec<Value> = reqwest::blocking::get(format!("{master}/json/"))
        .expect("the master")
        .json::<Value>()
        .expect("json")["completedapps"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(completed.len(), 2, "two jobs on one master: {completed:?}");
}
