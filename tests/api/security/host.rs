//! Nothing a namespace admin writes runs on the server's host: not through an approved app
//! pointed at its own profile, nor through a template of its own named like a SYSTEM one.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::runs::{deploy_in, program_in, wait_deprovisioned};
use crate::support::server::{Server, assert_error};

/// A template whose one service's install script writes `marker` on whatever host runs it.
fn template_writing(marker: &Path) -> Value {
    let script = format!("echo ran >> '{}'", marker.display());
    json!({
        "hardwareTypes": {"any": {"local": {}}},
        "imageTypes": {"any": {"local": {}}},
        "defaults": {"services": ["svc"], "hardwareType": "any", "imageType": "any"},
        "services": {"svc": {"actions": {"install": {"type": "shell", "script": script}}}}
    })
}

/// A one-node `local` profile with template `template`.
fn local_profile(template: &str) -> Value {
    json!({"provisioner": {"name": "local", "properties": [
        {"name": "nodes", "value": "1"},
        {"name": "template", "value": template}
    ]}})
}

#[test]
fn a_namespace_admins_profile_or_template_never_runs_on_the_servers_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let admin = super::team_with_admin(&server);
    let as_admin = |method: &str, path: &str, body: Option<Value>| {
        server.call(method, path, body, Some(&admin))
    };
    // An app an instance admin deployed: its command may run on this host.
    deploy_in(&server, "team", "ok", "true", json!({}));
    let start = format!("{}/start", program_in("team", "ok"));
    let pwned = dir.path().join("pwned");

    // (a) The namespace admin's own template and local profile, pointed at by runtime
    // arguments or by program preferences.
    let (code, made) = as_admin(
        "PUT",
        "/v3/namespaces/team/templates/evil",
        Some(template_writing(&pwned)),
    );
    assert_eq!(code, 200, "{made}");
    let (code, made) = as_admin(
        "PUT",
        "/v3/namespaces/team/profiles/mine",
        Some(local_profile("evil")),
    );
    assert_eq!(code, 200, "{made}");
    let refused = as_admin("POST", &start, Some(json!({"system.profile.name": "mine"})));
    assert_error(
        refused,
        403,
        "profile 'mine' in namespace 'team' may not run programs on the server's own host",
    );
    let prefs = format!("{}/preferences", program_in("team", "ok"));
    let (code, set) = as_admin("PUT", &prefs, Some(json!({"system.profile.name": "mine"})));
    assert_eq!(code, 200, "{set}");
    assert_error(
        as_admin("POST", &start, None),
        403,
        "it was written by a namespace admin",
    );
    let (code, _) = as_admin("DELETE", &prefs, None);
    assert_eq!(code, 200);

    // A USER profile an instance admin wrote, naming the namespace admin's template: the
    // template is refused.
    let (code, made) = server.put("/v3/namespaces/team/profiles/vetted", local_profile("evil"));
    assert_eq!(code, 200, "{made}");
    assert_error(
        as_admin(
            "POST",
            &start,
            Some(json!({"system.profile.name": "vetted"})),
        ),
        403,
        "template 'evil' may not run programs on the server's own host",
    );

    // (b) A SYSTEM profile naming SYSTEM template `zk`, and the namespace admin's own `zk`:
    // the run takes SYSTEM's, which the namespace never shadows.
    let system_ran = dir.path().join("system-ran");
    let (code, made) = server.put("/v3/templates/zk", template_writing(&system_ran));
    assert_eq!(code, 200, "{made}");
    let (code, made) = server.put("/v3/profiles/sys-local", local_profile("zk"));
    assert_eq!(code, 200, "{made}");
    let (code, made) = as_admin(
        "PUT",
        "/v3/namespaces/team/templates/zk",
        Some(template_writing(&pwned)),
    );
    assert_eq!(code, 200, "{made}");
    let (code, started) = as_admin(
        "POST",
        &start,
        Some(json!({"system.profile.name": "SYSTEM:sys-local"})),
    );
    assert_eq!(code, 200, "{started}");
    let run = format!(
        "{}/runs/{}",
        program_in("team", "ok"),
        started["runId"].as_str().expect("runId")
    );
    let ended = wait_deprovisioned(&server, &run);
    assert_eq!(ended["status"], "COMPLETED", "{ended:#}");
    assert!(system_ran.exists(), "the SYSTEM template's script ran");

    // A SYSTEM profile that names the namespace's template on purpose: refused too.
    let (code, made) = server.put("/v3/profiles/sys-user", local_profile("USER:zk"));
    assert_eq!(code, 200, "{made}");
    assert_error(
        as_admin(
            "POST",
            &start,
            Some(json!({"system.profile.name": "SYSTEM:sys-user"})),
        ),
        403,
        "template 'USER:zk'",
    );

    // Nothing the namespace admin wrote ran here, and every refusal was recorded.
    assert!(
        !pwned.exists(),
        "a namespace admin's script ran on the host"
    );
    let (_, rejected) = server.get(&format!(
        "{}/runs?status=REJECTED",
        program_in("team", "ok")
    ));
    assert_eq!(rejected.as_array().map(Vec::len), Some(4), "{rejected:#}");

    // The namespace allowed by an instance admin: its own profile and template may run.
    let (code, ns) = server.put("/v3/namespaces/team", json!({"allowHostPrograms": true}));
    assert_eq!(code, 200, "{ns}");
    let (code, started) = as_admin("POST", &start, Some(json!({"system.profile.name": "mine"})));
    assert_eq!(code, 200, "{started}");
    let run = format!(
        "{}/runs/{}",
        program_in("team", "ok"),
        started["runId"].as_str().expect("runId")
    );
    assert_eq!(wait_deprovisioned(&server, &run)["status"], "COMPLETED");
    assert!(pwned.exists(), "allowed, the namespace's own template ran");
}

/// An app a namespace admin deployed while the namespace allowed host programs runs on the
/// host only while it still does: turning the allowance off takes it back at once.
#[test]
fn host_rights_end_when_the_namespace_stops_allowing_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let admin = super::team_with_admin(&server);
    let allow = |allowed: bool| {
        let (code, body) = server.put("/v3/namespaces/team", json!({"allowHostPrograms": allowed}));
        assert_eq!(code, 200, "{body}");
    };
    allow(true);
    let (code, body) = server.call(
        "PUT",
        "/v3/namespaces/team/apps/shell",
        Some(json!({"programs": [{"type": "workflows", "name": "p", "command": ["true"]}]})),
        Some(&admin),
    );
    assert_eq!(code, 200, "{body}");
    let start = format!("{}/start", program_in("team", "shell"));
    let (code, body) = server.call("POST", &start, None, Some(&admin));
    assert_eq!(code, 200, "allowed, it runs: {body}");
    allow(false);
    assert_error(
        server.call("POST", &start, None, Some(&admin)),
        403,
        "may not run programs on the server's own host",
    );
    // Allowed again, it runs again; redeployed by an instance admin, it runs whatever the
    // namespace says.
    allow(true);
    let (code, body) = server.call("POST", &start, None, Some(&admin));
    assert_eq!(code, 200, "{body}");
    allow(false);
    deploy_in(&server, "team", "shell", "true", json!({}));
    let (code, body) = server.call("POST", &start, None, Some(&admin));
    assert_eq!(code, 200, "{body}");
}
