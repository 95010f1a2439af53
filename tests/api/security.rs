//! Regression tests from an attacker's audit: no single request may abort or stall the
//! server, secrets never reach programs or other users, the open endpoint refuses what
//! other pages and hosts send, and oversized input gets a 4xx naming its limit.

use serde_json::{Value, json};

use super::harness::{Server, assert_error, profile_body};
use super::runs_support::*;

/// A template whose `count` services all sit in one `cantCoexist` group (so every one is
/// constrained), each allowed on any number of nodes.
fn exclusive_services(count: usize) -> Value {
    let names: Vec<String> = (0..count).map(|i| format!("s{i}")).collect();
    let services: serde_json::Map<String, Value> =
        names.iter().map(|n| (n.clone(), json!({}))).collect();
    json!({
        "services": services,
        "hardwareTypes": {"h": {"local": {}}},
        "imageTypes": {"i": {"local": {}}},
        "defaults": {"services": names},
        "constraints": {"layout": {"cantCoexist": [names]}}
    })
}

/// A template of `count` services, each on at most one node: every subset of them is a
/// candidate node, 2^count of them (15 made the old recursive search overflow the stack).
fn optional_services(count: usize) -> Value {
    let names: Vec<String> = (0..count).map(|i| format!("s{i}")).collect();
    let services: serde_json::Map<String, Value> =
        names.iter().map(|n| (n.clone(), json!({}))).collect();
    let constraints: serde_json::Map<String, Value> = names
        .iter()
        .map(|n| (n.clone(), json!({"quantities": {"min": 0, "max": 1}})))
        .collect();
    json!({
        "services": services,
        "hardwareTypes": {"h": {"local": {}}},
        "imageTypes": {"i": {"local": {}}},
        "defaults": {"services": names},
        "constraints": {"services": constraints}
    })
}

/// The server still answers: it did not abort, and its writer is not stalled.
#[track_caller]
fn assert_alive(server: &Server) {
    let (code, _) = server.get("/v3/health");
    assert_eq!(code, 200, "the server stopped answering");
    let (code, body) = server.put("/v3/namespaces/alive", json!({}));
    assert_eq!(code, 200, "the store's writer does not answer: {body}");
}

