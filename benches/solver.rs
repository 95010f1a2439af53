//! Layout solver speed: a 1,000-node cluster of a template with 20 services, 8 of them
//! constrained (quantities, ratios, odd counts, hardware types, coexist groups).
//!
//! `cargo bench --bench solver` prints the median and worst of 20 solves.

use std::time::{Duration, Instant};

use ebb::model::template::Template;
use ebb::rules::solver::{Request, solve};
use serde_json::{Map, Value, json};

fn template() -> Template {
    let mut services = Map::new();
    for i in 0..20 {
        services.insert(format!("s{i:02}"), json!({}));
    }
    let t: Template = serde_json::from_value(json!({
        "services": Value::Object(services),
        "hardwareTypes": {"small": {"sim": {}}, "medium": {"sim": {}}, "large": {"sim": {}}},
        "imageTypes": {"debian12": {"sim": {}}, "ubuntu24": {"sim": {}}},
        "defaults": {"services": (0..20).map(|i| format!("s{i:02}")).collect::<Vec<_>>(), "hardwareType": "medium"},
        "constraints": {
            "size": {"min": 1, "max": 5000},
            "layout": {"mustCoexist": [["s04", "s05"]], "cantCoexist": [["s00", "s06"], ["s01", "s07"]]},
            "services": {
                "s00": {"quantities": {"min": 1, "max": 1}, "hardwareTypes": ["large"]},
                "s01": {"quantities": {"min": 3, "max": 5}, "odd": true},
                "s02": {"ratio": {"min": 0.1, "max": 0.2}},
                "s03": {"quantities": {"min": 2, "max": 10}, "imageTypes": ["ubuntu24"]},
                "s04": {"ratio": {"min": 0.5, "max": 1.0}},
                "s05": {"hardwareTypes": ["small", "medium"]},
                "s06": {"quantities": {"min": 0, "max": 900}},
                "s07": {"ratio": {"min": 0.0, "max": 0.3}}
            }
        }
    }))
    .expect("template");
    t.validate().expect("valid");
    t
}

fn main() {
    let t = template();
    let request = Request {
        provisioner: "sim".into(),
        nodes: 1000,
        ..Request::default()
    };
    let mut times: Vec<Duration> = Vec::new();
    let mut nodes = 0;
    for _ in 0..20 {
        let started = Instant::now();
        let layout = solve(&t, &request).expect("a layout exists");
        times.push(started.elapsed());
        nodes = layout.len();
    }
    times.sort();
    println!(
        "solver: {nodes} nodes, 20 services (8 constrained): median {:.2} ms, worst {:.2} ms over {} solves",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3,
        times.len()
    );
}
