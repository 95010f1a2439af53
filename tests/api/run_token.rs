//! A run's program resizes its own cluster with its `EBB_RUN_TOKEN`: within the profile's
//! `minNodes` and `maxNodes`, on its own run's cluster and nothing else, only while the run
//! lives; the token shows in no event, log line or process list. An operator's resize is held
//! to the same bounds.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::profiles::{profile_body, put_profile_body};
use crate::support::runs::*;
use crate::support::server::{Options, Server};

/// A program that asks for `asks` (one JSON body per line) on its own cluster, with its own
/// token, one at a time, each after the file `go-<n>` appears in `dir`, writing each answer's
/// HTTP code to `code-<n>`; it leaves its token in `dir/token` for the test to try elsewhere,
/// and ends when `dir/done` appears.
fn resizing_program(dir: &Path, asks: &[Value]) -> String {
    let d = dir.display();
    let mut script = format!("printf %s \"$EBB_RUN_TOKEN\" > {d}/token\n");
    for (n, body) in asks.iter().enumerate() {
        script.push_str(&format!(
            "while [ ! -e {d}/go-{n} ]; do sleep 0.05; done\n\
             curl -s -o {d}/answer-{n} -w '%{{http_code}}' -X POST \
             -H \"Authorization: Bearer $EBB_RUN_TOKEN\" -H 'content-type: application/json' \
             -d '{body}' \
             \"$EBB_SERVER/v3/namespaces/$EBB_NAMESPACE/apps/$EBB_APP/workflows/$EBB_PROGRAM/runs/$EBB_RUN_ID/cluster\" \
             > {d}/code-{n}.tmp && mv {d}/code-{n}.tmp {d}/code-{n}\n"
        ));
    }
    script.push_str(&format!("while [ ! -e {d}/done ]; do sleep 0.05; done\n"));
    script
}

/// Lets the program make ask `n`, and answers its HTTP code and body.
#[track_caller]
fn ask(dir: &Path, n: usize) -> (u16, Value) {
    std::fs::write(dir.join(format!("go-{n}")), "").expect("go");
    let code = dir.join(format!("code-{n}"));
    let started = std::time::Instant::now();
    while !code.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "ask {n} never answered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let code = std::fs::read_to_string(code).expect("code");
    let body = std::fs::read_to_string(dir.join(format!("answer-{n}"))).unwrap_or_default();
    (
        code.trim().parse().expect("an HTTP code"),
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

#[test]
fn a_program_resizes_its_own_cluster_within_its_bounds_and_nothing_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, sim, talk) = (sub(&dir, "data"), sub(&dir, "sim"), sub(&dir, "talk"));
    let server = Server::start_at(&data, Options::default());
    let body = profile_body(
        "sim",
        &[
            ("stateDir", sim.to_str().expect("utf-8"), false),
            ("nodes", "2", false),
            ("minNodes", "2", false),
            ("maxNodes", "4", false),
        ],
    );
    put_profile_body(&server, "elastic", body);
    let asks = [
        json!({"operation": "expand", "nodes": 2}),
        json!({"operation": "expand", "nodes": 1}),
        json!({"operation": "restart-services"}),
        json!({"operation": "shrink", "nodes": 2}),
        json!({"operation": "shrink", "nodes": 1}),
    ];
    deploy(&server, "a", &resizing_program(&talk, &asks), json!({}));
    let run = start(&server, "a", json!({"system.profile.name": "elastic"}));
    wait_until(&server, &run, Duration::from_secs(60), |r| {
        r["status"] == "RUNNING"
    });

    // Grown by 2 to its maxNodes (4).
    let (code, grown) = ask(&talk, 0);
    assert_eq!(code, 200, "{grown}");
    let op = wait_op(&server, &run, grown["id"].as_u64().expect("id"));
    assert_eq!(op["status"], "SUCCEEDED", "{op}");
    let (_, now) = server.get(&run);
    assert_eq!(now["cluster"]["numNodes"], 4, "{now}");
    // Past it: refused, naming the bound.
    let (code, refused) = ask(&talk, 1);
    assert_eq!(code, 400, "{refused}");
    assert!(refused.to_string().contains("maxNodes (4)"), "{refused}");
    // Any other operation on its cluster: forbidden.
    let (code, refused) = ask(&talk, 2);
    assert_eq!(code, 403, "{refused}");
    // Shrunk by 2 to its minNodes (2); one more is refused.
    let (code, shrunk) = ask(&talk, 3);
    assert_eq!(code, 200, "{shrunk}");
    let op = wait_op(&server, &run, shrunk["id"].as_u64().expect("id"));
    assert_eq!(op["status"], "SUCCEEDED", "{op}");
    let (code, refused) = ask(&talk, 4);
    assert_eq!(code, 400, "{refused}");
    assert!(refused.to_string().contains("minNodes (2)"), "{refused}");

    // The token does nothing else: another route, another run, another namespace's list.
    let token = std::fs::read_to_string(talk.join("token")).expect("token");
    assert!(token.starts_with("ebbrun_"), "{token}");
    // While the program runs, no file the server keeps holds it (its launch file included).
    for (path, bytes) in files(&data) {
        let found = bytes.windows(token.len()).any(|w| w == token.as_bytes());
        assert!(!found, "{} holds the run's token", path.display());
    }
    let other = start(&server, "a", json!({"system.profile.name": "elastic"}));
    let expand = json!({"operation": "expand", "nodes": 1});
    for (method, path, body) in [
        ("GET", run.clone(), None),
        ("POST", format!("{run}/stop"), None),
        ("POST", format!("{other}/cluster"), Some(expand.clone())),
        ("GET", "/v3/namespaces".to_string(), None),
        ("POST", format!("{run}/cluster/plan"), Some(expand.clone())),
    ] {
        let (code, reply) = server.call(method, &path, body, Some(&token));
        assert_eq!(code, 403, "{method} {path}: {reply}");
    }
    // An operator is held to the same bounds.
    let (code, refused) = server.post_json(
        &format!("{run}/cluster"),
        json!({"operation": "expand", "nodes": 4}),
    );
    assert_eq!(code, 400, "{refused}");
    assert!(refused.to_string().contains("maxNodes (4)"), "{refused}");

    // Once the run has ended, the token is refused.
    std::fs::write(talk.join("done"), "").expect("done");
    wait_deprovisioned(&server, &run);
    let (code, _) = server.call(
        "POST",
        &format!("{run}/cluster"),
        Some(expand),
        Some(&token),
    );
    assert_eq!(code, 401);

    // It shows nowhere: not in the run's events, operations or output, the server's log, or
    // any process's command line.
    for path in [
        format!("{run}/events"),
        format!("{run}/operations"),
        format!("{run}/logs"),
    ] {
        let (_, body) = server.get(&path);
        assert!(!body.to_string().contains(&token), "{path} shows the token");
    }
    assert!(
        !server.logs().iter().any(|l| l.contains(&token)),
        "the server's log shows the token"
    );
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            assert!(
                !String::from_utf8_lossy(&cmdline).contains(&token),
                "a command line shows the token"
            );
        }
    }
    // The other run's program found every ask let through and `done` there: it ends too.
    wait_deprovisioned(&server, &other);
}
