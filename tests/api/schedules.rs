//! Schedules: cron times and run ends fire runs once each, across a crash; schedule
//! properties are a level of the profile hierarchy; constraints wait or skip; the profile
//! rules see schedules; bad schedules are 400s naming the field.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::profiles::sim_profile;
use crate::support::runs::{deploy, program, start, sub, wait_until};
use crate::support::server::{Options, Server, assert_error};

/// The path of schedule `name` of app `app` in `default`.
fn schedule(app: &str, name: &str) -> String {
    format!("/v3/namespaces/default/apps/{app}/schedules/{name}")
}

/// A server whose cron times count as missed after `grace`.
fn server_with_grace(data_dir: &std::path::Path, grace: &str) -> Server {
    Server::start_at(
        data_dir,
        Options {
            env: vec![("EBB_SCHEDULE_GRACE".into(), grace.into())],
            ..Options::default()
        },
    )
}

/// Creates schedule `name` of `app` (program `p`) with `trigger` and `extra` fields, enabled.
#[track_caller]
fn create(server: &Server, app: &str, name: &str, trigger: Value, extra: Value) -> Value {
    let mut body = json!({
        "name": name,
        "program": {"programName": "p", "programType": "WORKFLOW"},
        "trigger": trigger,
        "status": "SCHEDULED",
    });
    body.as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    let (code, made) = server.put(&schedule(app, name), body);
    assert_eq!(code, 200, "{made}");
    made
}

/// The runs of program `p` of `app`, oldest first.
fn runs(server: &Server, app: &str) -> Vec<Value> {
    let (code, runs) = server.get(&format!("{}/runs?limit=1000", program(app)));
    assert_eq!(code, 200, "{runs}");
    let mut runs = runs.as_array().expect("runs").clone();
    runs.reverse();
    runs
}

/// The fires of schedule `name` of `app`, newest first.
fn fires(server: &Server, app: &str, name: &str) -> Vec<Value> {
    let (code, fires) = server.get(&format!("{}/fires?limit=1000", schedule(app, name)));
    assert_eq!(code, 200, "{fires}");
    fires.as_array().expect("fires").clone()
}