#[test]
fn no_plan_request_aborts_or_stalls_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let plan = "/v3/namespaces/default/plan";

    // 15 constrained services made the layout search recurse 2^15 deep; 40 in one group made
    // it enumerate 2^40 sets. Both now end with a 400 naming the limit or the budget.
    let (code, body) = server.post_json(
        plan,
        json!({"template": exclusive_services(15), "provisioner": "local", "nodes": 20}),
    );
    assert!(code == 200 || code == 400, "{code} {body}");
    for count in [15, 16] {
        let (code, body) = server.post_json(
            plan,
            json!({"template": optional_services(count), "provisioner": "local", "nodes": 20}),
        );
        assert!(code == 200 || code == 400, "{code} {body}");
        if code == 400 {
            assert!(
                body["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("steps")),
                "{body}"
            );
        }
        assert_alive(&server);
    }
    // A run whose template needs that search: refused or started, the writer answers.
    let (code, body) = server.put(
        "/v3/namespaces/default/templates/optional",
        optional_services(15),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = server.put(
        "/v3/namespaces/default/profiles/optional",
        profile_body(
            "local",
            &[("nodes", "20", true), ("template", "optional", true)],
        ),
    );
    assert_eq!(code, 200, "{body}");
    deploy(&server, "opt", "true", json!({}));
    let (code, body) = server.post_json(
        &format!("{}/start", program("opt")),
        json!({"system.profile.name": "optional"}),
    );
    assert!(code == 200 || code == 400, "{code} {body}");
    assert_alive(&server);
    if code == 200 {
        let run = format!(
            "{}/runs/{}",
            program("opt"),
            body["runId"].as_str().expect("id")
        );
        wait_deprovisioned(&server, &run);
    }
    assert_error(
        server.post_json(
            plan,
            json!({"template": exclusive_services(40), "provisioner": "local", "nodes": 20}),
        ),
        400,
        "40 constrained services",
    );
    assert_alive(&server);

    // A node count past the provisioner's maximum is refused before anything is sized by it.
    assert_error(
        server.post_json(
            plan,
            json!({"template": "zookeeper-cluster", "provisioner": "local", "nodes": 4294967295u64}),
        ),
        400,
        "allows at most 64 nodes",
    );
    assert_error(
        server.post_json(
            plan,
            json!({"template": "zookeeper-cluster", "provisioner": "sim", "nodes": 4294967295u64}),
        ),
        400,
        "nodes",
    );
    assert_error(
        server.post_json(
            plan,
            json!({"template": "zookeeper-cluster", "provisioner": "local", "nodes": -1}),
        ),
        400,
        "nodes",
    );
    // A plan that fits the provisioner but would be quadratic in size gets a 400 too.
    let wide = json!({
        "services": {"a": {}, "b": {"dependencies": {"install": {"requires": ["a"]}}}},
        "hardwareTypes": {"h": {"sim": {}}}, "imageTypes": {"i": {"sim": {}}},
        "defaults": {"services": ["a", "b"]}
    });
    assert_error(
        server.post_json(
            plan,
            json!({"template": wide, "provisioner": "sim", "nodes": 10000}),
        ),
        400,
        "more than the limit",
    );

    // An 8,500-service dependency chain overflowed the stack in the cycle check; it is now
    // refused by its size, and a chain at the limit is checked without recursion.
    let chain = |count: usize| {
        let services: serde_json::Map<String, Value> = (0..count)
            .map(|i| {
                let deps = if i == 0 {
                    json!({})
                } else {
                    json!({"dependencies": {"runtime": {"requires": [format!("s{}", i - 1)]}}})
                };
                (format!("s{i}"), deps)
            })
            .collect();
        json!({ "services": services })
    };
    assert_error(
        server.put("/v3/namespaces/default/templates/chain", chain(8_500)),
        400,
        "more than the limit of 128",
    );
    let (code, body) = server.put("/v3/namespaces/default/templates/chain", chain(128));
    assert_eq!(code, 200, "{body}");
    assert_alive(&server);
}

#[test]
fn expand_stops_at_the_provisioners_node_maximum() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let mut profile = profile_body("local", &[("nodes", "2", true)]);
    profile["keepalive"] = json!({"failed": 600});
    let (code, body) = server.put("/v3/namespaces/default/profiles/two", profile);
    assert_eq!(code, 200, "{body}");
    deploy(&server, "a", "exit 3", json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "two"}));
    wait_until(&server, &run, std::time::Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });

    let cluster = format!("{run}/cluster");
    assert_error(
        server.post_json(
            &cluster,
            json!({"operation": "expand", "nodes": 4294967295u64}),
        ),
        400,
        "allows at most 64",
    );
    // `local` allows 64 nodes: 2 + 63 is one too many; the audit found 71 made.
    assert_error(
        server.post_json(&cluster, json!({"operation": "expand", "nodes": 63})),
        400,
        "allows at most 64",
    );
    let run_now = server.get(&run).1;
    assert_eq!(
        run_now["cluster"]["nodes"].as_array().map(Vec::len),
        Some(2),
        "{run_now}"
    );
    assert_eq!(operations(&server, &run).len(), 1, "only the create ran");
    assert_alive(&server);
    let (code, _) = server.post(&format!("{run}/deprovision"));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &run);
}

