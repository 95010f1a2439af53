//! What grants access is the installation's own: a browser holds a session, never a token,
//! a token or session record written into the store by anyone else grants nothing, and a
//! token signs in at a bounded rate.

use serde_json::json;

use crate::support::server::{Options, Server, make_token};
use crate::ui::{cookie_of, raw, sign_in};

/// The status of `GET /ui` with `cookie`: 200 signed in, 303 sent to sign in.
fn ui_with(server: &Server, cookie: &str) -> u16 {
    raw()
        .get(format!("{}/ui", server.url))
        .header("Cookie", cookie)
        .send()
        .expect("get")
        .status()
        .as_u16()
}

#[test]
fn a_browser_holds_a_session_that_sign_out_and_the_token_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let token = server.token().expect("token");
    let set = sign_in(&server, &token);
    let cookie = cookie_of(&set);
    // The cookie is a session's credential, not the token nor anything of it.
    let hex = token.trim_start_matches("ebb_");
    assert!(
        !cookie.contains(hex),
        "the cookie holds the token: {cookie}"
    );
    assert_eq!(ui_with(&server, &cookie), 200);
    // The token given as the cookie signs nobody in (a page that tosses a cookie of its own
    // in needs a live session, not a token).
    assert_eq!(ui_with(&server, &format!("ebb_session={token}")), 303);
    // Two sign-ins are two sessions; signing out ends one, in the store.
    let other = cookie_of(&sign_in(&server, &token));
    assert_ne!(other, cookie);
    let reply = raw()
        .post(format!("{}/ui/logout", server.url))
        .header("Cookie", &cookie)
        .send()
        .expect("sign out");
    assert_eq!(reply.status(), 303);
    assert_eq!(
        ui_with(&server, &cookie),
        303,
        "a signed-out session still works"
    );
    assert_eq!(ui_with(&server, &other), 200);

    // A token revoked, then made again under the same name: its old sessions stay ended.
    let secret = make_token(&server, "ci", json!({"namespaces": {"default": "viewer"}}));
    let session = cookie_of(&sign_in(&server, &secret));
    assert_eq!(ui_with(&server, &session), 200);
    let (code, _) = server.delete("/v3/tokens/ci");
    assert_eq!(code, 200);
    make_token(&server, "ci", json!({"instanceAdmin": true}));
    assert_eq!(
        ui_with(&server, &session),
        303,
        "a new token inherited a session"
    );
}

/// Writes a token record and its hash's index straight into the stopped server's store, as
/// someone who reached etcd's port (or the data dir) would: `name`, an instance admin,
/// opened by `secret`; unsealed, or under the seal lifted from the genuine record
/// `lift_seal_of`.
fn forge(data_dir: &std::path::Path, name: &str, secret: &str, lift_seal_of: Option<&str>) {
    use ebb::model::access::{Grants, TokenRecord};
    use ebb::store::{Store, Table};
    let location = crate::support::server::store_location(data_dir);
    let store = Store::open_at(&location).expect("open the store");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (name, secret) = (name.to_string(), secret.to_string());
    let lift = lift_seal_of.map(str::to_string);
    runtime
        .block_on(store.write(move |tx| {
            let record = TokenRecord {
                name: name.clone(),
                hash: ebb::service::tokens::hash(&secret),
                grants: Grants::instance_admin(),
                created: 0,
                created_by: "ebb serve".into(),
                expires: None,
                generation: 0,
                signature: String::new(),
            };
            let json = serde_json::to_string(&record).expect("json");
            // A seal lifted from a genuine record does not fit another.
            let bytes = match &lift {
                Some(of) => {
                    let genuine = tx
                        .scan_raw(Table::Tokens)?
                        .into_iter()
                        .find(|(key, _)| key == of)
                        .expect("the genuine record")
                        .1;
                    let genuine: serde_json::Value =
                        serde_json::from_slice(&genuine).expect("sealed json");
                    let seal = genuine["seal"].as_str().expect("a seal").to_string();
                    format!(r#"{{"seal":"{seal}","value":{json}}}"#).into_bytes()
                }
                None => json.into_bytes(),
            };
            tx.put_raw(Table::Tokens, &name, bytes);
            tx.put(Table::TokenHashes, &record.hash, &name)?;
            Ok::<_, ebb::store::StoreError>(())
        }))
        .expect("forged");
    runtime.block_on(store.close()).expect("closed");
}

#[test]
fn a_token_record_written_into_the_store_by_someone_else_is_no_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Server::start_at(&data, Options::default());
    let genuine = server.token().expect("token");
    assert_eq!(server.terminate().code(), Some(0));
    let forged = format!("ebb_{}", "7".repeat(64));
    let lifted = format!("ebb_{}", "8".repeat(64));
    forge(&data, "intruder", &forged, None);
    forge(&data, "lifted", &lifted, Some("admin"));

    let server = Server::start_at(&data, Options::default());
    for secret in [&forged, &lifted] {
        let (code, body) = server.request("GET", "/v3/namespaces", Some(secret));
        assert_eq!(code, 401, "a forged token opened the API: {body}");
        let reply = raw()
            .post(format!("{}/ui/login", server.url))
            .form(&[("token", secret.as_str())])
            .send()
            .expect("sign in");
        assert_eq!(reply.status(), 401, "a forged token signed in");
    }
    // The installation's own token, made before the restart, still works.
    let (code, body) = server.request("GET", "/v3/namespaces", Some(&genuine));
    assert_eq!(code, 200, "{body}");
    assert!(
        server
            .logs()
            .iter()
            .any(|l| l.contains("did not seal was refused")),
        "the refusal is logged for someone to act on"
    );
}

/// A token signs in a burst of times (as many sessions as it may hold), then is refused with
/// a 429 that says when to try again: ending a live session reseals every token and session,
/// so signing in and out in a loop must not make that write as often as a caller likes.
#[test]
fn a_token_signs_in_at_a_bounded_rate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    let secret = make_token(
        &server,
        "looper",
        json!({"namespaces": {"default": "viewer"}}),
    );
    let burst = ebb::service::tokens::sessions::SIGN_IN_BURST;
    for _ in 0..burst {
        let cookie = cookie_of(&sign_in(&server, &secret));
        let reply = raw()
            .post(format!("{}/ui/logout", server.url))
            .header("Cookie", &cookie)
            .send()
            .expect("sign out");
        assert_eq!(reply.status(), 303);
    }
    let reply = raw()
        .post(format!("{}/ui/login", server.url))
        .form(&[("token", secret.as_str()), ("next", "/ui/runs")])
        .send()
        .expect("sign in");
    assert_eq!(reply.status(), 429);
    let wait: u64 = reply.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=10).contains(&wait), "Retry-After: {wait}");
    assert!(reply.headers().get("set-cookie").is_none());
    let page = reply.text().expect("page");
    assert!(page.contains("signed in too often"), "{page}");
    // Another token signs in as before.
    let other = make_token(
        &server,
        "other",
        json!({"namespaces": {"default": "viewer"}}),
    );
    sign_in(&server, &other);
}