/// Waits until `app` has at least `n` runs; returns them.
#[track_caller]
fn wait_runs(server: &Server, app: &str, n: usize, limit: Duration) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let all = runs(server, app);
        if all.len() >= n {
            return all;
        }
        assert!(
            started.elapsed() < limit,
            "{} of {n} runs after {limit:?}: {all:?}",
            all.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_ended(server: &Server, app: &str, run: &Value) -> Value {
    let path = format!(
        "{}/runs/{}",
        program(app),
        run["runid"].as_str().expect("id")
    );
    wait_until(server, &path, Duration::from_secs(60), |r| {
        r["cluster"]["status"] == "DEPROVISIONED"
    })
}

#[test]
fn a_cron_every_two_seconds_fires_runs_with_the_schedules_properties() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    sim_profile(
        &server,
        "sim",
        &sub(&dir, "sim"),
        &[("nodes", "1")],
        0,
        None,
    );
    deploy(&server, "etl", "true", json!({}));
    let (code, body) = server.put(
        "/v3/namespaces/default/apps/etl/preferences",
        json!({"system.profile.name": "USER:sim"}),
    );
    assert_eq!(code, 200, "{body}");
    let made = create(
        &server,
        "etl",
        "every2s",
        json!({"type": "TIME", "cronExpression": "*/2 * * * * *"}),
        json!({"properties": {"system.profile.properties.nodes": "2", "day": "monday"}}),
    );
    assert_eq!(made["status"], "SCHEDULED");
    let (code, next) = server.get(&format!("{}/nextruntime", program("etl")));
    assert_eq!(code, 200, "{next}");
    assert_eq!(next[0]["id"], "every2s");
    assert_eq!(next[0]["time"].as_u64().expect("time") % 2000, 0, "{next}");

    let fired = wait_runs(&server, "etl", 2, Duration::from_secs(20));
    for run in &fired {
        let props: BTreeMap<&str, (&str, &str)> = run["profileProperties"]
            .as_array()
            .expect("properties")
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().expect("name"),
                    (
                        p["value"].as_str().expect("value"),
                        p["origin"].as_str().expect("origin"),
                    ),
                )
            })
            .collect();
        assert_eq!(
            props["nodes"],
            ("2", "schedule:default/etl/every2s"),
            "{run}"
        );
        let by = &run["startedBy"];
        assert_eq!(by["schedule"], "default/etl/every2s", "{run}");
        let time = by["time"].as_u64().expect("time");
        assert_eq!(time % 2000, 0, "{run}");
        assert_eq!(run["properties"]["logical.start.time"], time.to_string());
        assert_eq!(run["properties"]["day"], "monday");
    }
    // Who started them: the schedule, and who last changed it, in the audit log.
    let (code, audit) = server.get("/v3/audit?namespace=default&limit=1000");
    assert_eq!(code, 200, "{audit}");
    let by_schedule = audit
        .as_array()
        .expect("changes")
        .iter()
        .find(|c| c["action"] == "run.start")
        .expect("a run.start change");
    assert!(
        by_schedule["actor"]
            .as_str()
            .expect("actor")
            .starts_with("schedule:default/etl/every2s (last changed by "),
        "{by_schedule}"
    );
    let ended = wait_ended(&server, "etl", &fired[0]);
    assert_eq!(ended["status"], "COMPLETED", "{ended}");
    assert_eq!(ended["cluster"]["numNodes"], 2, "{ended}");

    // Every fire is recorded with the run it started; fire times never repeat.
    let (code, _) = server.post(&format!("{}/disable", schedule("etl", "every2s")));
    assert_eq!(code, 200);
    let (_, status) = server.get(&format!("{}/status", schedule("etl", "every2s")));
    assert_eq!(status, json!({"status": "SUSPENDED"}));
    std::thread::sleep(Duration::from_millis(500));
    let before = runs(&server, "etl").len();
    let recorded = fires(&server, "etl", "every2s");
    let started: BTreeSet<&str> = recorded
        .iter()
        .map(|f| {
            assert_eq!(f["outcome"]["status"], "STARTED", "{f}");
            f["outcome"]["run"].as_str().expect("run")
        })
        .collect();
    let all = runs(&server, "etl");
    let ids: BTreeSet<&str> = all
        .iter()
        .map(|r| r["runid"].as_str().expect("id"))
        .collect();
    assert_eq!(
        started, ids,
        "every run has its fire and every fire its run"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        runs(&server, "etl").len(),
        before,
        "a suspended schedule fired"
    );
    assert_error(
        server.post(&format!("{}/suspend", schedule("etl", "every2s"))),
        409,
        "already SUSPENDED",
    );
}

/// Fire times of a 2-second schedule, from its fire records: started ones, and the missed
/// ranges recorded as skips (first, last, count).
fn fire_times(fires: &[Value]) -> (BTreeSet<u64>, Vec<String>) {
    let mut started = BTreeSet::new();
    let mut skips = Vec::new();
    for f in fires {
        let time = f["time"].as_u64().expect("time");
        match f["outcome"]["status"].as_str() {
            Some("STARTED") => {
                assert!(started.insert(time), "time {time} fired twice");
            }
            Some("SKIPPED") => skips.push(f["outcome"]["reason"].as_str().expect("reason").into()),
            other => panic!("unexpected outcome {other:?}: {f}"),
        }
    }
    (started, skips)
}

