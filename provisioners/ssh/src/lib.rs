//! ebb's SSH transport: how the server reaches the nodes of a remote cluster.
//!
//! A node ebb reaches over SSH carries the fact `ssh` = `user@host:port` ([`Target`]). The
//! server logs in with the profile's `sshPrivateKey` (a secret, held in memory only: it is
//! never written to a file) and checks the server's host key as `sshHostKeyChecking` says
//! ([`Checking`]). Each command runs on its own channel of one connection ([`Session::exec`]);
//! what runs there outlives the connection only when the command detaches it ([`remote`]).

pub mod remote;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ebb_spi::{
    Context, FACT_SSH, FACT_SSH_HOST_KEY, ProvisionError, SSH_HOST_KEY_CHECKING, SSH_KNOWN_HOSTS,
    SSH_PRIVATE_KEY, SSH_USER,
};
use russh::ChannelMsg;
use russh::client;
use russh::keys::{HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKey};

/// How long connecting and logging in may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Where to log in: `user@host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub user: String,
    pub host: String,
    pub port: u16,
}

impl Target {
    /// Parses `[user@]host[:port]` (`[v6addr]:port` for IPv6); `user` defaults to
    /// `default_user`, the port to 22.
    pub fn parse(text: &str, default_user: Option<&str>) -> Result<Target, String> {
        let text = text.trim();
        let (user, rest) = match text.rsplit_once('@') {
            Some((u, r)) => (Some(u), r),
            None => (None, text),
        };
        let user = user
            .or(default_user)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| format!("'{text}' names no user (write user@host, or set sshUser)"))?;
        if user
            .chars()
            .any(|c| c.is_whitespace() || c == ':' || c == '/')
        {
            return Err(format!("'{user}' is not a user name"));
        }
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("'{text}': '[' without ']'"))?;
            match after.strip_prefix(':') {
                Some(p) => (host, Some(p)),
                None if after.is_empty() => (host, None),
                None => return Err(format!("'{text}': unexpected '{after}' after the address")),
            }
        } else {
            match rest.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (rest, None),
            }
        };
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '/') {
            return Err(format!("'{text}' names no host"));
        }
        let port = match port {
            None => 22,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("'{text}': '{p}' is not a port"))?,
        };
        Ok(Target {
            user: user.to_string(),
            host: host.to_string(),
            port,
        })
    }

    /// The host as `known_hosts` names it: `host`, or `[host]:port` off port 22.
    pub fn known_hosts_name(&self) -> String {
        if self.port == 22 {
            self.host.clone()
        } else {
            format!("[{}]:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}@[{}]:{}", self.user, self.host, self.port)
        } else {
            write!(f, "{}@{}:{}", self.user, self.host, self.port)
        }
    }
}

/// How a server's host key is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checking {
    /// The key must be one `known_hosts` lists for the host.
    Listed(KnownHosts),
    /// The key must have this fingerprint (pinned at first contact).
    Pinned(String),
    /// Any key: the first contact of `accept-new`, or `sshHostKeyChecking=no`.
    Any,
}

/// Host keys in `known_hosts` format.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct KnownHosts(Vec<(Vec<String>, PublicKey)>);

impl fmt::Debug for KnownHosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(names, key)| (names, fingerprint(key))))
            .finish()
    }
}

impl KnownHosts {
    /// Parses `host[,host] type base64 [comment]` lines; blank lines and `#` comments are
    /// skipped. Hashed names (`|1|...`) and markers (`@revoked`) are refused, naming the line.
    pub fn parse(text: &str) -> Result<KnownHosts, String> {
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(names), Some(_kind), Some(key)) =
                (fields.next(), fields.next(), fields.next())
            else {
                return Err(format!("line {}: expected 'host type key'", n + 1));
            };
            if names.starts_with('@') || names.starts_with('|') {
                return Err(format!(
                    "line {}: markers and hashed host names are not supported; list the host by name",
                    n + 1
                ));
            }
            let key = russh::keys::parse_public_key_base64(key)
                .map_err(|e| format!("line {}: not a public key: {e}", n + 1))?;
            entries.push((names.split(',').map(str::to_string).collect(), key));
        }
        Ok(KnownHosts(entries))
    }

    /// The keys listed for `target`.
    pub fn keys_for<'k>(&'k self, target: &Target) -> impl Iterator<Item = &'k PublicKey> {
        let name = target.known_hosts_name();
        self.0
            .iter()
            .filter(move |(names, _)| names.contains(&name))
            .map(|(_, key)| key)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The SHA-256 fingerprint of `key`, as OpenSSH prints it (`SHA256:...`).
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// What went wrong reaching a node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The node could not be reached, or the connection broke: worth trying again.
    #[error("cannot reach {target}: {message}")]
    Unreachable { target: String, message: String },
    /// The server showed a host key the policy does not accept.
    #[error("{target} showed host key {seen}, {expected}")]
    HostKey {
        target: String,
        seen: String,
        expected: String,
    },
    /// The server refused the key.
    #[error("{target} refused the key for user '{user}'")]
    Refused { target: String, user: String },
    /// The settings are wrong (a key that does not parse, a policy without host keys).
    #[error("{0}")]
    Settings(String),
}

