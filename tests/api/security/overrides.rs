//! Runs' overrides are opt-in, and what decides where a cluster is reached or with what
//! rights is its profile author's alone: an operator cannot point a run's credentials at a
//! listener of its own, make ebb sign a secure key for it, or lift a template's heal limits.

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::support::runs::{deploy, program};
use crate::support::server::{Server, assert_error, make_token};

/// A listener on loopback that counts the connections it is sent: where an attacker would
/// collect credentials.
fn trap() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&hits);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    (url, hits)
}

/// A property of a profile body: (name, value, isEditable; `None` leaves it out).
fn prop(name: &str, value: &str, editable: Option<bool>) -> Value {
    match editable {
        Some(e) => json!({"name": name, "value": value, "isEditable": e}),
        None => json!({"name": name, "value": value}),
    }
}

fn profile(provisioner: &str, properties: Vec<Value>) -> Value {
    json!({"provisioner": {"name": provisioner, "properties": properties}})
}

/// A server with app `a` in `default` and an operator's token there.
fn with_operator(dir: &tempfile::TempDir) -> (Server, String) {
    let server = Server::start(dir);
    deploy(&server, "a", "true", json!({}));
    let operator = make_token(
        &server,
        "op",
        json!({"namespaces": {"default": "operator"}}),
    );
    (server, operator)
}

fn start_as(server: &Server, token: &str, args: Value) -> (u16, Value) {
    server.call(
        "POST",
        &format!("{}/start", program("a")),
        Some(args),
        Some(token),
    )
}

#[test]
fn a_property_is_fixed_unless_the_profile_marks_it_editable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, operator) = with_operator(&dir);
    let (code, made) = server.put(
        "/v3/namespaces/default/profiles/small",
        profile(
            "local",
            vec![
                prop("nodes", "1", None),
                prop("retryBudget", "1m", Some(true)),
            ],
        ),
    );
    assert_eq!(code, 200, "{made}");
    let properties = &made["provisioner"]["properties"];
    assert_eq!(properties[0]["isEditable"], false, "{made}");
    let args = |key: &str, value: &str| json!({"system.profile.name": "small", format!("system.profile.properties.{key}"): value});
    assert_error(
        start_as(&server, &operator, args("nodes", "3")),
        400,
        "property 'nodes' of profile 'small' in namespace 'default' is not editable",
    );
    // Not set by the profile: nothing to override.
    assert_error(
        start_as(&server, &operator, args("healAttempts", "100")),
        400,
        "property 'healAttempts' is not set by profile 'small'",
    );
    let (code, started) = start_as(&server, &operator, args("retryBudget", "2m"));
    assert_eq!(code, 200, "{started}");
}

#[test]
fn an_operator_cannot_lift_a_templates_heal_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, operator) = with_operator(&dir);
    let (code, made) = server.put(
        "/v3/namespaces/default/profiles/healed",
        profile(
            "local",
            vec![
                prop("nodes", "1", Some(true)),
                prop("template", "SYSTEM:zookeeper", None),
                prop("healAttempts", "3", None),
            ],
        ),
    );
    assert_eq!(code, 200, "{made}");
    for (key, value) in [
        ("healAttempts", "100"),
        ("healWindow", "1s"),
        ("heal", "none"),
    ] {
        let (code, body) = start_as(
            &server,
            &operator,
            json!({"system.profile.name": "healed", format!("system.profile.properties.{key}"): value}),
        );
        assert_eq!(code, 400, "{key}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| m.contains(key)),
            "{body}"
        );
    }
}