#[test]
fn a_kill_across_fire_times_runs_each_time_once_or_records_its_skip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server_with_grace(dir.path(), "1s");
    deploy(&server, "all", "true", json!({}));
    deploy(&server, "none", "true", json!({}));
    let every2s = json!({"type": "TIME", "cronExpression": "*/2 * * * * *"});
    create(
        &server,
        "all",
        "s",
        every2s.clone(),
        json!({"catchUp": "all"}),
    );
    create(&server, "none", "s", every2s, json!({}));
    wait_runs(&server, "all", 2, Duration::from_secs(20));
    wait_runs(&server, "none", 2, Duration::from_secs(20));
    server.kill();
    // Down across at least three fire times, well past the grace.
    std::thread::sleep(Duration::from_secs(7));
    let server = server_with_grace(dir.path(), "1s");
    let restarted = Instant::now();
    // Fires after the restart come at once: both schedules fire again.
    let before = runs(&server, "all").len();
    wait_runs(&server, "all", before + 1, Duration::from_secs(10));
    let lag = restarted.elapsed();
    wait_runs(
        &server,
        "none",
        runs(&server, "none").len() + 1,
        Duration::from_secs(10),
    );
    let (code, _) = server.post(&format!("{}/disable", schedule("all", "s")));
    assert_eq!(code, 200);
    let (code, _) = server.post(&format!("{}/disable", schedule("none", "s")));
    assert_eq!(code, 200);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        lag < Duration::from_secs(8),
        "first fire {lag:?} after the restart"
    );

    // catchUp all: every 2 s time from the first to the last has exactly one run.
    let (started, skips) = fire_times(&fires(&server, "all", "s"));
    assert!(skips.is_empty(), "{skips:?}");
    let (first, last) = (
        *started.first().expect("fired"),
        *started.last().expect("fired"),
    );
    let every: BTreeSet<u64> = (first..=last).step_by(2000).collect();
    assert_eq!(started, every, "catchUp all runs every missed time once");
    let all_runs = runs(&server, "all");
    let by_time: BTreeSet<u64> = all_runs
        .iter()
        .map(|r| r["startedBy"]["time"].as_u64().expect("time"))
        .collect();
    assert_eq!(by_time, every, "one run per fire time");
    assert_eq!(all_runs.len(), every.len(), "no fire time has two runs");

    // catchUp none: the missed times are one recorded skip, the rest ran once each.
    let (started, skips) = fire_times(&fires(&server, "none", "s"));
    assert_eq!(skips.len(), 1, "{skips:?}");
    assert!(skips[0].contains("catchUp none"), "{skips:?}");
    let (first, last) = (
        *started.first().expect("fired"),
        *started.last().expect("fired"),
    );
    let missing = (first..=last)
        .step_by(2000)
        .filter(|t| !started.contains(t))
        .count();
    assert!(
        skips[0].contains(&format!("missed {missing} fire time(s)")),
        "{missing} missing: {skips:?}"
    );
    assert!(missing >= 2, "the kill missed {missing} times");
    assert_eq!(runs(&server, "none").len(), started.len());
}

