//! What a role does not need, it is not told: viewers do not learn which server owns a run
//! (the name its resources are tagged with), and a namespace admin does not learn which
//! token names exist outside its namespaces.

use serde_json::json;

use crate::support::runs::{deploy, start, wait_until, while_the_test_runs};
use crate::support::server::{Server, assert_error, make_token};

#[test]
fn viewers_do_not_see_which_server_owns_a_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    deploy(&server, "a", &while_the_test_runs(), json!({}));
    let run = start(&server, "a", json!({}));
    wait_until(&server, &run, std::time::Duration::from_secs(30), |r| {
        r["status"] == "RUNNING"
    });
    let viewer = make_token(&server, "v", json!({"namespaces": {"default": "viewer"}}));
    let operator = make_token(&server, "o", json!({"namespaces": {"default": "operator"}}));
    let (_, seen) = server.request("GET", &run, Some(&viewer));
    assert_eq!(seen["owner"], json!(null), "{seen:#}");
    let (_, listed) = server.request("GET", "/v3/namespaces/default/runs", Some(&viewer));
    assert_eq!(listed[0]["owner"], json!(null), "{listed:#}");
    let (_, seen) = server.request("GET", &run, Some(&operator));
    assert_eq!(seen["owner"], "ebb", "{seen:#}");
    let (code, _) = server.post(&format!("{run}/stop"));
    assert_eq!(code, 200);
}

#[test]
fn a_namespace_admin_names_tokens_after_its_namespace_and_learns_nothing_of_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let admin = super::team_with_admin(&server);
    make_token(&server, "ops-root", json!({"instanceAdmin": true}));
    let create = |name: &str| {
        server.call(
            "POST",
            "/v3/tokens",
            Some(json!({"name": name, "namespaces": {"team": "viewer"}})),
            Some(&admin),
        )
    };
    // A name that is taken and one that is free are refused alike outside its namespace.
    for name in ["ops-root", "ops-free"] {
        assert_error(create(name), 400, "names its tokens after a namespace");
    }
    let (code, made) = create("team-ci");
    assert_eq!(code, 201, "{made}");
}
