//! Whoever can write ebb's keys in etcd is not an administrator of ebb: records written with a
//! plain etcd client (an app, a schedule, a namespace, a server, a token) decide nothing, and
//! a revoked token's records written back stay revoked. These run on their own etcd whatever
//! `EBB_TEST_STORE` says (the etcd pass leaves them out).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::etcd::Cluster;
use crate::support::installation::Installation;
use crate::support::runs::deploy;
use crate::support::server::{Server, make_token};

const TTL: Duration = Duration::from_secs(3);

/// The value of etcd key `key`, if any.
fn get(cluster: &Cluster, key: &str) -> Option<Vec<u8>> {
    let key = key.to_string();
    cluster.admin(|mut c| async move {
        let found = c.get(key, None).await?;
        Ok(found.kvs().first().map(|kv| kv.value().to_vec()))
    })
}

/// Puts `value` under etcd key `key`, as a plain etcd client does.
fn put(cluster: &Cluster, key: &str, value: Vec<u8>) {
    let key = key.to_string();
    cluster.admin(|mut c| async move { c.put(key, value, None).await.map(|_| ()) });
}

/// Deletes etcd key `key`.
fn delete(cluster: &Cluster, key: &str) {
    let key = key.to_string();
    cluster.admin(|mut c| async move { c.delete(key, None).await.map(|_| ()) });
}

/// The record inside a sealed value.
fn record_of(sealed: &[u8]) -> Value {
    let sealed: Value = serde_json::from_slice(sealed).expect("json");
    assert!(sealed["seal"].is_string(), "not sealed: {sealed}");
    sealed["value"].clone()
}

