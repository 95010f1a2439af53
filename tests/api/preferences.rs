//! Preferences at the instance and namespace levels, and profile assignment checks.

use serde_json::json;

use crate::support::profiles::profile_body;
use crate::support::server::{Server, assert_error};

#[test]
fn set_get_replace_delete_and_resolve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    assert_eq!(s.get("/v3/preferences"), (200, json!({})));
    assert_eq!(
        s.put("/v3/preferences", json!({"a": "1", "b": "1"})),
        (200, json!({"a": "1", "b": "1"}))
    );
    assert_eq!(
        s.put(
            "/v3/namespaces/default/preferences",
            json!({"b": "2", "c": "2"})
        )
        .0,
        200
    );
    assert_eq!(
        s.get("/v3/namespaces/default/preferences").1,
        json!({"b": "2", "c": "2"})
    );
    assert_eq!(
        s.get("/v3/namespaces/default/preferences?resolved=true").1,
        json!({"a": "1", "b": "2", "c": "2"})
    );
    assert_eq!(
        s.get("/v3/preferences?resolved=true").1,
        json!({"a": "1", "b": "1"})
    );
    // PUT replaces the whole map.
    assert_eq!(s.put("/v3/preferences", json!({"z": "9"})).0, 200);
    assert_eq!(s.get("/v3/preferences").1, json!({"z": "9"}));
    assert_eq!(s.delete("/v3/preferences").0, 200);
    assert_eq!(s.get("/v3/preferences").1, json!({}));
    assert_eq!(
        s.get("/v3/namespaces/default/preferences?resolved=true").1,
        json!({"b": "2", "c": "2"})
    );
    assert_error(
        s.get("/v3/preferences?resolved=perhaps"),
        400,
        "'resolved' must be true or false",
    );
}

#[test]
fn assigning_a_profile_checks_it_exists_is_enabled_and_fits_the_level() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    let ns = "/v3/namespaces/default/preferences";
    s.put(
        "/v3/namespaces/default/profiles/mine",
        profile_body("native", &[]),
    );
    for ok in ["SYSTEM:local", "USER:mine", "mine", "system:native"] {
        assert_eq!(s.put(ns, json!({"system.profile.name": ok})).0, 200, "{ok}");
    }
    assert_eq!(
        s.put(
            "/v3/preferences",
            json!({"system.profile.name": "SYSTEM:local"})
        )
        .0,
        200
    );
    assert_error(
        s.put(ns, json!({"system.profile.name": "USER:ghost"})),
        404,
        "profile 'ghost' in namespace 'default' not found",
    );
    assert_error(
        s.put(
            "/v3/preferences",
            json!({"system.profile.name": "SYSTEM:ghost"}),
        ),
        404,
        "profile 'SYSTEM:ghost' not found",
    );
    assert_error(
        s.put("/v3/preferences", json!({"system.profile.name": "mine"})),
        400,
        "must name a SYSTEM profile",
    );
    assert_error(
        s.put(
            "/v3/preferences",
            json!({"system.profile.name": "USER:mine"}),
        ),
        400,
        "must name a SYSTEM profile",
    );
    assert_error(
        s.put(ns, json!({"system.profile.name": "TEAM:mine"})),
        400,
        "unknown scope 'TEAM'",
    );
    assert_error(
        s.put(ns, json!({"system.profile.name": "SYSTEM:bad name"})),
        400,
        "is not a valid name",
    );
    s.post("/v3/namespaces/default/profiles/mine/disable");
    assert_error(
        s.put(ns, json!({"system.profile.name": "mine"})),
        409,
        "is disabled; enable it first",
    );
    assert_eq!(
        s.get(ns).1,
        json!({"system.profile.name": "system:native"}),
        "refused writes changed nothing"
    );
}

#[test]
fn values_must_be_strings_and_keys_well_formed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(&dir);
    assert_error(
        s.put("/v3/preferences", json!({"nodes": 3})),
        400,
        "nodes: invalid type: integer `3`, expected a string",
    );
    assert_error(
        s.put("/v3/preferences", json!({"": "x"})),
        400,
        "a key is empty",
    );
    assert_error(
        s.put(
            "/v3/preferences",
            json!({"system.profile.properties.": "x"}),
        ),
        400,
        "the property name is empty",
    );
    assert_error(
        s.put("/v3/preferences", json!(["a"])),
        400,
        "body: must be a JSON object",
    );
    assert_eq!(
        s.put(
            "/v3/preferences",
            json!({"system.profile.properties.nodes": "5"})
        )
        .0,
        200
    );
}
