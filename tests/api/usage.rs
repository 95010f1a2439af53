//! Usage and cost: what runs used is fixed when their use of a cluster ends, and answered by
//! any grouping over any range: to the second and the cent (checked against the node records),
//! the same after a restart and after history retention compacted the runs; a price change
//! prices only runs that end after it; a namespace's viewers see only its usage.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::profile_body;
use crate::support::runs::*;
use crate::support::server::{Options, Server, make_token};

/// A sim profile `name` in namespace `ns` whose instances report machine type `machine`,
/// with a keepalive of `failed` seconds after a failure, and its own price if `price`.
fn priced_sim(
    server: &Server,
    ns: &str,
    name: &str,
    sim: &std::path::Path,
    machine: &str,
    failed: u64,
    price: Option<f64>,
) {
    let mut body = profile_body(
        "sim",
        &[
            ("stateDir", sim.to_str().expect("utf-8"), false),
            ("nodes", "2", false),
            ("machineType", machine, false),
            ("createLatency", "300ms", false),
        ],
    );
    body["keepalive"] = json!({"failed": failed, "killed": 60});
    if let Some(price) = price {
        body["pricePerNodeHour"] = json!(price);
    }
    let (code, reply) = server.put(&format!("/v3/namespaces/{ns}/profiles/{name}"), body);
    assert_eq!(code, 200, "{reply}");
}

/// Node-seconds of run `path`'s nodes, from their records.
fn node_seconds(server: &Server, path: &str) -> u64 {
    let (code, run) = server.get(path);
    assert_eq!(code, 200, "{run}");
    run["cluster"]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            let created = n["createTime"].as_u64().expect("created");
            n["deleteTime"].as_u64().expect("deleted") - created
        })
        .sum()
}

/// `GET /v3/usage` with `query`, over this month and the next (a run near midnight on the
/// last day of a month still counts).
fn usage(server: &Server, query: &str) -> Value {
    let (code, answer) = server.get(&format!(
        "/v3/usage?from={}&to={}&{query}",
        first_of_month(0),
        first_of_month(2)
    ));
    assert_eq!(code, 200, "{answer}");
    answer
}

/// The first day of the month `ahead` months from now (UTC).
fn first_of_month(ahead: i64) -> String {
    let secs = now_secs() as i64;
    let days = secs.div_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm), to stay off a date crate in the tests.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let index = year * 12 + (month - 1) + ahead;
    format!(
        "{:04}-{:02}-01",
        index.div_euclid(12),
        index.rem_euclid(12) + 1
    )
}

/// The group of `answer` whose key has `dim` = `value`.
fn group<'a>(answer: &'a Value, dim: &str, value: &str) -> &'a Value {
    answer["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["key"][dim] == value)
        .unwrap_or_else(|| panic!("no group {dim}={value} in {answer}"))
}

