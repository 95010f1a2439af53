//! The `ebb` command line against a real server.

use serde_json::Value;

use crate::support::server::{Server, run_ebb};

fn ebb(s: &Server, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["--server", s.url.as_str()];
    all.extend_from_slice(args);
    let token = s.token().unwrap_or_default();
    run_ebb(&all, &[("EBB_TOKEN", token.as_str())], None)
}

fn ok(s: &Server, args: &[&str]) -> String {
    let (code, out, err) = ebb(s, args);
    assert_eq!(code, 0, "ebb {args:?} failed: {err}");
    out
}

/// Runs a command that must fail (exit 1); returns its stderr.
#[track_caller]
fn fails(s: &Server, args: &[&str]) -> String {
    let (code, _, err) = ebb(s, args);
    assert_eq!(code, 1, "ebb {args:?} should have failed: {err}");
    err
}

fn json(s: &Server, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = ok(s, &all);
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("ebb {args:?} printed no JSON ({e}): {out}"))
}

#[test]
fn profile_lifecycle_from_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let out = ok(
        &s,
        &[
            "profile",
            "create",
            "small",
            "--provisioner",
            "local",
            "--property",
            "nodes=2",
            "--fixed-property",
            "workDir=/tmp/ebb",
            "--keepalive-failed",
            "8h",
            "--timeout",
            "2h",
            "--label",
            "Small",
        ],
    );
    assert!(
        out.contains("USER:small") && out.contains("8h") && out.contains("fixed"),
        "{out}"
    );
    let p = json(&s, &["profile", "get", "small"]);
    assert_eq!(p["keepalive"]["failed"], 28800);
    assert_eq!(p["timeout"], 7200);
    assert_eq!(p["label"], "Small");
    assert_eq!(p["provisioner"]["properties"][1]["isEditable"], false);

    let err = fails(
        &s,
        &["profile", "create", "small", "--provisioner", "local"],
    );
    assert!(err.contains("already exists"), "{err}");

    let p = json(
        &s,
        &[
            "profile",
            "edit",
            "small",
            "--property",
            "nodes=4",
            "--remove-property",
            "workDir",
            "--no-timeout",
        ],
    );
    assert_eq!(
        p["provisioner"]["properties"],
        serde_json::json!([{"name": "nodes", "value": "4", "isEditable": true}])
    );
    assert_eq!(p["timeout"], Value::Null);
    assert_eq!(
        p["keepalive"]["failed"], 28800,
        "edit keeps what it was not told to change"
    );
    assert_eq!(p["label"], "Small");

    let list = ok(&s, &["profile", "list", "--include-system"]);
    assert!(
        list.contains("USER:small")
            && list.contains("SYSTEM:local")
            && list.contains("PROVISIONER"),
        "{list}"
    );
    assert_eq!(ok(&s, &["profile", "status", "small"]).trim(), "ENABLED");
    let err = fails(&s, &["profile", "delete", "small"]);
    assert!(
        err.contains("is enabled; disable it first (HTTP 409)"),
        "{err}"
    );
    assert!(ok(&s, &["profile", "disable", "small"]).contains("DISABLED"));
    assert!(ok(&s, &["profile", "delete", "small"]).contains("deleted"));
    let err = fails(&s, &["profile", "get", "small"]);
    assert!(err.contains("not found (HTTP 404)"), "{err}");
}