#[test]
fn program_status_triggers_chain_once_per_end_and_copy_arguments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "a", "true", json!({}));
    deploy(&server, "b", "true", json!({}));
    deploy(&server, "c", "true", json!({}));
    let after = |app: &str, statuses: Value| {
        json!({"type": "PROGRAM_STATUS", "programStatuses": statuses,
               "programId": {"namespace": "default", "application": app, "program": "p",
                             "type": "WORKFLOW", "entity": "PROGRAM", "version": "-SNAPSHOT"}})
    };
    create(
        &server,
        "b",
        "after-a",
        after("a", json!(["COMPLETED"])),
        json!({"properties": {"triggering.properties.mapping":
            r#"{"arguments": [{"source": "day", "target": "upstream.day"}]}"#}}),
    );
    create(
        &server,
        "c",
        "after-b",
        after("b", json!(["COMPLETED", "FAILED"])),
        json!({}),
    );
    let a = start(&server, "a", json!({"day": "tuesday"}));
    let a_id = a.rsplit('/').next().expect("id").to_string();
    let b = wait_runs(&server, "b", 1, Duration::from_secs(30));
    assert_eq!(b[0]["properties"]["triggering.run.id"], a_id.as_str());
    assert_eq!(b[0]["properties"]["triggering.status"], "COMPLETED");
    assert_eq!(b[0]["properties"]["upstream.day"], "tuesday");
    assert_eq!(b[0]["startedBy"]["triggering"]["run"], a_id.as_str());
    let c = wait_runs(&server, "c", 1, Duration::from_secs(30));
    assert_eq!(
        c[0]["properties"]["triggering.run.id"], b[0]["runid"],
        "{c:?}"
    );
    // A KILLED end of a is not COMPLETED: b does not fire.
    deploy(&server, "a", "sleep 30", json!({}));
    let killed = start(&server, "a", json!({}));
    wait_until(&server, &killed, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    let (code, body) = server.post(&format!("{killed}/stop"));
    assert_eq!(code, 200, "{body}");
    wait_until(&server, &killed, Duration::from_secs(30), |r| {
        r["status"] == "KILLED"
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        runs(&server, "b").len(),
        1,
        "a KILLED end fired a COMPLETED trigger"
    );
    assert_eq!(runs(&server, "c").len(), 1, "c fired more than once");
    let recorded = fires(&server, "b", "after-a");
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["id"], format!("r{a_id}"));
}

#[test]
fn constraints_skip_or_wait_and_say_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "busy", "sleep 4", json!({}));
    create(
        &server,
        "busy",
        "one-at-a-time",
        json!({"type": "TIME", "cronExpression": "* * * * * *"}),
        json!({"constraints": [{"type": "CONCURRENCY", "maxConcurrency": 1}]}),
    );
    wait_runs(&server, "busy", 1, Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(3));
    let (code, _) = server.post(&format!("{}/disable", schedule("busy", "one-at-a-time")));
    assert_eq!(code, 200);
    let recorded = fires(&server, "busy", "one-at-a-time");
    let skipped: Vec<&Value> = recorded
        .iter()
        .filter(|f| f["outcome"]["status"] == "SKIPPED")
        .collect();
    assert!(!skipped.is_empty(), "{recorded:?}");
    assert!(
        skipped[0]["outcome"]["reason"]
            .as_str()
            .expect("reason")
            .contains("maxConcurrency 1"),
        "{skipped:?}"
    );
    let live = runs(&server, "busy")
        .iter()
        .filter(|r| r["cluster"]["status"] != "DEPROVISIONED")
        .count();
    assert!(live <= 1, "{live} runs at once");

    deploy(&server, "later", "true", json!({}));
    create(
        &server,
        "later",
        "delayed",
        json!({"type": "TIME", "cronExpression": "*/5 * * * * *"}),
        json!({"constraints": [{"type": "DELAY", "millisAfterTrigger": 2000}]}),
    );
    let started = Instant::now();
    let waiting = loop {
        let f = fires(&server, "later", "delayed");
        if let Some(first) = f.last() {
            break first.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never fired");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(waiting["outcome"]["status"], "WAITING", "{waiting}");
    let run = wait_runs(&server, "later", 1, Duration::from_secs(10));
    let fired = run[0]["startedBy"]["time"].as_u64().expect("time");
    assert!(
        run[0]["starting"].as_u64().expect("starting") * 1000 + 1000 >= fired + 2000,
        "started before its delay: {run:?}"
    );
    let (_, f) = server.get(&format!("{}/fires", schedule("later", "delayed")));
    let first = f
        .as_array()
        .expect("fires")
        .iter()
        .find(|x| x["time"].as_u64() == Some(fired))
        .cloned()
        .expect("its fire");
    assert_eq!(first["outcome"]["status"], "STARTED", "{first}");
}

#[test]
fn profiles_know_the_schedules_that_name_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    sim_profile(&server, "nightly", &sub(&dir, "sim"), &[], 0, None);
    deploy(&server, "etl", "true", json!({}));
    let profile = "/v3/namespaces/default/profiles/nightly";
    let (code, _) = server.post(&format!("{profile}/disable"));
    assert_eq!(code, 200);
    let body = json!({
        "program": {"programName": "p", "programType": "WORKFLOW"},
        "properties": {"system.profile.name": "USER:nightly"},
        "trigger": {"type": "TIME", "cronExpression": "*/2 * * * * *"},
        "status": "SCHEDULED"
    });
    assert_error(
        server.put(&schedule("etl", "s"), body.clone()),
        409,
        "disabled",
    );
    let (code, _) = server.post(&format!("{profile}/enable"));
    assert_eq!(code, 200);
    let (code, made) = server.put(&schedule("etl", "s"), body.clone());
    assert_eq!(code, 200, "{made}");
    assert_error(
        server.put(&schedule("etl", "s"), body),
        409,
        "already exists",
    );
    let (code, places) = server.get(&format!("{profile}/assignments"));
    assert_eq!(code, 200, "{places}");
    assert!(
        places
            .as_array()
            .expect("assignments")
            .iter()
            .any(|p| p["level"] == "schedule" && p["schedule"] == "s"),
        "{places}"
    );
    // Disabled while assigned: its fires are REJECTED runs that say why.
    let (code, _) = server.post(&format!("{profile}/disable"));
    assert_eq!(code, 200);
    let rejected = wait_runs(&server, "etl", 1, Duration::from_secs(10));
    assert_eq!(rejected[0]["status"], "REJECTED", "{rejected:?}");
    let path = format!(
        "{}/runs/{}",
        program("etl"),
        rejected[0]["runid"].as_str().expect("id")
    );
    let (_, events) = server.get(&format!("{path}/events"));
    assert!(events.to_string().contains("disabled"), "{events}");
    assert_error(server.delete(profile), 409, "schedule 'default/etl/s'");
    let (code, _) = server.delete(&schedule("etl", "s"));
    assert_eq!(code, 200);
    let (code, body) = server.delete(profile);
    assert_eq!(code, 200, "{body}");
}

#[test]
fn bad_schedules_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "etl", "true", json!({}));
    let with = |trigger: Value, extra: Value| {
        let mut body = json!({
            "program": {"programName": "p", "programType": "WORKFLOW"},
            "trigger": trigger,
        });
        body.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        server.put(&schedule("etl", "bad"), body)
    };
    let time = |cron: &str| json!({"type": "TIME", "cronExpression": cron});
    assert_error(
        with(time("* * *"), json!({})),
        400,
        "trigger.cronExpression",
    );
    assert_error(
        with(time("61 * * * *"), json!({})),
        400,
        "trigger.cronExpression",
    );
    assert_error(with(time("0 0 31 2 *"), json!({})), 400, "never fires");
    assert_error(
        with(
            json!({"type": "TIME", "cronExpression": "0 4 * * *", "timeZone": "Mars/Base"}),
            json!({}),
        ),
        400,
        "trigger.timeZone",
    );
    assert_error(
        with(json!({"type": "AND", "triggers": []}), json!({})),
        400,
        "trigger.triggers",
    );
    let mut deep = time("0 4 * * *");
    for _ in 0..5 {
        deep = json!({"type": "OR", "triggers": [deep]});
    }
    assert_error(with(deep, json!({})), 400, "nest");
    assert_error(
        with(
            time("0 4 * * *"),
            json!({"constraints": [{"type": "TIME_RANGE",
            "startTime": "22:00", "endTime": "22:00"}]}),
        ),
        400,
        "constraints[0].endTime",
    );
    assert_error(
        with(time("0 4 * * *"), json!({"name": "other"})),
        400,
        "name",
    );
    assert_error(
        with(
            time("0 4 * * *"),
            json!({"program": {"programName": "ghost", "programType": "WORKFLOW"}}),
        ),
        404,
        "ghost",
    );
    assert_error(
        with(
            time("0 4 * * *"),
            json!({"properties": {"triggering.properties.mapping": "{"}}),
        ),
        400,
        "properties.triggering.properties.mapping",
    );
    assert_error(with(time("0 4 * * *"), json!({"cron": "x"})), 400, "cron");
    // Only an instance admin may watch another namespace's runs.
    let (code, _) = server.put("/v3/namespaces/team", json!({}));
    assert_eq!(code, 200);
    let admin = crate::support::server::make_token(
        &server,
        "default-admin",
        json!({"namespaces": {"default": "admin"}}),
    );
    let (code, body) = server.call(
        "PUT",
        &schedule("etl", "spy"),
        Some(json!({
            "program": {"programName": "p", "programType": "WORKFLOW"},
            "trigger": {"type": "PROGRAM_STATUS", "programStatuses": ["COMPLETED"],
                        "programId": {"namespace": "team", "application": "x", "program": "y"}}
        })),
        Some(&admin),
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("trigger.programId.namespace")
    );
    let (code, list) = server.get("/v3/namespaces/default/schedules");
    assert_eq!(code, 200);
    assert_eq!(list, json!([]), "a refused schedule was kept");
}