#[test]
fn a_program_sees_no_secret_of_the_server_and_its_files_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, work) = (dir.path().join("data"), dir.path().join("work"));
    let server = Server::start_at(
        &data,
        super::harness::Options {
            token: Some("the-servers-token".into()),
            args: vec!["--work-dir".into(), work.display().to_string()],
            env: vec![
                ("AWS_SECRET_ACCESS_KEY".into(), "cloud-secret-xyz".into()),
                ("EBB_SECURE_PASSPHRASE".into(), "passphrase-xyz".into()),
            ],
            ..Default::default()
        },
    );
    // The program does what a curious one would: print its environment and its launcher's,
    // then look for the store and the key around its working directory.
    let script = r#"
        env
        tr '\0' '\n' < /proc/$PPID/environ
        for up in . .. ../.. ../../.. ../../../.. ../../../../..; do
          for f in secure.key ebb.redb; do
            if cat "$up/$f" >/dev/null 2>&1; then echo "READ $up/$f"; fi
          done
        done
        pwd
    "#;
    deploy(&server, "curious", script, json!({}));
    for profile in ["SYSTEM:native", "SYSTEM:local"] {
        let run = start(&server, "curious", json!({"system.profile.name": profile}));
        let done = wait_deprovisioned(&server, &run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
        let logs = server.get(&format!("{run}/logs")).1;
        let out = logs["stdout"].as_str().expect("stdout");
        assert!(out.contains("EBB_RUN_ID="), "the program ran: {out}");
        for secret in ["the-servers-token", "cloud-secret-xyz", "passphrase-xyz"] {
            assert!(
                !out.contains(secret),
                "{profile}: {secret} reached the program:\n{out}"
            );
        }
        assert!(!out.contains("EBB_TOKEN"), "{profile}:\n{out}");
        assert!(
            !out.contains("READ "),
            "{profile}: found the server's files:\n{out}"
        );
        let cwd = out.lines().last().expect("pwd");
        assert!(
            !std::path::Path::new(cwd).starts_with(&data),
            "{profile}: the program works inside the data dir: {cwd}"
        );
    }
    // Other local users read nothing of the server's: owner-only, all of it.
    let mode = |p: &std::path::Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    for (path, want) in [
        (data.clone(), 0o700),
        (work.clone(), 0o700),
        (data.join("ebb.redb"), 0o600),
        (data.join("secure.key"), 0o600),
        (data.join("runs"), 0o700),
    ] {
        assert_eq!(mode(&path), want, "{}", path.display());
    }
    for entry in std::fs::read_dir(data.join("runs"))
        .expect("runs")
        .flatten()
    {
        assert_eq!(mode(&entry.path()), 0o700, "{}", entry.path().display());
        for file in std::fs::read_dir(entry.path()).expect("run dir").flatten() {
            assert_eq!(mode(&file.path()) & 0o077, 0, "{}", file.path().display());
        }
    }
}