#[test]
fn profile_from_a_file_and_system_scope() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let file = dir.path().join("p.json");
    std::fs::write(&file, r#"{"provisioner": {"name": "sim", "properties": [{"name": "nodes", "value": "3"}]}, "keepalive": {"killed": "10m"}}"#).expect("write");
    let p = json(
        &s,
        &[
            "profile",
            "create",
            "SYSTEM:simmed",
            "--file",
            file.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(p["scope"], "SYSTEM");
    assert_eq!(p["keepalive"]["killed"], 600);
    let out = ok(&s, &["profile", "list", "--system"]);
    assert!(out.contains("SYSTEM:simmed"), "{out}");
    // A file saved from `get --json` can be fed back to `edit`.
    let saved = dir.path().join("saved.json");
    std::fs::write(
        &saved,
        ok(&s, &["profile", "get", "SYSTEM:simmed", "--json"]),
    )
    .expect("write");
    let p = json(
        &s,
        &[
            "profile",
            "edit",
            "SYSTEM:simmed",
            "--file",
            saved.to_str().expect("utf-8"),
            "--timeout",
            "1h",
        ],
    );
    assert_eq!(p["timeout"], 3600);
    assert_eq!(p["keepalive"]["killed"], 600);
}

#[test]
fn bad_flags_fail_before_reaching_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let err = fails(
        &s,
        &[
            "profile",
            "create",
            "x",
            "--provisioner",
            "local",
            "--keepalive-failed",
            "soon",
        ],
    );
    assert!(
        err.contains("--keepalive-failed must be a duration"),
        "{err}"
    );
    let err = fails(
        &s,
        &[
            "profile",
            "create",
            "x",
            "--provisioner",
            "local",
            "--property",
            "nodes",
        ],
    );
    assert!(err.contains("'nodes' is not NAME=VALUE"), "{err}");
    let err = fails(&s, &["profile", "create", "x"]);
    assert!(err.contains("needs a provisioner"), "{err}");
    let err = fails(
        &s,
        &[
            "profile",
            "create",
            "x",
            "--provisioner",
            "local",
            "--property",
            "nodes=100",
        ],
    );
    assert!(
        err.contains("provisioner.properties.nodes: must be between 1 and 64, got 100 (HTTP 400)"),
        "{err}"
    );
}

#[test]
fn namespaces_preferences_and_provisioners() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    ok(
        &s,
        &["namespace", "create", "team", "--description", "Team A"],
    );
    let out = ok(&s, &["namespace", "list"]);
    assert!(
        out.contains("team") && out.contains("Team A") && out.contains("default"),
        "{out}"
    );
    ok(
        &s,
        &["pref", "set", "a=1", "system.profile.name=SYSTEM:local"],
    );
    ok(&s, &["pref", "set", "-n", "team", "b=2"]);
    let merged = json(&s, &["pref", "get", "-n", "team", "--resolved"]);
    assert_eq!(
        merged,
        serde_json::json!({"a": "1", "b": "2", "system.profile.name": "SYSTEM:local"})
    );
    ok(&s, &["pref", "delete", "a"]);
    assert_eq!(
        json(&s, &["pref", "get"]),
        serde_json::json!({"system.profile.name": "SYSTEM:local"})
    );
    let err = fails(&s, &["pref", "set", "system.profile.name=SYSTEM:ghost"]);
    assert!(err.contains("profile 'SYSTEM:ghost' not found"), "{err}");
    ok(&s, &["pref", "delete"]);
    assert!(ok(&s, &["pref", "get"]).contains("(no preferences)"));
    ok(&s, &["namespace", "delete", "team"]);
    let err = fails(&s, &["namespace", "get", "team"]);
    assert!(err.contains("namespace 'team' not found"), "{err}");

    let out = ok(&s, &["provisioner", "list"]);
    assert!(
        out.contains("sim") && out.contains("local") && out.contains("native"),
        "{out}"
    );
    let out = ok(&s, &["provisioner", "get", "sim"]);
    assert!(
        out.contains("transientErrorRate") && out.contains("Fault injection"),
        "{out}"
    );
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let (code, _, err) = run_ebb(
        &[
            "--server",
            &format!("http://127.0.0.1:{port}"),
            "profile",
            "list",
        ],
        &[],
        None,
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("cannot reach the ebb server") && err.contains("ebb serve"),
        "{err}"
    );
}

/// `ebb ... | head` closes the pipe early: the CLI stops quietly instead of panicking.
#[test]
fn a_closed_output_pipe_is_not_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let mut child = std::process::Command::new(crate::support::server::EBB)
        .args(["--server", &s.url, "provisioner", "get", "sim"])
        .env("EBB_TOKEN", s.token().expect("token"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn secure_keys_from_the_cli_never_print_their_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "pa55word-from-file\n").expect("write");
    let file = secret.to_str().expect("utf-8");
    let out = ok(
        &s,
        &[
            "secure",
            "put",
            "db",
            "--description",
            "the db password",
            "--data-file",
            file,
            "--property",
            "owner=ops",
        ],
    );
    assert!(out.contains("db") && !out.contains("pa55word"), "{out}");
    let listed = ok(&s, &["secure", "list"]);
    assert!(
        listed.contains("the db password") && !listed.contains("pa55word"),
        "{listed}"
    );
    let key = json(&s, &["secure", "get", "db"]);
    assert_eq!(key["properties"]["owner"], "ops");
    assert!(key.get("data").is_none(), "{key}");
    // A profile refers to it; the reference, not the secret, is what shows.
    ok(
        &s,
        &[
            "profile",
            "create",
            "p",
            "--provisioner",
            "hosts",
            "--property",
            "hosts=root@127.0.0.1",
            "--property",
            "sshPrivateKey=${secure(db)}",
        ],
    );
    let profile = ok(&s, &["profile", "get", "p"]);
    assert!(
        profile.contains("${secure(db)}") && !profile.contains("pa55word"),
        "{profile}"
    );
    let err = fails(
        &s,
        &[
            "profile",
            "create",
            "q",
            "--provisioner",
            "sim",
            "--property",
            "stateDir=${secure(db",
        ],
    );
    assert!(err.contains("provisioner.properties.stateDir"), "{err}");
    let err = fails(&s, &["secure", "get", "nope"]);
    assert!(
        err.contains("secure key 'nope' not found in namespace 'default'"),
        "{err}"
    );
    let err = fails(&s, &["secure", "put", "bad/name", "--data-file", file]);
    assert!(
        err.contains("404") || err.contains("secure key name"),
        "{err}"
    );
    ok(&s, &["secure", "delete", "db"]);
    assert!(!ok(&s, &["secure", "list"]).contains("db"));
}

