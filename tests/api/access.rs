//! Access control: tokens with roles per namespace, the guard of every route, namespaces
//! hidden from tokens without a role in them, who did what, quotas, host programs.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::runs::{deploy_in, program_in, start_in, wait_deprovisioned};
use crate::support::server::{Server, assert_error};

use crate::support::server::make_token as token;

fn namespace(server: &Server, name: &str, body: Value) {
    let (code, ns) = server.put(&format!("/v3/namespaces/{name}"), body);
    assert_eq!(code, 200, "{ns}");
}

/// A namespace `team` holding a secure key (so no request of the matrix empties it), and a
/// namespace `other`.
fn two_namespaces(server: &Server) {
    namespace(server, "team", json!({}));
    namespace(server, "other", json!({}));
    let (code, key) = server.put(
        "/v3/namespaces/team/securekeys/keep",
        json!({ "data": "kept" }),
    );
    assert_eq!(code, 200, "{key}");
}

/// A path of the route table with its parameters filled in: names that do not exist, so that
/// no request of the matrix changes what the next one finds.
fn fill(route: &ebb::api::routes::Route) -> String {
    let path = route.path;
    let mut out = route.url();
    for (param, value) in [
        ("{ns}", "team"),
        ("{app}", "ghost"),
        ("{type}", "workflows"),
        ("{program}", "ghost"),
        ("{run}", "0190b1d2-0000-7000-8000-000000000000"),
        ("{op}", "1"),
        ("{name}", "ghost"),
    ] {
        out = out.replace(param, value);
    }
    match path {
        "/audit" => format!("{out}?namespace=team"),
        "/janitor/run" => format!("{out}?dryRun=true"),
        _ => out,
    }
}

