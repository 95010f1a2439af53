//! Start-up, shutdown, durability, restart, store version, auth and the generic HTTP errors.

use crate::support::profiles::profile_body;
use serde_json::json;

use crate::support::server::{
    EBB, Options, Server, assert_error, run_ebb, serve_fails, spawn_and_wait,
};

#[test]
fn health_and_built_ins_are_there_once_listening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    assert_eq!(s.get("/v3/health"), (200, json!({"status": "ok"})));
    let (code, profiles) = s.get("/v3/profiles");
    assert_eq!(code, 200);
    let names: Vec<&str> = profiles
        .as_array()
        .expect("list")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["local", "native"]);
    let (_, local) = s.get("/v3/profiles/local");
    assert_eq!(local["scope"], "SYSTEM");
    assert_eq!(local["status"], "ENABLED");
    assert_eq!(local["provisioner"]["name"], "local");
    assert_eq!(
        local["provisioner"]["properties"],
        json!([{"name": "nodes", "value": "3", "isEditable": true}])
    );
    assert!(local["created"].as_u64().expect("created") > 1_700_000_000);
    assert_eq!(s.get("/v3/namespaces/default").0, 200);
}

#[test]
fn sigterm_exits_zero_and_everything_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    assert_eq!(
        s.put("/v3/namespaces/team", json!({"description": "Team A"}))
            .0,
        200
    );
    let mut body = profile_body("sim", &[("nodes", "5", false)]);
    body["keepalive"] = json!({"failed": "8h", "killed": 60});
    body["timeout"] = json!(7200);
    let (code, created) = s.put("/v3/namespaces/team/profiles/sims", body);
    assert_eq!(code, 200);
    assert_eq!(s.post("/v3/namespaces/team/profiles/sims/disable").0, 200);
    assert_eq!(s.post("/v3/profiles/local/disable").0, 200);
    assert_eq!(
        s.put(
            "/v3/preferences",
            json!({"a": "1", "system.profile.name": "SYSTEM:native"})
        )
        .0,
        200
    );
    assert_eq!(
        s.put("/v3/namespaces/team/preferences", json!({"b": "2"}))
            .0,
        200
    );
    let status = s.terminate();
    assert_eq!(status.code(), Some(0), "SIGTERM must exit 0");

    let s = Server::start(&dir);
    let (_, ns) = s.get("/v3/namespaces/team");
    assert_eq!(ns["description"], "Team A");
    let (_, p) = s.get("/v3/namespaces/team/profiles/sims");
    assert_eq!(p["status"], "DISABLED");
    assert_eq!(p["created"], created["created"]);
    assert_eq!(p["keepalive"], json!({"killed": 60, "failed": 28800}));
    assert_eq!(p["timeout"], 7200);
    assert_eq!(p["provisioner"]["properties"][0]["isEditable"], false);
    // A built-in keeps the admin's status across restarts, though it is reloaded.
    assert_eq!(s.get("/v3/profiles/local/status"), (200, json!("DISABLED")));
    assert_eq!(
        s.get("/v3/preferences").1,
        json!({"a": "1", "system.profile.name": "SYSTEM:native"})
    );
    assert_eq!(
        s.get("/v3/namespaces/team/preferences?resolved=true").1,
        json!({"a": "1", "b": "2", "system.profile.name": "SYSTEM:native"})
    );
}