#[test]
fn schedules_deploy_and_go_with_their_app() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let app = |cron: &str| {
        json!({
            "programs": [{"type": "workflows", "name": "p", "command": ["true"]}],
            "schedules": [{
                "name": "nightly",
                "program": {"programName": "p", "programType": "WORKFLOW"},
                "trigger": {"type": "TIME", "cronExpression": cron, "timeZone": "Europe/Berlin"}
            }]
        })
    };
    let (code, body) = server.put("/v3/namespaces/default/apps/etl", app("0 4 * * *"));
    assert_eq!(code, 200, "{body}");
    let (code, s) = server.get(&schedule("etl", "nightly"));
    assert_eq!(code, 200, "{s}");
    assert_eq!(
        s["status"], "SUSPENDED",
        "a deployed schedule waits to be enabled"
    );
    let (code, _) = server.post(&format!("{}/enable", schedule("etl", "nightly")));
    assert_eq!(code, 200);
    // Deployed again: updated in place, still enabled.
    let (code, body) = server.put("/v3/namespaces/default/apps/etl", app("0 5 * * *"));
    assert_eq!(code, 200, "{body}");
    let (_, s) = server.get(&schedule("etl", "nightly"));
    assert_eq!(s["trigger"]["cronExpression"], "0 5 * * *");
    assert_eq!(s["status"], "SCHEDULED");
    let (code, next) = server.get(&format!("{}/next?count=3", schedule("etl", "nightly")));
    assert_eq!(code, 200, "{next}");
    let times: Vec<u64> = next
        .as_array()
        .expect("times")
        .iter()
        .map(|t| t.as_u64().expect("ms"))
        .collect();
    assert_eq!(times.len(), 3);
    assert!(
        times.windows(2).all(|w| w[1] - w[0] >= 23 * 3600 * 1000),
        "{times:?}"
    );
    assert_error(
        server.put("/v3/namespaces/default/apps/etl", app("0 0 31 2 *")),
        400,
        "schedules[0].trigger.cronExpression",
    );
    let (code, body) = server.delete("/v3/namespaces/default/apps/etl");
    assert_eq!(code, 200, "{body}");
    let (code, _) = server.get(&schedule("etl", "nightly"));
    assert_eq!(code, 404);
    let (_, all) = server.get("/v3/namespaces/default/schedules");
    assert_eq!(all, json!([]));
}

