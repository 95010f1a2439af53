//! A role is in a namespace that exists: it goes with its namespace, and no token is made
//! for one that does not exist.

use serde_json::json;

use crate::support::server::{Server, assert_error, make_token};

#[test]
fn a_role_goes_with_its_namespace_and_is_not_inherited_by_a_new_one_of_its_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (code, ns) = server.put("/v3/namespaces/team", json!({}));
    assert_eq!(code, 200, "{ns}");
    let old = make_token(
        &server,
        "old-admin",
        json!({"namespaces": {"team": "admin", "default": "viewer"}}),
    );
    let (code, _) = server.request("GET", "/v3/namespaces/team", Some(&old));
    assert_eq!(code, 200);
    let (code, gone) = server.delete("/v3/namespaces/team");
    assert_eq!(code, 200, "{gone}");
    let (code, ns) = server.put("/v3/namespaces/team", json!({}));
    assert_eq!(code, 200, "{ns}");
    assert_error(
        server.request("GET", "/v3/namespaces/team", Some(&old)),
        404,
        "namespace 'team' not found",
    );
    let (code, apps) = server.call(
        "PUT",
        "/v3/namespaces/team/apps/x",
        Some(json!({"programs": []})),
        Some(&old),
    );
    assert_eq!(code, 404, "{apps}");
    // Its other roles stay.
    let (code, _) = server.request("GET", "/v3/namespaces/default", Some(&old));
    assert_eq!(code, 200);
    let (_, tokens) = server.get("/v3/tokens");
    let listed = tokens
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "old-admin"))
        .expect("listed")
        .clone();
    assert_eq!(
        listed["namespaces"],
        json!({"default": "viewer"}),
        "{listed}"
    );

    // No token for a namespace that does not exist.
    assert_error(
        server.post_json(
            "/v3/tokens",
            json!({"name": "early", "namespaces": {"later": "admin"}}),
        ),
        404,
        "namespace 'later' not found",
    );
}
