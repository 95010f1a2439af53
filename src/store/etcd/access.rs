//! How ebb reaches etcd and proves who it is: TLS (the CA that signed etcd's certificates, and
//! a client certificate when etcd asks for one) and etcd's own users (a name, and a password
//! read from a file so it never shows in a process list).
//!
//! Nothing here writes the password anywhere: it is read when the store opens, handed to the
//! etcd client, and never formatted (its `Debug` says `***`). A failure to connect is turned
//! into a message that says which of these was wrong, naming the flag that fixes it.

use std::path::{Path, PathBuf};

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

/// How to reach an installation's etcd, besides its URLs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// The CA whose certificates etcd's members present (`--etcd-ca-cert`): with `https://`
    /// endpoints.
    pub ca_cert: Option<PathBuf>,
    /// A client certificate and its key (`--etcd-cert`, `--etcd-key`), for an etcd started
    /// with `--client-cert-auth`.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// An etcd user (`--etcd-user`) and the file holding its password
    /// (`--etcd-password-file`).
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    /// Allows plain `http://` to an etcd on another host (`--etcd-insecure`).
    pub insecure: bool,
}

/// A password as read from its file: never shown.
struct Password(String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl Access {
    /// Whether the endpoints are `https://`: TLS options are given.
    pub fn tls(&self) -> bool {
        self.ca_cert.is_some()
    }

    /// Checks that the options go together and with endpoints of `scheme` on `hosts`.
    pub(super) fn check(&self, https: bool, hosts: &[&str]) -> Result<(), String> {
        match (&self.client_cert, &self.client_key) {
            (Some(_), None) => return Err("--etcd-cert needs --etcd-key (its private key)".into()),
            (None, Some(_)) => return Err("--etcd-key needs --etcd-cert".into()),
            (Some(_), Some(_)) | (None, None) => {}
        }
        match (&self.user, &self.password_file) {
            (Some(_), None) => {
                return Err(
                    "--etcd-user needs --etcd-password-file (a file holding the user's password)"
                        .into(),
                );
            }
            (None, Some(_)) => return Err("--etcd-password-file needs --etcd-user".into()),
            (Some(user), Some(_)) => {
                if user.is_empty() || user.len() > 128 || user.chars().any(char::is_control) {
                    return Err(format!(
                        "--etcd-user '{}' must be 1 to 128 printable characters",
                        user.escape_debug()
                    ));
                }
            }
            (None, None) => {}
        }
        if https {
            if self.ca_cert.is_none() {
                return Err("https:// endpoints need --etcd-ca-cert (the CA that signed etcd's certificates)".into());
            }
            return Ok(());
        }
        if self.ca_cert.is_some() || self.client_cert.is_some() {
            return Err(
                "--etcd-ca-cert and --etcd-cert are for TLS: write the endpoints as https://"
                    .into(),
            );
        }
        if let Some(host) = hosts.iter().find(|h| !is_loopback(h))
            && !self.insecure
        {
            return Err(format!(
                "etcd at {host} is reached over plain http://: anyone on the network could read and rewrite the installation; \
                 use https:// with --etcd-ca-cert (and --etcd-user or --etcd-cert), or pass --etcd-insecure"
            ));
        }
        Ok(())
    }

    /// The etcd client's options for these: TLS files and the password read now.
    pub(super) fn connect_options(&self) -> Result<ConnectOptions, String> {
        let mut options = ConnectOptions::new();
        if let Some(ca) = &self.ca_cert {
            let mut tls = TlsOptions::new()
                .ca_certificate(Certificate::from_pem(read("--etcd-ca-cert", ca)?));
            if let (Some(cert), Some(key)) = (&self.client_cert, &self.client_key) {
                tls = tls.identity(Identity::from_pem(
                    read("--etcd-cert", cert)?,
                    read_private("--etcd-key", key)?,
                ));
            }
            options = options.with_tls(tls);
        }
        if let (Some(user), Some(file)) = (&self.user, &self.password_file) {
            let password = password(file)?;
            options = options
                .with_user(user.clone(), password.0)
                .with_auto_token_refresh(true);
        }
        Ok(options)
    }

    /// What a failure to reach or use etcd at start says, with the option at fault named
    /// where it can be told from the error (a certificate etcd's CA does not match, a client
    /// certificate etcd asks for, a user it refuses). Over TLS, a failure of the connection
    /// itself is looked into with a handshake of its own with `url`, since the gRPC client
    /// may report only that the connection broke.
    pub(super) fn explain(&self, e: &etcd_client::Error, url: &str, prefix: &str) -> String {
        let mut chain = chain(e);
        if self.tls()
            && !chain.contains("etcdserver:")
            && let Some(found) = self.handshake(url)
        {
            chain = format!("{chain}: {found}");
        }
        let lower = chain.to_lowercase();
        let ca = self
            .ca_cert
            .as_deref()
            .map_or_else(String::new, |p| p.display().to_string());
        if lower.contains("unknownissuer")
            || lower.contains("invalid peer certificate")
            || lower.contains("badsignature")
        {
            return format!(
                "etcd's certificate is not trusted: it was not signed by the CA in --etcd-ca-cert {ca} ({chain})"
            );
        }
        if lower.contains("certificaterequired") || lower.contains("certificate required") {
            return if self.client_cert.is_some() {
                format!("etcd refused the client certificate of --etcd-cert ({chain})")
            } else {
                "etcd requires a client certificate: give --etcd-cert and --etcd-key".to_string()
            };
        }
        if lower.contains("bad certificate") || lower.contains("badcertificate") {
            return if self.client_cert.is_some() {
                format!(
                    "etcd refused the client certificate of --etcd-cert: is it signed by etcd's --trusted-ca-file? ({chain})"
                )
            } else {
                "etcd requires a client certificate: give --etcd-cert and --etcd-key".to_string()
            };
        }
        if lower.contains("authentication failed") {
            let user = self.user.as_deref().unwrap_or("");
            return format!(
                "etcd refused user '{user}': authentication failed (check --etcd-user and the password in --etcd-password-file)"
            );
        }
        if lower.contains("user name is empty") || lower.contains("user name not found") {
            return "etcd requires a user: give --etcd-user and --etcd-password-file (or a client certificate with --etcd-cert)".into();
        }
        if lower.contains("permission denied") {
            let user = self
                .user
                .as_deref()
                .unwrap_or("(of the client certificate)");
            return format!(
                "etcd user {user} may not read and write under {prefix}: grant its role readwrite on the prefix ({chain})"
            );
        }
        if lower.contains("http2 error") && self.ca_cert.is_none() {
            return format!("cannot connect: is etcd serving https://? ({chain})");
        }
        format!("cannot connect: {chain}")
    }
}

impl Access {
    /// A TLS handshake with `url` as the client makes it, and a read of etcd's first answer:
    /// the TLS error found, if any.
    fn handshake(&self, url: &str) -> Option<String> {
        use rustls_pki_types::pem::PemObject as _;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        use std::io::{Read as _, Write as _};
        let host_port = url.strip_prefix("https://")?;
        let host = host_port
            .rsplit_once(':')?
            .0
            .trim_start_matches('[')
            .trim_end_matches(']');
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(self.ca_cert.as_ref()?).ok()? {
            roots.add(cert.ok()?).ok()?;
        }
        let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
        let config = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .ok()?
                    .collect::<Result<Vec<_>, _>>()
                    .ok()?;
                let key = PrivateKeyDer::from_pem_file(key).ok()?;
                builder.with_client_auth_cert(chain, key).ok()?
            }
            _ => builder.with_no_client_auth(),
        };
        let name = ServerName::try_from(host.to_string()).ok()?;
        let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).ok()?;
        let mut tcp = std::net::TcpStream::connect(host_port).ok()?;
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .ok()?;
        let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
        // HTTP/2's preface, so that etcd answers (or says why not) after the handshake.
        if let Err(e) = tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") {
            return Some(e.to_string());
        }
        let mut first = [0u8; 16];
        match tls.read(&mut first) {
            Err(e)
                if e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut =>
            {
                Some(e.to_string())
            }
            Ok(_) | Err(_) => None,
        }
    }
}

