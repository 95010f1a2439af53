//! Spot and zones on aws-ec2, against moto through the official SDK: the spot request reaches
//! EC2 as EC2 documents it, a zone out of spot capacity sends the workers to the next zone,
//! and spot out everywhere falls back to on-demand. Moto never runs out of capacity itself:
//! its harness refuses `RunInstances` for a zone and market with EC2's own error.

use serde_json::{Value, json};

use crate::support::moto::*;
use crate::support::runs::*;
use crate::support::server::{Options, Server};

/// Moto answers `RunInstances` asking for `market` in `zone` with EC2's capacity error.
fn full(moto: &Moto, zone: &str, market: &str) {
    let mut matching = json!({"Placement.AvailabilityZone": zone});
    if market == "spot" {
        matching["InstanceMarketOptions.MarketType"] = json!("spot");
    }
    moto.fault(json!({
        "action": "RunInstances",
        "status": 500,
        "code": "InsufficientInstanceCapacity",
        "message": format!("We currently do not have sufficient t3.micro capacity in the Availability Zone you requested ({zone})."),
        "match": matching,
    }));
}

/// The `RunInstances` calls moto saw, as their parameters.
fn launches(moto: &Moto) -> Vec<Value> {
    moto.calls()
        .into_iter()
        .filter(|c| c["action"] == "RunInstances")
        .map(|c| c["params"].clone())
        .collect()
}

/// (node, zone, lifecycle) of each instance of `run`, sorted.
fn placed(moto: &Moto, run: &str) -> Vec<(String, String, String)> {
    let id = run.rsplit('/').next().expect("id");
    let mut out: Vec<(String, String, String)> = moto
        .of_run(id)
        .iter()
        .map(|i| {
            let text = |v: &Value| v.as_str().unwrap_or("on-demand").to_string();
            (
                text(&i["tags"]["ebb:node"]),
                text(&i["zone"]),
                text(&i["lifecycle"]),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn spot_workers_fail_over_to_the_next_zone_then_fall_back_to_on_demand() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(&sub(&dir, "data"), Options::default());
    put_secret(&server);
    let zones = format!("{REGION}a, {REGION}b");
    aws_profile(
        &server,
        &moto,
        "spot",
        &[
            ("zones", zones.as_str()),
            ("marketType", "spot-with-fallback"),
            ("maxSpotPrice", "0.05"),
        ],
        None,
    );
    deploy(&server, "a", "true", json!({}));
    let (a, b) = (format!("{REGION}a"), format!("{REGION}b"));

    // Zone a has no spot room: the workers go to zone b on spot; the master, on-demand, stays
    // in zone a.
    full(&moto, &a, "spot");
    let run = start(&server, "a", json!({"system.profile.name": "spot"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(
        placed(&moto, &run),
        [
            ("master".to_string(), a.clone(), "on-demand".to_string()),
            ("worker-1".to_string(), b.clone(), "spot".to_string()),
            ("worker-2".to_string(), b.clone(), "spot".to_string()),
        ]
    );
    // The spot request as EC2 documents it: one-time, terminated when reclaimed, the price cap.
    let spot: Vec<Value> = launches(&moto)
        .into_iter()
        .filter(|p| p["InstanceMarketOptions.MarketType"] == "spot")
        .collect();
    assert!(spot.len() >= 3, "{spot:?}");
    for p in &spot {
        assert_eq!(
            p["InstanceMarketOptions.SpotOptions.SpotInstanceType"], "one-time",
            "{p}"
        );
        assert_eq!(
            p["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"], "terminate",
            "{p}"
        );
        assert_eq!(
            p["InstanceMarketOptions.SpotOptions.MaxPrice"], "0.05",
            "{p}"
        );
    }
    // A move to another zone is a new request: a client token of its own.
    let tokens: std::collections::BTreeSet<&str> = spot
        .iter()
        .filter_map(|p| p["ClientToken"].as_str())
        .collect();
    assert_eq!(tokens.len(), spot.len(), "{spot:?}");
    let ops = operations(&server, &run);
    let create = ops
        .iter()
        .find(|o| o["operation"] == "create")
        .expect("create");
    assert_eq!(create["blocked"][0]["zone"], a.as_str(), "{create}");
    assert_eq!(create["blocked"][0]["market"], "spot", "{create}");

    // Spot out in both zones: the workers fall back to on-demand, in zone a.
    full(&moto, &b, "spot");
    let run = start(&server, "a", json!({"system.profile.name": "spot"}));
    let done = wait_deprovisioned(&server, &run);
    assert_eq!(done["status"], "COMPLETED", "{done}");
    for (node, zone, market) in placed(&moto, &run) {
        assert_eq!(
            (zone.as_str(), market.as_str()),
            (a.as_str(), "on-demand"),
            "{node}"
        );
    }
    // A quota answer stays fatal, saying so, in every zone.
    moto.clear_faults();
    moto.fault(json!({
        "action": "RunInstances", "status": 400, "code": "VcpuLimitExceeded",
        "message": "You have requested more vCPU capacity than your current vCPU limit allows.",
    }));
    let run = start(&server, "a", json!({"system.profile.name": "spot"}));
    let failed = wait_until(&server, &run, std::time::Duration::from_secs(60), |r| {
        r["status"] == "FAILED"
    });
    assert!(
        failed["failure"].to_string().contains("VcpuLimitExceeded"),
        "{failed}"
    );
}