impl Error {
    /// Whether a retry can help: only when the node could not be reached.
    pub fn retryable(&self) -> bool {
        matches!(self, Error::Unreachable { .. })
    }
}

impl From<Error> for ProvisionError {
    fn from(e: Error) -> Self {
        if e.retryable() {
            ProvisionError::retryable(e.to_string())
        } else {
            ProvisionError::fatal(e.to_string())
        }
    }
}

/// How to log in to a profile's nodes: its key and host key policy.
#[derive(Clone)]
pub struct Access {
    key: Arc<PrivateKey>,
    policy: Policy,
    known: KnownHosts,
    /// `sshUser`, for targets that name no user.
    pub user: Option<String>,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access")
            .field("key", &fingerprint(self.key.public_key()))
            .field("policy", &self.policy)
            .field("known", &self.known)
            .field("user", &self.user)
            .finish()
    }
}

/// `sshHostKeyChecking`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Yes,
    AcceptNew,
    No,
}

impl Access {
    /// The access the properties of `ctx` describe (secrets resolved). Errors name the
    /// property.
    pub fn from_context(ctx: &Context) -> Result<Access, Error> {
        let key = ctx.property(SSH_PRIVATE_KEY.name).ok_or_else(|| {
            Error::Settings(format!(
                "property '{}' is not set: ebb needs a key to log in to the nodes",
                SSH_PRIVATE_KEY.name
            ))
        })?;
        let key = russh::keys::decode_secret_key(key, None).map_err(|e| {
            Error::Settings(format!(
                "property '{}' is not a private key ebb can use (an unencrypted OpenSSH or PEM key): {e}",
                SSH_PRIVATE_KEY.name
            ))
        })?;
        let known = match ctx.property(SSH_KNOWN_HOSTS.name) {
            Some(text) => KnownHosts::parse(text).map_err(|e| {
                Error::Settings(format!("property '{}': {e}", SSH_KNOWN_HOSTS.name))
            })?,
            None => KnownHosts::default(),
        };
        let policy = match ctx.property(SSH_HOST_KEY_CHECKING.name) {
            Some("yes") => Policy::Yes,
            Some("no") => Policy::No,
            Some("accept-new") | None => Policy::AcceptNew,
            Some(other) => {
                return Err(Error::Settings(format!(
                    "property '{}': '{other}' is not yes, accept-new or no",
                    SSH_HOST_KEY_CHECKING.name
                )));
            }
        };
        if policy == Policy::Yes && known.is_empty() {
            return Err(Error::Settings(format!(
                "property '{}' is yes but '{}' lists no host keys",
                SSH_HOST_KEY_CHECKING.name, SSH_KNOWN_HOSTS.name
            )));
        }
        Ok(Access {
            key: Arc::new(key),
            policy,
            known,
            user: ctx.property(SSH_USER.name).map(str::to_string),
        })
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// How to check the host key of `target`, whose key was pinned as `pinned` (if it was).
    pub fn checking(&self, pinned: Option<&str>) -> Checking {
        match (self.policy, pinned) {
            (Policy::Yes, _) => Checking::Listed(self.known.clone()),
            (Policy::AcceptNew, Some(fp)) => Checking::Pinned(fp.to_string()),
            (Policy::AcceptNew, None) | (Policy::No, _) => Checking::Any,
        }
    }

    /// The target and pinned host key of a node from its facts; `None` when the node is not
    /// reached over SSH.
    pub fn node(
        &self,
        facts: &std::collections::BTreeMap<String, String>,
    ) -> Option<Result<(Target, Checking), Error>> {
        let target = facts.get(FACT_SSH)?;
        Some(
            Target::parse(target, self.user.as_deref())
                .map_err(|e| Error::Settings(format!("fact '{FACT_SSH}': {e}")))
                .map(|t| {
                    let pinned = facts.get(FACT_SSH_HOST_KEY).map(String::as_str);
                    (t, self.checking(pinned))
                }),
        )
    }

    /// Logs in to `target`.
    pub async fn connect(&self, target: &Target, checking: Checking) -> Result<Session, Error> {
        let unreachable = |message: String| Error::Unreachable {
            target: target.to_string(),
            message,
        };
        let seen = Arc::new(std::sync::Mutex::new(None));
        let handler = Checker {
            target: target.clone(),
            checking,
            seen: Arc::clone(&seen),
        };
        let config = Arc::new(client::Config {
            inactivity_timeout: None,
            keepalive_interval: Some(Duration::from_secs(15)),
            keepalive_max: 4,
            nodelay: true,
            ..Default::default()
        });
        let login = async {
            let addr = (target.host.as_str(), target.port);
            let mut handle = match client::connect(config, addr, handler).await {
                Ok(h) => h,
                Err(e) => {
                    let rejected = seen.lock().map(|s| s.clone()).unwrap_or_default();
                    return Err(match rejected {
                        Some(Rejected { seen, expected }) => Error::HostKey {
                            target: target.to_string(),
                            seen,
                            expected,
                        },
                        None => unreachable(e.to_string()),
                    });
                }
            };
            let hash = handle
                .best_supported_rsa_hash()
                .await
                .map_err(|e| unreachable(e.to_string()))?
                .flatten();
            let auth = handle
                .authenticate_publickey(
                    target.user.clone(),
                    PrivateKeyWithHashAlg::new(Arc::clone(&self.key), hash),
                )
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            if !auth.success() {
                return Err(Error::Refused {
                    target: target.to_string(),
                    user: target.user.clone(),
                });
            }
            Ok(handle)
        };
        let handle = tokio::time::timeout(CONNECT_TIMEOUT, login)
            .await
            .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}")))??;
        let host_key = seen
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|r| r.seen.clone()))
            .unwrap_or_default();
        Ok(Session {
            handle,
            target: target.clone(),
            host_key,
        })
    }
}

