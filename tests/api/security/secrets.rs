//! Secrets stay out of programs, other users' reach and the process list; secure references
//! only where a secret belongs.

use serde_json::json;

use crate::support::profiles::profile_body;
use crate::support::runs::*;
use crate::support::server::{Server, assert_error};

#[test]
fn a_program_sees_no_secret_of_the_server_and_its_files_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let (data, work) = (dir.path().join("data"), dir.path().join("work"));
    let server = Server::start_at(
        &data,
        crate::support::server::Options {
            token: Some("the-servers-token".into()),
            args: vec!["--work-dir".into(), work.display().to_string()],
            env: vec![
                ("AWS_SECRET_ACCESS_KEY".into(), "cloud-secret-xyz".into()),
                ("EBB_SECURE_PASSPHRASE".into(), "passphrase-xyz".into()),
            ],
            ..Default::default()
        },
    );
    // The program does what a curious one would: print its environment and its launcher's,
    // then look for the store and the key around its working directory.
    let script = r#"
        env
        tr '\0' '\n' < /proc/$PPID/environ
        for up in . .. ../.. ../../.. ../../../.. ../../../../..; do
          for f in secure.key ebb.redb; do
            if cat "$up/$f" >/dev/null 2>&1; then echo "READ $up/$f"; fi
          done
        done
        pwd
    "#;
    deploy(&server, "curious", script, json!({}));
    for profile in ["SYSTEM:native", "SYSTEM:local"] {
        let run = start(&server, "curious", json!({"system.profile.name": profile}));
        let done = wait_deprovisioned(&server, &run);
        assert_eq!(done["status"], "COMPLETED", "{done}");
        let logs = server.get(&format!("{run}/logs")).1;
        let out = logs["stdout"].as_str().expect("stdout");
        assert!(out.contains("EBB_RUN_ID="), "the program ran: {out}");
        for secret in ["the-servers-token", "cloud-secret-xyz", "passphrase-xyz"] {
            assert!(
                !out.contains(secret),
                "{profile}: {secret} reached the program:\n{out}"
            );
        }
        assert!(!out.contains("EBB_TOKEN"), "{profile}:\n{out}");
        assert!(
            !out.contains("READ "),
            "{profile}: found the server's files:\n{out}"
        );
        let cwd = out.lines().last().expect("pwd");
        assert!(
            !std::path::Path::new(cwd).starts_with(&data),
            "{profile}: the program works inside the data dir: {cwd}"
        );
    }
    // Other local users read nothing of the server's: owner-only, all of it.
    let mode = |p: &std::path::Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let mut owned = vec![
        (data.clone(), 0o700),
        (work.clone(), 0o700),
        (data.join("secure.key"), 0o600),
        (data.join("runs"), 0o700),
    ];
    // The store is a file in the data dir on redb; on etcd, the data dir's lock file is.
    owned.push(if crate::support::etcd::enabled() {
        (data.join("server.lock"), 0o600)
    } else {
        (data.join("ebb.redb"), 0o600)
    });
    for (path, want) in owned {
        assert_eq!(mode(&path), want, "{}", path.display());
    }
    for entry in std::fs::read_dir(data.join("runs"))
        .expect("runs")
        .flatten()
    {
        assert_eq!(mode(&entry.path()), 0o700, "{}", entry.path().display());
        for file in std::fs::read_dir(entry.path()).expect("run dir").flatten() {
            assert_eq!(mode(&file.path()) & 0o077, 0, "{}", file.path().display());
        }
    }
}

#[test]
fn secure_references_are_allowed_in_secret_properties_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let (code, body) = server.put(
        "/v3/namespaces/default/securekeys/k",
        json!({"data": "the-secret-value"}),
    );
    assert_eq!(code, 200, "{body}");
    // A profile may not put a secret where it would be used in the clear.
    for (provisioner, property, value) in [
        ("local", "workDir", "/tmp/leak-${secure(k)}"),
        ("sim", "stateDir", "${secure(k)}"),
        ("hosts", "hosts", "root@${secure(k)}.example"),
    ] {
        assert_error(
            server.put(
                "/v3/namespaces/default/profiles/leak",
                profile_body(provisioner, &[(property, value, true)]),
            ),
            400,
            &format!("provisioner.properties.{property}: is not a secret property"),
        );
    }
    // Nor may a run's overrides.
    let (code, body) = server.put(
        "/v3/namespaces/default/profiles/open",
        profile_body(
            "local",
            &[("nodes", "1", true), ("workDir", "/tmp/ebb-open", true)],
        ),
    );
    assert_eq!(code, 200, "{body}");
    deploy(&server, "a", "true", json!({}));
    assert_error(
        server.post_json(
            &format!("{}/start", program("a")),
            json!({"system.profile.name": "open",
                   "system.profile.properties.workDir": "/tmp/leak-${secure(k)}"}),
        ),
        400,
        "runtime arguments may not refer to secure keys",
    );
    assert!(
        !std::fs::read_dir("/tmp")
            .expect("tmp")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains("the-secret-value")),
        "a secret became a directory name"
    );
    let runs = server.get(&format!("{}/runs", program("a"))).1;
    assert_eq!(runs.as_array().map(Vec::len), Some(0), "{runs}");
}

#[test]
fn a_token_from_a_file_stays_out_of_the_process_list() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("token");
    std::fs::write(&file, "file-token-123\n").expect("token");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let data = sub(&dir, "data");
    let refused = crate::support::server::serve_fails_with(
        &data,
        &["--token-file", file.to_str().expect("utf-8")],
    );
    assert!(refused.contains("others can read it"), "{refused}");

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let server = Server::start_at(
        &data,
        crate::support::server::Options {
            args: vec!["--token-file".into(), file.display().to_string()],
            ..Default::default()
        },
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", server.pid())).expect("cmdline");
    assert!(!String::from_utf8_lossy(&cmdline).contains("file-token-123"));
    assert_error(
        server.request("GET", "/v3/namespaces", None),
        401,
        "bearer token",
    );
    for wrong in ["file-token-12", "file-token-1234", "x", ""] {
        assert_error(
            server.request("GET", "/v3/namespaces", Some(wrong)),
            401,
            "bearer token",
        );
    }
    let (code, _) = server.request("GET", "/v3/namespaces", Some("file-token-123"));
    assert_eq!(code, 200);
}