#[test]
fn an_operator_cannot_move_what_only_the_profiles_author_sets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, operator) = with_operator(&dir);
    let work = dir.path().join("work");
    let work = work.to_str().expect("utf-8");
    // Editable on purpose, yet author-only: the operator still may not.
    let (code, made) = server.put(
        "/v3/namespaces/default/profiles/mine",
        profile(
            "local",
            vec![
                prop("nodes", "1", Some(true)),
                prop("workDir", work, Some(true)),
                prop("template", "SYSTEM:zookeeper", Some(true)),
            ],
        ),
    );
    assert_eq!(code, 200, "{made}");
    for (key, value) in [("workDir", "/tmp/elsewhere"), ("template", "USER:other")] {
        assert_error(
            start_as(
                &server,
                &operator,
                json!({"system.profile.name": "mine", format!("system.profile.properties.{key}"): value}),
            ),
            400,
            &format!(
                "property '{key}' of profile 'mine' in namespace 'default' may be set only by its author (instance admin), but runtime arguments override it"
            ),
        );
    }
    // Runtime arguments never refer to secure keys, whatever the key.
    let (code, key) = server.put(
        "/v3/namespaces/default/securekeys/db-password",
        json!({"data": "hunter2"}),
    );
    assert_eq!(code, 200, "{key}");
    assert_error(
        start_as(
            &server,
            &operator,
            json!({"system.profile.name": "mine", "anything": "${secure(db-password)}"}),
        ),
        400,
        "runtime arguments may not refer to secure keys",
    );
}

#[cfg(feature = "aws")]
#[test]
fn an_operator_cannot_send_aws_credentials_or_a_secure_key_to_its_own_endpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, operator) = with_operator(&dir);
    let (trap_url, hits) = trap();
    let (code, key) = server.put(
        "/v3/namespaces/default/securekeys/db-password",
        json!({"data": "hunter2"}),
    );
    assert_eq!(code, 200, "{key}");
    let (code, made) = server.put(
        "/v3/namespaces/default/profiles/ec2",
        profile(
            "aws-ec2",
            vec![
                prop("region", "us-east-1", None),
                prop("endpointUrl", "http://127.0.0.1:9", Some(true)),
                prop("nodes", "1", Some(true)),
            ],
        ),
    );
    assert_eq!(code, 200, "{made}");
    // The audit's attack: credentials added, a secure key as the secret, the endpoint moved.
    let steer = json!({
        "system.profile.name": "ec2",
        "system.profile.properties.accessKeyId": "AKIAATTACKER",
        "system.profile.properties.secretAccessKey": "${secure(db-password)}",
        "system.profile.properties.endpointUrl": trap_url,
    });
    assert_error(
        start_as(&server, &operator, steer),
        400,
        "runtime arguments may not refer to secure keys",
    );
    assert_error(
        start_as(
            &server,
            &operator,
            json!({"system.profile.name": "ec2", "system.profile.properties.endpointUrl": trap_url}),
        ),
        400,
        "property 'endpointUrl' of profile 'ec2' in namespace 'default' may be set only by its author",
    );
    assert_error(
        start_as(
            &server,
            &operator,
            json!({"system.profile.name": "ec2", "system.profile.properties.accessKeyId": "AKIAATTACKER"}),
        ),
        400,
        "property 'accessKeyId' is not set by profile 'ec2'",
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "ebb called the operator's listener"
    );
}

#[cfg(feature = "gcp")]
#[test]
fn an_operator_cannot_point_a_google_profile_at_its_own_endpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, operator) = with_operator(&dir);
    let (trap_url, hits) = trap();
    let (code, key) = server.put(
        "/v3/namespaces/default/securekeys/gcp-key",
        json!({"data": "{}"}),
    );
    assert_eq!(code, 200, "{key}");
    // A SYSTEM profile whose key is fixed, and no endpoint of its own.
    let (code, made) = server.put(
        "/v3/profiles/gce",
        profile(
            "gcp-compute",
            vec![
                prop("projectId", "victim", None),
                prop("zone", "europe-west1-b", None),
                prop("accountKey", "${secure(gcp-key)}", None),
                prop("nodes", "1", Some(true)),
            ],
        ),
    );
    assert_eq!(code, 200, "{made}");
    for key in ["endpoint", "anonymous", "projectId"] {
        let value = if key == "anonymous" {
            "true"
        } else {
            trap_url.as_str()
        };
        let (code, body) = start_as(
            &server,
            &operator,
            json!({"system.profile.name": "SYSTEM:gce", format!("system.profile.properties.{key}"): value}),
        );
        assert_eq!(code, 400, "{key}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| m.contains(key)),
            "{body}"
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "ebb called the operator's listener"
    );
}
