//! HTTPS with a certificate made at test time, what `ebb serve` refuses to expose, and the CLI
//! with tokens from files.

use std::path::Path;

use crate::support::pki::{Pki, private};
use crate::support::server::{Options, Server, run_ebb, serve_fails_with};

fn pki(dir: &Path) -> Pki {
    Pki::new(dir)
}

fn path(p: &Path) -> String {
    p.to_str().expect("utf-8").to_string()
}

#[test]
fn https_with_a_certificate_made_at_test_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki(dir.path());
    let data = dir.path().join("data");
    let server = Server::start_at(
        &data,
        Options {
            args: vec![
                "--tls-cert".into(),
                path(&pki.cert),
                "--tls-key".into(),
                path(&pki.key),
            ],
            ..Options::default()
        },
    );
    assert!(
        server.url.starts_with("https://127.0.0.1:"),
        "{}",
        server.url
    );
    let token = server.token().expect("token");
    let pem = std::fs::read(&pki.ca).expect("ca");
    let trusting = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("pem"))
        .build()
        .expect("client");
    let reply = trusting
        .get(format!("{}/v3/namespaces", server.url))
        .bearer_auth(&token)
        .send()
        .expect("the handshake succeeds with the CA");
    assert_eq!(reply.status().as_u16(), 200);
    // Browsers are told to come back over HTTPS only.
    assert_eq!(
        reply.headers()["strict-transport-security"],
        "max-age=31536000"
    );
    // Over HTTPS the UI's session cookie is Secure: a browser never sends it in the clear.
    let signed_in = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("pem"))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
        .post(format!("{}/ui/login", server.url))
        .form(&[("token", token.as_str())])
        .send()
        .expect("sign in");
    assert_eq!(signed_in.status().as_u16(), 303);
    let cookie = signed_in.headers()["set-cookie"].to_str().expect("ascii");
    assert!(cookie.contains("; Secure"), "{cookie}");
    // A `__Host-` cookie: a browser takes it only from this host over HTTPS, at path `/`,
    // so no plain-HTTP page of the host (another port's) can toss a session of its own in.
    assert!(cookie.starts_with("__Host-ebb_session="), "{cookie}");
    assert!(
        cookie.contains("Path=/") && !cookie.contains("Domain"),
        "{cookie}"
    );
    assert!(
        !cookie.contains(token.trim_start_matches("ebb_")),
        "{cookie}"
    );
    // A client that does not trust the CA refuses the server.
    let err = reqwest::blocking::Client::new()
        .get(format!("{}/v3/health", server.url))
        .send()
        .expect_err("an unknown CA");
    let chain = format!("{err:?}");
    assert!(
        chain.contains("Certificate") || chain.contains("certificate"),
        "{chain}"
    );
    // Plain HTTP to the same port gets no answer of the API.
    let plain = server.url.replace("https://", "http://");
    let answered = reqwest::blocking::Client::new()
        .get(format!("{plain}/v3/health"))
        .send()
        .map(|r| r.status().is_success())
        .unwrap_or(false);
    assert!(!answered, "plain HTTP must not reach the API");
    // The CLI with --ca-cert; without it, a clear error.
    let args = |more: &[&str]| -> Vec<String> {
        let mut all = vec!["--server".to_string(), server.url.clone()];
        all.extend(more.iter().map(|s| s.to_string()));
        all.extend(["namespace".to_string(), "list".to_string()]);
        all
    };
    let with_ca = args(&["--ca-cert", &path(&pki.ca)]);
    let with_ca: Vec<&str> = with_ca.iter().map(String::as_str).collect();
    let (code, out, err) = run_ebb(&with_ca, &[("EBB_TOKEN", token.as_str())], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("default"), "{out}");
    let without = args(&[]);
    let without: Vec<&str> = without.iter().map(String::as_str).collect();
    let (code, _, err) = run_ebb(&without, &[("EBB_TOKEN", token.as_str())], None);
    assert_eq!(code, 1);
    assert!(err.contains("cannot reach the ebb server"), "{err}");
}