#[test]
fn an_and_fires_once_all_its_parts_have_within_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "a", "true", json!({}));
    deploy(&server, "b", "true", json!({}));
    deploy(&server, "c", "true", json!({}));
    let ended = |app: &str| {
        json!({"type": "PROGRAM_STATUS", "programStatuses": ["COMPLETED"],
               "programId": {"application": app, "program": "p"}})
    };
    create(
        &server,
        "c",
        "both",
        json!({"type": "AND", "triggers": [ended("a"), ended("b")]}),
        json!({"timeoutMillis": 600000}),
    );
    let first_a = start(&server, "a", json!({}));
    wait_until(&server, &first_a, Duration::from_secs(30), |r| {
        r["status"] == "COMPLETED"
    });
    // a's end is a part: c waits for b.
    let started = Instant::now();
    while fires(&server, "c", "both").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a's end was not joined"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let parts = fires(&server, "c", "both");
    assert_eq!(parts[0]["outcome"]["status"], "PART", "{parts:?}");
    assert!(runs(&server, "c").is_empty(), "c fired on one part");
    let b = start(&server, "b", json!({}));
    let b_id = b.rsplit('/').next().expect("id").to_string();
    let c = wait_runs(&server, "c", 1, Duration::from_secs(30));
    assert_eq!(
        c[0]["properties"]["triggering.run.id"],
        b_id.as_str(),
        "{c:?}"
    );
    // The parts were used up: a's next end alone fires nothing.
    let second_a = start(&server, "a", json!({}));
    wait_until(&server, &second_a, Duration::from_secs(30), |r| {
        r["status"] == "COMPLETED"
    });
    let started = Instant::now();
    while fires(&server, "c", "both").len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a's second end was not joined"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        runs(&server, "c").len(),
        1,
        "c fired without b's second end"
    );
    let outcomes: Vec<String> = fires(&server, "c", "both")
        .iter()
        .map(|f| f["outcome"]["status"].as_str().expect("status").to_string())
        .collect();
    assert_eq!(outcomes, vec!["PART", "STARTED", "PART"], "newest first");
}