/// Whether `host` names this machine.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An error and every error beneath it, as one line (etcd-client's errors do not link their
/// sources: the transport's and gRPC's are walked here).
#[allow(
    clippy::wildcard_enum_match_arm,
    reason = "etcd-client's errors, not ebb's"
)]
fn chain(e: &etcd_client::Error) -> String {
    let (mut text, mut source): (String, Option<&(dyn std::error::Error + 'static)>) = match e {
        etcd_client::Error::GRpcStatus(status) => (
            status.message().to_string(),
            std::error::Error::source(status),
        ),
        etcd_client::Error::TransportError(t) => (t.to_string(), std::error::Error::source(t)),
        other => (other.to_string(), None),
    };
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// Files read for the connection are small: a certificate chain, a key, a password.
const MAX_FILE: u64 = 1 << 20;

fn read(flag: &str, path: &Path) -> Result<Vec<u8>, String> {
    let bytes = read_bounded(flag, path)?;
    if !String::from_utf8_lossy(&bytes).contains("-----BEGIN") {
        return Err(format!("{flag} {}: not a PEM file", path.display()));
    }
    Ok(bytes)
}

fn read_bounded(flag: &str, path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!("{flag} {}: larger than 1 MiB", path.display()));
    }
    Ok(bytes)
}

