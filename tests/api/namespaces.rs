//! Namespaces: create, list, get, update, delete, and the rules around them.

use serde_json::json;

use crate::support::profiles::profile_body;
use crate::support::server::{Server, assert_error};

#[test]
fn create_list_get_update_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let (code, ns) = s.put_raw("/v3/namespaces/team-a", "");
    assert_eq!(code, 200, "a body is optional");
    assert_eq!(ns["name"], "team-a");
    assert_eq!(ns["description"], "");
    let (code, ns) = s.put("/v3/namespaces/team-a", json!({"description": "Team A"}));
    assert_eq!(code, 200);
    assert_eq!(ns["description"], "Team A");
    let (_, list) = s.get("/v3/namespaces");
    let names: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|n| n["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["default", "team-a"]);
    assert_eq!(s.get("/v3/namespaces/team-a").1["description"], "Team A");
    assert_eq!(s.delete("/v3/namespaces/team-a").0, 200);
    assert_error(
        s.get("/v3/namespaces/team-a"),
        404,
        "namespace 'team-a' not found",
    );
    assert_error(
        s.delete("/v3/namespaces/team-a"),
        404,
        "namespace 'team-a' not found",
    );
}

#[test]
fn default_always_exists_and_cannot_be_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    assert_eq!(s.get("/v3/namespaces/default").0, 200);
    assert_error(s.delete("/v3/namespaces/default"), 405, "cannot be deleted");
    assert_eq!(s.get("/v3/namespaces/default").0, 200);
}

#[test]
fn a_namespace_holding_profiles_cannot_be_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    s.put("/v3/namespaces/team", json!({}));
    assert_eq!(
        s.put(
            "/v3/namespaces/team/profiles/small",
            profile_body("native", &[])
        )
        .0,
        200
    );
    assert_error(
        s.delete("/v3/namespaces/team"),
        409,
        "still holds profiles (small)",
    );
    s.post("/v3/namespaces/team/profiles/small/disable");
    assert_eq!(s.delete("/v3/namespaces/team/profiles/small").0, 200);
    assert_eq!(s.delete("/v3/namespaces/team").0, 200);
}

#[test]
fn deleting_a_namespace_removes_its_preferences() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    s.put("/v3/namespaces/team", json!({}));
    assert_eq!(
        s.put("/v3/namespaces/team/preferences", json!({"k": "v"}))
            .0,
        200
    );
    assert_eq!(s.delete("/v3/namespaces/team").0, 200);
    s.put("/v3/namespaces/team", json!({}));
    assert_eq!(s.get("/v3/namespaces/team/preferences"), (200, json!({})));
}

#[test]
fn unknown_namespaces_are_404_on_every_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let gets = [
        "/v3/namespaces/ghost",
        "/v3/namespaces/ghost/profiles",
        "/v3/namespaces/ghost/profiles/p",
        "/v3/namespaces/ghost/profiles/p/status",
        "/v3/namespaces/ghost/preferences",
    ];
    for path in gets {
        assert_error(s.get(path), 404, "namespace 'ghost' not found");
    }
    assert_error(
        s.put(
            "/v3/namespaces/ghost/profiles/p",
            profile_body("native", &[]),
        ),
        404,
        "namespace 'ghost' not found",
    );
    assert_error(
        s.put("/v3/namespaces/ghost/preferences", json!({})),
        404,
        "namespace 'ghost' not found",
    );
    assert_error(
        s.delete("/v3/namespaces/ghost/preferences"),
        404,
        "namespace 'ghost' not found",
    );
    assert_error(
        s.post("/v3/namespaces/ghost/profiles/p/enable"),
        404,
        "namespace 'ghost' not found",
    );
    assert_error(
        s.post("/v3/namespaces/ghost/profiles/p/disable"),
        404,
        "namespace 'ghost' not found",
    );
    assert_error(
        s.delete("/v3/namespaces/ghost/profiles/p"),
        404,
        "namespace 'ghost' not found",
    );
    // SYSTEM profiles are not a namespace; the message says where they are.
    assert_error(
        s.get("/v3/namespaces/system/profiles"),
        404,
        "namespace 'system' not found",
    );
}

#[test]
fn bad_names_and_bodies_are_400() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    assert_error(
        s.put("/v3/namespaces/bad.name", json!({})),
        400,
        "namespace: 'bad.name' is not a valid name",
    );
    let long = "n".repeat(65);
    assert_error(
        s.put(&format!("/v3/namespaces/{long}"), json!({})),
        400,
        "is not a valid name",
    );
    assert_error(
        s.put("/v3/namespaces/system", json!({})),
        400,
        "'system' is reserved",
    );
    assert_error(
        s.put("/v3/namespaces/ok", json!({"descr": "x"})),
        400,
        "unknown field `descr`",
    );
    assert_error(
        s.put("/v3/namespaces/ok", json!({"description": 5})),
        400,
        "description: invalid type",
    );
    assert_error(
        s.put_raw("/v3/namespaces/ok", "{not json"),
        400,
        "body: is not valid JSON",
    );
    assert_eq!(s.get("/v3/namespaces/ok").0, 404, "nothing was created");
}
