//! A store of schema version 2 (records not yet sealed) is sealed once, by the first server
//! that opens it, in the write that bumps its version; what that version refused (a token
//! record it did not sign) is not sealed but deleted; and a store whose version is set back
//! after it was sealed is refused rather than sealed again.

use ebb::model::access::{Grants, TokenRecord};
use ebb::store::secure::Cipher;
use ebb::store::{Location, Store, StoreError, Table};

use crate::support::server::{Options, Server, serve_fails_with, store_location};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// An instance-admin token record named `name`, opened by `secret`.
fn admin_record(name: &str, secret: &str) -> TokenRecord {
    TokenRecord {
        name: name.into(),
        hash: ebb::service::tokens::hash(secret),
        grants: Grants::instance_admin(),
        created: 0,
        created_by: "ebb serve".into(),
        expires: None,
        generation: 0,
        signature: String::new(),
    }
}

/// An app record as a schema 2 store kept it, deployed by token `by`, approved for the host.
fn app_record(name: &str, by: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "name": name, "namespace": "default", "description": "", "config": {},
        "programs": [{"type": "workflows", "name": "p", "command": ["true"]}],
        "created": 0, "updated": 0, "hostPrograms": true, "deployedBy": by,
    }))
    .expect("json")
}

/// Writes token records and `more` records into the stopped installation's store as they
/// are, then sets its schema version to `version`.
fn write_tokens(
    location: &Location,
    records: Vec<TokenRecord>,
    more: Vec<(Table, String, Vec<u8>)>,
    marks: bool,
    version: u64,
) {
    let store = Store::open_at(location).expect("open the store");
    let rt = runtime();
    rt.block_on(store.write(move |tx| {
        for (table, key, bytes) in &more {
            tx.put_raw(*table, key, bytes.clone());
        }
        for record in &records {
            let json = serde_json::to_vec(record).expect("json");
            tx.put_raw(Table::Tokens, &record.name, json);
            tx.put_raw(
                Table::TokenHashes,
                &record.hash,
                serde_json::to_vec(&record.name).expect("json"),
            );
        }
        if marks {
            // What a schema 2 store has once its token records were signed one by one.
            tx.put_raw(Table::Meta, "tokens_signed", b"true".to_vec());
        }
        Ok::<_, StoreError>(())
    }))
    .expect("written");
    rt.block_on(store.close()).expect("closed");
    drop(store);
    ebb::store::write_schema_version_at(location, version).expect("schema version");
}

/// The raw records of `table`.
fn raw(location: &Location, table: Table) -> Vec<(String, Vec<u8>)> {
    let store = Store::open_at(location).expect("open the store");
    let rt = runtime();
    let rows = rt
        .block_on(store.write(move |tx| tx.scan_raw(table)))
        .expect("read");
    rt.block_on(store.close()).expect("closed");
    drop(store);
    rows
}

#[test]
fn a_schema_2_store_is_sealed_once_and_a_version_set_back_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    let location = store_location(&data);
    // The installation's key, as its servers made it; a token it signed one by one (schema
    // 2), and one written in by someone else that schema 2 refused.
    let cipher = Cipher::load_or_create(&data.join("secure.key")).expect("key");
    let (good, bad) = (
        format!("ebb_{}", "1".repeat(64)),
        format!("ebb_{}", "2".repeat(64)),
    );
    let mut genuine = admin_record("old-admin", &good);
    genuine.signature = cipher.sign("token", &genuine.signed());
    let intruder = admin_record("intruder", &bad);
    // A namespace admin's token, and two apps approved for the host: one deployed by it
    // (while its namespace allowed host programs), one by the instance admin.
    let mut team = admin_record("team-admin", &format!("ebb_{}", "4".repeat(64)));
    team.grants = Grants {
        namespaces: [("default".to_string(), ebb::model::access::Role::Admin)].into(),
        ..Grants::default()
    };
    team.signature = cipher.sign("token", &team.signed());
    let apps = vec![
        (
            Table::Apps,
            "default/by-team".to_string(),
            app_record("by-team", "team-admin"),
        ),
        (
            Table::Apps,
            "default/by-admin".to_string(),
            app_record("by-admin", "old-admin"),
        ),
    ];
    write_tokens(&location, vec![genuine, intruder, team], apps, true, 2);

    let server = Server::start_at(
        &data,
        Options {
            client_token: Some(good.clone()),
            ..Options::default()
        },
    );
    let (code, body) = server.request("GET", "/v3/namespaces", Some(&good));
    assert_eq!(
        code, 200,
        "the installation's own token stopped working: {body}"
    );
    let (code, body) = server.request("GET", "/v3/namespaces", Some(&bad));
    assert_eq!(code, 401, "sealing the store sealed a forged token: {body}");
    assert!(
        server
            .logs()
            .iter()
            .any(|l| l.contains("deleted when the store was sealed") && l.contains("intruder")),
        "the forged record's deletion is not logged"
    );
    // Host approval stays with what an instance admin deployed.
    for (app, approved) in [("by-team", false), ("by-admin", true)] {
        let (code, body) = server.request(
            "GET",
            &format!("/v3/namespaces/default/apps/{app}"),
            Some(&good),
        );
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["hostPrograms"], approved, "{body}");
    }
    assert_eq!(server.terminate().code(), Some(0));
    let tokens = raw(&location, Table::Tokens);
    assert_eq!(tokens.len(), 2, "{tokens:?}");
    assert!(
        tokens[0].1.starts_with(br#"{"seal":""#),
        "not sealed: {}",
        String::from_utf8_lossy(&tokens[0].1)
    );

    // Someone sets the version back and writes an unsigned instance-admin token: the next
    // server refuses the store instead of sealing it.
    let late = format!("ebb_{}", "3".repeat(64));
    write_tokens(
        &location,
        vec![admin_record("late", &late)],
        vec![],
        false,
        2,
    );
    let stderr = serve_fails_with(&data, &[]);
    assert!(
        stderr.contains("set back by someone writing to the store directly"),
        "{stderr}"
    );
    // Put right, the store serves again, and the late token is still nothing.
    ebb::store::write_schema_version_at(&location, ebb::store::SCHEMA_VERSION)
        .expect("schema version");
    let server = Server::start_at(
        &data,
        Options {
            client_token: Some(good.clone()),
            ..Options::default()
        },
    );
    assert_eq!(server.request("GET", "/v3/namespaces", Some(&good)).0, 200);
    assert_eq!(server.request("GET", "/v3/namespaces", Some(&late)).0, 401);
}
