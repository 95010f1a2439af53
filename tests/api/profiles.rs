//! Profiles: the CDAP v3 contract, USER and SYSTEM, and every refusal.

use serde_json::{Value, json};

use crate::support::profiles::profile_body;
use crate::support::server::{Server, assert_error};

const P: &str = "/v3/namespaces/default/profiles";

#[test]
fn create_get_replace_keeps_status_and_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let mut body = profile_body(
        "local",
        &[("nodes", "2", true), ("workDir", "/tmp/w", false)],
    );
    body["label"] = json!("Two nodes");
    body["description"] = json!("for tests");
    body["keepalive"] = json!({"killed": "30m", "failed": 3600});
    body["timeout"] = json!("2h");
    let (code, created) = s.put(&format!("{P}/two"), body);
    assert_eq!(code, 200, "{created}");
    let expected = json!({
        "name": "two", "label": "Two nodes", "description": "for tests", "scope": "USER", "status": "ENABLED",
        "provisioner": {"name": "local", "properties": [
            {"name": "nodes", "value": "2", "isEditable": true},
            {"name": "workDir", "value": "/tmp/w", "isEditable": false}]},
        "keepalive": {"killed": 1800, "failed": 3600}, "timeout": 7200, "created": created["created"].clone(),
    });
    assert_eq!(created, expected);
    assert_eq!(s.get(&format!("{P}/two")), (200, expected));
    assert_eq!(s.get(&format!("{P}/two/status")), (200, json!("ENABLED")));

    assert_eq!(s.post(&format!("{P}/two/disable")).0, 200);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (code, replaced) = s.put(
        &format!("{P}/two"),
        profile_body("sim", &[("nodes", "4", true)]),
    );
    assert_eq!(code, 200);
    assert_eq!(replaced["status"], "DISABLED", "replace keeps status");
    assert_eq!(
        replaced["created"], created["created"],
        "replace keeps created"
    );
    assert_eq!(replaced["provisioner"]["name"], "sim");
    assert_eq!(replaced["label"], "two", "label defaults to the name");
    assert_eq!(replaced["keepalive"], json!({"killed": 0, "failed": 0}));
    assert_eq!(replaced["timeout"], Value::Null);
}

#[test]
fn list_user_profiles_with_and_without_system() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    s.put(&format!("{P}/mine"), profile_body("native", &[]));
    let names = |v: Value| -> Vec<String> {
        v.as_array()
            .expect("list")
            .iter()
            .map(|p| {
                format!(
                    "{}:{}",
                    p["scope"].as_str().expect("scope"),
                    p["name"].as_str().expect("name")
                )
            })
            .collect()
    };
    assert_eq!(names(s.get(P).1), ["USER:mine"]);
    assert_eq!(
        names(s.get(&format!("{P}?includeSystem=true")).1),
        ["USER:mine", "SYSTEM:local", "SYSTEM:native"]
    );
    assert_eq!(
        names(s.get(&format!("{P}?includeSystem=false")).1),
        ["USER:mine"]
    );
    assert_error(
        s.get(&format!("{P}?includeSystem=maybe")),
        400,
        "'includeSystem' must be true or false",
    );
    assert_eq!(
        names(s.get("/v3/profiles").1),
        ["SYSTEM:local", "SYSTEM:native"]
    );
}

#[test]
fn enable_and_disable_are_409_when_already_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    s.put(&format!("{P}/p"), profile_body("native", &[]));
    assert_error(s.post(&format!("{P}/p/enable")), 409, "is already ENABLED");
    let (code, p) = s.post(&format!("{P}/p/disable"));
    assert_eq!((code, p["status"].clone()), (200, json!("DISABLED")));
    assert_error(
        s.post(&format!("{P}/p/disable")),
        409,
        "is already DISABLED",
    );
    assert_eq!(s.get(&format!("{P}/p/status")).1, "DISABLED");
    assert_eq!(s.post(&format!("{P}/p/enable")).0, 200);
    assert_error(
        s.post(&format!("{P}/nope/enable")),
        404,
        "profile 'nope' in namespace 'default' not found",
    );
    assert_error(s.get(&format!("{P}/nope/status")), 404, "not found");
}