/// Sends `head` (request line and headers, without the blank line) and `body` over a plain
/// socket, exactly as written, and returns the status code and the body.
fn raw(server: &Server, head: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = server.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    let text = format!(
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(text.as_bytes()).expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read");
    let code = reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = reply
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (code, body)
}

#[test]
fn web_pages_and_rebound_names_cannot_use_the_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(
        dir.path(),
        super::harness::Options {
            args: vec!["--allowed-host".into(), "ebb.internal".into()],
            ..Default::default()
        },
    );
    deploy(&server, "a", "true", json!({}));
    let addr = server.url.trim_start_matches("http://").to_string();
    let start = "POST /v3/namespaces/default/apps/a/workflows/p/start HTTP/1.1";
    let runs = |server: &Server| {
        server
            .get(&format!("{}/runs", program("a")))
            .1
            .as_array()
            .map_or(0, Vec::len)
    };

    // DNS rebinding: a page on evil.example, its name pointed at 127.0.0.1, reads nothing.
    let (code, body) = raw(
        &server,
        &format!(
            "GET /v3/namespaces HTTP/1.1\r\nHost: evil.example:{}",
            addr.rsplit(':').next().unwrap_or("80")
        ),
        "",
    );
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("--allowed-host evil.example"), "{body}");
    let (code, _) = raw(
        &server,
        &format!("GET /v3/namespaces HTTP/1.1\r\nHost: {addr}"),
        "",
    );
    assert_eq!(code, 200);
    let (code, _) = raw(
        &server,
        "GET /v3/namespaces HTTP/1.1\r\nHost: localhost",
        "",
    );
    assert_eq!(code, 200);
    let (code, _) = raw(
        &server,
        "GET /v3/namespaces HTTP/1.1\r\nHost: ebb.internal:443",
        "",
    );
    assert_eq!(code, 200, "a name the admin allowed");

    // A page's simple requests (no preflight): text/plain, a form, a cross-site fetch.
    let (code, body) = raw(
        &server,
        &format!("{start}\r\nHost: {addr}\r\nContent-Type: text/plain"),
        "{}",
    );
    assert_eq!(code, 415, "{body}");
    let (code, body) = raw(
        &server,
        &format!(
            "{start}\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nOrigin: http://evil.example"
        ),
        "",
    );
    assert!(code == 403 || code == 415, "{code} {body}");
    let (code, body) = raw(
        &server,
        &format!("{start}\r\nHost: {addr}\r\nOrigin: http://evil.example"),
        "",
    );
    assert_eq!(code, 403, "{body}");
    let (code, body) = raw(
        &server,
        &format!("{start}\r\nHost: {addr}\r\nSec-Fetch-Site: cross-site"),
        "",
    );
    assert_eq!(code, 403, "{body}");
    let (code, body) = raw(
        &server,
        &format!(
            "PUT /v3/namespaces/default/apps/b HTTP/1.1\r\nHost: {addr}\r\nContent-Type: text/plain"
        ),
        r#"{"programs": [{"type": "workflows", "name": "p", "command": ["id"]}]}"#,
    );
    assert_eq!(code, 415, "{body}");
    assert_eq!(runs(&server), 0, "no run was started");
    assert_error(
        server.get("/v3/namespaces/default/apps/b"),
        404,
        "not found",
    );

    // The API's own clients: JSON, no Origin; a page of this server's own origin.
    let (code, body) = raw(
        &server,
        &format!("{start}\r\nHost: {addr}\r\nContent-Type: application/json"),
        "{}",
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = raw(
        &server,
        &format!(
            "{start}\r\nHost: {addr}\r\nOrigin: http://{addr}\r\nSec-Fetch-Site: same-origin\r\nContent-Type: application/json; charset=utf-8"
        ),
        "{}",
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(runs(&server), 2);
}

#[test]
fn secure_references_are_allowed_in_secret_properties_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (code, body) = server.put(
        "/v3/namespaces/default/securekeys/k",
        json!({"data": "the-secret-value"}),
    );
    assert_eq!(code, 200, "{body}");
    // A profile may not put a secret where it would be used in the clear.
    for (provisioner, property, value) in [
        ("local", "workDir", "/tmp/leak-${secure(k)}"),
        ("sim", "stateDir", "${secure(k)}"),
        ("hosts", "hosts", "root@${secure(k)}.example"),
    ] {
        assert_error(
            server.put(
                "/v3/namespaces/default/profiles/leak",
                profile_body(provisioner, &[(property, value, true)]),
            ),
            400,
            &format!("provisioner.properties.{property}: is not a secret property"),
        );
    }
    // Nor may a run's overrides.
    let (code, body) = server.put(
        "/v3/namespaces/default/profiles/open",
        profile_body(
            "local",
            &[("nodes", "1", true), ("workDir", "/tmp/ebb-open", true)],
        ),
    );
    assert_eq!(code, 200, "{body}");
    deploy(&server, "a", "true", json!({}));
    assert_error(
        server.post_json(
            &format!("{}/start", program("a")),
            json!({"system.profile.name": "open",
                   "system.profile.properties.workDir": "/tmp/leak-${secure(k)}"}),
        ),
        400,
        "properties.workDir: is not a secret property",
    );
    assert!(
        !std::fs::read_dir("/tmp")
            .expect("tmp")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains("the-secret-value")),
        "a secret became a directory name"
    );
    let runs = server.get(&format!("{}/runs", program("a"))).1;
    assert_eq!(runs.as_array().map(Vec::len), Some(0), "{runs}");
}