#[test]
fn every_route_answers_every_role_as_the_guard_table_says() {
    use ebb::model::access::{Decision, Grants, Need, Role, decide};
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    two_namespaces(&server);
    let roles: Vec<(&str, Grants, Value)> = vec![
        (
            "viewer",
            grants(&[("team", Role::Viewer)]),
            json!({"namespaces": {"team": "viewer"}}),
        ),
        (
            "operator",
            grants(&[("team", Role::Operator)]),
            json!({"namespaces": {"team": "operator"}}),
        ),
        (
            "team-admin",
            grants(&[("team", Role::Admin)]),
            json!({"namespaces": {"team": "admin"}}),
        ),
        (
            "stranger",
            grants(&[("other", Role::Admin)]),
            json!({"namespaces": {"other": "admin"}}),
        ),
        (
            "root",
            Grants::instance_admin(),
            json!({"instanceAdmin": true}),
        ),
    ];
    let secrets: BTreeMap<&str, String> = roles
        .iter()
        .map(|(name, _, body)| (*name, token(&server, name, body.clone())))
        .collect();
    let table = ebb::api::routes::table();
    assert!(table.len() > 70, "the whole table: {}", table.len());
    let mut checked = 0;
    for route in &table {
        let path = fill(route);
        let method = route.method.as_str();
        let body = (method != "GET" && method != "DELETE").then(|| json!({}));
        // No token, and a wrong one: 401 on everything but health.
        for wrong in [None, Some("ebb_0000"), Some("not-a-token")] {
            let (code, reply) = server.call(method, &path, body.clone(), wrong);
            if route.need == Need::Public {
                assert_eq!(code, 200, "{method} {path}: {reply}");
            } else {
                assert_eq!(code, 401, "{method} {path} with {wrong:?}: {reply}");
            }
        }
        let ns = (path.contains("/namespaces/team") || route.path == "/audit").then_some("team");
        for (name, grants, _) in &roles {
            let (code, reply) = server.call(method, &path, body.clone(), Some(&secrets[name]));
            let message = reply["message"].as_str().unwrap_or_default().to_string();
            match decide(route.need, grants, ns) {
                Decision::Allow => {
                    assert!(
                        code != 401 && code != 403 && message != "namespace 'team' not found",
                        "{name} may {method} {path}, got {code}: {reply}"
                    );
                }
                Decision::Hidden(_) => {
                    assert_eq!(code, 404, "{name} must not see {method} {path}: {reply}");
                    assert_eq!(
                        message, "namespace 'team' not found",
                        "{name} {method} {path}"
                    );
                }
                Decision::Forbidden(_) => {
                    assert_eq!(code, 403, "{name} must not {method} {path}: {reply}");
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, table.len() * roles.len());
}

fn grants(pairs: &[(&str, ebb::model::access::Role)]) -> ebb::model::access::Grants {
    ebb::model::access::Grants {
        instance_admin: false,
        namespaces: pairs.iter().map(|(n, r)| (n.to_string(), *r)).collect(),
        metrics: false,
    }
}

#[test]
fn another_namespace_does_not_exist_for_a_token_without_a_role_in_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    namespace(&server, "team-a", json!({}));
    namespace(&server, "team-b", json!({}));
    // team-b holds a run with output, a key, a profile, preferences, an app, a template.
    deploy_in(
        &server,
        "team-b",
        "hello",
        "echo b-secret-output",
        json!({}),
    );
    let run = start_in(
        &server,
        "team-b",
        "hello",
        json!({"system.profile.name": "SYSTEM:native"}),
    );
    wait_deprovisioned(&server, &run);
    for (path, body) in [
        ("/v3/namespaces/team-b/securekeys/k", json!({"data": "x"})),
        ("/v3/namespaces/team-b/preferences", json!({"a.b": "c"})),
        (
            "/v3/namespaces/team-b/profiles/p",
            crate::support::profiles::profile_body("native", &[]),
        ),
    ] {
        let (code, reply) = server.put(path, body);
        assert_eq!(code, 200, "{path}: {reply}");
    }
    let a_admin = token(
        &server,
        "a-admin",
        json!({"namespaces": {"team-a": "admin"}}),
    );
    for path in [
        "/v3/namespaces/team-b".to_string(),
        run.clone(),
        format!("{run}/logs"),
        format!("{run}/events"),
        format!("{run}/operations"),
        "/v3/namespaces/team-b/runs".into(),
        "/v3/namespaces/team-b/apps".into(),
        "/v3/namespaces/team-b/apps/hello".into(),
        "/v3/namespaces/team-b/securekeys".into(),
        "/v3/namespaces/team-b/securekeys/k".into(),
        "/v3/namespaces/team-b/profiles".into(),
        "/v3/namespaces/team-b/profiles/p".into(),
        "/v3/namespaces/team-b/preferences".into(),
        "/v3/namespaces/team-b/templates".into(),
        "/v3/audit?namespace=team-b".into(),
    ] {
        let (code, reply) = server.call("GET", &path, None, Some(&a_admin));
        assert_eq!(code, 404, "{path}: {reply}");
        assert_eq!(reply["message"], "namespace 'team-b' not found", "{path}");
        assert!(!reply.to_string().contains("b-secret-output"));
    }
    // The answer is the same as for a namespace that does not exist at all.
    let (_, missing) = server.call("GET", "/v3/namespaces/team-c", None, Some(&a_admin));
    assert_eq!(missing["message"], "namespace 'team-c' not found");
    // Lists show only what the token has a role in.
    let (code, list) = server.call("GET", "/v3/namespaces", None, Some(&a_admin));
    assert_eq!(code, 200);
    let names: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert_eq!(names, vec!["team-a"]);
    // A token of team-a's admin cannot hand out a role in team-b, nor see its tokens.
    let b_viewer = token(
        &server,
        "b-viewer",
        json!({"namespaces": {"team-b": "viewer"}}),
    );
    let (code, reply) = server.call(
        "POST",
        "/v3/tokens",
        Some(json!({"name": "sneak", "namespaces": {"team-b": "viewer"}})),
        Some(&a_admin),
    );
    assert_error((code, reply), 403, "namespace 'team-b'");
    let (_, tokens) = server.call("GET", "/v3/tokens", None, Some(&a_admin));
    let names: Vec<&str> = tokens
        .as_array()
        .expect("tokens")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, vec!["a-admin"], "{tokens}");
    let (code, reply) = server.call("DELETE", "/v3/tokens/b-viewer", None, Some(&a_admin));
    assert_error((code, reply), 404, "token 'b-viewer' not found");
    let (code, _) = server.call("GET", "/v3/namespaces/team-b", None, Some(&b_viewer));
    assert_eq!(code, 200, "b-viewer still works");
}

#[test]
fn revoked_and_expired_tokens_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let ci = token(
        &server,
        "ci",
        json!({"namespaces": {"default": "operator"}}),
    );
    let short = token(
        &server,
        "short",
        // Expiry counts whole seconds: 3s lives at least 2s, long enough for the first use
        // on a busy machine (1s could end a few milliseconds after it was made).
        json!({"namespaces": {"default": "viewer"}, "expiresIn": "3s"}),
    );
    for t in [&ci, &short] {
        let (code, reply) = server.call("GET", "/v3/namespaces/default", None, Some(t));
        assert_eq!(code, 200, "{reply}");
    }
    let (code, revoked) = server.delete("/v3/tokens/ci");
    assert_eq!(code, 200, "{revoked}");
    assert!(revoked.get("token").is_none(), "{revoked}");
    let (code, reply) = server.call("GET", "/v3/namespaces/default", None, Some(&ci));
    assert_error((code, reply), 401, "bearer token");
    // Expiry is checked on every request.
    std::thread::sleep(Duration::from_millis(3100));
    let (code, reply) = server.call("GET", "/v3/namespaces/default", None, Some(&short));
    assert_error((code, reply), 401, "bearer token");
    // A name is taken until its token is revoked.
    let (code, reply) = server.post_json(
        "/v3/tokens",
        json!({"name": "short", "instanceAdmin": true}),
    );
    assert_error((code, reply), 409, "token 'short' already exists");
}