/// The host key the server showed, and why it was refused (when it was).
#[derive(Debug, Clone, Default)]
struct Rejected {
    seen: String,
    expected: String,
}

/// russh's callback: checks the server's host key.
struct Checker {
    target: Target,
    checking: Checking,
    seen: Arc<std::sync::Mutex<Option<Rejected>>>,
}

impl client::Handler for Checker {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let russh::keys::PublicKeyOrCertificate::PublicKey { key, .. } = key else {
            self.note(
                String::from("a certificate"),
                "host certificates are not supported",
            );
            return Ok(false);
        };
        let seen = fingerprint(key);
        let (ok, expected) = match &self.checking {
            Checking::Any => (true, String::new()),
            Checking::Pinned(fp) => (
                *fp == seen,
                format!("but the node's key was pinned as {fp} at first contact"),
            ),
            Checking::Listed(known) => (
                known
                    .keys_for(&self.target)
                    .any(|k| k.key_data() == key.key_data()),
                format!(
                    "which sshKnownHosts does not list for {}",
                    self.target.known_hosts_name()
                ),
            ),
        };
        self.note(seen, if ok { "" } else { &expected });
        Ok(ok)
    }
}

impl Checker {
    fn note(&self, seen: String, expected: &str) {
        if let Ok(mut slot) = self.seen.lock() {
            *slot = Some(Rejected {
                seen,
                expected: expected.to_string(),
            });
        }
    }
}

/// A logged-in connection to one node.
pub struct Session {
    handle: client::Handle<Checker>,
    target: Target,
    host_key: String,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("target", &self.target)
            .field("host_key", &self.host_key)
            .finish()
    }
}

/// Most bytes of each of a command's standard output and error kept: what a node sends
/// past it is read and dropped, so a node that prints gigabytes costs ebb no memory.
pub const MAX_OUTPUT: usize = 4 << 20;

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// The exit status; `None` when the command was killed by a signal or the channel closed
    /// without one.
    pub status: Option<u32>,
    /// The first [`MAX_OUTPUT`] bytes of its standard output.
    pub stdout: Vec<u8>,
    /// The first [`MAX_OUTPUT`] bytes of its standard error.
    pub stderr: Vec<u8>,
    /// It sent more than [`MAX_OUTPUT`] bytes on one of them.
    pub truncated: bool,
}

