//! A namespace admin does not price its own runs below the instance admin's price table: a
//! USER profile's `pricePerNodeHour` may raise a node's price, or price what the table does
//! not, never lower what the table prices.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::profiles::profile_body;
use crate::support::runs::{sub, wait_deprovisioned};
use crate::support::server::{Server, make_token};

#[test]
fn a_namespace_admin_does_not_price_its_runs_below_the_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = sub(&dir, "data");
    let server = Server::start_at(&data, Default::default());
    // The namespace may run on this host (the sim's nodes), so its admin's profile runs.
    let (code, body) = server.put("/v3/namespaces/team", json!({"allowHostPrograms": true}));
    assert_eq!(code, 200, "{body}");
    let admin = make_token(
        &server,
        "team-admin",
        json!({"namespaces": {"team": "admin"}}),
    );
    // sim.large at 36 an hour (0.01 a second).
    let mut prices = server.get("/v3/prices").1;
    prices["prices"]
        .as_array_mut()
        .expect("prices")
        .push(json!({"provisioner": "sim", "machineType": "sim.large", "perHour": 36.0}));
    let (code, body) = server.put("/v3/prices", prices);
    assert_eq!(code, 200, "{body}");
    let as_admin = |method: &str, path: &str, body: Value| {
        let (code, answer) = server.call(method, path, Some(body), Some(&admin));
        assert!(code < 300, "{method} {path}: {code} {answer}");
        answer
    };
    for (name, price) in [("free", 0.0), ("dear", 72.0)] {
        let mut body = profile_body(
            "sim",
            &[("nodes", "1", false), ("machineType", "sim.large", false)],
        );
        body["pricePerNodeHour"] = json!(price);
        as_admin("PUT", &format!("/v3/namespaces/team/profiles/{name}"), body);
    }
    as_admin(
        "PUT",
        "/v3/namespaces/team/apps/etl",
        json!({"programs": [{"type": "workflows", "name": "p", "command": ["sh", "-c", "sleep 1"]}]}),
    );
    let mut runs = Vec::new();
    for profile in ["free", "dear"] {
        let started = as_admin(
            "POST",
            "/v3/namespaces/team/apps/etl/workflows/p/start",
            json!({"system.profile.name": profile}),
        );
        let run = started["runId"].as_str().expect("runId").to_string();
        runs.push(format!(
            "/v3/namespaces/team/apps/etl/workflows/p/runs/{run}"
        ));
    }
    let mut seconds = Vec::new();
    for run in &runs {
        let view = wait_deprovisioned(&server, run);
        assert_eq!(view["status"], "COMPLETED", "{view}");
        let nodes = view["cluster"]["nodes"].as_array().expect("nodes");
        seconds.push(
            nodes
                .iter()
                .map(|n| {
                    n["deleteTime"].as_u64().expect("deleted")
                        - n["createTime"].as_u64().expect("created")
                })
                .sum::<u64>(),
        );
    }
    let started = Instant::now();
    let answer = loop {
        let (code, answer) = server.get("/v3/usage?namespace=team&groupBy=profile");
        assert_eq!(code, 200, "{answer}");
        let counted = answer["groups"].as_array().map_or(0, Vec::len);
        if counted == 2 {
            break answer;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{answer}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let cost = |profile: &str| {
        answer["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .find(|g| g["key"]["profile"] == profile)
            .and_then(|g| g["cost"].as_f64())
            .unwrap_or_else(|| panic!("no cost of {profile}: {answer}"))
    };
    // Its own zero does not lower the table's price; its own 72 raises it.
    assert!(
        (cost("USER:free") - seconds[0] as f64 * 0.01).abs() < 0.000_01,
        "a namespace admin priced its run below the table: {answer}"
    );
    assert!(
        (cost("USER:dear") - seconds[1] as f64 * 0.02).abs() < 0.000_01,
        "{answer}"
    );
}
