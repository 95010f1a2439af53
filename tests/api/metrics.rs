//! `GET /metrics`: a run of `examples/hello.json` seen moving through the series while it
//! runs and after it ended, the live gauges of a kept cluster, bounded labels.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::runs::{kept_failed_run, wait_until};
use crate::support::server::Server;

const LIMIT: Duration = Duration::from_secs(60);

/// The metrics text, scraped with the server's token.
pub fn scrape(server: &Server) -> String {
    let reply = reqwest::blocking::Client::new()
        .get(format!("{}/metrics", server.url))
        .bearer_auth(server.token().expect("token"))
        .send()
        .expect("scrape");
    assert_eq!(reply.status(), 200);
    assert!(
        reply.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("text/plain; version=0.0.4"),
    );
    reply.text().expect("text")
}

/// The value of the sample `series` (name and labels exactly as exported), if there is one.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The sum of the samples of metric `name` whose labels contain every one of `labels`.
pub fn total(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.split(['{', ' ']).next() == Some(name) && labels.iter().all(|x| l.contains(x))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_run_of_the_example_app_moves_through_the_series() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    // Without a token, nothing.
    let anonymous = reqwest::blocking::get(format!("{}/metrics", server.url)).expect("get");
    assert_eq!(anonymous.status(), 401);
    let app: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/hello.json"))
            .expect("examples/hello.json"),
    )
    .expect("json");
    let (code, deployed) = server.put("/v3/namespaces/default/apps/hello", app);
    assert_eq!(code, 200, "{deployed}");
    // The program pauses long enough to be scraped while it runs.
    let (code, started) = server.post_json(
        "/v3/namespaces/default/apps/hello/workflows/main/start",
        json!({"GREETING_PAUSE": "3"}),
    );
    assert_eq!(code, 200, "{started}");
    let id = started["runId"].as_str().expect("runId").to_string();
    let run = format!("/v3/namespaces/default/apps/hello/workflows/main/runs/{id}");
    wait_until(&server, &run, LIMIT, |r| r["status"] == "RUNNING");
    let during = scrape(&server);
    assert_eq!(
        sample(
            &during,
            r#"ebb_live_runs{program_status="RUNNING",cluster_status="PROVISIONED"}"#
        ),
        Some(1.0),
        "{during}"
    );
    assert_eq!(
        sample(
            &during,
            r#"ebb_live_nodes{provisioner="local",profile="SYSTEM:local",state="provisioned"}"#
        ),
        Some(3.0),
        "{during}"
    );
    assert_eq!(
        total(
            &during,
            "ebb_run_phase_seconds_count",
            &[r#"phase="provisioning""#]
        ),
        1.0,
        "{during}"
    );
    wait_until(&server, &run, LIMIT, |r| {
        r["cluster"]["status"] == "DEPROVISIONED"
    });
    let after = scrape(&server);
    for (name, labels, want) in [
        (
            "ebb_runs_started_total",
            vec![r#"namespace="default""#],
            1.0,
        ),
        ("ebb_run_status_total", vec![r#"status="RUNNING""#], 1.0),
        ("ebb_run_status_total", vec![r#"status="COMPLETED""#], 1.0),
        (
            "ebb_cluster_status_total",
            vec![r#"status="PROVISIONED""#],
            1.0,
        ),
        (
            "ebb_cluster_status_total",
            vec![r#"status="DEPROVISIONED""#],
            1.0,
        ),
        (
            "ebb_run_phase_seconds_count",
            vec![r#"phase="running""#],
            1.0,
        ),
        (
            "ebb_run_phase_seconds_count",
            vec![r#"phase="deprovisioning""#],
            1.0,
        ),
        (
            "ebb_operations_total",
            vec![r#"operation="create""#, r#"status="succeeded""#],
            1.0,
        ),
        (
            "ebb_operations_total",
            vec![r#"operation="delete""#, r#"status="succeeded""#],
            1.0,
        ),
        (
            "ebb_task_attempts_total",
            vec![r#"action="create""#, r#"outcome="succeeded""#],
            3.0,
        ),
        (
            "ebb_provisioner_calls_total",
            vec![
                r#"provisioner="local""#,
                r#"call="create""#,
                r#"outcome="ok""#,
            ],
            3.0,
        ),
    ] {
        assert_eq!(
            total(&after, name, &labels),
            want,
            "{name} {labels:?}\n{after}"
        );
    }
    assert!(total(&after, "ebb_store_commit_seconds_count", &[r#"store=""#]) > 0.0);
    assert!(total(&after, "ebb_store_commit_batch_size_count", &[]) > 0.0);
    assert!(
        total(
            &after,
            "ebb_http_requests_total",
            &[
                r#"route="/v3/namespaces/{ns}/apps/{app}/{type}/{program}/start""#,
                r#"status="200""#
            ]
        ) >= 1.0,
        "{after}"
    );
    // Nothing live any more, and no run id anywhere: labels stay bounded.
    assert_eq!(total(&after, "ebb_live_runs", &[]), 0.0, "{after}");
    assert!(!after.contains(&id), "a run id in the metrics:\n{after}");
    // Every metric the server documents is described.
    for m in ebb::model::metrics::ALL {
        assert!(
            after.contains(&format!("# HELP {} ", m.name))
                || m.kind == ebb::model::metrics::Kind::Counter && !after.contains(m.name)
                || m.kind == ebb::model::metrics::Kind::Histogram && !after.contains(m.name),
            "{} is not described\n{after}",
            m.name
        );
    }
}

#[test]
fn a_kept_cluster_is_a_live_gauge_until_it_goes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let run = kept_failed_run(&server, &dir, "fails", "2");
    let kept = scrape(&server);
    assert_eq!(
        sample(
            &kept,
            r#"ebb_live_runs{program_status="FAILED",cluster_status="WAITING"}"#
        ),
        Some(1.0),
        "{kept}"
    );
    assert_eq!(
        sample(
            &kept,
            r#"ebb_live_clusters{provisioner="sim",profile="USER:kept",state="waiting"}"#
        ),
        Some(1.0),
        "{kept}"
    );
    assert_eq!(
        sample(
            &kept,
            r#"ebb_live_nodes{provisioner="sim",profile="USER:kept",state="waiting"}"#
        ),
        Some(2.0),
        "{kept}"
    );
    let (code, _) = server.post(&format!("{run}/deprovision"));
    assert_eq!(code, 200);
    wait_until(&server, &run, LIMIT, |r| {
        r["cluster"]["status"] == "DEPROVISIONED"
    });
    let gone = scrape(&server);
    assert_eq!(total(&gone, "ebb_live_clusters", &[]), 0.0, "{gone}");
}

/// The `ebb_` metric names `expr` reads.
fn names_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("ebb_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// Whether the server exports series `name`: a metric of `model::metrics`, or one of a
/// histogram's `_bucket`, `_sum` and `_count` series.
fn exported(name: &str) -> bool {
    use ebb::model::metrics::{ALL, Kind};
    ALL.iter().any(|m| {
        m.name == name
            || m.kind == Kind::Histogram
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| name == format!("{}{s}", m.name))
    })
}

#[test]
fn the_dashboard_and_alert_rules_read_only_metrics_the_server_exports() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/monitoring");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/grafana-dashboard.json")).expect("dashboard"),
    )
    .expect("the dashboard is JSON");
    let mut exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().expect("an expr").to_string())
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    // The rules file: each `expr:` (on its line, or folded over the lines after `>-`).
    let rules = std::fs::read_to_string(format!("{dir}/alerts.yml")).expect("alerts");
    let lines: Vec<&str> = rules.lines().collect();
    let mut alerts = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some(expr) = line.trim().strip_prefix("expr:") else {
            continue;
        };
        alerts += 1;
        let mut expr = expr.trim().to_string();
        if expr == ">-" {
            let indent = line.len() - line.trim_start().len();
            expr = lines[i + 1..]
                .iter()
                .take_while(|l| l.len() - l.trim_start().len() > indent)
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join(" ");
        }
        exprs.push(expr);
    }
    assert!(alerts >= 5, "{rules}");
    for expr in &exprs {
        let names = names_in(expr);
        assert!(!names.is_empty(), "reads no ebb metric: {expr}");
        for name in names {
            assert!(exported(&name), "{name} is not exported (in {expr})");
        }
    }
    // And the check itself catches a wrong name.
    assert!(!exported("ebb_runs_total"));
    assert!(exported("ebb_run_phase_seconds_bucket"));
}