/// Waits until the ledger counts `runs` runs in all.
fn wait_counted(server: &Server, runs: u64) -> Value {
    let started = std::time::Instant::now();
    loop {
        let answer = usage(server, "groupBy=app");
        let counted: u64 = answer["total"]["runs"]
            .as_object()
            .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
        if counted == runs {
            return answer;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{answer}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn usage_is_exact_by_every_grouping_across_a_restart_and_retention() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let server = Server::start_at(&data, Options::default());
    let (code, reply) = server.put("/v3/namespaces/team", json!({}));
    assert_eq!(code, 200, "{reply}");
    // sim.large at 1.44 an hour (0.0004 a second) in the price table; `flat` at 3.60 an hour
    // of its own; `free`'s machine type has no price.
    let mut prices = server.get("/v3/prices").1;
    prices["prices"]
        .as_array_mut()
        .expect("prices")
        .push(json!({"provisioner": "sim", "machineType": "sim.large", "perHour": 1.44}));
    let (code, reply) = server.put("/v3/prices", prices);
    assert_eq!(code, 200, "{reply}");
    priced_sim(&server, "default", "large", &sim, "sim.large", 2, None);
    priced_sim(&server, "default", "flat", &sim, "sim.other", 0, Some(3.6));
    priced_sim(&server, "team", "free", &sim, "sim.other", 0, None);
    deploy(&server, "etl", "sleep 1", json!({}));
    deploy(&server, "bad", "exit 3", json!({}));
    deploy_in(&server, "team", "etl", "sleep 1", json!({}));

    let runs = [
        start(&server, "etl", json!({"system.profile.name": "large"})),
        start(&server, "bad", json!({"system.profile.name": "large"})),
        start(&server, "etl", json!({"system.profile.name": "flat"})),
        start_in(
            &server,
            "team",
            "etl",
            json!({"system.profile.name": "free"}),
        ),
    ];
    for run in &runs {
        wait_deprovisioned(&server, run);
    }
    let seconds: Vec<u64> = runs.iter().map(|r| node_seconds(&server, r)).collect();
    let answer = wait_counted(&server, 4);

    // By app: node time to the second, cost to the cent (a millionth, here).
    let etl = group(&answer, "app", "etl");
    assert_eq!(etl["runs"]["COMPLETED"], 3, "{answer}");
    assert_eq!(
        etl["nodeSeconds"],
        seconds[0] + seconds[2] + seconds[3],
        "{answer}"
    );
    let bad = group(&answer, "app", "bad");
    assert_eq!(bad["runs"]["FAILED"], 1, "{answer}");
    assert_eq!(bad["nodeSeconds"], seconds[1], "{answer}");
    // The failed run's cluster was kept WAITING for its 2 s keepalive.
    let kept = bad["keptNodeSeconds"].as_u64().expect("kept");
    assert!((2..=6).contains(&kept), "{answer}");
    assert_eq!(
        bad["programNodeSeconds"].as_u64().expect("program") + kept,
        seconds[1],
        "{answer}"
    );

    let by_profile = usage(&server, "groupBy=profile");
    let cost = |g: &Value| g["cost"].as_f64();
    let large = group(&by_profile, "profile", "USER:large");
    let expected = (seconds[0] + seconds[1]) as f64 * 0.0004;
    assert!(
        (cost(large).expect("priced") - expected).abs() < 0.000_01,
        "{by_profile}"
    );
    let flat = group(&by_profile, "profile", "USER:flat");
    assert!(
        (cost(flat).expect("priced") - seconds[2] as f64 * 0.001).abs() < 0.000_01,
        "{by_profile}"
    );
    // No price known: the cost is unknown, never 0.
    let free = group(&by_profile, "profile", "USER:free");
    assert_eq!(free["cost"], Value::Null, "{by_profile}");
    assert_eq!(free["unpricedNodeSeconds"], seconds[3], "{by_profile}");

    // Every grouping adds up to the same total.
    let total: u64 = seconds.iter().sum();
    for by in [
        "namespace",
        "provisioner",
        "day",
        "week",
        "month",
        "namespace,app,program,profile,provisioner,day",
    ] {
        let answer = usage(&server, &format!("groupBy={by}"));
        assert_eq!(answer["total"]["nodeSeconds"], total, "{by}: {answer}");
        let summed: u64 = answer["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .map(|g| g["nodeSeconds"].as_u64().expect("seconds"))
            .sum();
        assert_eq!(summed, total, "{by}: {answer}");
    }
    let team = usage(&server, "namespace=team&groupBy=namespace");
    assert_eq!(team["groups"].as_array().map(Vec::len), Some(1), "{team}");
    assert_eq!(team["total"]["nodeSeconds"], seconds[3], "{team}");

    // A namespace's viewer sees its usage, and no other's.
    let viewer = make_token(&server, "viewer", json!({"namespaces": {"team": "viewer"}}));
    let (code, seen) = server.request(
        "GET",
        &format!("/v3/usage?namespace=team&from={}", first_of_month(0)),
        Some(&viewer),
    );
    assert_eq!(code, 200, "{seen}");
    assert_eq!(seen["total"]["nodeSeconds"], seconds[3], "{seen}");
    for path in ["/v3/usage?namespace=default", "/v3/usage"] {
        let (code, refused) = server.request("GET", path, Some(&viewer));
        assert!([403, 404].contains(&code), "{path}: {code} {refused}");
    }

    // A restart changes nothing; nor does compacting the runs' history.
    let by_all = "groupBy=namespace,app,program,profile,provisioner,day";
    let before = usage(&server, by_all);
    drop(server);
    let server = Server::start_at(&data, Options::default());
    assert_eq!(usage(&server, by_all), before);
    drop(server);
    let retention = Options {
        args: vec!["--history-retention".into(), "1s".into()],
        ..Options::default()
    };
    let server = Server::start_at(&data, retention);
    let started = std::time::Instant::now();
    while runs.iter().any(|r| server.get(r).0 != 404) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never compacted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(usage(&server, by_all), before);

    // A price change prices the runs that end after it, and rewrites nothing.
    let mut prices = server.get("/v3/prices").1;
    for p in prices["prices"].as_array_mut().expect("prices") {
        if p["machineType"] == "sim.large" {
            p["perHour"] = json!(36.0);
        }
    }
    let (code, reply) = server.put("/v3/prices", prices);
    assert_eq!(code, 200, "{reply}");
    let later = start(&server, "etl", json!({"system.profile.name": "large"}));
    wait_deprovisioned(&server, &later);
    let later_seconds = node_seconds(&server, &later);
    let answer = wait_counted(&server, 5);
    let large = group(&usage(&server, "groupBy=profile"), "profile", "USER:large").clone();
    let expected = (seconds[0] + seconds[1]) as f64 * 0.0004 + later_seconds as f64 * 0.01;
    assert!(
        (cost(&large).expect("priced") - expected).abs() < 0.000_01,
        "{answer}"
    );
}

#[test]
fn bad_usage_queries_and_price_tables_are_clear_4xx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    for (query, field) in [
        ("from=yesterday", "from"),
        ("from=2026-02-01&to=2026-01-01", "to"),
        ("from=1990-01-01&to=2026-01-01", "to"),
        ("groupBy=day,month", "groupBy"),
        ("groupBy=team", "groupBy"),
        ("limit=3", "limit"),
    ] {
        let (code, answer) = server.get(&format!("/v3/usage?{query}"));
        assert_eq!(code, 400, "{query}: {answer}");
        assert!(answer.to_string().contains(field), "{query}: {answer}");
    }
    for (table, field) in [
        (
            json!({"currency": "USD", "taken": "x", "prices": [{"provisioner": "sim", "machineType": "a", "perHour": -1}]}),
            "perHour",
        ),
        (
            json!({"currency": "USD", "taken": "x", "prices": [{"provisioner": "sim", "machineType": "a", "perHour": 1e300}]}),
            "perHour",
        ),
        (
            json!({"currency": "", "taken": "x", "prices": []}),
            "currency",
        ),
        (
            json!({"currency": "USD", "taken": "x", "prices": [{"provisioner": "sim", "machineType": "a", "perHour": 1, "colour": "red"}]}),
            "colour",
        ),
    ] {
        let (code, answer) = server.put("/v3/prices", table);
        assert_eq!(code, 400, "{answer}");
        assert!(answer.to_string().contains(field), "{answer}");
    }
    let mut body = profile_body("native", &[]);
    body["pricePerNodeHour"] = json!(-3);
    let (code, answer) = server.put("/v3/namespaces/default/profiles/p", body);
    assert_eq!(code, 400, "{answer}");
    assert!(answer.to_string().contains("pricePerNodeHour"), "{answer}");
    // The shipped table is in force until an admin replaces it.
    let (code, prices) = server.get("/v3/prices");
    assert_eq!(code, 200, "{prices}");
    assert_eq!(prices["currency"], "USD");
    assert!(
        prices["prices"].as_array().is_some_and(|p| p.len() > 20),
        "{prices}"
    );
}

/// The namespace's audit log's actions by the server itself about its budget.
fn budget_entries(server: &Server, ns: &str) -> Vec<String> {
    let (code, audit) = server.get(&format!("/v3/audit?namespace={ns}&limit=1000"));
    assert_eq!(code, 200, "{audit}");
    audit
        .as_array()
        .expect("audit")
        .iter()
        .filter(|e| {
            e["actor"] == "ebb serve"
                && e["action"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("budget."))
        })
        .map(|e| e["action"].as_str().expect("action").to_string())
        .collect()
}

#[test]
fn a_budget_warns_at_80_percent_then_refuses_new_starts_and_a_hard_stop_stops_live_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let server = Server::start_at(&data, Options::default());
    let (code, reply) = server.put("/v3/namespaces/team", json!({}));
    assert_eq!(code, 200, "{reply}");
    // A node costs 36.00 an hour: 0.01 a second.
    priced_sim(&server, "team", "p", &sim, "sim.x", 0, Some(36.0));
    deploy_in(&server, "team", "etl", "sleep 1", json!({}));
    deploy_in(&server, "team", "long", "sleep 120", json!({}));
    let args = json!({"system.profile.name": "p"});

    let first = start_in(&server, "team", "etl", args.clone());
    wait_deprovisioned(&server, &first);
    let cost = node_seconds(&server, &first) as f64 * 0.01;
    assert!(cost > 0.0);
    // The budget is set so that the first run used 90% of it: a warning, and starts go on.
    let (code, reply) = server.put(
        "/v3/namespaces/team",
        json!({"budget": {"cost": cost / 0.9}}),
    );
    assert_eq!(code, 200, "{reply}");
    let started = std::time::Instant::now();
    while budget_entries(&server, "team") != ["budget.warning"] {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            budget_entries(&server, "team")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let view = server.get("/v3/namespaces/team").1;
    let share = view["budgetUsed"]["share"].as_f64().expect("share");
    assert!((share - 0.9).abs() < 0.001, "{view}");

    // The second run takes it past 100%: counted once its cluster is gone, then every start
    // is refused with the reason, racing ones too.
    let second = start_in(&server, "team", "etl", args.clone());
    wait_deprovisioned(&server, &second);
    let started = std::time::Instant::now();
    while !budget_entries(&server, "team").contains(&"budget.used".to_string()) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            budget_entries(&server, "team")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let refused: Vec<Value> = std::thread::scope(|s| {
        let starts: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    server.post_json(
                        &format!("{}/start", program_in("team", "etl")),
                        args.clone(),
                    )
                })
            })
            .collect();
        starts
            .into_iter()
            .map(|h| h.join().expect("start").1)
            .collect()
    });
    for answer in &refused {
        assert!(answer.to_string().contains("budget"), "{answer}");
    }
    // Another namespace is not held back.
    deploy(&server, "etl", "true", json!({}));
    let other = start(
        &server,
        "etl",
        json!({"system.profile.name": "SYSTEM:native"}),
    );
    assert_eq!(wait_deprovisioned(&server, &other)["status"], "COMPLETED");

    // With hardStop, raised so a long run may start (95% used): once a run takes the
    // namespace past it again, the long run is stopped.
    let used = (node_seconds(&server, &first) + node_seconds(&server, &second)) as f64 * 0.01;
    let (code, reply) = server.put(
        "/v3/namespaces/team",
        json!({"budget": {"cost": used / 0.95, "hardStop": true}}),
    );
    assert_eq!(code, 200, "{reply}");
    let long = start_in(&server, "team", "long", args.clone());
    wait_until(&server, &long, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    let third = start_in(&server, "team", "etl", args);
    wait_deprovisioned(&server, &third);
    let stopped = wait_until(&server, &long, Duration::from_secs(30), |r| {
        r["status"] == "KILLED"
    });
    assert_eq!(stopped["status"], "KILLED", "{stopped}");
}

