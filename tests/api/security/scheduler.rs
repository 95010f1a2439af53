//! One tenant cannot take the shared scheduler: schedules cannot trigger themselves or each
//! other round a loop, a chain of program-status fires stops at its longest, a schedule's
//! refused starts feed no trigger, a namespace fires at its rate while another's schedules
//! keep theirs, an AND keeps a bounded number of parts waiting, and a change in one
//! namespace makes the scheduler read that namespace's schedules only.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::profiles::{profile_body, put_profile_body};
use crate::support::runs::{deploy_in, program_in, start_in};
use crate::support::server::{Options, Server, assert_error};

fn schedule_path(ns: &str, app: &str, name: &str) -> String {
    format!("/v3/namespaces/{ns}/apps/{app}/schedules/{name}")
}

/// Puts schedule `name` of `app` in `ns` (program `p`), enabled, with `trigger` and `extra`.
fn put_schedule(
    server: &Server,
    ns: &str,
    app: &str,
    name: &str,
    trigger: Value,
    extra: Value,
) -> (u16, Value) {
    let mut body = json!({
        "name": name,
        "program": {"programName": "p", "programType": "WORKFLOW"},
        "trigger": trigger,
        "status": "SCHEDULED",
    });
    body.as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    server.put(&schedule_path(ns, app, name), body)
}

/// A trigger on the end of program `p` of `app` (in `ns`, if given) with `statuses`.
fn after(ns: Option<&str>, app: &str, statuses: &[&str]) -> Value {
    let mut id = json!({"application": app, "program": "p"});
    if let Some(ns) = ns {
        id["namespace"] = json!(ns);
    }
    json!({"type": "PROGRAM_STATUS", "programId": id, "programStatuses": statuses})
}

fn fires(server: &Server, ns: &str, app: &str, name: &str) -> Vec<Value> {
    let (code, body) = server.get(&format!(
        "{}/fires?limit=1000",
        schedule_path(ns, app, name)
    ));
    assert_eq!(code, 200, "{body}");
    body.as_array().expect("fires").clone()
}

fn runs(server: &Server, ns: &str, app: &str) -> Vec<Value> {
    let (code, body) = server.get(&format!("{}/runs?limit=1000", program_in(ns, app)));
    assert_eq!(code, 200, "{body}");
    body.as_array().expect("runs").clone()
}