/// Waits until a log line of `server` contains `text`.
#[track_caller]
fn wait_log(server: &Server, text: &str) {
    let started = Instant::now();
    while !server.logs().iter().any(|l| l.contains(text)) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no log line says {text:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An app that runs on the server's host, a schedule firing every second and the schedules'
/// change marker, an allowing namespace, a server record: all written with a plain etcd
/// client, unsealed or under another record's seal. Nothing runs, nothing is listed, and the
/// refusals are logged.
#[test]
fn records_written_into_etcd_by_someone_else_start_nothing() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = "/ebb-test/forged-records";
    let install = Installation::new(&cluster, dir.path(), TTL, prefix);
    let server = install.server("s0");
    // A genuine app of the instance admin (its programs run on the host), and a genuine
    // schedule of it, suspended: their records are the attacker's templates.
    deploy(&server, "a", "true", json!({}));
    let (code, body) = server.put(
        "/v3/namespaces/default/apps/a/schedules/s",
        json!({
            "name": "s",
            "program": {"programName": "p", "programType": "WORKFLOW"},
            "trigger": {"type": "TIME", "cronExpression": "0 0 1 1 *"},
            "status": "SUSPENDED",
        }),
    );
    assert_eq!(code, 200, "{body}");
    let app_key = format!("{prefix}/apps/default/a");
    let schedule_key = format!("{prefix}/schedules/default/a/s");
    let sealed_app = get(&cluster, &app_key).expect("the app's record");
    let mut app = record_of(&sealed_app);
    assert_eq!(app["hostPrograms"], true, "{app}");
    let mut schedule = record_of(&get(&cluster, &schedule_key).expect("the schedule's record"));

    // The attacker's program proves it ran by making this file.
    let marker = dir.path().join("pwned");
    let command = json!(["sh", "-c", format!("touch {}", marker.display())]);
    app["programs"][0]["command"] = command;
    app["name"] = json!("forged");
    schedule["app"] = json!("forged");
    schedule["status"] = json!("SCHEDULED");
    schedule["trigger"] = json!({"type": "TIME", "cronExpression": "* * * * * *"});
    // Unsealed records of a new app and its schedule...
    put(
        &cluster,
        &format!("{prefix}/apps/default/forged"),
        app.to_string().into_bytes(),
    );
    put(
        &cluster,
        &format!("{prefix}/schedules/default/forged/s"),
        schedule.to_string().into_bytes(),
    );
    // ...the genuine app's record changed under its own seal...
    let mut changed_a = app.clone();
    changed_a["name"] = json!("a");
    let lifted = String::from_utf8(sealed_app.clone()).expect("utf-8");
    let seal = &lifted[..lifted.find(r#","value":"#).expect("value")];
    put(
        &cluster,
        &app_key,
        format!(r#"{seal},"value":{changed_a}}}"#).into_bytes(),
    );
    // ...a namespace that allows host programs, a server to forward commands to, and the
    // schedules' change marker bumped so the scheduler looks.
    put(
        &cluster,
        &format!("{prefix}/namespaces/evil"),
        json!({"name": "evil", "allowHostPrograms": true, "description": ""})
            .to_string()
            .into_bytes(),
    );
    put(
        &cluster,
        &format!("{prefix}/servers/evil"),
        json!({"name": "evil", "url": "http://127.0.0.1:9", "started": 0})
            .to_string()
            .into_bytes(),
    );
    put(
        &cluster,
        &format!("{prefix}/meta/schedules/changed"),
        b"1000".to_vec(),
    );

    wait_log(&server, "did not seal was refused");
    // Three seconds of a schedule that would fire every second.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !marker.exists(),
        "a program written into etcd ran on the host"
    );
    let (code, body) = server.get("/v3/namespaces/default/apps/forged");
    assert_eq!(code, 404, "{body}");
    let (code, body) = server.get("/v3/namespaces/default/apps/a");
    assert_eq!(
        code, 404,
        "an app record changed under its seal was read: {body}"
    );
    let (code, body) = server.get("/v3/namespaces/evil");
    assert_eq!(code, 404, "{body}");
    let (code, body) = server.get("/v3/servers");
    assert_eq!(code, 200, "{body}");
    assert_eq!(body.as_array().map(Vec::len), Some(1), "{body}");
    let (code, body) = server.get("/v3/namespaces/default/schedules");
    assert_eq!(code, 200, "{body}");
    assert!(
        !body.to_string().contains("forged"),
        "a schedule written into etcd is listed: {body}"
    );
    for (table, key) in [
        ("apps", "default/forged"),
        ("schedules", "default/forged/s"),
        ("apps", "default/a"),
        ("namespaces", "evil"),
    ] {
        assert!(
            server
                .logs()
                .iter()
                .any(|l| l.contains("did not seal was refused")
                    && l.contains(&format!("\"{table}\""))
                    && l.contains(&format!("\"{key}\""))),
            "the refusal of {table} {key} is not logged"
        );
    }
}

/// A revoked token whose records are written back with a plain etcd client stays revoked;
/// so it does when the access generation is set back too, on the server that saw the later
/// one, across its restart.
#[test]
fn a_revoked_token_written_back_stays_revoked() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = "/ebb-test/written-back";
    let install = Installation::new(&cluster, dir.path(), TTL, prefix);
    let server = install.server("s0");
    let secret = make_token(&server, "ci", json!({"namespaces": {"default": "viewer"}}));
    let (code, _) = server.request("GET", "/v3/namespaces", Some(&secret));
    assert_eq!(code, 200);
    let hash = ebb::service::tokens::hash(&secret);
    let token_key = format!("{prefix}/tokens/ci");
    let hash_key = format!("{prefix}/token_hashes/{hash}");
    let generation_key = format!("{prefix}/meta/access_generation");
    let (old_token, old_hash) = (
        get(&cluster, &token_key).expect("token"),
        get(&cluster, &hash_key).expect("hash"),
    );
    let old_generation = get(&cluster, &generation_key);

    let (code, body) = server.delete("/v3/tokens/ci");
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        server.request("GET", "/v3/namespaces", Some(&secret)).0,
        401
    );
    put(&cluster, &token_key, old_token);
    put(&cluster, &hash_key, old_hash);
    // Past REVOKED_WITHIN, so every look sees what was written back.
    std::thread::sleep(Duration::from_millis(1500));
    let (code, body) = server.request("GET", "/v3/namespaces", Some(&secret));
    assert_eq!(code, 401, "a revoked token written back works: {body}");
    wait_log(&server, "past access generation was refused");
    let admin = server.token().expect("admin");
    assert_eq!(server.request("GET", "/v3/namespaces", Some(&admin)).0, 200);

    // The generation set back as well: the server saw the later one.
    match old_generation {
        Some(value) => put(&cluster, &generation_key, value),
        None => delete(&cluster, &generation_key),
    }
    std::thread::sleep(Duration::from_millis(1500));
    let (code, body) = server.request("GET", "/v3/namespaces", Some(&secret));
    assert_eq!(
        code, 401,
        "a revoked token works with the generation set back: {body}"
    );
    wait_log(&server, "access generation is below one this server saw");
    // It keeps what it saw across a restart.
    assert_eq!(server.terminate().code(), Some(0));
    let server = install.server("s0");
    let (code, body) = server.request("GET", "/v3/namespaces", Some(&secret));
    assert_eq!(code, 401, "after a restart: {body}");
    wait_log(&server, "access generation is below one this server saw");
}
