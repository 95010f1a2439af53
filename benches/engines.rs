//! Real engines, ebb against the same engine started by hand, in one run:
//!
//! - cold: for each of ZooKeeper, Dask and Spark, the time from the start to the first line
//!   the example job prints, (a) with the engine's daemons started by hand on three loopback
//!   addresses (the same commands and flags the template runs, each started as soon as the
//!   one it needs answers) and the job run against them, and (b) with `ebb run start` of the
//!   shipped example on a 3-node `local` cluster of the shipped template (from just before
//!   the start request to the job's first line in the run's log file, looked at every 20 ms);
//! - warm: the Spark word count on a profile with `clusterReuse`, each run started when the
//!   one before completed, so it takes the cluster the one before left IDLE: start →
//!   RUNNING and start → the job's first line; in turns with the same job submitted by hand
//!   to a cluster started by hand beside it.
//!
//! On two cores a JVM engine's own time varies by seconds from one start to the next, and
//! drifts over minutes; so (a) and (b) run in turns, each first every other round, and what
//! ebb adds is the median of the differences round by round (each printed).
//!
//! `cargo bench --bench engines`; `EBB_BENCH_ROUNDS` (default 5) cold rounds per engine,
//! `EBB_BENCH_CHAIN` (default 5) warm runs. Needs what `tests/support/engines/setup.sh`
//! installs (it is run first).