#[test]
fn a_schedule_cannot_trigger_its_own_program_or_close_a_loop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    for app in ["a", "b", "c"] {
        deploy_in(&server, "default", app, "true", json!({}));
    }
    // Its own program, in any status (a refused start is an end like the others).
    assert_error(
        put_schedule(
            &server,
            "default",
            "a",
            "self",
            after(None, "a", &["REJECTED"]),
            json!({}),
        ),
        400,
        "trigger",
    );
    assert_error(
        put_schedule(
            &server,
            "default",
            "a",
            "self2",
            json!({"type": "OR", "triggers": [
                {"type": "TIME", "cronExpression": "0 4 * * *"},
                after(Some("default"), "a", &["COMPLETED"]),
            ]}),
            json!({}),
        ),
        400,
        "the program the schedule starts",
    );
    // A chain is fine; the schedule that would close it is refused, naming the loop, and
    // so is an update that would, of a suspended one too.
    let (code, body) = put_schedule(
        &server,
        "default",
        "b",
        "s",
        after(None, "a", &["COMPLETED"]),
        json!({}),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = put_schedule(
        &server,
        "default",
        "c",
        "s",
        after(None, "b", &["COMPLETED"]),
        json!({"status": "SUSPENDED"}),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = put_schedule(
        &server,
        "default",
        "a",
        "s",
        after(None, "c", &["FAILED"]),
        json!({}),
    );
    assert_eq!(code, 400, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("trigger")
            && message.contains("default/a/p → default/b/p → default/c/p → default/a/p"),
        "{message}"
    );
    let (code, body) = put_schedule(
        &server,
        "default",
        "a",
        "s",
        json!({"type": "TIME", "cronExpression": "0 4 * * *"}),
        json!({}),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = server.post_json(
        &format!("{}/update", schedule_path("default", "a", "s")),
        json!({"trigger": after(None, "c", &["COMPLETED"])}),
    );
    assert_eq!(code, 400, "an update closed the loop: {body}");
}

/// Two namespaces whose schedules trigger each other (no write in one can see the other's):
/// the chain stops at its longest, with the skip recorded.
#[test]
fn a_chain_of_fires_across_namespaces_stops_at_its_longest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (code, body) = server.put("/v3/namespaces/other", json!({}));
    assert_eq!(code, 200, "{body}");
    deploy_in(&server, "default", "a", "true", json!({}));
    deploy_in(&server, "other", "b", "true", json!({}));
    let (code, body) = put_schedule(
        &server,
        "default",
        "a",
        "ping",
        after(Some("other"), "b", &["COMPLETED"]),
        json!({}),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = put_schedule(
        &server,
        "other",
        "b",
        "pong",
        after(Some("default"), "a", &["COMPLETED"]),
        json!({}),
    );
    assert_eq!(code, 200, "{body}");
    start_in(&server, "default", "a", json!({}));
    let started = Instant::now();
    let skipped = loop {
        let all = [
            fires(&server, "default", "a", "ping"),
            fires(&server, "other", "b", "pong"),
        ]
        .concat();
        if let Some(f) = all.iter().find(|f| f["outcome"]["status"] == "SKIPPED") {
            break f.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the chain never stopped: {} fires",
            all.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let reason = skipped["outcome"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("a chain of 17 program-status fires"),
        "{reason}"
    );
    // It stays stopped: the manual run and sixteen fired ones, no more.
    std::thread::sleep(Duration::from_secs(3));
    let total = runs(&server, "default", "a").len() + runs(&server, "other", "b").len();
    assert_eq!(total, 17, "the chain went on");
}

/// A schedule whose fires are refused (its profile is disabled) feeds no program-status
/// trigger with those refusals.
#[test]
fn a_schedules_refused_starts_feed_no_trigger() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    put_profile_body(&server, "off", profile_body("native", &[]));
    deploy_in(&server, "default", "a", "true", json!({}));
    deploy_in(&server, "default", "b", "true", json!({}));
    let (code, body) = put_schedule(
        &server,
        "default",
        "a",
        "every-second",
        json!({"type": "TIME", "cronExpression": "* * * * * *"}),
        json!({"properties": {"system.profile.name": "USER:off"}}),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = put_schedule(
        &server,
        "default",
        "b",
        "after-a",
        after(None, "a", &["REJECTED"]),
        json!({}),
    );
    assert_eq!(code, 200, "{body}");
    // The profile the schedule names is disabled since: each fire's start is refused.
    let (code, body) = server.post("/v3/namespaces/default/profiles/off/disable");
    assert_eq!(code, 200, "{body}");
    let rejected = || {
        runs(&server, "default", "a")
            .iter()
            .filter(|r| r["status"] == "REJECTED")
            .count()
    };
    let started = Instant::now();
    while rejected() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "a's starts were never refused"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Past a tick more: the refusals fired nothing.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        fires(&server, "default", "b", "after-a"),
        Vec::<Value>::new()
    );
    assert!(runs(&server, "default", "b").is_empty());
}

/// A namespace with many schedules firing every second fires at its rate; another
/// namespace's schedule fires every second all the while.
#[test]
fn a_namespace_fires_at_its_rate_and_others_keep_theirs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(
        dir.path(),
        Options {
            args: vec!["--schedule-namespace-rate".into(), "1".into()],
            ..Options::default()
        },
    );
    for ns in ["flood", "calm"] {
        let (code, body) = server.put(&format!("/v3/namespaces/{ns}"), json!({}));
        assert_eq!(code, 200, "{body}");
    }
    let every_second = json!({"type": "TIME", "cronExpression": "* * * * * *"});
    for i in 0..10 {
        let app = format!("f{i}");
        deploy_in(&server, "flood", &app, "true", json!({}));
        let (code, body) =
            put_schedule(&server, "flood", &app, "s", every_second.clone(), json!({}));
        assert_eq!(code, 200, "{body}");
    }
    deploy_in(&server, "calm", "c", "true", json!({}));
    let (code, body) = put_schedule(&server, "calm", "c", "s", every_second.clone(), json!({}));
    assert_eq!(code, 200, "{body}");
    let began = Instant::now();
    std::thread::sleep(Duration::from_secs(8));
    let seconds = began.elapsed().as_secs() + 1;
    let flood: usize = (0..10)
        .map(|i| fires(&server, "flood", &format!("f{i}"), "s").len())
        .sum();
    // A burst of ten, then one a second (the schedules would make ten a second).
    assert!(
        flood as u64 <= 10 + seconds + 1,
        "{flood} fires of the flooding namespace in {seconds}s"
    );
    let calm = fires(&server, "calm", "c", "s").len();
    assert!(
        calm >= 6,
        "the other namespace's schedule fired {calm} times in 8s"
    );
    let text = crate::metrics::scrape(&server);
    assert!(
        text.lines()
            .any(|l| l.starts_with("ebb_schedule_fires_throttled_total{namespace=\"flood\"}")),
        "{text}"
    );
}

/// A schedule's properties are bounded in size as in count, and a namespace's schedules are
/// listed a page at a time.
#[test]
fn schedules_are_bounded_in_size_and_listed_in_pages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy_in(&server, "default", "a", "true", json!({}));
    let cron = json!({"type": "TIME", "cronExpression": "0 4 * * *"});
    let big: serde_json::Map<String, Value> = (0..20)
        .map(|i| (format!("p{i}"), json!("x".repeat(4000))))
        .collect();
    assert_error(
        put_schedule(
            &server,
            "default",
            "a",
            "big",
            cron.clone(),
            json!({"properties": big}),
        ),
        400,
        "properties",
    );
    for i in 0..5 {
        let (code, body) = put_schedule(
            &server,
            "default",
            "a",
            &format!("s{i}"),
            cron.clone(),
            json!({"status": "SUSPENDED"}),
        );
        assert_eq!(code, 200, "{body}");
    }
    let names = |query: &str| -> Vec<String> {
        let (code, body) = server.get(&format!("/v3/namespaces/default/schedules{query}"));
        assert_eq!(code, 200, "{body}");
        body.as_array()
            .expect("list")
            .iter()
            .map(|s| s["name"].as_str().expect("name").to_string())
            .collect()
    };
    assert_eq!(names("?limit=2"), ["s0", "s1"]);
    assert_eq!(names("?limit=2&after=a/s1"), ["s2", "s3"]);
    assert_eq!(names("?after=a/s3"), ["s4"]);
    assert_eq!(names("").len(), 5);
    assert_error(
        server.get("/v3/namespaces/default/schedules?limit=5000"),
        400,
        "limit",
    );
    assert_error(
        server.get("/v3/namespaces/default/schedules?after=nope"),
        400,
        "after",
    );
}

/// An AND trigger whose one part fires far more often than the other keeps only its newest
/// parts waiting: the join's record stays bounded however often the part fires.
#[test]
fn an_and_keeps_a_bounded_number_of_parts_waiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy_in(&server, "default", "a", "true", json!({}));
    deploy_in(&server, "default", "b", "true", json!({}));
    // a's ends, and a cron time that does not come while the test runs.
    let and = json!({"type": "AND", "triggers": [
        after(None, "a", &["COMPLETED"]),
        {"type": "TIME", "cronExpression": "0 4 1 1 *"},
    ]});
    let (code, body) = put_schedule(
        &server,
        "default",
        "b",
        "both",
        and,
        json!({"timeoutMillis": 86_400_000}),
    );
    assert_eq!(code, 200, "{body}");
    let ends = ebb::model::schedule::MAX_PARTS + 8;
    for _ in 0..ends {
        start_in(&server, "default", "a", json!({}));
    }
    let started = Instant::now();
    while fires(&server, "default", "b", "both").len() < ends {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "a's ends were not all joined: {:?}",
            fires(&server, "default", "b", "both")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        runs(&server, "default", "b").is_empty(),
        "b fired on one part"
    );
    server.terminate();
    let location = crate::support::server::store_location(dir.path());
    let store = ebb::store::Store::open_at(&location).expect("open the store");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let rows = rt
        .block_on(store.write(|tx| tx.scan_raw(ebb::store::Table::Joins)))
        .expect("read");
    rt.block_on(store.close()).expect("closed");
    assert_eq!(rows.len(), 1, "one join waits");
    let record: Value = serde_json::from_slice(&rows[0].1).expect("json");
    let parts = record["value"]["parts"].as_object().expect("parts");
    let waiting: Vec<usize> = parts
        .values()
        .map(|p| p.as_array().expect("fires").len())
        .collect();
    assert_eq!(
        waiting,
        [ebb::model::schedule::MAX_PARTS],
        "{ends} ends of a left {waiting:?} parts waiting"
    );
}