#[test]
fn servers_left_at_their_defaults_never_sweep_each_others_resources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = sub(&dir, "sim");
    let defaults = super::harness::Options {
        generated_name: true,
        ..Default::default()
    };
    let (a_dir, b_dir) = (sub(&dir, "a"), sub(&dir, "b"));
    let a = Server::start_at(&a_dir, defaults.clone());
    sim_profile(&a, "p", &sim, &[("nodes", "2")], 600, None);
    deploy(&a, "x", "exit 3", json!({}));
    let kept = start(&a, "x", json!({"system.profile.name": "p"}));
    wait_until(&a, &kept, std::time::Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    let name = instances(&sim)[0]["tags"]["ebb:server"]
        .as_str()
        .expect("server tag")
        .to_string();
    assert!(name.starts_with("ebb-") && name.len() == 16, "{name}");

    // The name is kept: after a restart the same server still owns its cluster.
    drop(a);
    let a = Server::start_at(&a_dir, defaults.clone());
    let (_, sweep) = a.post("/v3/janitor/run?dryRun=true");
    assert!(
        sweep["orphans"].as_array().is_some_and(Vec::is_empty),
        "{sweep:#}"
    );
    assert_eq!(sweep["accounts"][0]["listed"], 2, "{sweep:#}");

    // A resource without a server tag, as a tool other than ebb might leave: nobody's.
    let mut stray = instances(&sim)[0].clone();
    stray["id"] = json!("i-stray");
    stray["tags"]
        .as_object_mut()
        .expect("tags")
        .remove("ebb:server");
    stray["tags"]["ebb:run"] = json!("0190-not-ours");
    std::fs::write(sim.join("resources/i-stray.json"), stray.to_string()).expect("stray");

    // Another server, also at its defaults, on the same account, sweeping to delete.
    let b = Server::start_at(&b_dir, defaults);
    sim_profile(&b, "p", &sim, &[("nodes", "2")], 0, None);
    let (code, sweep) = b.post("/v3/janitor/run");
    assert_eq!(code, 200, "{sweep}");
    assert!(
        sweep["orphans"].as_array().is_some_and(Vec::is_empty),
        "{sweep:#}"
    );
    let (_, sweep) = a.post("/v3/janitor/run");
    assert!(
        sweep["orphans"].as_array().is_some_and(Vec::is_empty),
        "{sweep:#}"
    );
    for i in instances(&sim) {
        assert_eq!(i["deleteCalls"].as_u64().unwrap_or(0), 0, "{i}");
    }
    let (code, _) = a.post(&format!("{kept}/deprovision"));
    assert_eq!(code, 200);
    wait_deprovisioned(&a, &kept);
}

/// GETs `path` and returns the runs and the `Link` to the next page, if any.
fn runs_page(server: &Server, path: &str) -> (Vec<Value>, Option<String>) {
    let res = reqwest::blocking::get(format!("{}{path}", server.url)).expect("get");
    assert_eq!(res.status().as_u16(), 200, "{path}");
    let link = res
        .headers()
        .get("link")
        .map(|v| v.to_str().expect("ascii").to_string());
    let runs: Vec<Value> = res.json().expect("json");
    let next = link.map(|l| {
        assert!(l.ends_with(">; rel=\"next\""), "{l}");
        l.trim_start_matches('<')
            .split('>')
            .next()
            .expect("url")
            .to_string()
    });
    (runs, next)
}

#[test]
fn run_lists_are_paged_in_the_store_newest_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "a", "sleep 60", json!({"maxConcurrentRuns": 1}));
    let live = start(&server, "a", json!({}));
    // Refused runs are recorded too: the list must not read them all to show a few.
    for _ in 0..120 {
        let (code, _) = server.post_json(&format!("{}/start", program("a")), json!({}));
        assert_eq!(code, 409);
    }
    for base in [
        format!("{}/runs", program("a")),
        "/v3/namespaces/default/runs".to_string(),
    ] {
        let (first, next) = runs_page(&server, &base);
        assert_eq!(first.len(), 100, "the default page");
        let next = next.expect("a link to the next page");
        let (rest, end) = runs_page(&server, &next);
        assert_eq!(rest.len(), 21, "{next}");
        assert_eq!(end, None, "the last page links nowhere");
        let ids: Vec<&str> = first
            .iter()
            .chain(&rest)
            .map(|r| r["runid"].as_str().expect("id"))
            .collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.dedup();
        assert_eq!(ids, sorted, "newest first, none twice");
        assert_eq!(
            *ids.last().expect("oldest"),
            live.rsplit('/').next().expect("id")
        );

        let (rejected, next) = runs_page(&server, &format!("{base}?status=REJECTED&limit=7"));
        assert_eq!(rejected.len(), 7);
        assert!(rejected.iter().all(|r| r["status"] == "REJECTED"));
        let next = next.expect("more rejected runs");
        assert!(
            next.contains("status=REJECTED") && next.contains("limit=7"),
            "{next}"
        );
        let (more, _) = runs_page(&server, &next);
        assert_eq!(more.len(), 7);
        assert!(more[0]["runid"].as_str() < rejected[6]["runid"].as_str());
        let (running, next) = runs_page(&server, &format!("{base}?status=RUNNING"));
        assert_eq!(running.len(), 1);
        assert_eq!(next, None);
    }
    for bad in ["limit=0", "limit=1001", "limit=-1", "before=../x"] {
        let (code, body) = server.get(&format!("{}/runs?{bad}", program("a")));
        assert_eq!(code, 400, "{bad}: {body}");
    }
    let (code, _) = server.post(&format!("{live}/stop"));
    assert_eq!(code, 200);
}