impl Output {
    /// Keeps what of `data` fits in `into` under [`MAX_OUTPUT`].
    fn keep(into: &mut Vec<u8>, data: &[u8], truncated: &mut bool) {
        let room = MAX_OUTPUT.saturating_sub(into.len());
        if data.len() > room {
            *truncated = true;
        }
        into.extend_from_slice(&data[..data.len().min(room)]);
    }
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }

    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_string()
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_string()
    }

    /// "exited with N: <stderr>", for error messages.
    pub fn failure(&self) -> String {
        let status = match self.status {
            Some(n) => format!("exited with {n}"),
            None => "ended without an exit status".to_string(),
        };
        match self.stderr_text() {
            e if e.is_empty() => status,
            e => format!("{status}: {e}"),
        }
    }
}

impl Session {
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The fingerprint of the host key the server showed.
    pub fn host_key(&self) -> &str {
        &self.host_key
    }

    /// Runs `command` with the login shell, feeding it `stdin` (then end of file).
    #[allow(
        clippy::wildcard_enum_match_arm,
        reason = "russh's channel messages, not ebb's"
    )]
    pub async fn exec(&self, command: &str, stdin: &[u8]) -> Result<Output, Error> {
        let broken = |e: russh::Error| Error::Unreachable {
            target: self.target.to_string(),
            message: e.to_string(),
        };
        let mut channel = self.handle.channel_open_session().await.map_err(broken)?;
        channel.exec(true, command).await.map_err(broken)?;
        if !stdin.is_empty() {
            channel.data_bytes(stdin.to_vec()).await.map_err(broken)?;
        }
        channel.eof().await.map_err(broken)?;
        let mut out = Output::default();
        while let Some(msg) = channel.wait().await {
            match msg {
                ChannelMsg::Data { data } => {
                    Output::keep(&mut out.stdout, &data, &mut out.truncated);
                }
                ChannelMsg::ExtendedData { data, ext: 1 } => {
                    Output::keep(&mut out.stderr, &data, &mut out.truncated);
                }
                ChannelMsg::ExitStatus { exit_status } => out.status = Some(exit_status),
                // russh's channel messages: the window, EOF, signals and the rest say nothing
                // the output keeps.
                _ => {}
            }
        }
        Ok(out)
    }

    /// Runs `command`; its standard output when it exits 0, else an error saying what
    /// `what` was and how it failed.
    pub async fn run(&self, what: &str, command: &str, stdin: &[u8]) -> Result<String, String> {
        let out = self.exec(command, stdin).await.map_err(|e| e.to_string())?;
        if out.success() {
            Ok(out.stdout_text())
        } else {
            Err(format!("{what} on {}: {}", self.target, out.failure()))
        }
    }

    /// Ends the connection politely.
    pub async fn close(self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    }
}

/// `text` quoted for a POSIX shell.
pub fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        let t = Target::parse("ops@10.0.0.5:2222", None).expect("valid");
        assert_eq!(
            (t.user.as_str(), t.host.as_str(), t.port),
            ("ops", "10.0.0.5", 2222)
        );
        assert_eq!(t.to_string(), "ops@10.0.0.5:2222");
        assert_eq!(t.known_hosts_name(), "[10.0.0.5]:2222");
        let t = Target::parse("db.example.com", Some("root")).expect("default user");
        assert_eq!((t.user.as_str(), t.port), ("root", 22));
        assert_eq!(t.known_hosts_name(), "db.example.com");
        let t = Target::parse("me@[::1]:22", None).expect("v6");
        assert_eq!(t.host, "::1");
        assert_eq!(t.to_string(), "me@[::1]:22");
        for bad in [
            "host",
            "me@",
            "me@host:0",
            "me@host:port",
            "me@[::1",
            "a b@host",
        ] {
            assert!(Target::parse(bad, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_known_hosts() {
        let key = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
        let text = format!("# pinned\n[127.0.1.5]:2222,node-a ssh-ed25519 {key} c\n\n");
        let known = KnownHosts::parse(&text).expect("valid");
        let t = Target::parse("u@127.0.1.5:2222", None).expect("valid");
        assert_eq!(known.keys_for(&t).count(), 1);
        let other = Target::parse("u@127.0.1.5", None).expect("valid");
        assert_eq!(known.keys_for(&other).count(), 0);
        assert!(KnownHosts::parse("|1|abc|def ssh-ed25519 AAAA").is_err());
        assert!(KnownHosts::parse("host ssh-ed25519").is_err());
        assert!(KnownHosts::parse("host ssh-ed25519 notbase64!").is_err());
    }

    #[test]
    fn quotes_for_the_shell() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }
}