/// Every write acknowledged with 200 is on disk: SIGKILL right after the answers loses none.
#[test]
fn sigkill_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let acknowledged: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let s = &s;
                scope.spawn(move || {
                    (0..20)
                        .filter_map(|i| {
                            let name = format!("p{t}-{i}");
                            let (code, _) = s.put(
                                &format!("/v3/namespaces/default/profiles/{name}"),
                                profile_body("native", &[]),
                            );
                            (code == 200).then_some(name)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    assert_eq!(acknowledged.len(), 160);
    s.kill();
    let s = Server::start(&dir);
    let (_, list) = s.get("/v3/namespaces/default/profiles");
    let stored: Vec<String> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect();
    for name in &acknowledged {
        assert!(stored.contains(name), "{name} was acknowledged but lost");
    }
}

#[test]
fn a_store_with_a_newer_schema_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(Server::start(&dir).terminate().code(), Some(0));
    let location = crate::support::server::store_location(dir.path());
    ebb::store::write_schema_version_at(&location, ebb::store::SCHEMA_VERSION + 1)
        .expect("bump version");
    let stderr = serve_fails("127.0.0.1:0", dir.path());
    assert!(
        stderr.contains(&format!(
            "schema version {}",
            ebb::store::SCHEMA_VERSION + 1
        )) && stderr.contains("newer ebb"),
        "{stderr}"
    );
}

#[test]
fn a_second_server_on_the_same_data_dir_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _first = Server::start(&dir);
    let stderr = serve_fails("127.0.0.1:0", dir.path());
    assert!(stderr.contains("in use by another process"), "{stderr}");
}

#[test]
fn a_busy_port_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Server::start(&dir);
    let other = tempfile::tempdir().expect("tempdir");
    let bind = first.url.trim_start_matches("http://").to_string();
    let stderr = serve_fails(&bind, other.path());
    assert!(
        stderr.contains("cannot listen on") && stderr.contains("--bind"),
        "{stderr}"
    );
}

#[test]
fn env_vars_configure_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("from-env");
    let mut cmd = std::process::Command::new(EBB);
    cmd.args(["serve", "--log-format", "json"])
        .env("EBB_BIND", "127.0.0.1:0")
        .env("EBB_DATA_DIR", &data)
        .env_remove("EBB_TOKEN")
        .stderr(std::process::Stdio::piped());
    let (mut child, url, _) = spawn_and_wait(cmd).expect("starts");
    let health = reqwest::blocking::get(format!("{url}/v3/health"))
        .expect("health")
        .status();
    assert_eq!(health.as_u16(), 200);
    assert!(data.join("ebb.redb").is_file(), "store not in EBB_DATA_DIR");
    crate::support::server::signal(child.id(), "TERM");
    assert_eq!(child.wait().expect("wait").code(), Some(0));
}

/// With no flags at all: ./ebb-data and 127.0.0.1:11015, as the README says.
#[test]
fn defaults_work_with_no_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = std::process::Command::new(EBB);
    cmd.args(["serve", "--log-format", "json"])
        .current_dir(dir.path())
        .env_remove("EBB_BIND")
        .env_remove("EBB_DATA_DIR")
        .env_remove("EBB_TOKEN")
        .stderr(std::process::Stdio::piped());
    let (mut child, url, _) =
        spawn_and_wait(cmd).expect("starts on the default port (is 11015 free?)");
    assert_eq!(url, "http://127.0.0.1:11015");
    assert!(dir.path().join("ebb-data/ebb.redb").is_file());
    // The first token is in ./ebb-data, where the CLI looks when given none.
    let first = dir.path().join("ebb-data/admin.token");
    assert!(
        first.is_file(),
        "the first start writes {}",
        first.display()
    );
    let (code, out, err) = run_ebb(&["profile", "list", "--system"], &[], Some(dir.path()));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("SYSTEM:local") && out.contains("SYSTEM:native"),
        "{out}"
    );
    crate::support::server::signal(child.id(), "INT");
    assert_eq!(
        child.wait().expect("wait").code(),
        Some(0),
        "Ctrl-C must exit 0"
    );
}

#[test]
fn logs_are_json_lines_with_request_fields() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    s.get("/v3/namespaces");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let request = loop {
        let found = s
            .logs()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["message"] == "request" && v["http.path"] == "/v3/namespaces");
        if let Some(found) = found {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no request log in {:?}",
            s.logs()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(request["http.status"], 200);
    assert_eq!(request["http.method"], "GET");
    assert_eq!(request["level"], "INFO");
}

#[test]
fn a_configured_token_is_required_except_for_health() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start_at(
        dir.path(),
        Options {
            token: Some("s3cret".into()),
            ..Options::default()
        },
    );
    assert_error(
        s.request("GET", "/v3/namespaces", Some("wrong")),
        401,
        "bearer token",
    );
    assert_eq!(
        s.request("GET", "/v3/namespaces", None).0,
        200,
        "the harness sends the right token"
    );
    let anonymous = reqwest::blocking::get(format!("{}/v3/namespaces", s.url)).expect("get");
    assert_eq!(anonymous.status().as_u16(), 401);
    let health = reqwest::blocking::get(format!("{}/v3/health", s.url)).expect("get");
    assert_eq!(health.status().as_u16(), 200);
}