/// Every file under `dir`, recursively.
fn every_file(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn a_tokens_secret_shows_only_in_the_answer_that_made_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let first = server.token().expect("the first token");
    let secret = token(&server, "ci", json!({"namespaces": {"default": "admin"}}));
    // Use it, list it, audit it, revoke another: none of it shows a secret.
    let (code, _) = server.call("GET", "/v3/namespaces", None, Some(&secret));
    assert_eq!(code, 200);
    let (code, _) = server.call(
        "PUT",
        "/v3/namespaces/default/preferences",
        Some(json!({"x.y": "z"})),
        Some(&secret),
    );
    assert_eq!(code, 200);
    let mut answers = Vec::new();
    for path in ["/v3/tokens", "/v3/audit", "/v3/audit?namespace=default"] {
        let (code, reply) = server.get(path);
        assert_eq!(code, 200, "{path}: {reply}");
        answers.push(reply.to_string());
    }
    let (_, audit) = server.get("/v3/audit?namespace=default");
    assert!(
        audit
            .as_array()
            .expect("audit")
            .iter()
            .any(|e| e["actor"] == "ci"),
        "{audit}"
    );
    let logs = server.logs().join("\n");
    drop(server);
    for s in [&secret, &first] {
        for a in &answers {
            assert!(!a.contains(s.as_str()), "an answer shows a secret: {a}");
        }
        assert!(!logs.contains(s.as_str()), "the log shows a secret");
    }
    // On disk: only the first-start file holds a secret, and it holds only the first.
    for file in every_file(dir.path()) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(secret.as_str()),
            "{} holds a secret",
            file.display()
        );
        if file.file_name().is_some_and(|n| n == "admin.token") {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
            assert_eq!(mode & 0o077, 0, "admin.token is owner-only");
            continue;
        }
        assert!(
            !text.contains(first.as_str()),
            "{} holds the first secret",
            file.display()
        );
    }
}