/// Racing enables of a disabled profile: the check and the write are one step, so exactly one
/// wins and the rest see 409.
#[test]
fn concurrent_enables_let_exactly_one_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    s.put(&format!("{P}/race"), profile_body("native", &[]));
    for round in 0..5 {
        assert_eq!(s.post(&format!("{P}/race/disable")).0, 200, "round {round}");
        let codes: Vec<u16> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| s.post(&format!("{P}/race/enable")).0))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect()
        });
        assert_eq!(
            codes.iter().filter(|c| **c == 200).count(),
            1,
            "round {round}: {codes:?}"
        );
        assert_eq!(
            codes.iter().filter(|c| **c == 409).count(),
            7,
            "round {round}: {codes:?}"
        );
    }
}

#[test]
fn delete_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    assert_error(s.delete(&format!("{P}/ghost")), 404, "not found");
    s.put(&format!("{P}/p"), profile_body("native", &[]));
    assert_error(
        s.delete(&format!("{P}/p")),
        409,
        "is enabled; disable it first",
    );
    assert_eq!(
        s.put(
            "/v3/namespaces/default/preferences",
            json!({"system.profile.name": "USER:p"})
        )
        .0,
        200
    );
    s.post(&format!("{P}/p/disable"));
    assert_error(
        s.delete(&format!("{P}/p")),
        409,
        "still assigned in namespace 'default' preferences",
    );
    assert_eq!(s.delete("/v3/namespaces/default/preferences").0, 200);
    let (code, deleted) = s.delete(&format!("{P}/p"));
    assert_eq!((code, deleted["name"].clone()), (200, json!("p")));
    assert_error(s.get(&format!("{P}/p")), 404, "not found");
}

#[test]
fn system_profiles_are_managed_at_the_top_level() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let (code, p) = s.put(
        "/v3/profiles/shared",
        profile_body("sim", &[("nodes", "2", true)]),
    );
    assert_eq!((code, p["scope"].clone()), (200, json!("SYSTEM")));
    assert_eq!(s.get("/v3/profiles/shared/status"), (200, json!("ENABLED")));
    assert_eq!(
        s.put(
            "/v3/preferences",
            json!({"system.profile.name": "SYSTEM:shared"})
        )
        .0,
        200
    );
    assert_eq!(s.post("/v3/profiles/shared/disable").0, 200);
    assert_error(
        s.delete("/v3/profiles/shared"),
        409,
        "still assigned in instance preferences",
    );
    s.delete("/v3/preferences");
    assert_eq!(s.delete("/v3/profiles/shared").0, 200);
    assert_error(
        s.get("/v3/profiles/shared"),
        404,
        "profile 'SYSTEM:shared' not found",
    );
}

#[test]
fn built_in_profiles_cannot_be_changed_or_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    for name in ["native", "local"] {
        assert_error(
            s.put(&format!("/v3/profiles/{name}"), profile_body("native", &[])),
            405,
            "is built in",
        );
        assert_error(
            s.delete(&format!("/v3/profiles/{name}")),
            405,
            "is built in",
        );
    }
    assert_error(
        s.post("/v3/profiles/native/disable"),
        405,
        "instance default and cannot be disabled",
    );
    assert_eq!(
        s.post("/v3/profiles/local/disable").0,
        200,
        "other built-ins may be disabled"
    );
    assert_error(s.delete("/v3/profiles/local"), 405, "is built in");
    assert_eq!(
        s.get("/v3/profiles/local").1["provisioner"]["properties"][0]["value"],
        "3",
        "unchanged"
    );
}