#[test]
fn a_namespace_that_queues_holds_starts_over_its_budget_until_it_is_raised_and_the_cli_exports_csv()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let server = Server::start_at(&data, Options::default());
    // No node-hour may be used: the first run's use is all of it.
    let (code, reply) = server.put(
        "/v3/namespaces/q",
        json!({"queueRuns": true, "budget": {"nodeHours": 0}}),
    );
    assert_eq!(code, 200, "{reply}");
    priced_sim(&server, "q", "p", &sim, "sim.x", 0, Some(3.6));
    deploy_in(&server, "q", "etl", "sleep 1", json!({}));
    let args = json!({"system.profile.name": "p"});
    let first = start_in(&server, "q", "etl", args.clone());
    wait_deprovisioned(&server, &first);
    let view = server.get("/v3/namespaces/q").1;
    assert!(
        view["budgetUsed"]["nodeHours"].as_f64().expect("hours") > 0.0,
        "{view}"
    );

    let second = start_in(&server, "q", "etl", args);
    let queued = server.get(&second).1;
    assert_eq!(queued["status"], "QUEUED", "{queued}");
    assert!(
        queued["queue"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("budget")),
        "{queued}"
    );
    let (code, reply) = server.put("/v3/namespaces/q", json!({"budget": {"nodeHours": 1000}}));
    assert_eq!(code, 200, "{reply}");
    assert_eq!(wait_deprovisioned(&server, &second)["status"], "COMPLETED");

    // The CLI's CSV: a header, then a row per group, as a spreadsheet reads them.
    let data_dir = data.to_str().expect("utf-8");
    let env = [
        ("EBB_SERVER", server.url.as_str()),
        ("EBB_DATA_DIR", data_dir),
    ];
    let started = std::time::Instant::now();
    let out = loop {
        let (code, out, err) = crate::support::server::run_ebb(
            &[
                "usage",
                "-n",
                "q",
                "--group-by",
                "app,day",
                "--format",
                "csv",
            ],
            &env,
            None,
        );
        assert_eq!(code, 0, "{out}{err}");
        if out.contains(",2,0,0,0,") {
            break out;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{out}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("day,app,completed,failed,killed,rejected,node_hours,"),
        "{out}"
    );
    assert_eq!(lines.len(), 2, "{out}");
    let row: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(row[1], "etl", "{out}");
    let seconds = node_seconds(&server, &first) + node_seconds(&server, &second);
    let cost: f64 = row[11].parse().expect("cost");
    assert!((cost - seconds as f64 * 0.001).abs() < 0.006, "{out}");
    let (code, table, _) =
        crate::support::server::run_ebb(&["usage", "-n", "q", "--group-by", "app"], &env, None);
    assert_eq!(code, 0);
    assert!(table.contains("TOTAL") && table.contains("etl"), "{table}");
}
