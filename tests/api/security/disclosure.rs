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

/// `/metrics` names every namespace, with its runs, cost and budget: a token with a role in
/// one namespace does not read it; an instance admin, or a scraper's token only an instance
/// admin gives, does.
#[test]
fn only_an_instance_admin_or_a_metrics_token_reads_every_namespaces_figures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let team_admin = super::team_with_admin(&server);
    let viewer = make_token(&server, "v", json!({"namespaces": {"default": "viewer"}}));
    for token in [&viewer, &team_admin] {
        let reply = server.call("GET", "/metrics", None, Some(token));
        assert_error(reply, 403, "metrics token");
    }
    // A namespace admin cannot give it; an instance admin can, alone or beside roles.
    let reply = server.call(
        "POST",
        "/v3/tokens",
        Some(json!({"name": "team-scraper", "metrics": true})),
        Some(&team_admin),
    );
    assert_error(reply, 403, "metrics tokens");
    let scraper = make_token(&server, "prometheus", json!({"metrics": true}));
    let reply = reqwest::blocking::Client::new()
        .get(format!("{}/metrics", server.url))
        .bearer_auth(&scraper)
        .send()
        .expect("scrape");
    assert_eq!(reply.status(), 200);
    assert!(reply.text().expect("text").contains("ebb_live_runs"));
    // It reads nothing else.
    let (code, _) = server.request("GET", "/v3/namespaces/default/apps", Some(&scraper));
    assert_eq!(code, 404);
    let (code, _) = server.request("GET", "/v3/namespaces", Some(&scraper));
    assert_eq!(
        code, 200,
        "a token lists the namespaces it has a role in: none"
    );
}