#[test]
fn serve_refuses_to_expose_the_api_unprotected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data_arg = path(&data);
    let serve = |more: &[&str]| {
        let mut all = vec![
            "serve",
            "--data-dir",
            data_arg.as_str(),
            "--bind",
            "0.0.0.0:0",
        ];
        all.extend_from_slice(more);
        run_ebb(&all, &[], None)
    };
    // Plain HTTP on an address other hosts reach.
    let (code, _, err) = serve(&[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--tls-cert") && err.contains("--insecure-http"),
        "{err}"
    );
    // No tokens at all on such an address, even with --insecure-http.
    let (code, _, err) = serve(&["--no-auth", "--insecure-http"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--no-auth is allowed only on a loopback address"),
        "{err}"
    );
    // --no-auth and a token contradict each other.
    let err = serve_fails_with(&data, &["--no-auth", "--token", "abc"]);
    assert!(err.contains("contradict"), "{err}");
    // A TLS key others can read is refused.
    let pki = pki(dir.path());
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&pki.key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let err = serve_fails_with(
        &data,
        &["--tls-cert", &path(&pki.cert), "--tls-key", &path(&pki.key)],
    );
    assert!(err.contains("others can read it"), "{err}");
    // With --insecure-http it serves, and a request still needs a token.
    let open = Server::start_at(
        &dir.path().join("open"),
        Options {
            args: vec![
                "--bind".into(),
                "0.0.0.0:0".into(),
                "--insecure-http".into(),
            ],
            ..Options::default()
        },
    );
    let (code, _) = open.call("GET", "/v3/namespaces", None, None);
    assert_eq!(code, 401);
}

#[test]
fn no_auth_on_loopback_serves_everyone_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_at(
        dir.path(),
        Options {
            args: vec!["--no-auth".into()],
            ..Options::default()
        },
    );
    assert!(server.token().is_none(), "no first token without auth");
    let (code, reply) = server.call("PUT", "/v3/namespaces/x", None, None);
    assert_eq!(code, 200, "{reply}");
    let (_, audit) = server.call("GET", "/v3/audit?namespace=x", None, None);
    assert_eq!(audit[0]["actor"], "anonymous", "{audit}");
    assert!(
        server
            .logs()
            .iter()
            .any(|l| l.contains("--no-auth") && l.contains("WARN")),
        "the log says so"
    );
    // The UI needs no sign-in either: its pages open, with no sign-out.
    let page = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
        .get(format!("{}/ui/namespaces", server.url))
        .send()
        .expect("get");
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().expect("html");
    assert!(
        html.contains("anonymous") && !html.contains("Sign out"),
        "{html}"
    );
}

#[test]
fn the_cli_makes_uses_and_revokes_tokens_kept_in_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Server::start_at(&data, Options::default());
    let data_dir = path(&data);
    let as_admin = [
        ("EBB_SERVER", server.url.as_str()),
        ("EBB_DATA_DIR", data_dir.as_str()),
    ];
    // The first token comes from the data dir.
    let (code, out, err) = run_ebb(
        &[
            "token",
            "create",
            "ci",
            "--namespace",
            "default",
            "--role",
            "operator",
            "--expires",
            "30d",
        ],
        &as_admin,
        None,
    );
    assert_eq!(code, 0, "{err}");
    let secret = out.trim().to_string();
    assert!(secret.starts_with("ebb_") && secret.len() == 68, "{out}");
    assert!(err.contains("shown this once"), "{err}");
    let file = dir.path().join("ci.token");
    private(&file, &format!("{secret}\n"));
    let as_ci = [
        ("EBB_SERVER", server.url.as_str()),
        ("EBB_TOKEN_FILE", file.to_str().expect("utf-8")),
    ];
    let (code, out, err) = run_ebb(&["namespace", "list"], &as_ci, None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("default"), "{out}");
    // An operator cannot make namespaces.
    let (code, _, err) = run_ebb(&["namespace", "create", "x"], &as_ci, None);
    assert_eq!(code, 1);
    assert!(
        err.contains("instance-admin") && err.contains("403"),
        "{err}"
    );
    // Listed without its secret, revoked, then refused.
    let (code, out, _) = run_ebb(&["token", "list"], &as_admin, None);
    assert_eq!(code, 0);
    assert!(
        out.contains("ci") && out.contains("default:operator"),
        "{out}"
    );
    assert!(!out.contains(&secret), "{out}");
    let (code, _, err) = run_ebb(&["token", "revoke", "ci"], &as_admin, None);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_ebb(&["namespace", "list"], &as_ci, None);
    assert_eq!(code, 1);
    assert!(err.contains("401"), "{err}");
    // The audit log shows who did it.
    let (code, out, err) = run_ebb(&["audit"], &as_admin, None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("token.revoke") && out.contains("token.create"),
        "{out}"
    );
    // Pairs of --namespace and --role must match.
    let (code, _, err) = run_ebb(
        &["token", "create", "x", "--namespace", "default"],
        &as_admin,
        None,
    );
    assert_eq!(code, 1);
    assert!(err.contains("one --role for each --namespace"), "{err}");
}