/// A change to one namespace's schedules makes the scheduler read that namespace's schedules
/// again, not every namespace's.
#[test]
fn a_change_in_one_namespace_reads_only_its_schedules_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    for ns in ["big", "small"] {
        let (code, body) = server.put(&format!("/v3/namespaces/{ns}"), json!({}));
        assert_eq!(code, 200, "{body}");
    }
    let yearly = json!({"type": "TIME", "cronExpression": "0 4 1 1 *"});
    deploy_in(&server, "big", "a", "true", json!({}));
    for i in 0..30 {
        let (code, body) = put_schedule(
            &server,
            "big",
            "a",
            &format!("s{i}"),
            yearly.clone(),
            json!({}),
        );
        assert_eq!(code, 200, "{body}");
    }
    deploy_in(&server, "small", "c", "true", json!({}));
    let (code, body) = put_schedule(&server, "small", "c", "s", yearly.clone(), json!({}));
    assert_eq!(code, 200, "{body}");
    let value = |name: &str| -> f64 {
        crate::metrics::scrape(&server)
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < Duration::from_secs(20), "{what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    until("the scheduler never read the 31 schedules", &|| {
        value("ebb_schedules_enabled") == 31.0
    });
    // A tick past the last read, so that the count below starts from a settled scheduler.
    std::thread::sleep(Duration::from_millis(1500));
    let before = value("ebb_schedules_read_total");
    for description in ["one", "two", "three"] {
        let read = value("ebb_schedules_read_total");
        let (code, body) = server.post_json(
            &schedule_path("small", "c", "s"),
            json!({
                "name": "s",
                "description": description,
                "program": {"programName": "p", "programType": "WORKFLOW"},
                "trigger": yearly,
                "status": "SCHEDULED",
            }),
        );
        assert_eq!(code, 200, "{body}");
        until("the change was never read", &|| {
            value("ebb_schedules_read_total") > read
        });
    }
    let read = value("ebb_schedules_read_total") - before;
    assert_eq!(
        read, 3.0,
        "three changes of one schedule read {read} schedules"
    );
}