/// Waits until a fire of schedule `name` of `app` has outcome `status`; returns it.
#[track_caller]
fn wait_fire(server: &Server, app: &str, name: &str, status: &str) -> Value {
    let started = Instant::now();
    loop {
        if let Some(f) = fires(server, app, name)
            .into_iter()
            .find(|f| f["outcome"]["status"] == status)
        {
            return f;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no {status} fire: {:?}",
            fires(server, app, name)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn time_ranges_last_runs_and_a_waiting_concurrency_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let every_second = json!({"type": "TIME", "cronExpression": "* * * * * *"});
    // A window two hours from now: every fire is outside it, and skipped.
    deploy(&server, "window", "true", json!({}));
    let hour = (crate::support::runs::now_secs() as u64 / 3600 + 2) % 24;
    create(
        &server,
        "window",
        "later",
        every_second.clone(),
        json!({"constraints": [{"type": "TIME_RANGE", "startTime": format!("{hour:02}:00"),
            "endTime": format!("{:02}:00", (hour + 1) % 24), "waitUntilMet": false}]}),
    );
    let skipped = wait_fire(&server, "window", "later", "SKIPPED");
    assert!(
        skipped["outcome"]["reason"]
            .as_str()
            .expect("reason")
            .contains("outside"),
        "{skipped}"
    );
    server.post(&format!("{}/disable", schedule("window", "later")));
    assert!(runs(&server, "window").is_empty());

    // A run a moment ago: LAST_RUN of an hour skips.
    deploy(&server, "recent", "true", json!({}));
    let manual = start(&server, "recent", json!({}));
    wait_until(&server, &manual, Duration::from_secs(30), |r| {
        r["status"] == "COMPLETED"
    });
    create(
        &server,
        "recent",
        "hourly-at-most",
        every_second,
        json!({"constraints": [{"type": "LAST_RUN", "millisSinceLastRun": 3_600_000}]}),
    );
    let skipped = wait_fire(&server, "recent", "hourly-at-most", "SKIPPED");
    assert!(
        skipped["outcome"]["reason"]
            .as_str()
            .expect("reason")
            .contains("less than 3600000 ms ago"),
        "{skipped}"
    );
    server.post(&format!("{}/disable", schedule("recent", "hourly-at-most")));
    assert_eq!(
        runs(&server, "recent").len(),
        1,
        "LAST_RUN let a run through"
    );

    // One at a time, waiting: a fire that meets a live run waits, then starts.
    deploy(&server, "queue", "sleep 3", json!({}));
    create(
        &server,
        "queue",
        "one",
        json!({"type": "TIME", "cronExpression": "*/2 * * * * *"}),
        json!({"constraints": [{"type": "CONCURRENCY", "maxConcurrency": 1,
            "waitUntilMet": true}]}),
    );
    // The oldest waiting fire goes first, once the live run has ended.
    let started = Instant::now();
    let id = loop {
        if let Some(f) = fires(&server, "queue", "one")
            .iter()
            .rev()
            .find(|f| f["outcome"]["status"] == "WAITING")
        {
            break f["id"].clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no fire waited"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let started = Instant::now();
    loop {
        let now = fires(&server, "queue", "one");
        let f = now.iter().find(|f| f["id"] == id).expect("the fire");
        if f["outcome"]["status"] == "STARTED" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the waiting fire never started: {f}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.post(&format!("{}/disable", schedule("queue", "one")));
    let all = runs(&server, "queue");
    assert!(all.len() >= 2, "{all:?}");
    let live = all
        .iter()
        .filter(|r| r["cluster"]["status"] != "DEPROVISIONED")
        .count();
    assert!(live <= 1, "{live} runs at once: {all:?}");
}