#[test]
fn schedules_from_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    crate::support::runs::deploy(&s, "etl", "true", serde_json::json!({}));
    let made = ok(
        &s,
        &[
            "schedule",
            "create",
            "default/etl/nightly",
            "--program",
            "p",
            "--cron",
            "0 4 * * *",
            "--time-zone",
            "Europe/Berlin",
            "--property",
            "day=monday",
        ],
    );
    assert!(made.contains("SUSPENDED"), "{made}");
    assert!(made.contains("cron '0 4 * * *' Europe/Berlin"), "{made}");
    let next = ok(
        &s,
        &["schedule", "next", "default/etl/nightly", "--count", "2"],
    );
    assert_eq!(next.lines().count(), 2, "{next}");
    assert!(next.contains("04:00:00 Europe/Berlin"), "{next}");
    ok(&s, &["schedule", "enable", "default/etl/nightly"]);
    ok(
        &s,
        &[
            "schedule",
            "create",
            "default/etl/after",
            "--program",
            "p",
            "--after",
            "default/load/p",
            "--on",
            "failed,killed",
        ],
    );
    let list = ok(&s, &["schedule", "list"]);
    assert!(
        list.contains("etl/nightly") && list.contains("SCHEDULED"),
        "{list}"
    );
    assert!(
        list.contains("after default/load/p FAILED|KILLED"),
        "{list}"
    );
    let listed = json(&s, &["schedule", "list", "--app", "etl"]);
    assert_eq!(listed.as_array().expect("list").len(), 2, "{listed}");
    ok(
        &s,
        &[
            "schedule",
            "update",
            "default/etl/nightly",
            "--cron",
            "0 5 * * *",
        ],
    );
    let got = json(&s, &["schedule", "get", "default/etl/nightly"]);
    assert_eq!(got["trigger"]["cronExpression"], "0 5 * * *");
    assert_eq!(
        got["trigger"].get("timeZone"),
        None,
        "a new --cron replaces the trigger"
    );
    let err = fails(
        &s,
        &["schedule", "create", "default/etl/x", "--program", "p"],
    );
    assert!(err.contains("--cron or --after"), "{err}");
    let err = fails(
        &s,
        &[
            "schedule",
            "create",
            "etl/x",
            "--program",
            "p",
            "--cron",
            "* * * * *",
        ],
    );
    assert!(err.contains("NAMESPACE/APP/NAME"), "{err}");
    let err = fails(
        &s,
        &[
            "schedule",
            "create",
            "default/etl/x",
            "--program",
            "p",
            "--cron",
            "0 0 31 2 *",
        ],
    );
    assert!(err.contains("never fires"), "{err}");
    ok(&s, &["schedule", "delete", "default/etl/after"]);
    let fires = ok(&s, &["schedule", "fires", "default/etl/nightly"]);
    assert!(fires.contains("FIRED FOR"), "{fires}");
    // A fired run says which fire started it, and its arguments.
    ok(
        &s,
        &[
            "schedule",
            "create",
            "default/etl/often",
            "--program",
            "p",
            "--cron",
            "* * * * * *",
            "--property",
            "day=tuesday",
            "--enable",
        ],
    );
    let started = std::time::Instant::now();
    let run = loop {
        let listed = json(&s, &["run", "list", "default/etl/p"]);
        if let Some(r) = listed.as_array().and_then(|a| a.first()) {
            break format!("default/etl/p/{}", r["runid"].as_str().expect("id"));
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "never fired"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    ok(&s, &["schedule", "disable", "default/etl/often"]);
    let shown = ok(&s, &["run", "get", &run]);
    assert!(
        shown.contains("started:  by schedule default/etl/often for the time "),
        "{shown}"
    );
    assert!(shown.contains("argument: day=tuesday"), "{shown}");
    assert!(shown.contains("argument: logical.start.time="), "{shown}");
}

#[test]
fn namespace_set_changes_quotas_and_the_queue_and_get_shows_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    ok(
        &s,
        &[
            "namespace",
            "set",
            "default",
            "--max-live-runs",
            "2",
            "--queue-runs",
            "true",
            "--max-queued",
            "50",
            "--max-queue-time",
            "2h",
        ],
    );
    let shown = ok(&s, &["namespace", "get", "default"]);
    for line in [
        "maxLiveRuns:       2",
        "queueRuns:         true",
        "maxQueued:         50",
        "maxQueueTime:      2h",
        "maxLiveNodes:      none",
    ] {
        assert!(shown.contains(line), "{line} in {shown}");
    }
    ok(
        &s,
        &[
            "namespace",
            "set",
            "default",
            "--max-live-runs",
            "none",
            "--max-queued",
            "none",
        ],
    );
    let after = json(&s, &["namespace", "get", "default"]);
    assert!(after.get("maxLiveRuns").is_none(), "{after}");
    assert!(after.get("maxQueued").is_none(), "{after}");
    assert_eq!(after["queueRuns"], true, "{after}");
    let err = fails(
        &s,
        &["namespace", "set", "default", "--max-queued", "100001"],
    );
    assert!(err.contains("maxQueued"), "{err}");
}