#[test]
fn quotas_hold_under_racing_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    namespace(
        &server,
        "quota",
        json!({"maxLiveRuns": 3, "maxLiveNodes": 5, "maxNodesPerRun": 2}),
    );
    deploy_in(&server, "quota", "long", "sleep 30", json!({}));
    let start = &format!("{}/start", program_in("quota", "long"));
    // A run of more nodes than one run may have is refused whatever else runs.
    let (code, reply) = server.post_json(
        start,
        json!({"system.profile.name": "SYSTEM:local", "system.profile.properties.nodes": "3"}),
    );
    assert_error((code, reply), 409, "maxNodesPerRun");
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|_| {
                s.spawn(|| {
                    server.post_json(
                        start,
                        json!({"system.profile.name": "SYSTEM:local", "system.profile.properties.nodes": "2"}),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("start"))
            .collect()
    });
    let started: Vec<&Value> = answers
        .iter()
        .filter(|(c, _)| *c == 200)
        .map(|(_, b)| b)
        .collect();
    // Two runs of two nodes fit in five nodes; a third would make six.
    assert_eq!(started.len(), 2, "{answers:?}");
    for (code, body) in answers.iter().filter(|(c, _)| *c != 200) {
        assert_eq!(*code, 409, "{body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("maxLiveNodes") || message.contains("maxLiveRuns"),
            "{message}"
        );
    }
    let (code, ns) = server.get("/v3/namespaces/quota");
    assert_eq!(code, 200);
    assert_eq!(ns["usage"], json!({"liveRuns": 2, "liveNodes": 4}), "{ns}");
    assert_eq!(ns["maxLiveNodes"], 5, "{ns}");
    // The refused starts are recorded as REJECTED, with the reason.
    let (_, runs) = server.get("/v3/namespaces/quota/runs?status=REJECTED");
    assert_eq!(runs.as_array().expect("runs").len(), 19, "{runs}");
    // A one-node run still fits.
    let (code, reply) = server.post_json(
        start,
        json!({"system.profile.name": "SYSTEM:local", "system.profile.properties.nodes": "1"}),
    );
    assert_eq!(code, 200, "{reply}");
    let (code, reply) = server.post_json(
        start,
        json!({"system.profile.name": "SYSTEM:local", "system.profile.properties.nodes": "1"}),
    );
    assert_error((code, reply), 409, "maxLiveRuns 3");
    // Stop them all: their clusters go, and the quota is free again.
    let (_, all) = server.get("/v3/namespaces/quota/runs");
    for run in all
        .as_array()
        .expect("runs")
        .iter()
        .filter(|r| r["status"] != "REJECTED")
    {
        let path = format!(
            "{}/runs/{}",
            program_in("quota", "long"),
            run["runid"].as_str().expect("id")
        );
        server.post(&format!("{path}/stop"));
        wait_deprovisioned(&server, &path);
    }
    let (_, ns) = server.get("/v3/namespaces/quota");
    assert_eq!(ns["usage"], json!({"liveRuns": 0, "liveNodes": 0}), "{ns}");
}

#[test]
fn only_an_instance_admin_or_a_namespace_that_allows_it_runs_programs_on_the_servers_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    namespace(&server, "team", json!({}));
    let admin = token(
        &server,
        "team-admin",
        json!({"namespaces": {"team": "admin"}}),
    );
    let app = |config: Value| json!({"config": config, "programs": [{"type": "workflows", "name": "p", "command": ["true"]}]});
    // An app whose own config picks a profile that runs on this host: refused at deploy.
    let (code, reply) = server.call(
        "PUT",
        "/v3/namespaces/team/apps/local",
        Some(app(json!({"system.profile.name": "SYSTEM:native"}))),
        Some(&admin),
    );
    assert_error((code, reply), 403, "allowHostPrograms");
    // One that does not say: deployed, but a run that lands on this host is REJECTED.
    let (code, reply) = server.call(
        "PUT",
        "/v3/namespaces/team/apps/plain",
        Some(app(json!({}))),
        Some(&admin),
    );
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["hostPrograms"], false, "{reply}");
    let start = "/v3/namespaces/team/apps/plain/workflows/p/start";
    let (code, reply) = server.call("POST", start, None, Some(&admin));
    assert_error(
        (code, reply),
        403,
        "may not run programs on the server's own host",
    );
    // The instance admin allows it for the namespace: the same start runs.
    namespace(&server, "team", json!({"allowHostPrograms": true}));
    let (code, reply) = server.call("POST", start, None, Some(&admin));
    assert_eq!(code, 200, "{reply}");
    // Deployed by an instance admin, an app's runs may run here in any namespace.
    namespace(&server, "team", json!({"allowHostPrograms": false}));
    let (code, reply) = server.put("/v3/namespaces/team/apps/plain", app(json!({})));
    assert_eq!(code, 200, "{reply}");
    let (code, reply) = server.call("POST", start, None, Some(&admin));
    assert_eq!(code, 200, "{reply}");
}

