//! The shipped `spark` template: a real Apache Spark standalone cluster (Spark from PyPI's
//! pyspark, on Java 17) on three `local` nodes, a master with two ALIVE workers, runs the
//! shipped word count (its counts checked against the same count made here), and heals a
//! worker whose JVM was killed: it registers with the master again. Spark programs are
//! submitted to the master, and a reused cluster runs the next one with the last one's files
//! gone.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;
use crate::support::process::started_under;
use crate::support::runs::{deploy, start, wait_until, while_the_test_runs};
use crate::support::server::Server;

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

/// The addresses of the cluster's worker nodes there now, sorted, each with `ALIVE`.
fn alive(view: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = view["cluster"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["name"] != "master" && n["status"] == "CREATED")
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

/// A PySpark job whose tasks wait: each writes a mark (named by its element, holding its
/// working directory, which is its executor's on its worker) into directory argument 2, then
/// waits until file argument 3 is there; the job prints the sum of the squares of 0..=N
/// (argument 1).
const WAITING: &str = r#"import os, sys, time
from pyspark.sql import SparkSession

n, marks, go = int(sys.argv[1]), sys.argv[2], sys.argv[3]

def square(x):
    with open(os.path.join(marks, f"{x}-{os.getpid()}"), "w") as f:
        f.write(os.getcwd())
    while not os.path.exists(go):
        time.sleep(0.1)
    return x * x

spark = SparkSession.builder.getOrCreate()
total = spark.sparkContext.parallelize(range(n + 1), n + 1).map(square).sum()
print(f"squares {total}")
spark.stop()
"#;

#[test]
fn a_master_with_two_alive_workers_heals_a_worker_killed_during_a_job_and_counts_the_examples_words()
 {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    // A job on a 3-node cluster whose tasks wait until the test lets them finish.
    profile(&server, "held", 3);
    let job = dir.path().join("waiting.py");
    std::fs::write(&job, WAITING).expect("the job");
    let marks = dir.path().join("marks");
    std::fs::create_dir(&marks).expect("marks");
    let go = dir.path().join("go");
    let (code, reply) = server.put(
        "/v3/namespaces/default/apps/waiting",
        serde_json::json!({
            "config": {"system.profile.name": "held"},
            "programs": [{"type": "spark", "name": "squares", "mainFile": job.display().to_string(),
                          "args": ["9", marks.display().to_string(), go.display().to_string()]}]
        }),
    );
    assert_eq!(code, 200, "{reply}");
    let (held_run, _) = start_program(&server, "waiting", "squares");
    let view = wait_until(&server, &held_run, LIMIT, |r| {
        r["status"] == "RUNNING" || r["status"] == "FAILED"
    });
    assert_eq!(view["status"], "RUNNING", "{}", events(&server, &held_run));
    let ui = view["cluster"]["endpoints"]["spark-ui"]
        .as_str()
        .unwrap_or_else(|| panic!("no spark-ui endpoint: {view}"))
        .to_string();
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

    // The example's run makes its own cluster meanwhile.
    profile(&server, "spark", 3);
    deploy_example(&server, "spark", "spark.json");
    let (run, _) = start_program(&server, "spark", "wordcount");

    // Once a task waits on worker-1, its worker's JVM is killed: the check sees it, the heal
    // restarts it, and it registers with the master again.
    let worker_1 = sandbox(dir.path(), &held_run, "worker-1");
    let started = Instant::now();
    while !std::fs::read_dir(&marks)
        .expect("marks")
        .flatten()
        .any(|m| {
            std::fs::read_to_string(m.path())
                .is_ok_and(|cwd| cwd.starts_with(&*worker_1.to_string_lossy()))
        })
    {
        assert!(
            started.elapsed() < LIMIT,
            "no task began on worker-1\n{}",
            events(&server, &held_run)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    kill_by_pid_file(&worker_1.join("spark/worker.pid"));
    let started = Instant::now();
    loop {
        let heals = heals(&server, &held_run);
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
            events(&server, &held_run)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let text = events(&server, &held_run);
    assert!(text.contains("worker-1: spark-worker is down"), "{text}");
    // The job, let go, still completes with the right answer: the lost tasks ran again.
    std::fs::write(&go, "").expect("go");
    let done = ended(&server, &held_run, LIMIT);
    let (stdout, stderr) = output(&server, &held_run);
    let says = format!("{stdout}\n{stderr}\n{}", events(&server, &held_run));
    assert_eq!(done["status"], "COMPLETED", "{says}");
    assert!(stdout.contains("squares 285"), "{says}");
    assert!(
        stderr.contains("Lost executor") || stderr.contains("lost"),
        "{says}"
    );

    let example: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/spark.json"))
            .expect("the example"),
    )
    .expect("json");
    let done = ended(&server, &run, LIMIT);
    let stdout = completed_output(&server, &run, &done);
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

/// The ids of the applications the master whose web UI is `ui` lists as completed.
fn completed_apps(ui: &str) -> Vec<String> {
    reqwest::blocking::get(format!("{ui}/json/"))
        .expect("the master")
        .json::<Value>()
        .expect("json")["completedapps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["id"].as_str().map(str::to_string))
        .collect()
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

/// A PySpark job: the sum of the squares of 0..=N (argument 1) from the workers (after a
/// pause of argument 3 seconds, if given), a property ebb passed, then the exit status in
/// argument 2.
const SQUARES: &str = r#"import os, sys, time
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
n = int(sys.argv[1])
total = spark.sparkContext.parallelize(range(n + 1), 4).map(lambda x: x * x).sum()
# A third argument holds the driver back: so many seconds, or until that file exists.
if len(sys.argv) > 3:
    if sys.argv[3].replace(".", "", 1).isdigit():
        time.sleep(float(sys.argv[3]))
    else:
        while not os.path.exists(sys.argv[3]):
            time.sleep(0.1)
print(f"squares {total}")
print(f"conf {spark.conf.get('spark.ebb.said')}")
spark.stop()
sys.exit(int(sys.argv[2]))
"#;

#[test]
fn a_spark_program_is_submitted_the_run_names_its_application_and_the_next_reuses_the_cluster_cleaned()
 {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let job = dir.path().join("squares.py");
    std::fs::write(&job, SQUARES).expect("the job");
    // The second run takes the first one's cluster: one Spark master sees both applications.
    // The profile adds the template's optional history server, which shows them both.
    let services = "spark-master, spark-worker, spark-history";
    reusing_profile(&server, "spark", "spark", &[("templateServices", services)]);
    let job = job.display().to_string();
    let (code, reply) = server.put(
        "/v3/namespaces/default/apps/squares",
        serde_json::json!({
            "config": {"system.profile.name": "spark"},
            "programs": [
                {"type": "spark", "name": "squares", "mainFile": job, "args": ["100", "0"],
                 "conf": {"spark.ebb.said": "hello world", "spark.executor.memory": "512m"}},
                {"type": "spark", "name": "fails", "mainFile": job, "args": ["10", "3"],
                 "conf": {"spark.ebb.said": "-"}}
            ]
        }),
    );
    assert_eq!(code, 200, "{reply}");
    // CDAP's path for a spark program answers for spark programs only.
    let (code, reply) = server.put(
        "/v3/namespaces/default/apps/plain",
        serde_json::json!({"programs": [{"type": "workflows", "name": "echo", "command": ["true"]}]}),
    );
    assert_eq!(code, 200, "{reply}");
    let (code, reply) = server.post_json(
        "/v3/namespaces/default/apps/plain/spark/echo/start",
        serde_json::json!({}),
    );
    assert_eq!(code, 404, "{reply}");
    let (code, reply) = server.get("/v3/namespaces/default/apps/squares/spark/squares");
    assert_eq!(
        (code, &reply["mainFile"]),
        (200, &serde_json::json!(job)),
        "{reply}"
    );
    let finished = |program: &str| {
        // Started as CDAP's clients start a spark program; the run read on ebb's own path.
        let path = format!("/v3/namespaces/default/apps/squares/spark/{program}");
        let (code, started) = server.post_json(&format!("{path}/start"), serde_json::json!({}));
        assert_eq!(code, 200, "{started}");
        let id = started["runId"].as_str().expect("runId");
        let (code, seen) = server.get(&format!("{path}/runs/{id}"));
        assert_eq!(code, 200, "{seen}");
        let run = format!("/v3/namespaces/default/apps/squares/workflows/{program}/runs/{id}");
        // A completed run leaves its cluster IDLE for the next; a failed one does not.
        let done = wait_until(&server, &run, LIMIT, |r| {
            r["status"] == "FAILED"
                || (r["status"] == "COMPLETED" && r["cluster"]["status"] == "IDLE")
        });
        let (stdout, stderr) = output(&server, &run);
        (run, done, stdout, stderr)
    };
    let (run, done, stdout, stderr) = finished("squares");
    let says = format!("{stdout}\n{stderr}\n{}", events(&server, &run));
    assert_eq!(done["status"], "COMPLETED", "{says}");
    assert!(stdout.contains("squares 338350"), "{says}");
    assert!(stdout.contains("conf hello world"), "{says}");
    // The run names the application the driver was given, and links its page on the master.
    let app = done["application"]["id"].as_str().expect("application id");
    assert!(
        app.starts_with("app-") && app.len() == "app-20261129083012-0000".len(),
        "{done}"
    );
    assert_eq!(done["application"]["engine"], "spark");
    let ui = done["cluster"]["endpoints"]["spark-ui"]
        .as_str()
        .expect("spark-ui");
    assert_eq!(
        done["application"]["ui"],
        format!("{ui}/app/?appId={app}"),
        "{done}"
    );
    assert!(events(&server, &run).contains(&format!("spark application {app}")));
    let page = crate::ui::run_page(&server, &run);
    assert!(page.contains(app), "{page}");
    let completed = completed_apps(ui);
    assert_eq!(completed, [app], "the cluster's master ran it");
    // The history server runs on the master (the template places it there) and has the
    // application's page once it has read its event log (it looks every 2 s).
    let placed: Vec<(String, String)> = crate::support::runs::service_states(&server, &run)
        .into_iter()
        .filter(|(_, s, _)| s == "spark-history")
        .map(|(node, _, state)| (node, state))
        .collect();
    assert_eq!(placed, [("master".to_string(), "up".to_string())]);
    let history = done["cluster"]["endpoints"]["spark-history"]
        .as_str()
        .expect("spark-history")
        .to_string();
    assert_eq!(
        done["application"]["history"],
        format!("{history}/history/{app}/"),
        "{done}"
    );
    assert!(
        page.contains(&format!("{history}/history/{app}/")),
        "{page}"
    );
    let master_dir = sandbox(dir.path(), &run, "master");
    let in_history = |apps: &[&str]| {
        let start = Instant::now();
        loop {
            let listed = reqwest::blocking::get(format!("{history}/api/v1/applications"))
                .and_then(|r| r.text())
                .unwrap_or_else(|e| e.to_string());
            if apps.iter().all(|app| listed.contains(app)) {
                break;
            }
            let log =
                std::fs::read_to_string(master_dir.join("spark/history.log")).unwrap_or_default();
            assert!(start.elapsed() < Duration::from_secs(30), "{listed}\n{log}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    in_history(&[app]);
    let first_apps = app_dirs(dir.path(), &run, "worker-1");
    assert_eq!(first_apps.len(), 1, "the first job's directory");
    let first = run;

    // The driver's exit is the run's.
    let (run, failed, stdout, stderr) = finished("fails");
    let says = format!("{stdout}\n{stderr}\n{}", events(&server, &run));
    assert_eq!(failed["status"], "FAILED", "{says}");
    assert_eq!(failed["exit"]["code"], 3, "{says}");
    assert!(stdout.contains("squares 385"), "{says}");
    assert_eq!(failed["cluster"]["origin"], "reused", "{failed}");
    let second = failed["application"]["id"]
        .as_str()
        .expect("application id");
    assert_ne!(second, app);
    assert!(events(&server, &run).contains(&format!("spark application {second}")));
    // The same master and workers: no engine started for the second run, and the first job's
    // application directories went before it ran (one is left on each worker, the second's).
    assert_eq!(
        failed["cluster"]["id"],
        first.rsplit('/').next().expect("id"),
        "{failed}"
    );
    let ops = crate::support::runs::operations(&server, &run);
    assert!(
        ops.iter().all(|o| o["operation"] != "create"),
        "the second run made a cluster: {ops:?}"
    );
    for node in ["worker-1", "worker-2"] {
        let apps = app_dirs(dir.path(), &first, node);
        assert_eq!(apps.len(), 1, "{node}: {apps:?}");
        assert!(!first_apps.contains(&apps[0]), "{node}: {apps:?}");
    }
    let completed = completed_apps(ui);
    assert_eq!(completed.len(), 2, "two jobs on one master: {completed:?}");
    // The reused cluster's history server links the second application too (the failed
    // run's cluster is being deleted now, the server with it).
    assert_eq!(
        failed["application"]["history"],
        format!("{history}/history/{second}/"),
        "{failed}"
    );
}

/// Waits (at most `limit`) until an event of `run` says `fragment`.
#[track_caller]
fn wait_for_event(server: &Server, run: &str, fragment: &str, limit: Duration) {
    let start = Instant::now();
    while !events(server, run).contains(fragment) {
        assert!(
            start.elapsed() < limit,
            "no event says '{fragment}' in {limit:?}:\n{}",
            events(server, run)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_server_killed_during_the_create_and_during_the_job_leaks_and_doubles_nothing() {
    setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path();
    let work = crate::support::server::work_dir(data);
    let server = Server::start(&dir);
    profile(&server, "spark", 3);
    let job = data.join("squares.py");
    std::fs::write(&job, SQUARES).expect("the job");
    let (code, reply) = server.put(
        "/v3/namespaces/default/apps/squares",
        serde_json::json!({
            "config": {"system.profile.name": "spark"},
            "programs": [{"type": "spark", "name": "squares", "mainFile": job,
                          "args": ["100", "0", "6"], "conf": {"spark.ebb.said": "once"}}]
        }),
    );
    assert_eq!(code, 200, "{reply}");
    let (run, _) = start_program(&server, "squares", "squares");
    // Killed while the create starts the engine: the master is up, its workers are starting.
    wait_for_event(&server, &run, "start spark-master done", LIMIT);
    server.kill();
    let server = Server::start_at(data, Default::default());
    // Killed again while the job runs on the cluster the restarted server finished.
    wait_for_event(&server, &run, "spark application app-", LIMIT);
    let engine = started_under(&work);
    let count = |class: &str| engine.iter().filter(|(_, c)| c.contains(class)).count();
    assert_eq!(
        (
            count("org.apache.spark.deploy.master.Master"),
            count("org.apache.spark.deploy.worker.Worker"),
            count("org.apache.spark.deploy.SparkSubmit"),
        ),
        (1, 2, 1),
        "one master, two workers, one driver: {engine:#?}"
    );
    server.kill();
    let server = Server::start_at(data, Default::default());
    let done = deprovisioned(&server, &run, LIMIT);
    let (stdout, stderr) = output(&server, &run);
    let said = events(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{stdout}\n{stderr}\n{said}");
    // The job ran once: one application, one answer.
    assert_eq!(stdout.matches("squares 338350").count(), 1, "{stdout}");
    assert_eq!(said.matches("spark application app-").count(), 1, "{said}");
    // Each node's engine was started once, by one start task.
    for (node, service) in [
        ("master", "spark-master"),
        ("worker-1", "spark-worker"),
        ("worker-2", "spark-worker"),
    ] {
        let starts = said
            .lines()
            .filter(|l| l.starts_with(&format!("{node}: start {service} done")))
            .count();
        assert_eq!(starts, 1, "{node}: {said}");
    }
    // Nothing of the engine is left: no process, no node.
    let left = started_under(&work);
    assert!(left.is_empty(), "left running: {left:#?}");
    let nodes = done["cluster"]["nodes"].as_array().expect("nodes");
    assert!(
        nodes.len() == 3 && nodes.iter().all(|n| n["status"] == "DELETED"),
        "{done}"
    );
}

/// A PySpark job of 120 tasks of a quarter second each: the sum of the squares of 0..119.
const SLOW: &str = r#"import time
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
def square(x):
    time.sleep(0.25)
    return x * x
print(f"squares {spark.sparkContext.parallelize(range(120), 120).map(square).sum()}")
spark.stop()
"#;

#[test]
fn expand_adds_a_worker_that_registers_and_shrink_decommissions_one_under_a_running_job() {
    setup();
    let venv = setup_python();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (run, _, ui) = held(&server);
    let id = crate::support::runs::cluster_op(
        &server,
        &run,
        serde_json::json!({"operation": "expand", "nodes": 1}),
    );
    let op = crate::support::runs::wait_op_within(&server, &run, id, LIMIT);
    assert_eq!(op["status"], "SUCCEEDED", "{op}");
    let (_, view) = server.get(&run);
    assert_eq!(alive(&view).len(), 3, "{view}");
    assert_eq!(workers(&ui), alive(&view), "three ALIVE workers");

    // A job from outside the cluster (the driver here), on all three workers.
    let master = view["cluster"]["endpoints"]["spark-master"]
        .as_str()
        .expect("spark-master")
        .to_string();
    let submit = view["cluster"]["endpoints"]["spark-submit"]
        .as_str()
        .expect("spark-submit")
        .to_string();
    let job = dir.path().join("slow.py");
    std::fs::write(&job, SLOW).expect("the job");
    let driver = std::process::Command::new(&submit)
        .args(["--master", &master])
        .args(["--conf", "spark.driver.host=127.0.0.1"])
        .args(["--conf", "spark.driver.bindAddress=127.0.0.1"])
        .args(["--conf", "spark.ui.enabled=false"])
        .args(["--conf", "spark.decommission.enabled=true"])
        .args([
            "--conf",
            &format!("spark.local.dir={}", dir.path().display()),
        ])
        .arg(&job)
        .env("PYSPARK_PYTHON", format!("{venv}/bin/python3"))
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spark-submit");
    // Shrunk once the job has an executor on every worker.
    let started = Instant::now();
    loop {
        let state: Value = reqwest::blocking::get(format!("{ui}/json/"))
            .expect("the master")
            .json()
            .expect("json");
        let busy = state["workers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| w["state"] == "ALIVE" && w["coresused"].as_u64() > Some(0))
            .count();
        if busy == 3 {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the job never ran on three workers: {state}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let leaving = view["cluster"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["name"] == "worker-1")
        .and_then(|n| n["ipAddress"].as_str())
        .expect("worker-1's address")
        .to_string();
    let id = crate::support::runs::cluster_op(
        &server,
        &run,
        serde_json::json!({"operation": "shrink", "remove": ["worker-1"]}),
    );
    let op = crate::support::runs::wait_op_within(&server, &run, id, LIMIT);
    assert_eq!(op["status"], "SUCCEEDED", "{op}");
    let out = driver.wait_with_output().expect("the driver");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // Unharmed: the job's answer, its executor on the leaving node decommissioned (told by the
    // master, not lost with its node).
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("squares 568820"), "{stdout}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("is now DECOMMISSIONED (worker decommissioned)")),
        "{stderr}"
    );
    let (_, view) = server.get(&run);
    assert_eq!(alive(&view).len(), 2, "{view}");
    assert!(!alive(&view).iter().any(|(a, _)| *a == leaving));
    let listed = workers(&ui);
    assert!(
        alive(&view).iter().all(|w| listed.contains(w)),
        "the staying workers ALIVE: {listed:?}"
    );
    // Decommissioned, then gone with its node: the master no longer counts it ALIVE.
    assert!(
        listed
            .iter()
            .any(|(a, s)| *a == leaving && (s == "DECOMMISSIONED" || s == "DEAD")),
        "the leaving worker: {listed:?}"
    );
}

#[test]
fn over_ssh_a_spark_program_runs_on_a_master_and_two_workers_on_three_machines() {
    setup();
    let (sshd, _daemons, dir, server) = over_ssh(
        &["127.0.2.21", "127.0.2.22", "127.0.2.23"],
        "spark",
        "spark",
    );
    let job = dir.path().join("squares.py");
    std::fs::write(&job, SQUARES).expect("the job");
    let go = dir.path().join("go").display().to_string();
    let (code, reply) = server.put(
        "/v3/namespaces/default/apps/squares",
        serde_json::json!({
            "config": {"system.profile.name": "spark"},
            "programs": [{"type": "spark", "name": "squares", "mainFile": job,
                          "args": ["100", "0", go], "conf": {"spark.ebb.said": "over ssh"}}]
        }),
    );
    assert_eq!(code, 200, "{reply}");
    let (run, _) = start_program(&server, "squares", "squares");
    // While the job runs: a worker's daemon log, read from its machine over SSH.
    wait_until(&server, &run, LIMIT, |r| r["status"] == "RUNNING");
    let (code, logs) = server.get(&format!("{run}/services/spark-worker/logs?node=worker-1"));
    assert_eq!(code, 200, "{logs}");
    assert_eq!(logs["logs"][0]["file"], "spark/worker.log", "{logs}");
    let text = logs["logs"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("Successfully registered with master spark://127.0.2.21:"),
        "{logs}"
    );
    std::fs::write(&go, "").expect("go");
    let done = deprovisioned(&server, &run, LIMIT);
    let (stdout, stderr) = output(&server, &run);
    let said = events(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{stdout}\n{stderr}\n{said}");
    assert!(stdout.contains("squares 338350"), "{stdout}");
    assert!(stdout.contains("conf over ssh"), "{stdout}");
    assert!(
        done["application"]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("app-")),
        "{done}"
    );
    let addresses: Vec<&str> = done["cluster"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["ipAddress"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(addresses, ["127.0.2.21", "127.0.2.22", "127.0.2.23"]);
    // The engine was stopped with the cluster: nothing of it is left on the machines.
    let left = started_under(&sshd.remote_dir());
    assert!(left.is_empty(), "left running: {left:#?}");
}