#[test]
fn waiting_on_events_of_runs_that_do_not_exist_holds_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "a", "true", json!({}));
    let long = "x".repeat(60_000);
    assert_error(
        server.get(&format!("{}/runs/{long}/events?wait=1ms", program("a"))),
        400,
        "run",
    );
    assert_error(
        server.get(&format!("{}/runs/0190-nope/events?wait=10ms", program("a"))),
        404,
        "run '0190-nope' not found",
    );
    assert_error(
        server.get(&format!("{}/runs/..%2F..%2Fsecure.key/logs", program("a"))),
        400,
        "run",
    );
    let rss = || {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", server.pid())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .expect("VmRSS")
    };
    let before = rss();
    let path = format!(
        "{}/runs/{}/events?wait=1ms",
        program("a"),
        "y".repeat(60_000)
    );
    for _ in 0..200 {
        let (code, _) = server.get(&path);
        assert_eq!(code, 400);
    }
    let grown_kb = rss().saturating_sub(before);
    eprintln!("the server grew by {grown_kb} kB over 200 requests");
    // A leak of the key per request would be 12 MB.
    assert!(grown_kb < 6_000, "the server grew by {grown_kb} kB");

    // A long poll on a run that exists, given up by its client, leaves nothing behind either.
    let run = start(&server, "a", json!({}));
    wait_deprovisioned(&server, &run);
    let (code, _) = server.get(&format!("{run}/events?after=99999999999999999&wait=50ms"));
    assert_eq!(code, 200);
}

#[test]
fn a_token_from_a_file_stays_out_of_the_process_list() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("token");
    std::fs::write(&file, "file-token-123\n").expect("token");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let data = sub(&dir, "data");
    let refused =
        super::harness::serve_fails_with(&data, &["--token-file", file.to_str().expect("utf-8")]);
    assert!(refused.contains("others can read it"), "{refused}");

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let server = Server::start_at(
        &data,
        super::harness::Options {
            args: vec!["--token-file".into(), file.display().to_string()],
            ..Default::default()
        },
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", server.pid())).expect("cmdline");
    assert!(!String::from_utf8_lossy(&cmdline).contains("file-token-123"));
    assert_error(
        server.request("GET", "/v3/namespaces", None),
        401,
        "bearer token",
    );
    for wrong in ["file-token-12", "file-token-1234", "x", ""] {
        assert_error(
            server.request("GET", "/v3/namespaces", Some(wrong)),
            401,
            "bearer token",
        );
    }
    let (code, _) = server.request("GET", "/v3/namespaces", Some("file-token-123"));
    assert_eq!(code, 200);
}