#[test]
fn who_did_what_is_in_the_audit_log_the_run_events_and_the_operations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let ops = token(
        &server,
        "alice",
        json!({"namespaces": {"default": "operator"}}),
    );
    crate::support::runs::deploy(&server, "hello", "sleep 30", json!({}));
    let (code, started) = server.call(
        "POST",
        &format!("{}/start", crate::support::runs::program("hello")),
        Some(
            json!({"system.profile.name": "SYSTEM:local", "system.profile.properties.nodes": "1"}),
        ),
        Some(&ops),
    );
    assert_eq!(code, 200, "{started}");
    let run = format!(
        "{}/runs/{}",
        crate::support::runs::program("hello"),
        started["runId"].as_str().expect("id")
    );
    crate::support::runs::wait_until(&server, &run, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    let (code, reply) = server.call("POST", &format!("{run}/stop"), None, Some(&ops));
    assert_eq!(code, 200, "{reply}");
    wait_deprovisioned(&server, &run);
    let (_, events) = server.get(&format!("{run}/events"));
    let by_alice: Vec<&str> = events
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["actor"] == "alice")
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(by_alice.iter().any(|m| m.contains("PENDING")), "{events}");
    assert!(by_alice.contains(&"stop requested"), "{events}");
    let (_, audit) = server.get("/v3/audit?namespace=default");
    let entries: Vec<(String, String, String)> = audit
        .as_array()
        .expect("audit")
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap_or_default().to_string(),
                e["action"].as_str().unwrap_or_default().to_string(),
                e["target"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let id = started["runId"].as_str().expect("id").to_string();
    // Newest first: the stop, the start, the deploy (by the first token).
    assert_eq!(
        entries[0],
        ("alice".into(), "run.stop".into(), id.clone()),
        "{audit}"
    );
    assert_eq!(
        entries[1],
        ("alice".into(), "run.start".into(), id),
        "{audit}"
    );
    assert_eq!(
        entries[2],
        ("admin".into(), "app.put".into(), "hello".into()),
        "{audit}"
    );
    // Paging: one at a time, each page older than the last.
    let (_, page) = server.get("/v3/audit?namespace=default&limit=1");
    let seq = page[0]["seq"].as_u64().expect("seq");
    let (_, next) = server.get(&format!("/v3/audit?namespace=default&limit=1&before={seq}"));
    assert_eq!(next[0]["action"], "run.start", "{next}");
    // Changes of the instance are apart: the tokens made.
    let (_, instance) = server.get("/v3/audit");
    assert!(
        instance
            .as_array()
            .expect("audit")
            .iter()
            .any(|e| e["action"] == "token.create" && e["target"] == "alice"),
        "{instance}"
    );
    let (code, reply) = server.get("/v3/audit?limit=0");
    assert_error((code, reply), 400, "limit");
}

#[test]
fn an_expand_past_the_namespaces_nodes_is_refused_and_a_resize_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    namespace(&server, "quota", json!({"maxLiveNodes": 3}));
    deploy_in(&server, "quota", "long", "sleep 30", json!({}));
    let run = start_in(
        &server,
        "quota",
        "long",
        json!({"system.profile.name": "SYSTEM:local", "system.profile.properties.nodes": "2"}),
    );
    crate::support::runs::wait_until(&server, &run, Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    let (code, reply) = server.post_json(
        &format!("{run}/cluster"),
        json!({"operation": "expand", "nodes": 2}),
    );
    assert_error((code, reply), 409, "maxLiveNodes 3");
    let (code, reply) = server.post_json(
        &format!("{run}/cluster"),
        json!({"operation": "expand", "nodes": 1}),
    );
    assert_eq!(code, 200, "{reply}");
    crate::support::runs::wait_until(&server, &run, Duration::from_secs(30), |r| {
        r["cluster"]["numNodes"] == 3
    });
    // The operation says who asked for it; the create at start does not (the run did).
    let ops = crate::support::runs::operations(&server, &run);
    let expand = ops
        .iter()
        .find(|o| o["operation"] == "expand")
        .expect("the expand");
    assert_eq!(expand["actor"], "admin", "{expand}");
    let create = ops
        .iter()
        .find(|o| o["operation"] == "create")
        .expect("create");
    assert!(create.get("actor").is_none(), "{create}");
    let (_, audit) = server.get("/v3/audit?namespace=quota&limit=1");
    assert_eq!(audit[0]["action"], "run.cluster", "{audit}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, ns) = server.get("/v3/namespaces/quota");
        if ns["usage"] == json!({"liveRuns": 1, "liveNodes": 3}) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{ns}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The namespace is full: another run of one node is refused.
    let (code, reply) = server.post_json(
        &format!("{}/start", program_in("quota", "long")),
        json!({"system.profile.name": "SYSTEM:local", "system.profile.properties.nodes": "1"}),
    );
    assert_error((code, reply), 409, "maxLiveNodes");
    let (code, _) = server.post(&format!("{run}/stop"));
    assert_eq!(code, 200);
    wait_deprovisioned(&server, &run);
}