#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use support::bench::{env_usize, percentile};
use support::profiles::{profile_body, put_profile_body};
use support::server::{Options, Server};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn venv() -> String {
    let out = Command::new("sh")
        .arg(format!("{ROOT}/tests/support/engines/setup.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("setup");
    assert!(
        out.status.success(),
        "tests/support/engines/setup.sh failed"
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// The example app `examples/<file>`.
fn example(file: &str) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(format!("{ROOT}/examples/{file}")).expect("the example"),
    )
    .expect("json")
}

/// Runs `script` under `sh -c` in `dir` with `env` until its standard output's first line:
/// how long that took. Everything it started is killed afterwards (its process group).
fn by_hand(dir: &std::path::Path, script: &str, env: &[(String, String)]) -> Duration {
    let began = Instant::now();
    let mut child = Command::new("setsid")
        .args(["sh", "-c", script])
        .current_dir(dir)
        .envs(env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    let took = began.elapsed();
    assert!(!line.is_empty(), "the job printed nothing: {script}");
    // Its daemons are in its session: end them all.
    let _ = Command::new("pkill")
        .args(["-KILL", "-s", &child.id().to_string()])
        .status();
    let _ = child.wait();
    took
}

/// Waits until the run `run` (its id `id`) has a first line of output in its log,
/// `<data>/runs/<id>/stdout.log` (what `GET .../logs` serves), looking at the file every 20 ms:
/// how long after `began`. The file, not the API: asking the server 50 times a second for
/// the logs and the run took CPU from the job it timed (on this 2-core machine a by-hand
/// `spark-submit` took about 0.75 s longer while a client polled the API every 20 ms). Whether
/// the run failed is asked once a second.
fn first_line(
    server: &Server,
    data: &std::path::Path,
    run: &str,
    id: &str,
    began: Instant,
) -> Duration {
    let log = data.join("runs").join(id).join("stdout.log");
    let mut asked = Instant::now();
    loop {
        if std::fs::read(&log).is_ok_and(|b| b.contains(&b'\n')) {
            return began.elapsed();
        }
        if asked.elapsed() >= Duration::from_secs(1) {
            let (_, view) = server.get(run);
            assert!(view["status"] != "FAILED", "{view}");
            asked = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts program `program` of app `app` on its example's profile; waits for the first line
/// of its output: (start → RUNNING, start → first line, the run's path).
fn through_ebb(
    server: &Server,
    data: &std::path::Path,
    app: &str,
    program: &str,
) -> (Duration, Duration, String) {
    let path = format!("/v3/namespaces/default/apps/{app}/workflows/{program}");
    let began = Instant::now();
    let asked = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs_f64();
    let (code, body) = server.post_json(&format!("{path}/start"), json!({}));
    assert_eq!(code, 200, "{body}");
    let id = body["runId"].as_str().expect("runId");
    let run = format!("{path}/runs/{id}");
    let first = first_line(server, data, &run, id, began);
    let (_, events) = server.get(&format!("{run}/events"));
    let running = events
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["message"] == "run RUNNING")
        .and_then(|e| e["time"].as_f64())
        .expect("a RUNNING event");
    (
        Duration::from_secs_f64((running - asked).max(0.0)),
        first,
        run,
    )
}

/// Waits until run `run` has ended and its cluster is gone (or IDLE, for reuse).
fn settle(server: &Server, run: &str) {
    loop {
        let (_, view) = server.get(run);
        if matches!(
            view["cluster"]["status"].as_str(),
            Some("DEPROVISIONED" | "IDLE" | "REUSED")
        ) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Differences in ms, signed, in the order they were measured.
fn signed(diffs: &[f64]) -> String {
    diffs
        .iter()
        .map(|d| format!("{d:+.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The median of `values` (sorted in place).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn main() {
    let venv = venv();
    let rounds = env_usize("EBB_BENCH_ROUNDS", 5);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let data = dir.path().join("data");
    let server = Server::start_at(
        &data,
        Options {
            unchecked: true,
            binary: support::bench::other_build(),
            ..Options::default()
        },
    );
    let config = json!({"pythonEnv": venv}).to_string();
    for (profile, template) in [
        ("zookeeper", "zookeeper"),
        ("dask", "dask"),
        ("spark", "spark"),
    ] {
        put_profile_body(
            &server,
            profile,
            profile_body(
                "local",
                &[
                    ("nodes", "3", false),
                    ("template", template, false),
                    ("templateConfig", &config, false),
                ],
            ),
        );
    }
    let mut warm = profile_body(
        "local",
        &[
            ("nodes", "3", false),
            ("template", "spark", false),
            ("templateConfig", &config, false),
        ],
    );
    warm["clusterReuse"] = json!(true);
    warm["reuseIdle"] = json!("10m");
    put_profile_body(&server, "spark-warm", warm);
    for (app, file) in [
        ("zookeeper", "zookeeper.json"),
        ("dask", "dask.json"),
        ("spark", "spark.json"),
    ] {
        let (code, body) = server.put(&format!("/v3/namespaces/default/apps/{app}"), example(file));
        assert_eq!(code, 200, "{body}");
    }

    let hand = tempfile::tempdir().expect("tempdir");
    let a = ["127.0.3.1", "127.0.3.2", "127.0.3.3"];
    let py = format!("{venv}/bin/python3");
    let spark_home = format!("{venv}/lib/python3.11/site-packages/pyspark");
    // The same commands and flags as the templates' start actions.
    let zookeeper = format!(
        r#"for i in 1 2 3; do mkdir -p n$i/data; echo $i > n$i/data/myid; a=127.0.3.$i
{{ echo tickTime=500; echo initLimit=20; echo syncLimit=10; echo dataDir=$PWD/n$i/data; echo clientPortAddress=$a; echo clientPort=2181
echo admin.enableServer=false; echo 4lw.commands.whitelist=srvr,mntr,ruok,conf
echo server.1=127.0.3.1:2888:3888; echo server.2=127.0.3.2:2888:3888; echo server.3=127.0.3.3:2888:3888; }} > n$i/zoo.cfg
java -Xmx256m -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar org.apache.zookeeper.server.quorum.QuorumPeerMain $PWD/n$i/zoo.cfg > n$i/log 2>&1 &
done
ask() {{ bash -c 'exec 3<>"/dev/tcp/$1/2181" && printf srvr >&3 && cat <&3' ask "$1" 2>/dev/null; }}
for a in {a0} {a1} {a2}; do until ask $a | grep -Eq '^Mode: (leader|follower)$'; do sleep 0.1; done; done
z=/by-hand; printf 'create %s hello\nget -w %s\nset %s changed\nget %s\ndelete %s\nquit\n' $z $z $z $z $z | /usr/share/zookeeper/bin/zkCli.sh -server {a0}:2181,{a1}:2181,{a2}:2181 2>/dev/null | grep -E '^(Created /|hello$|changed$)|NodeDataChanged'
"#,
        a0 = a[0],
        a1 = a[1],
        a2 = a[2]
    );
    let dask_job = example("dask.json")["programs"][0]["env"]["SQUARES"]
        .as_str()
        .expect("SQUARES")
        .to_string();
    let dask = format!(
        r#"d={venv}/bin/dask
$d scheduler --host {a0} --port 8786 --dashboard-address {a0}:8787 > s.log 2>&1 &
until {py} -c 'import urllib.request; urllib.request.urlopen("http://{a0}:8787/health")' 2>/dev/null; do sleep 0.1; done
for w in {a1} {a2}; do $d worker tcp://{a0}:8786 --host $w --name $w --nthreads 2 --memory-limit 1GiB --dashboard-address $w:8789 --local-directory $PWD/$w > $w.log 2>&1 & done
until {py} -c 'import json, sys, urllib.request; sys.exit(len(json.load(urllib.request.urlopen("http://{a0}:8787/json/identity.json"))["workers"]) != 2)' 2>/dev/null; do sleep 0.1; done
EBB_ENDPOINT_DASK_SCHEDULER=tcp://{a0}:8786 {py} -c "$SQUARES"
"#,
        a0 = a[0],
        a1 = a[1],
        a2 = a[2]
    );
    let spark_example = example("spark.json");
    let spark_env = &spark_example["programs"][0]["env"];
    let spark = format!(
        r#"export SPARK_HOME={spark_home} SPARK_DAEMON_MEMORY=512m
SPARK_LOCAL_IP={a0} $SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master --host {a0} --port 7077 --webui-port 8080 > m.log 2>&1 &
until {py} -c 'import json, urllib.request; assert json.load(urllib.request.urlopen("http://{a0}:8080/json/"))["status"] == "ALIVE"' 2>/dev/null; do sleep 0.1; done
for w in {a1} {a2}; do SPARK_LOCAL_IP=$w $SPARK_HOME/bin/spark-class org.apache.spark.deploy.worker.Worker spark://{a0}:7077 --host $w --webui-port 8081 --cores 1 --memory 1g --work-dir $PWD/$w > $w.log 2>&1 & done
until {py} -c 'import json, sys, urllib.request; sys.exit(sum(w["state"] == "ALIVE" for w in json.load(urllib.request.urlopen("http://{a0}:8080/json/"))["workers"]) != 2)' 2>/dev/null; do sleep 0.2; done
printf '%s\n' "$WORDCOUNT" > wordcount.py
$SPARK_HOME/bin/spark-submit --master spark://{a0}:7077 --conf spark.driver.host={a0} --conf spark.driver.bindAddress={a0} --conf spark.pyspark.python={py} --conf spark.ui.enabled=false wordcount.py
"#,
        a0 = a[0],
        a1 = a[1],
        a2 = a[2]
    );
    let env = vec![
        ("SQUARES".to_string(), dask_job),
        (
            "WORDCOUNT".to_string(),
            spark_env["WORDCOUNT"]
                .as_str()
                .expect("WORDCOUNT")
                .to_string(),
        ),
        (
            "TEXT".to_string(),
            spark_env["TEXT"].as_str().expect("TEXT").to_string(),
        ),
    ];

    for (engine, app, program, script) in [
        (
            "ZooKeeper (ensemble with a leader, then the client)",
            "zookeeper",
            "znodes",
            &zookeeper,
        ),
        (
            "Dask (scheduler, 2 workers, then the sum)",
            "dask",
            "squares",
            &dask,
        ),
        (
            "Spark (master, 2 workers, then the word count)",
            "spark",
            "wordcount",
            &spark,
        ),
    ] {
        let (mut hands, mut ebbs, mut runnings, mut added) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let work = hand.path().join(format!("{app}-{round}"));
            std::fs::create_dir_all(&work).expect("mkdir");
            // By hand first in even rounds, ebb first in odd ones: neither always runs on
            // what the other left (a warm page cache, a busier machine).
            let ebb = || {
                let (running, first, run) = through_ebb(&server, &data, app, program);
                settle(&server, &run);
                (running, first)
            };
            let (by_hand, (running, first)) = if round % 2 == 0 {
                let h = by_hand(&work, script, &env);
                (h, ebb())
            } else {
                let e = ebb();
                (by_hand(&work, script, &env), e)
            };
            hands.push(by_hand);
            ebbs.push(first);
            runnings.push(running);
            added.push(ms(first) - ms(by_hand));
        }
        hands.sort();
        ebbs.sort();
        runnings.sort();
        println!(
            "cold {engine}: by hand p50 {:.0} ms (min {:.0}, max {:.0}); ebb run start → first line p50 {:.0} ms (min {:.0}, max {:.0}), start → RUNNING p50 {:.0} ms; ebb adds, round by round, {} ms: median {:+.0} ms",
            ms(percentile(&hands, 0.5)),
            ms(hands[0]),
            ms(*hands.last().expect("rounds")),
            ms(percentile(&ebbs, 0.5)),
            ms(ebbs[0]),
            ms(*ebbs.last().expect("rounds")),
            ms(percentile(&runnings, 0.5)),
            signed(&added),
            median(&mut added),
        );
    }

    // Warm: each run takes over the cluster the one before left IDLE; beside it a cluster
    // started by hand once takes the same job, submitted by hand, in turns with ebb's runs (so
    // both see the same machine: its two idle clusters, the same hour).
    let chain = env_usize("EBB_BENCH_CHAIN", 5);
    let path = "/v3/namespaces/default/apps/spark/workflows/wordcount";
    let work = hand.path().join("spark-warm");
    std::fs::create_dir_all(&work).expect("mkdir");
    let (cluster, job) = spark
        .split_once("printf '%s\\n' \"$WORDCOUNT\" > wordcount.py\n")
        .expect("the job's line");
    let warm_script = format!(
        "{cluster}printf '%s\\n' \"$WORDCOUNT\" > wordcount.py\necho ready\nwhile read -r _; do s=$(date +%s%N); {} | {{ IFS= read -r l; e=$(date +%s%N); cat > /dev/null; echo \"$s $e\"; }}; done\n",
        job.trim_end()
    );
    let mut by_hand_cluster = Command::new("setsid")
        .args(["sh", "-c", &warm_script])
        .current_dir(&work)
        .envs(env.iter().cloned())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh");
    let mut asks = by_hand_cluster.stdin.take().expect("stdin");
    let mut answers = BufReader::new(by_hand_cluster.stdout.take().expect("stdout")).lines();
    assert_eq!(
        answers.next().and_then(Result::ok).as_deref(),
        Some("ready"),
        "the Spark cluster by hand did not come up"
    );
    let mut submit_by_hand = || -> Duration {
        use std::io::Write;
        writeln!(asks, "go").expect("ask");
        let line = answers.next().and_then(Result::ok).expect("a job's times");
        let (s, e) = line.split_once(' ').expect("two times");
        let (s, e): (u64, u64) = (s.parse().expect("ns"), e.parse().expect("ns"));
        Duration::from_nanos(e.saturating_sub(s))
    };
    let (mut runnings, mut firsts, mut hand_firsts, mut added) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    for i in 0..=chain {
        // The first run makes the cluster; the others reuse it.
        let hand_first = (i > 0 && i % 2 == 1).then(&mut submit_by_hand);
        let began = Instant::now();
        let (code, body) = server.post_json(
            &format!("{path}/start"),
            json!({"system.profile.name": "spark-warm"}),
        );
        assert_eq!(code, 200, "{body}");
        let id = body["runId"].as_str().expect("runId");
        let run = format!("{path}/runs/{id}");
        let first = first_line(&server, &data, &run, id, began);
        let (_, running) = server.get(&run);
        loop {
            let (_, view) = server.get(&run);
            if view["status"] == "COMPLETED" && view["cluster"]["status"] == "IDLE" {
                break;
            }
            assert!(view["status"] != "FAILED", "{view}");
            std::thread::sleep(Duration::from_millis(100));
        }
        if i > 0 {
            assert_eq!(running["cluster"]["origin"], "reused", "{running}");
            let (_, events) = server.get(&format!("{run}/events"));
            let at = |m: &str| {
                events
                    .as_array()
                    .expect("events")
                    .iter()
                    .find(|e| e["message"].as_str().is_some_and(|t| t.starts_with(m)))
                    .and_then(|e| e["time"].as_f64())
            };
            if let (Some(p), Some(r)) = (at("run PENDING"), at("run RUNNING")) {
                runnings.push(Duration::from_secs_f64((r - p).max(0.0)));
            }
            let hand_first = hand_first.unwrap_or_else(&mut submit_by_hand);
            firsts.push(first);
            hand_firsts.push(hand_first);
            added.push(ms(first) - ms(hand_first));
        }
        last = Some(run);
    }
    drop(asks);
    let _ = Command::new("pkill")
        .args(["-KILL", "-s", &by_hand_cluster.id().to_string()])
        .status();
    let _ = by_hand_cluster.wait();
    runnings.sort();
    firsts.sort();
    hand_firsts.sort();
    println!(
        "warm Spark word count on a reused cluster: {} runs, PENDING → RUNNING (cluster reset and checked, program launched) p50 {:.0} ms (max {:.0}); start → first line p50 {:.0} ms (max {:.0}); by hand on a running cluster, in turns with them, spark-submit → first line p50 {:.0} ms (max {:.0}); ebb adds, turn by turn, {} ms: median {:+.0} ms",
        firsts.len(),
        ms(percentile(&runnings, 0.5)),
        ms(runnings.last().copied().unwrap_or_default()),
        ms(percentile(&firsts, 0.5)),
        ms(firsts.last().copied().unwrap_or_default()),
        ms(percentile(&hand_firsts, 0.5)),
        ms(hand_firsts.last().copied().unwrap_or_default()),
        signed(&added),
        median(&mut added),
    );
    if let Some(run) = last {
        let _ = server.post(&format!("{run}/deprovision"));
        settle(&server, &run);
    }
}
