//! Services watched and healed, on `local` nodes with real daemon processes: a killed daemon
//! is seen down by its check and restarted with its dependent chain in order (read from the
//! services' own traces); a check that hangs is unknown and holds up no other; healing stops
//! at its limit and says so; a SIGKILL of ebb during a heal resumes it; an admin's named
//! restart across nodes keeps the dependency order.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::profiles::profile_body;
use crate::support::runs::*;
use crate::support::server::{Server, run_ebb};

/// A daemon service `name`: `start` runs a real process in the node's sandbox and records its
/// pid, `stop` kills it, `check` exits 0 while it runs and 3 when it does not. Each start and
/// stop appends `<nanoseconds> <node> <start|stop> <name>` to the node's `trace`. `start_wait`
/// is how long a start takes.
fn daemon(name: &str, needs: &[&str], start_wait: &str, extra: Value) -> Value {
    let trace = |what: &str| format!("echo \"$(date +%s%N) $EBB_NODE {what} {name}\" >> trace");
    let mut service = json!({
        "actions": {
            "start": {"type": "shell", "script": format!(
                "sleep {start_wait}; nohup sleep 100000 > /dev/null 2>&1 & echo $! > {name}.pid; {}",
                trace("start"))},
            "stop": {"type": "shell", "script": format!(
                "[ -f {name}.pid ] && kill $(cat {name}.pid) 2>/dev/null; rm -f {name}.pid; {}",
                trace("stop"))},
            "check": {"type": "shell", "script": format!(
                "[ -f {name}.pid ] && kill -0 $(cat {name}.pid) 2>/dev/null && exit 0; exit 3")}
        },
        "checkInterval": "1s"
    });
    if !needs.is_empty() {
        service["dependencies"] = json!({"runtime": {"requires": needs}});
    }
    if let (Some(s), Some(e)) = (service.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    service
}

/// Creates template `name` with `services` (each on every node) and a `local` profile of
/// the same name on `nodes` nodes.
fn setup(server: &Server, name: &str, services: Value, nodes: &str) {
    setup_with(server, name, services, nodes, &[]);
}

/// [`setup`], the profile with `more` properties.
fn setup_with(server: &Server, name: &str, services: Value, nodes: &str, more: &[(&str, &str)]) {
    let list: Vec<String> = services
        .as_object()
        .expect("services")
        .keys()
        .cloned()
        .collect();
    let template = json!({
        "services": services,
        "hardwareTypes": {"any": {"local": {}}}, "imageTypes": {"any": {"local": {}}},
        "defaults": {"services": list}
    });
    let (code, body) = server.put(
        &format!("/v3/namespaces/default/templates/{name}"),
        template,
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = server.put(
        &format!("/v3/namespaces/default/profiles/{name}"),
        profile_body("local", &{
            let mut props = vec![("nodes", nodes, true), ("template", name, true)];
            props.extend(more.iter().map(|(k, v)| (*k, *v, true)));
            props
        }),
    );
    assert_eq!(code, 200, "{body}");
}

/// Starts a long run on profile `profile` and waits until its program runs.
fn running(server: &Server, profile: &str) -> String {
    deploy(server, "a", &while_the_test_runs(), json!({}));
    let run = start(server, "a", json!({"system.profile.name": profile}));
    wait_until(server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    run
}

fn sandbox(dir: &Path, run: &str, node: &str) -> PathBuf {
    let id = run.rsplit('/').next().expect("id");
    crate::support::server::work_dir(dir)
        .join("local")
        .join(id)
        .join(node)
}

/// SIGKILLs the daemon `name` on `node`.
fn kill_daemon(dir: &Path, run: &str, node: &str, name: &str) {
    let pid = std::fs::read_to_string(sandbox(dir, run, node).join(format!("{name}.pid")))
        .expect("the daemon's pid");
    crate::support::server::signal(pid.trim().parse().expect("a pid"), "KILL");
}

/// Every node's trace since `after` ns, merged by time: (ns, node, action, service).
fn trace(
    dir: &Path,
    run: &str,
    nodes: &[&str],
    after: u128,
) -> Vec<(u128, String, String, String)> {
    let mut lines = Vec::new();
    for node in nodes {
        let text =
            std::fs::read_to_string(sandbox(dir, run, node).join("trace")).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let ns: u128 = f[0].parse().expect("nanoseconds");
            if ns > after {
                lines.push((ns, f[1].to_string(), f[2].to_string(), f[3].to_string()));
            }
        }
    }
    lines.sort();
    lines
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_nanos()
}

/// The position of (node, action, service) in `trace`, which must hold it once.
#[track_caller]
fn at(trace: &[(u128, String, String, String)], node: &str, action: &str, service: &str) -> usize {
    let found: Vec<usize> = trace
        .iter()
        .enumerate()
        .filter(|(_, (_, n, a, s))| n == node && a == action && s == service)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{action} {service} on {node} once: {trace:?}"
    );
    found[0]
}

/// The states of `service` on every node of `run`, by node.
fn states(server: &Server, run: &str, service: &str) -> Vec<(String, String)> {
    let (code, view) = server.get(run);
    assert_eq!(code, 200, "{view}");
    view["cluster"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap_or_default().to_string(),
                n["services"][service]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// Waits until `service` on `node` is `state`.
#[track_caller]
fn wait_state(server: &Server, run: &str, node: &str, service: &str, state: &str, limit: Duration) {
    let started = Instant::now();
    loop {
        let now = states(server, run, service);
        if now.iter().any(|(n, s)| n == node && s == state) {
            return;
        }
        if started.elapsed() > limit {
            let (_, events) = server.get(&format!("{run}/events"));
            panic!("{service} on {node} never became {state}: {now:?}\nevents: {events}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The heal operations of `run`.
fn heals(server: &Server, run: &str) -> Vec<Value> {
    operations(server, run)
        .into_iter()
        .filter(|o| o["request"]["trigger"].is_object())
        .collect()
}

/// Waits for heal operations of `run` until `count` exist and every one has ended.
#[track_caller]
fn wait_heals(server: &Server, run: &str, count: usize, limit: Duration) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let found = heals(server, run);
        if found.len() >= count && found.iter().all(|o| o["status"] != "RUNNING") {
            return found;
        }
        if started.elapsed() > limit {
            let (_, events) = server.get(&format!("{run}/events"));
            panic!(
                "{} heal(s) of {count}: {found:?}\nevents: {events}",
                found.len()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn event_texts(server: &Server, run: &str) -> Vec<String> {
    let (code, events) = server.get(&format!("{run}/events"));
    assert_eq!(code, 200, "{events}");
    events
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e["node"].as_str().unwrap_or("-"),
                e["message"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

const NODES: [&str; 3] = ["master", "worker-1", "worker-2"];

/// zk on every node; db needs zk; web needs db; each healed by restart.
fn chain() -> Value {
    let heal = json!({"heal": "restart", "healAttempts": 3, "healWindow": "1h"});
    json!({
        "zk": daemon("zk", &[], "0", heal.clone()),
        "db": daemon("db", &["zk"], "0", heal.clone()),
        "web": daemon("web", &["db"], "0", heal),
        // A check that never ends: its time runs out, and it holds up no other check.
        "hang": {"actions": {"check": {"type": "shell", "script": "sleep 600", "timeout": "2s"}},
                 "checkInterval": "1s"}
    })
}

#[test]
fn a_killed_daemon_is_seen_down_and_restarted_with_its_dependents_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    setup(&server, "chain", chain(), "3");
    let run = running(&server, "chain");
    for service in ["zk", "db", "web"] {
        assert!(
            states(&server, &run, service)
                .iter()
                .all(|(_, s)| s == "up"),
            "{service}"
        );
    }
    // The hung check is unknown, on every node, within its time limit and a tick or two.
    for node in NODES {
        wait_state(
            &server,
            &run,
            node,
            "hang",
            "unknown",
            Duration::from_secs(20),
        );
    }
    let events = event_texts(&server, &run);
    assert!(
        events
            .iter()
            .any(|e| e.contains("hang is unknown: its check did not end within 2s")),
        "{events:?}"
    );

    // Kill zk on worker-1: seen down within its interval (1s) and a tick, then healed.
    let before = now_ns();
    kill_daemon(dir.path(), &run, "worker-1", "zk");
    let done = wait_heals(&server, &run, 1, Duration::from_secs(60));
    assert_eq!(done.len(), 1, "one heal: {done:?}");
    let heal = &done[0];
    assert_eq!(heal["status"], "SUCCEEDED", "{heal}");
    assert_eq!(heal["operation"], "restart-services");
    let trigger = &heal["request"]["trigger"];
    assert_eq!(
        (trigger["node"].as_str(), trigger["service"].as_str()),
        (Some("worker-1"), Some("zk")),
        "{trigger}"
    );
    assert_eq!(trigger["state"], "down", "{trigger}");
    assert_eq!(trigger["attempt"], 1, "{trigger}");
    assert_eq!(
        heal["request"]["selection"],
        json!({"services": ["zk"], "nodes": ["worker-1"]})
    );
    let (_, ops_view) = server.get(&format!("{run}/operations/{}", heal["id"]));
    assert_eq!(ops_view["actor"], heal["actor"]);

    // The services' own traces: web stops everywhere before db stops anywhere, db everywhere
    // before zk on worker-1; zk starts again before db anywhere, db everywhere before web.
    let t = trace(dir.path(), &run, &NODES, before);
    assert_eq!(
        t.len(),
        14,
        "web and db stopped and started on 3 nodes, zk on one: {t:?}"
    );
    let zk_stop = at(&t, "worker-1", "stop", "zk");
    let zk_start = at(&t, "worker-1", "start", "zk");
    for node in NODES {
        assert!(
            at(&t, node, "stop", "web") < at(&t, node, "stop", "db").min(zk_stop),
            "{t:?}"
        );
        for other in NODES {
            assert!(
                at(&t, node, "stop", "web") < at(&t, other, "stop", "db"),
                "{t:?}"
            );
            assert!(
                at(&t, node, "start", "db") < at(&t, other, "start", "web"),
                "{t:?}"
            );
        }
        assert!(at(&t, node, "stop", "db") < zk_stop, "{t:?}");
        assert!(zk_start < at(&t, node, "start", "db"), "{t:?}");
    }
    assert!(zk_stop < zk_start);
    // zk on the other nodes kept running.
    assert!(
        t.iter().all(|(_, n, _, s)| s != "zk" || n == "worker-1"),
        "{t:?}"
    );
    for service in ["zk", "db", "web"] {
        wait_state(
            &server,
            &run,
            "worker-1",
            service,
            "up",
            Duration::from_secs(10),
        );
    }
    // The history tells it, in `ebb run events` too.
    let events = event_texts(&server, &run);
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("worker-1: zk is down: its check exited")),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| e.contains("healing zk: operation")
            && e.contains("restarts it with its dependent chain (heal 1 of 3 in 1h)")),
        "{events:?}"
    );
    let id = run.rsplit('/').next().expect("id");
    let token = server.token().unwrap_or_default();
    let (code, out, err) = run_ebb(
        &[
            "--server",
            &server.url,
            "run",
            "events",
            &format!("default/a/p/{id}"),
        ],
        &[("EBB_TOKEN", token.as_str())],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("zk is down"), "{out}");
    assert!(out.contains("healing zk"), "{out}");

    // An admin's stop is on purpose: a stopped service is not healed.
    let (code, reply) = server.post_json(
        &format!("{run}/cluster"),
        json!({"operation": "stop-services", "services": ["web"], "nodes": ["worker-2"]}),
    );
    assert_eq!(code, 200, "{reply}");
    wait_state(
        &server,
        &run,
        "worker-2",
        "web",
        "down",
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        heals(&server, &run).len(),
        1,
        "no heal of what an admin stopped"
    );
    assert!(states(&server, &run, "web").contains(&("worker-2".into(), "down".into())));

    let (code, _) = server.post_json(&format!("{run}/stop"), json!({}));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &run);
    assert_no_sandboxes(dir.path());
}

#[test]
fn dependents_found_down_with_what_they_need_wait_for_its_heal_and_none_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    // A follower whose check fails too while its leader is down, as Dask's workers do when
    // their scheduler is gone: both checks find their service down in the same tick.
    let heal = json!({"heal": "restart", "healAttempts": 3, "healWindow": "1h"});
    let mut follower = daemon("follower", &["leader"], "0", heal.clone());
    follower["actions"]["check"]["script"] = json!(
        "[ -f follower.pid ] && kill -0 $(cat follower.pid) 2>/dev/null && [ -f leader.pid ] && kill -0 $(cat leader.pid) 2>/dev/null && exit 0; exit 3"
    );
    // The leader's check is the slower one, so the follower's finding comes first: it waits
    // for the leader's, and the one heal is the leader's (restarting its follower with it).
    let mut leader = daemon("leader", &[], "0", heal);
    leader["actions"]["check"]["script"] = json!(
        "sleep 0.5; [ -f leader.pid ] && kill -0 $(cat leader.pid) 2>/dev/null && exit 0; exit 3"
    );
    setup(
        &server,
        "pair",
        json!({"leader": leader, "follower": follower}),
        "1",
    );
    let run = running(&server, "pair");
    kill_daemon(dir.path(), &run, "master", "leader");
    let started = Instant::now();
    loop {
        let events = event_texts(&server, &run);
        let found = |service: &str| {
            events
                .iter()
                .any(|e| e.contains(&format!("{service} is down")))
        };
        let up = states(&server, &run, "leader")
            .iter()
            .all(|(_, s)| s == "up")
            && states(&server, &run, "follower")
                .iter()
                .all(|(_, s)| s == "up");
        if found("leader") && found("follower") && up && !heals(&server, &run).is_empty() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{events:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A few more ticks: the heal that restarted the leader restarted its follower too, and
    // the follower's own finding waited for it instead of asking and being refused.
    std::thread::sleep(Duration::from_secs(3));
    let events = event_texts(&server, &run);
    assert!(
        events.iter().all(|e| !e.contains("cannot heal")),
        "{events:#?}"
    );
    let healed: Vec<Value> = heals(&server, &run)
        .iter()
        .map(|o| o["request"]["trigger"]["service"].clone())
        .collect();
    assert_eq!(healed, vec![json!("leader")], "{events:#?}");
}

#[test]
fn healing_stops_at_its_limit_with_an_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    // A daemon that dies a moment after every start.
    let dies = json!({
        "actions": {
            "start": {"type": "shell", "script": "nohup sleep 0.2 > /dev/null 2>&1 & echo $! > flaky.pid"},
            "stop": {"type": "shell", "script": "rm -f flaky.pid"},
            "check": {"type": "shell", "script": "[ -f flaky.pid ] && kill -0 $(cat flaky.pid) 2>/dev/null && exit 0; exit 3"}
        },
        "checkInterval": "1s", "heal": "none"
    });
    // The profile's healing overrides the template's.
    let healing = [
        ("heal", "restart"),
        ("healAttempts", "2"),
        ("healWindow", "1h"),
    ];
    setup_with(&server, "flaky", json!({"flaky": dies}), "1", &healing);
    let run = running(&server, "flaky");
    let started = Instant::now();
    let limit = loop {
        let events = event_texts(&server, &run);
        if let Some(e) = events.iter().find(|e| e.contains("healing stopped")) {
            break e.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(90), "{events:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        limit.contains("flaky stays down: healing stopped at its limit of 2 heal(s) in 1h"),
        "{limit}"
    );
    // It is said once, and no third heal starts.
    std::thread::sleep(Duration::from_secs(3));
    let done = wait_heals(&server, &run, 2, Duration::from_secs(30));
    assert_eq!(done.len(), 2, "{done:?}");
    let said = event_texts(&server, &run)
        .iter()
        .filter(|e| e.contains("healing stopped"))
        .count();
    assert_eq!(said, 1);
    let (code, _) = server.post_json(&format!("{run}/stop"), json!({}));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &run);
}

#[test]
fn a_heal_cut_short_by_a_sigkill_resumes_after_the_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    // db starts slowly, so the kill lands while the heal runs.
    let heal = json!({"heal": "restart"});
    let services = json!({
        "zk": daemon("zk", &[], "0", heal.clone()),
        "db": daemon("db", &["zk"], "1", json!({})),
    });
    setup(&server, "slow", services, "2");
    let run = running(&server, "slow");
    kill_daemon(dir.path(), &run, "worker-1", "zk");
    let started = Instant::now();
    while heals(&server, &run).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "no heal began");
        std::thread::sleep(Duration::from_millis(20));
    }
    let id = heals(&server, &run)[0]["id"].clone();
    server.kill();

    let server = Server::start(&dir);
    let done = wait_heals(&server, &run, 1, Duration::from_secs(60));
    assert_eq!(done.len(), 1, "resumed, not healed anew: {done:?}");
    assert_eq!(done[0]["id"], id);
    assert_eq!(done[0]["status"], "SUCCEEDED", "{}", done[0]);
    for service in ["zk", "db"] {
        for node in ["master", "worker-1"] {
            wait_state(&server, &run, node, service, "up", Duration::from_secs(20));
        }
    }
    let (code, _) = server.post_json(&format!("{run}/stop"), json!({}));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &run);
    assert_no_sandboxes(dir.path());
}

#[test]
fn a_named_restart_across_nodes_keeps_the_dependency_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let services = json!({
        "zk": daemon("zk", &[], "0", json!({})),
        "db": daemon("db", &["zk"], "0", json!({})),
        "web": daemon("web", &["db"], "0", json!({})),
    });
    setup(&server, "named", services, "3");
    let run = running(&server, "named");
    // Bad names are refused, naming the field.
    crate::support::server::assert_error(
        server.post_json(
            &format!("{run}/cluster"),
            json!({"operation": "restart-services", "services": ["nope"]}),
        ),
        400,
        "services[0]",
    );
    let before = now_ns();
    let token = server.token().unwrap_or_default();
    let id = run.rsplit('/').next().expect("id");
    let (code, out, err) = run_ebb(
        &[
            "--server",
            &server.url,
            "run",
            "cluster",
            &format!("default/a/p/{id}"),
            "restart-services",
            "--service",
            "db",
            "--node",
            "master",
            "--wait",
        ],
        &[("EBB_TOKEN", token.as_str())],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let t = trace(dir.path(), &run, &NODES, before);
    // db on master, and web (which needs db) everywhere; zk untouched.
    assert_eq!(t.len(), 8, "{t:?}");
    assert!(t.iter().all(|(_, _, _, s)| s != "zk"), "{t:?}");
    for node in NODES {
        assert!(
            at(&t, node, "stop", "web") < at(&t, "master", "stop", "db"),
            "{t:?}"
        );
        assert!(
            at(&t, "master", "start", "db") < at(&t, node, "start", "web"),
            "{t:?}"
        );
    }
    // The run page's form names them too: a stop of web on worker-2 alone.
    let cookie = crate::ui::cookie_of(&crate::ui::sign_in(&server, &token));
    let reply = crate::ui::raw()
        .post(format!(
            "{}{}/cluster",
            server.url,
            crate::ui::ui_path(&run)
        ))
        .header("Cookie", &cookie)
        .header("HX-Request", "true")
        .form(&[
            ("operation", "stop-services"),
            ("services", "web"),
            ("on", " worker-2 "),
        ])
        .send()
        .expect("post");
    assert_eq!(reply.status(), 200, "{}", reply.text().unwrap_or_default());
    let started = Instant::now();
    let op = loop {
        let ops = operations(&server, &run);
        let last = ops.last().expect("operations").clone();
        if last["operation"] == "stop-services" && last["status"] != "RUNNING" {
            break last;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{ops:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(op["status"], "SUCCEEDED", "{op}");
    assert_eq!(
        op["request"]["selection"],
        json!({"services": ["web"], "nodes": ["worker-2"]})
    );
    assert_eq!(op["tasks"].as_array().map(Vec::len), Some(1), "{op}");
    let (code, _) = server.post_json(&format!("{run}/stop"), json!({}));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &run);
}

#[test]
fn a_sim_instance_deleted_behind_ebbs_back_is_replaced_and_the_run_completes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let server = Server::start(&dir);
    let template = json!({
        "services": {
            "svc": {"actions": {
                        "configure": {"type": "shell", "script": "echo \"$EBB_SERVICE_NODES\" > svc.conf; echo configured >> svc.trace"},
                        "start": {"type": "shell", "script": "echo up > svc.state"},
                        "check": {"type": "shell", "script": "[ -f svc.state ] || exit 3"}},
                    "checkInterval": "1s", "heal": "replace-node"}
        },
        "hardwareTypes": {"any": {"sim": {}}}, "imageTypes": {"any": {"sim": {}}},
        "defaults": {"services": ["svc"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/rep", template);
    assert_eq!(code, 200, "{body}");
    crate::support::profiles::sim_profile(
        &server,
        "rep",
        &sim,
        &[("nodes", "3"), ("template", "rep")],
        0,
        None,
    );
    // The program runs until the test lets it end.
    let go = dir.path().join("go");
    deploy(
        &server,
        "a",
        &format!(
            "while [ ! -f '{}' ]; do sleep 0.1; done; echo done",
            go.display()
        ),
        json!({}),
    );
    let run = start(&server, "a", json!({"system.profile.name": "rep"}));
    wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });
    let live = |node: &str| -> Vec<Value> {
        instances(&sim)
            .into_iter()
            .filter(|i| i["tags"]["ebb:node"] == node && i["deletedAt"].is_null())
            .collect()
    };
    let old = live("worker-1");
    assert_eq!(old.len(), 1, "{old:?}");
    let old_id = old[0]["id"].as_str().expect("id").to_string();

    // Terminated behind ebb's back.
    let cloud = ebb_sim::cloud::Cloud::open(&sim, Default::default()).expect("the sim");
    cloud.delete(&old_id).expect("terminated");

    let done = wait_heals(&server, &run, 1, Duration::from_secs(60));
    let heal = &done[0];
    assert_eq!(heal["operation"], "replace-node", "{heal}");
    assert_eq!(heal["status"], "SUCCEEDED", "{heal}");
    let trigger = &heal["request"]["trigger"];
    assert_eq!(trigger["heal"], "replace-node", "{trigger}");
    assert_eq!(trigger["node"], "worker-1", "{trigger}");
    assert!(
        trigger["found"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("{old_id} is gone")),
        "{trigger}"
    );
    // A new instance for worker-1; the others kept theirs and were reconfigured.
    let new = live("worker-1");
    assert_eq!(new.len(), 1, "{new:?}");
    assert_ne!(new[0]["id"], old_id.as_str());
    let (_, view) = server.get(&run);
    let worker = view["cluster"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["name"] == "worker-1")
        .expect("worker-1")
        .clone();
    assert_eq!(worker["id"], new[0]["id"], "{worker}");
    let tasks: Vec<String> = heal["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| {
            format!(
                "{} {}",
                t["node"].as_str().unwrap_or_default(),
                t["action"].as_str().unwrap_or_default()
            )
        })
        .collect();
    for want in [
        "worker-1 replace",
        "worker-1 confirm",
        "worker-1 start",
        "master configure",
        "worker-2 configure",
    ] {
        assert!(tasks.contains(&want.to_string()), "{want}: {tasks:?}");
    }
    assert_eq!(view["status"], "RUNNING", "the run kept running: {view}");
    // The new node's service is up; the others run with the configuration from before it
    // came, until they restart.
    wait_state(
        &server,
        &run,
        "worker-1",
        "svc",
        "up",
        Duration::from_secs(20),
    );
    for node in ["master", "worker-2"] {
        wait_state(
            &server,
            &run,
            node,
            "svc",
            "outdated",
            Duration::from_secs(20),
        );
    }
    let events = event_texts(&server, &run);
    assert!(
        events
            .iter()
            .any(|e| e.contains("healing svc: operation") && e.contains("replaces node worker-1")),
        "{events:?}"
    );

    // The run completes, and every instance is gone.
    std::fs::write(&go, "").expect("go");
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    let left: Vec<Value> = instances(&sim)
        .into_iter()
        .filter(|i| i["deletedAt"].is_null())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(
        instances(&sim).len(),
        4,
        "one instance per node and one replacement"
    );
}

/// Over SSH, a node's checks run side by side, each with its own files on the node: a check
/// that hangs (held to 20 s) is `unknown`, and while it hangs again the kv check on the same
/// node (limited to 3 s) still runs, finds kv down, and kv is healed.
#[test]
fn over_ssh_a_hung_check_holds_up_no_other_check_on_its_node() {
    use crate::support::sshd::Sshd;
    let sshd = Sshd::start(&["127.0.1.81"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    crate::hosts::put_key(&server, &sshd);
    let mut kv = daemon("kv", &[], "0", json!({"heal": "restart"}));
    kv["actions"]["check"]["timeout"] = json!("3s");
    let template = json!({
        "services": {
            "hang": {"actions": {"check": {"type": "shell", "script": "sleep 100", "timeout": "20s"}},
                     "checkInterval": "1s"},
            "kv": kv
        },
        "hardwareTypes": {"any": {"hosts": {}}}, "imageTypes": {"any": {"hosts": {}}},
        "defaults": {"services": ["hang", "kv"]}
    });
    let (code, body) = server.put("/v3/namespaces/default/templates/watched", template);
    assert_eq!(code, 200, "{body}");
    crate::hosts::hosts_profile(&server, &sshd, "watched", &[("template", "watched")]);
    let run = running(&server, "watched");
    wait_state(&server, &run, "master", "kv", "up", Duration::from_secs(30));
    wait_state(
        &server,
        &run,
        "master",
        "hang",
        "unknown",
        Duration::from_secs(40),
    );
    // The hung check is under way again on the node when kv dies.
    std::thread::sleep(Duration::from_secs(2));

    let node = sshd
        .remote_dir()
        .join(run.rsplit('/').next().expect("id"))
        .join("master");
    let pid = std::fs::read_to_string(node.join("kv.pid")).expect("kv's pid on the node");
    crate::support::server::signal(pid.trim().parse().expect("a pid"), "KILL");

    // Well before the hung check ends.
    let healed = wait_heals(&server, &run, 1, Duration::from_secs(12));
    assert_eq!(
        healed[0]["request"]["trigger"]["service"], "kv",
        "{}",
        healed[0]
    );
    assert_eq!(healed[0]["status"], "SUCCEEDED", "{}", healed[0]);
    wait_state(&server, &run, "master", "kv", "up", Duration::from_secs(15));
    // Each check kept its own pid file on the node.
    for name in ["hang.check", "kv.check"] {
        assert!(
            node.join("attempts").join(format!("{name}.pid")).exists(),
            "{name}"
        );
    }
    let (code, _) = server.post_json(&format!("{run}/stop"), json!({}));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &run);
}