/// JSON nested `depth` arrays deep.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn hostile_input_to_every_endpoint_gets_a_4xx_and_the_server_stays_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    // A real WAITING cluster, so run-level endpoints see a live run too.
    let mut profile = profile_body("local", &[("nodes", "2", true)]);
    profile["keepalive"] = json!({"failed": 600});
    assert_eq!(
        server
            .put("/v3/namespaces/default/profiles/keep", profile)
            .0,
        200
    );
    deploy(&server, "a", "exit 3", json!({}));
    let live = start(&server, "a", json!({"system.profile.name": "keep"}));
    wait_until(&server, &live, std::time::Duration::from_secs(30), |r| {
        r["cluster"]["status"] == "WAITING"
    });
    let live_id = live.rsplit('/').next().expect("id").to_string();

    let long = "n".repeat(5_000);
    let ids = [
        long.as_str(),
        "..",
        "%2E%2E",
        "a%00b",
        "%F0%9F%92%A9",
        "a.b",
        "a%20b",
    ];
    let mut checked = 0;
    let mut send = |method: &str, path: &str, body: Option<&str>| {
        let (code, reply) = match body {
            Some(b) => raw(
                &server,
                &format!(
                    "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                ),
                b,
            ),
            None => raw(
                &server,
                &format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1"),
                "",
            ),
        };
        assert!(
            (400..500).contains(&code),
            "{method} {} -> {code}: {}",
            &path[..path.len().min(200)],
            &reply[..reply.len().min(300)]
        );
        checked += 1;
    };

    // Every id a path carries, oversized or malformed, in every position.
    let shapes = [
        ("GET", "/v3/namespaces/{x}"),
        ("PUT", "/v3/namespaces/{x}"),
        ("DELETE", "/v3/namespaces/{x}"),
        ("GET", "/v3/provisioners/{x}"),
        ("GET", "/v3/profiles/{x}"),
        ("GET", "/v3/namespaces/{x}/profiles"),
        ("GET", "/v3/namespaces/default/profiles/{x}"),
        ("GET", "/v3/namespaces/default/profiles/{x}/usage"),
        ("GET", "/v3/namespaces/default/profiles/{x}/assignments"),
        ("POST", "/v3/namespaces/default/profiles/{x}/enable"),
        ("DELETE", "/v3/namespaces/default/profiles/{x}"),
        ("GET", "/v3/namespaces/default/templates/{x}"),
        ("DELETE", "/v3/namespaces/default/templates/{x}"),
        ("GET", "/v3/namespaces/default/securekeys/{x}"),
        ("DELETE", "/v3/namespaces/default/securekeys/{x}"),
        ("GET", "/v3/namespaces/default/apps/{x}"),
        ("GET", "/v3/namespaces/default/apps/{x}/preferences"),
        ("GET", "/v3/namespaces/default/apps/a/workflows/{x}"),
        ("POST", "/v3/namespaces/default/apps/a/workflows/{x}/start"),
        ("GET", "/v3/namespaces/default/apps/a/workflows/{x}/runs"),
        ("GET", "/v3/namespaces/default/apps/a/workflows/p/runs/{x}"),
        (
            "GET",
            "/v3/namespaces/default/apps/a/workflows/p/runs/{x}/events?wait=1ms",
        ),
        (
            "GET",
            "/v3/namespaces/default/apps/a/workflows/p/runs/{x}/logs",
        ),
        (
            "GET",
            "/v3/namespaces/default/apps/a/workflows/p/runs/{x}/operations",
        ),
        (
            "POST",
            "/v3/namespaces/default/apps/a/workflows/p/runs/{x}/stop",
        ),
        (
            "POST",
            "/v3/namespaces/default/apps/a/workflows/p/runs/{x}/deprovision",
        ),
        (
            "GET",
            &format!("/v3/namespaces/default/apps/a/workflows/p/runs/{live_id}/operations/{{x}}"),
        ),
    ];
    for (method, shape) in shapes {
        for id in ids {
            send(method, &shape.replace("{x}", id), None);
        }
    }

    // Query values: sizes, counts and durations past every bound.
    let runs = format!("{}/runs", program("a"));
    for query in [
        "limit=18446744073709551616",
        "limit=0",
        "limit=99999999",
        "status=RUNNINGX",
        &format!("before={long}"),
    ] {
        send("GET", &format!("{runs}?{query}"), None);
    }
    for query in ["wait=99999999h", "wait=1e400s", "after=-1", "after=1e30"] {
        send("GET", &format!("{live}/events?{query}"), None);
    }
    send("POST", "/v3/janitor/run?dryRun=maybe", None);

    // Bodies: too deep, too large, numbers past every range, wrong types.
    let deep = nested(100_000);
    let writes = [
        ("PUT", "/v3/namespaces/x".to_string()),
        ("PUT", "/v3/namespaces/default/profiles/x".to_string()),
        ("PUT", "/v3/profiles/x".to_string()),
        ("PUT", "/v3/namespaces/default/preferences".to_string()),
        ("PUT", "/v3/namespaces/default/templates/x".to_string()),
        ("POST", "/v3/namespaces/default/plan".to_string()),
        ("PUT", "/v3/namespaces/default/apps/x".to_string()),
        ("PUT", "/v3/namespaces/default/securekeys/x".to_string()),
        ("POST", format!("{}/start", program("a"))),
        ("POST", format!("{live}/extend")),
        ("POST", format!("{live}/cluster")),
        ("POST", format!("{live}/stop")),
    ];
    for (method, path) in &writes {
        for body in [deep.as_str(), "{\"a\": 1e999999}", "[1, 2]", "\"x\"", "{"] {
            send(method, path, Some(body));
        }
    }
    let huge_services: serde_json::Map<String, Value> =
        (0..5_000).map(|i| (format!("s{i}"), json!({}))).collect();
    let huge_types: serde_json::Map<String, Value> = (0..5_000)
        .map(|i| (format!("t{i}"), json!({"local": {}})))
        .collect();
    let specific: Vec<(&str, String, Value)> = vec![
        (
            "PUT",
            "/v3/namespaces/default/templates/x".into(),
            json!({"services": huge_services}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/templates/x".into(),
            json!({"services": {"a": {}}, "hardwareTypes": huge_types}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/templates/x".into(),
            json!({"services": {"a": {"actions": {"start": {"type": "shell", "script": "x", "timeout": "99999999999999h"}}}}}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/templates/x".into(),
            json!({"services": {"a": {"actions": {"start": {"type": "shell", "script": "x", "attempts": 4294967295u64}}}}}),
        ),
        (
            "POST",
            "/v3/namespaces/default/plan".into(),
            json!({"template": "zookeeper-cluster", "provisioner": "local", "nodes": 18446744073709551615u64}),
        ),
        (
            "POST",
            "/v3/namespaces/default/plan".into(),
            json!({"template": "zookeeper-cluster", "provisioner": "sim", "nodes": 10000}),
        ),
        (
            "POST",
            "/v3/namespaces/default/plan".into(),
            json!({"template": {"services": huge_services}, "provisioner": "local", "nodes": 3}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/profiles/x".into(),
            json!({"provisioner": {"name": "local", "properties": [{"name": "nodes", "value": "99999999999999999999"}]}}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/profiles/x".into(),
            json!({"provisioner": {"name": "local", "properties": []}, "timeout": 18446744073709551615u64}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/profiles/x".into(),
            json!({"provisioner": {"name": "local", "properties": []}, "keepalive": {"failed": "99999999999999h"}}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/profiles/x".into(),
            json!({"provisioner": {"name": "sim", "properties": [{"name": "createLatency", "value": "99999999h"}]}}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/apps/x".into(),
            json!({"programs": [{"type": "workflows", "name": long, "command": ["true"]}]}),
        ),
        (
            "PUT",
            "/v3/namespaces/default/apps/x".into(),
            json!({"programs": [{"type": "workflows", "name": "p", "command": []}]}),
        ),
        (
            "POST",
            format!("{}/start", program("a")),
            json!({"system.profile.name": "keep", "system.profile.properties.nodes": "4294967296"}),
        ),
        (
            "POST",
            format!("{}/start", program("a")),
            json!({"system.profile.name": long}),
        ),
        (
            "POST",
            format!("{live}/extend"),
            json!({"expireAt": 18446744073709551615u64}),
        ),
        ("POST", format!("{live}/extend"), json!({"expireAt": -1})),
        (
            "POST",
            format!("{live}/cluster"),
            json!({"operation": "expand", "nodes": 4294967295u64}),
        ),
        (
            "POST",
            format!("{live}/cluster"),
            json!({"operation": "expand", "nodes": 18446744073709551615u64}),
        ),
        (
            "POST",
            format!("{live}/cluster"),
            json!({"operation": "shrink", "nodes": 4294967295u64}),
        ),
        (
            "POST",
            format!("{live}/cluster"),
            json!({"operation": "shrink", "remove": vec!["worker-1"; 50_000]}),
        ),
        (
            "POST",
            format!("{live}/cluster"),
            json!({"operation": "configure", "config": "x"}),
        ),
    ];
    for (method, path, body) in &specific {
        send(method, path, Some(&body.to_string()));
    }
    assert!(checked > 250, "{checked} requests");
    assert_alive(&server);
    let after = server.get(&live).1;
    assert_eq!(after["cluster"]["status"], "WAITING", "{after}");
    assert_eq!(after["cluster"]["nodes"].as_array().map(Vec::len), Some(2));
    let (code, _) = server.post(&format!("{live}/deprovision"));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &live);
}