/// Profile bodies a PUT refuses, each with the message fragment naming its field.
fn bad_bodies() -> Vec<(Value, &'static str)> {
    let with = |extra: Value| {
        let mut body = profile_body("local", &[("nodes", "2", true)]);
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        body
    };
    vec![
        (
            profile_body("nope", &[]),
            "provisioner.name: provisioner 'nope' does not exist",
        ),
        (
            profile_body("local", &[("nodes", "0", true)]),
            "provisioner.properties.nodes: must be between 1 and 64",
        ),
        (
            profile_body("local", &[("nodes", "two", true)]),
            "provisioner.properties.nodes: must be a whole number",
        ),
        (
            profile_body("local", &[("size", "2", true)]),
            "provisioner.properties.size: is not a property of provisioner 'local'",
        ),
        (
            profile_body("sim", &[("createLatency", "soon", true)]),
            "provisioner.properties.createLatency: must be a duration",
        ),
        (
            profile_body("sim", &[("transientErrorRate", "2", true)]),
            "provisioner.properties.transientErrorRate: must be between 0 and 1",
        ),
        (
            profile_body("native", &[("nodes", "1", true)]),
            "provider 'native' takes no properties",
        ),
        (
            with(json!({"keepalive": {"failed": -1}})),
            "keepalive.failed: must not be negative",
        ),
        (
            with(json!({"keepalive": {"killed": "-10m"}})),
            "keepalive.killed: must not be negative",
        ),
        (
            with(json!({"timeout": -5})),
            "timeout: must not be negative",
        ),
        (
            with(json!({"timeout": 0})),
            "timeout: must be at least 1 second",
        ),
        (
            with(json!({"timeout": "whenever"})),
            "timeout: must be a duration",
        ),
        (with(json!({"colour": "red"})), "unknown field `colour`"),
        (with(json!({"label": 7})), "label: invalid type"),
        (
            json!({"label": "no provisioner"}),
            "missing field `provisioner`",
        ),
        (
            json!({"provisioner": {"name": "local", "properties": [{"name": "nodes", "value": "1", "isEditable": "yes"}]}}),
            "provisioner.properties[0].isEditable: invalid type",
        ),
        (
            json!({"provisioner": {"name": "local", "properties": [{"name": "nodes", "value": "1"}, {"name": "nodes", "value": "2"}]}}),
            "provisioner.properties[1].name: property 'nodes' is given twice",
        ),
        (
            json!({"provisioner": {"name": "local", "properties": [{"name": "nodes", "value": ["1"]}]}}),
            "provisioner.properties[0].value: expected a string, number or boolean",
        ),
        (json!([1, 2]), "body: must be a JSON object, got an array"),
    ]
}

#[test]
fn bad_input_is_400_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let cases = bad_bodies();
    for (body, fragment) in cases {
        let fragment = fragment.replace("provider", "provisioner");
        assert_error(s.put(&format!("{P}/p"), body.clone()), 400, &fragment);
    }
    assert_error(
        s.put_raw(&format!("{P}/p"), "{\"provisioner\": "),
        400,
        "body: is not valid JSON",
    );
    assert_error(
        s.put_raw(&format!("{P}/p"), ""),
        400,
        "body: is not valid JSON",
    );
    assert_error(
        s.put(&format!("{P}/bad.name"), profile_body("native", &[])),
        400,
        "profile name: 'bad.name' is not a valid name",
    );
    assert_error(
        s.put("/v3/profiles/a%20b", profile_body("native", &[])),
        400,
        "is not a valid name",
    );
    assert_error(s.get(&format!("{P}/p")), 404, "not found");
    assert_eq!(
        s.get(P),
        (200, json!([])),
        "no refused request left anything behind"
    );
}

#[test]
fn numbers_and_booleans_are_taken_as_property_text_and_fixed_by_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let body = json!({"provisioner": {"name": "sim", "properties": [
        {"name": "nodes", "value": 3}, {"name": "failCreate", "value": false}, {"name": "lostCreateRate", "value": 0.25}]}});
    let (code, p) = s.put(&format!("{P}/sim"), body);
    assert_eq!(code, 200, "{p}");
    assert_eq!(
        p["provisioner"]["properties"],
        json!([
        {"name": "nodes", "value": "3", "isEditable": false},
        {"name": "failCreate", "value": "false", "isEditable": false},
        {"name": "lostCreateRate", "value": "0.25", "isEditable": false}])
    );
}