/// A file of a secret: refused when anyone but its owner may read it.
fn read_private(flag: &str, path: &Path) -> Result<Vec<u8>, String> {
    crate::store::secure::read_owner_only(path, MAX_FILE)
        .map_err(|e| format!("{flag} {}: {e}", path.display()))
}

/// The password in `file`: its first line.
fn password(file: &Path) -> Result<Password, String> {
    let bytes = read_private("--etcd-password-file", file)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("--etcd-password-file {}: not UTF-8 text", file.display()))?;
    let line = text.lines().next().unwrap_or("");
    if line.is_empty() {
        return Err(format!(
            "--etcd-password-file {}: the file is empty",
            file.display()
        ));
    }
    Ok(Password(line.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(f: impl FnOnce(&mut Access)) -> Access {
        let mut a = Access::default();
        f(&mut a);
        a
    }

    #[test]
    fn options_go_together_and_with_the_scheme() {
        let ca = || Some(PathBuf::from("ca.pem"));
        let cases: Vec<(Access, bool, &[&str], Option<&str>)> = vec![
            (Access::default(), false, &["127.0.0.1"], None),
            (Access::default(), false, &["localhost", "[::1]"], None),
            (
                Access::default(),
                false,
                &["10.0.0.2"],
                Some("plain http://"),
            ),
            (access(|a| a.insecure = true), false, &["10.0.0.2"], None),
            (
                Access::default(),
                true,
                &["etcd"],
                Some("need --etcd-ca-cert"),
            ),
            (access(|a| a.ca_cert = ca()), true, &["etcd"], None),
            (
                access(|a| a.ca_cert = ca()),
                false,
                &["127.0.0.1"],
                Some("write the endpoints as https://"),
            ),
            (
                access(|a| {
                    a.ca_cert = ca();
                    a.client_cert = Some("c.pem".into());
                }),
                true,
                &["etcd"],
                Some("--etcd-cert needs --etcd-key"),
            ),
            (
                access(|a| a.user = Some("ebb".into())),
                false,
                &["127.0.0.1"],
                Some("needs --etcd-password-file"),
            ),
            (
                access(|a| a.password_file = Some("pw".into())),
                false,
                &["127.0.0.1"],
                Some("needs --etcd-user"),
            ),
            (
                access(|a| {
                    a.user = Some("a\nb".into());
                    a.password_file = Some("pw".into());
                }),
                false,
                &["127.0.0.1"],
                Some("printable"),
            ),
        ];
        for (access, https, hosts, wanted) in cases {
            let got = access.check(https, hosts);
            match wanted {
                None => assert!(got.is_ok(), "{access:?} {hosts:?}: {got:?}"),
                Some(needle) => {
                    let e = got.expect_err(needle);
                    assert!(e.contains(needle), "{access:?}: {e}");
                }
            }
        }
    }

    #[test]
    fn a_password_file_others_can_read_is_refused_and_the_password_never_shown() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret-pass\nignored\n").expect("write");
        for mode in [0o644, 0o640] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let e = password(&file).expect_err("readable by others");
            assert!(
                e.contains("others can read it") && e.contains("chmod 600"),
                "{e}"
            );
        }
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let p = password(&file).expect("read");
        assert_eq!(p.0, "s3cret-pass");
        assert_eq!(format!("{p:?}"), "***");
        std::fs::write(&file, "").expect("empty");
        assert!(password(&file).expect_err("empty").contains("empty"));
    }
}
