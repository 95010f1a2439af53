//! A warm pool whose creates fail does not try again every tick for ever: it waits longer
//! after each failed run, stops after five in a row (saying so on its view, in its newest
//! run's history and in the metrics), and tries again once its profile changes. A namespace
//! keeps at most so many pools.

use std::time::Duration;

use serde_json::{Value, json};

use crate::pools::wait_pool;
use crate::support::profiles::{profile_body, put_profile_body};
use crate::support::runs::sub;
use crate::support::server::Server;

/// Profile `warm`: a one-node sim pool of three, whose creates fail if `fail`.
fn warm(server: &Server, sim: &std::path::Path, fail: bool) {
    let mut body = profile_body(
        "sim",
        &[
            ("stateDir", sim.to_str().expect("utf-8"), false),
            ("nodes", "1", false),
            ("failCreate", if fail { "true" } else { "false" }, false),
        ],
    );
    body["pool"] = json!({"min": 3, "max": 3});
    put_profile_body(server, "warm", body);
}

/// The pool's own runs.
fn pool_runs(server: &Server) -> Vec<Value> {
    let (code, runs) = server.get("/v3/namespaces/default/runs?limit=1000");
    assert_eq!(code, 200, "{runs}");
    runs.as_array()
        .expect("runs")
        .iter()
        .filter(|r| r["app"] == "_pool")
        .cloned()
        .collect()
}

#[test]
fn a_pool_whose_creates_fail_backs_off_then_stops_until_its_profile_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim) = (sub(&dir, "data"), sub(&dir, "sim"));
    let server = Server::start_at(&data, Default::default());
    warm(&server, &sim, true);
    let stopped = wait_pool(&server, "stopped", |p| p["health"]["status"] == "stopped");
    assert!(
        stopped["health"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("failCreate")),
        "{stopped}"
    );
    // Five failed in a row (three at once, then a few more after a wait), not one a tick.
    let tried = pool_runs(&server).len();
    assert!(
        (5..=6).contains(&tried),
        "{tried} runs: {:?}",
        pool_runs(&server)
    );
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(pool_runs(&server).len(), tried, "a stopped pool went on");
    let text = crate::metrics::scrape(&server);
    assert!(text.lines().any(|l| l == "ebb_pools_stopped 1"), "{text}");
    // Told once, in the newest run's history.
    let told = pool_runs(&server)
        .iter()
        .filter(|run| {
            let path = format!(
                "/v3/namespaces/default/apps/_pool/workflows/warm/runs/{}/events",
                run["runid"].as_str().expect("runid")
            );
            let (code, events) = server.get(&path);
            assert_eq!(code, 200, "{events}");
            let text = events.to_string();
            text.contains("stopped after") && text.contains("failed runs in a row")
        })
        .count();
    assert_eq!(
        told,
        1,
        "the stop is told once: {:?}",
        server
            .logs()
            .iter()
            .filter(|l| l.contains("stop"))
            .collect::<Vec<_>>()
    );

    // The cause fixed and the profile written again: it fills.
    warm(&server, &sim, false);
    let filled = wait_pool(&server, "3 ready", |p| {
        p["ready"].as_array().map_or(0, Vec::len) == 3
    });
    assert_eq!(filled["health"]["status"], "filling", "{filled}");
}

#[test]
fn a_namespace_keeps_at_most_sixteen_pools() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let body = |i: usize| {
        let mut body = profile_body("sim", &[("nodes", "1", false)]);
        body["pool"] = json!({"min": 0, "max": 1});
        body["description"] = json!(format!("pool {i}"));
        body
    };
    for i in 0..16 {
        put_profile_body(&server, &format!("p{i}"), body(i));
    }
    // Written again, one of them is still allowed; a seventeenth is not.
    put_profile_body(&server, "p3", body(3));
    crate::support::server::assert_error(
        server.put("/v3/namespaces/default/profiles/p16", body(16)),
        400,
        "pool",
    );
}