#[test]
fn unknown_paths_wrong_methods_and_huge_bodies_get_json_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    assert_error(
        s.get("/v3/nothing-here"),
        404,
        "no endpoint at /v3/nothing-here",
    );
    assert_error(
        s.request("PATCH", "/v3/profiles/local", None),
        405,
        "PATCH is not allowed",
    );
    assert_error(
        s.request("POST", "/v3/namespaces", None),
        405,
        "POST is not allowed",
    );
    let huge = format!("{{\"description\": \"{}\"}}", "x".repeat(1 << 20));
    assert_error(
        s.put_raw("/v3/namespaces/big", &huge),
        413,
        "larger than the limit",
    );
    assert_eq!(s.get("/v3/namespaces/big").0, 404, "nothing was created");
    // Just under the limit is fine.
    let fits = format!("{{\"description\": \"{}\"}}", "x".repeat((1 << 20) - 100));
    assert_eq!(s.put_raw("/v3/namespaces/fits", &fits).0, 200);
}

#[test]
fn text_logs_to_a_pipe_carry_no_colour_codes() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new(crate::support::server::EBB)
        .args(["serve", "--bind", "127.0.0.1:0", "--log-format", "text"])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .env_remove("EBB_STORE")
        .env_remove("EBB_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ebb serve");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("a line");
        let done = line.contains("listening");
        lines.push(line);
        if done || lines.len() > 200 {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(lines.iter().any(|l| l.contains("listening")), "{lines:?}");
    for line in &lines {
        assert!(!line.contains('\u{1b}'), "a colour code in {line:?}");
    }
}

#[test]
fn runs_operations_and_task_attempts_log_in_their_spans() {
    use crate::support::server::Options;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(
        dir.path(),
        Options {
            env: vec![("EBB_LOG".into(), "info,ebb::runtime::task=debug".into())],
            ..Options::default()
        },
    );
    let state = crate::support::runs::sub(&dir, "sim");
    crate::support::profiles::sim_profile(&server, "two", &state, &[("nodes", "2")], 0, None);
    crate::support::runs::deploy(&server, "a", "true", serde_json::json!({}));
    let run = crate::support::runs::start(
        &server,
        "a",
        serde_json::json!({"system.profile.name": "two"}),
    );
    crate::support::runs::wait_deprovisioned(&server, &run);
    let id = run.rsplit('/').next().expect("run id").to_string();
    let lines: Vec<serde_json::Value> = server
        .logs()
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let span_of = |line: &serde_json::Value, name: &str| -> Option<serde_json::Value> {
        line["spans"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
    };
    // The run's status changes, in the run's span.
    let statuses: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["message"] == "run status")
        .filter(|l| span_of(l, "run").is_some_and(|s| s["run.id"] == id.as_str()))
        .collect();
    assert!(statuses.len() >= 4, "{lines:#?}");
    // Each operation's end, with its id.
    let ops: Vec<serde_json::Value> = lines
        .iter()
        .filter(|l| l["message"] == "operation succeeded")
        .filter_map(|l| span_of(l, "operation"))
        .filter(|s| s["run.id"] == id.as_str())
        .collect();
    assert_eq!(ops.len(), 2, "create and delete: {ops:?}");
    assert!(ops.iter().all(|s| s["operation.id"].is_u64()), "{ops:?}");
    // Every task attempt, with its node and action.
    let attempts: Vec<serde_json::Value> = lines
        .iter()
        .filter(|l| l["message"] == "task attempt ended")
        .filter_map(|l| span_of(l, "task"))
        .filter(|s| s["run.id"] == id.as_str())
        .collect();
    let creates = attempts
        .iter()
        .filter(|s| s["action"] == "create")
        .map(|s| s["node"].as_str().unwrap_or_default().to_string())
        .collect::<std::collections::BTreeSet<_>>();
    assert_eq!(creates.len(), 2, "one create per node: {attempts:?}");
    assert!(attempts.iter().all(|s| s["operation.id"].is_u64()));
}
