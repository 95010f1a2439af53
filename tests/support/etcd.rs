//! Real etcd servers for tests: Debian's `etcd-server` on free loopback ports, one member or
//! several, each with its data in a temporary directory, served as an installation would be:
//! over TLS (certificates made at test time), with etcd's auth enabled (a `root` user, and an
//! `ebb` user whose role may read and write under [`ROOT`] only), on etcd's default flags.
//!
//! With `EBB_TEST_STORE=etcd` every test server keeps its state in etcd: one etcd per test
//! process ([`shared`]), and one key prefix per data directory, so a server restarted on the
//! same data directory finds its installation again, as it would find its redb file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use etcd_client::{
    Certificate, Client, ConnectOptions, DeleteOptions, GetOptions, Identity, Permission,
    TlsOptions,
};

use super::pki::{Pki, private};

/// Every test installation's key prefix starts with this: the `ebb` user's role covers it.
pub const ROOT: &str = "/ebb-test";

/// The password of etcd's `root` user in test clusters.
const ROOT_PASSWORD: &str = "root-test-password";

/// How ebb proves who it is to a test cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// The `ebb` user and its password (from a file).
    Password,
    /// A client certificate whose common name is `ebb` (etcd started with
    /// `--client-cert-auth`).
    ClientCert,
    /// Plain HTTP and no auth at all, as on a trusted loopback: for benchmarks that measure
    /// the store alone (`EBB_TEST_ETCD=plain`) beside builds that knew nothing else.
    Plain,
}

impl Auth {
    /// The kind of cluster tests start: `EBB_TEST_ETCD=plain` for [`Auth::Plain`], else
    /// [`Auth::Password`].
    fn chosen() -> Auth {
        match std::env::var("EBB_TEST_ETCD").as_deref() {
            Ok("plain") => Auth::Plain,
            Ok("") | Err(_) => Auth::Password,
            Ok(other) => panic!("EBB_TEST_ETCD={other}: use plain, or leave it unset"),
        }
    }
}

/// Whether this test run keeps servers' state in etcd (`EBB_TEST_STORE=etcd`) rather than in
/// redb files. Any other value but `redb` (or none) fails loudly.
pub fn enabled() -> bool {
    match std::env::var("EBB_TEST_STORE").as_deref() {
        Ok("etcd") => true,
        Ok("redb") | Ok("") | Err(_) => false,
        Ok(other) => panic!("EBB_TEST_STORE={other}: use redb or etcd"),
    }
}

/// The etcd of this test process, started on first use; it ends with the process.
pub fn shared() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| Cluster::start(1))
}

/// The `ebb serve` arguments that keep a server on `data_dir` in the shared etcd.
pub fn serve_args(data_dir: &Path) -> Vec<String> {
    shared().serve_args(&prefix_of(data_dir))
}

/// The installation's key prefix for a data directory: the same for the same directory.
pub fn prefix_of(data_dir: &Path) -> String {
    // FNV-1a: stable across runs, unlike the standard hasher.
    let hash = data_dir
        .to_string_lossy()
        .bytes()
        .fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
        });
    format!("{ROOT}/{hash:016x}")
}

/// Runs etcd with the arguments given, and SIGKILLs it on SIGTERM (a member stopped, to be
/// started again on its data) or once the test process `EBB_TEST_PID` is gone; then also
/// removes the cluster's directory `EBB_TEST_ETCD_DIR`, which a process-wide cluster never
/// drops (each member's write-ahead log takes over 60 MB).
const WATCHDOG: &str = r#"
etcd "$@" &
e=$!
trap 'kill -9 $e 2>/dev/null; wait $e; exit 0' TERM
while kill -0 "$EBB_TEST_PID" 2>/dev/null && kill -0 $e 2>/dev/null; do sleep 0.2; done
kill -9 $e 2>/dev/null
wait $e
kill -0 "$EBB_TEST_PID" 2>/dev/null || rm -rf "$EBB_TEST_ETCD_DIR"
"#;

fn ensure_installed() {
    super::process::ensure_installed(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        "tests/support/etcd/setup.sh",
        "etcd's server",
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One etcd member.
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    child: Option<Child>,
}

/// An etcd cluster of one or more members on loopback. Every member is killed when dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
    pub members: Vec<Member>,
    pki: Pki,
    auth: Auth,
    /// The `ebb` user's password file.
    password_file: PathBuf,
    /// The client certificate and key of the `ebb` user.
    client: (PathBuf, PathBuf),
    /// Whether etcd's auth is on yet (the cluster is set up).
    secured: bool,
    /// Another address of the host's the members listen on besides 127.0.0.1 (a test's
    /// bridge, for servers in network namespaces).
    also_on: Option<String>,
}

impl Cluster {
    /// Starts `size` members over TLS with the `ebb` user and its password, and waits until
    /// the cluster answers.
    pub fn start(size: usize) -> Cluster {
        Cluster::start_with(size, Auth::chosen())
    }

    /// Starts `size` members over TLS, ebb authenticating as `auth` says, and waits until the
    /// cluster answers.
    pub fn start_with(size: usize, auth: Auth) -> Cluster {
        Cluster::start_on(size, auth, None)
    }

    /// [`Cluster::start`], the members listening on `also` (an address of the host's) too.
    pub fn start_also_on(size: usize, also: &str) -> Cluster {
        Cluster::start_on(size, Auth::chosen(), Some(also.to_string()))
    }

    fn start_on(size: usize, auth: Auth, also_on: Option<String>) -> Cluster {
        ensure_installed();
        // A port found free may be taken by another process before etcd binds it: etcd then
        // exits, and the cluster starts again on other ports.
        for limit in [15, 15, 30] {
            let dir = tempfile::tempdir().expect("tempdir");
            let members: Vec<Member> = (0..size)
                .map(|i| Member {
                    name: format!("m{i}"),
                    client_port: free_port(),
                    peer_port: free_port(),
                    child: None,
                })
                .collect();
            let pki = Pki::for_addresses(dir.path(), also_on.as_slice());
            let client = pki.client("ebb");
            let password_file = dir.path().join("ebb.password");
            private(&password_file, "ebb-test-password\n");
            let mut cluster = Cluster {
                dir,
                members,
                pki,
                auth,
                password_file,
                client,
                secured: false,
                also_on: also_on.clone(),
            };
            for i in 0..size {
                cluster.start_member(i);
            }
            if cluster.healthy_within(Duration::from_secs(limit)) {
                if auth != Auth::Plain {
                    cluster.secure();
                }
                return cluster;
            }
        }
        panic!("etcd never became healthy, on three sets of ports");
    }

    /// Whether every running member answers within `limit` (it has a leader); false as soon
    /// as one exited.
    fn healthy_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let ports: Vec<(usize, u16)> = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.child.is_some())
            .map(|(i, m)| (i, m.client_port))
            .collect();
        for (i, port) in ports {
            loop {
                if self.answers(port) {
                    break;
                }
                let exited = self.members[i]
                    .child
                    .as_mut()
                    .is_none_or(|c| c.try_wait().ok().flatten().is_some());
                if exited || Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        true
    }

    /// Whether the member on `port` answers a read that needs a leader.
    fn answers(&self, port: u16) -> bool {
        let url = format!("{}://127.0.0.1:{port}", self.scheme());
        self.admin_on(&[url], |mut client| async move {
            client.get("health", None).await.map(|_| ())
        })
        .is_ok()
    }

    /// Runs `f` with a client of `urls` that may do anything: etcd's `root` once auth is on.
    fn admin_on<T, F, Fut>(&self, urls: &[String], f: F) -> Result<T, etcd_client::Error>
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let mut options = ConnectOptions::new();
        if self.auth != Auth::Plain {
            let ca = std::fs::read(&self.pki.ca).expect("ca");
            let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
            if self.auth == Auth::ClientCert {
                let cert = std::fs::read(&self.client.0).expect("client cert");
                let key = std::fs::read(&self.client.1).expect("client key");
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(tls);
        }
        let mut options = options
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5))
            .with_require_leader(true);
        if self.secured {
            options = options.with_user("root", ROOT_PASSWORD);
        }
        runtime.block_on(async move {
            let client = Client::connect(urls, Some(options)).await?;
            f(client).await
        })
    }

    /// Runs `f` with a client of the cluster that may do anything.
    pub fn admin<T, F, Fut>(&self, f: F) -> T
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let urls: Vec<String> = self.endpoints().split(',').map(str::to_string).collect();
        self.admin_on(&urls, f)
            .unwrap_or_else(|e| panic!("etcd as root: {e}"))
    }

    /// Turns etcd's auth on: `root`, and `ebb` whose role reads and writes under [`ROOT`].
    fn secure(&mut self) {
        let password = std::fs::read_to_string(&self.password_file).expect("password");
        let password = password.trim().to_string();
        self.admin(|mut c| async move {
            c.user_add("root", ROOT_PASSWORD, None).await?;
            c.user_grant_role("root", "root").await?;
            c.role_add("ebb").await?;
            c.role_grant_permission(
                "ebb",
                Permission::read_write(format!("{ROOT}/")).with_prefix(),
            )
            .await?;
            c.user_add("ebb", password, None).await?;
            c.user_grant_role("ebb", "ebb").await?;
            c.auth_enable().await.map(|_| ())
        });
        self.secured = true;
    }

    /// The `ebb` user's password file.
    pub fn password_file(&self) -> &Path {
        &self.password_file
    }

    /// The `ebb serve` (or `ebb store copy`) arguments that reach this cluster as `ebb`, but
    /// its endpoints: the CA, and the user's password file or client certificate.
    pub fn access_args(&self) -> Vec<String> {
        let path = |p: &Path| p.to_string_lossy().into_owned();
        if self.auth == Auth::Plain {
            return Vec::new();
        }
        let mut args = vec!["--etcd-ca-cert".into(), path(&self.pki.ca)];
        match self.auth {
            Auth::Plain => {}
            Auth::Password => args.extend([
                "--etcd-user".into(),
                "ebb".into(),
                "--etcd-password-file".into(),
                path(&self.password_file),
            ]),
            Auth::ClientCert => args.extend([
                "--etcd-cert".into(),
                path(&self.client.0),
                "--etcd-key".into(),
                path(&self.client.1),
            ]),
        }
        args
    }

    /// The `ebb serve` arguments of an installation under `prefix` on this cluster.
    pub fn serve_args(&self, prefix: &str) -> Vec<String> {
        let mut args = vec![
            "--store".into(),
            "etcd".into(),
            "--etcd-endpoints".into(),
            self.endpoints(),
        ];
        args.extend(self.access_args());
        args.extend(["--etcd-prefix".into(), prefix.into()]);
        args
    }

    /// How ebb's library reaches this cluster as `ebb`.
    pub fn access(&self) -> ebb::store::etcd::Access {
        if self.auth == Auth::Plain {
            return ebb::store::etcd::Access::default();
        }
        let mut access = ebb::store::etcd::Access {
            ca_cert: Some(self.pki.ca.clone()),
            ..Default::default()
        };
        match self.auth {
            Auth::Plain => {}
            Auth::Password => {
                access.user = Some("ebb".into());
                access.password_file = Some(self.password_file.clone());
            }
            Auth::ClientCert => {
                access.client_cert = Some(self.client.0.clone());
                access.client_key = Some(self.client.1.clone());
            }
        }
        access
    }

    /// The store location of an installation under `prefix` on this cluster.
    pub fn location(&self, prefix: &str) -> ebb::store::Location {
        ebb::store::Location::Etcd(
            ebb::store::etcd::Endpoints::parse(&self.endpoints(), prefix, self.access())
                .expect("endpoints"),
        )
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts member `i` (again) on its data directory and ports.
    pub fn start_member(&mut self, i: usize) {
        let initial = self.initial_cluster();
        let data = self.dir.path().join(&self.members[i].name);
        let scheme = self.scheme();
        let m = &mut self.members[i];
        let client = format!("{scheme}://127.0.0.1:{}", m.client_port);
        let listen = match &self.also_on {
            Some(also) => format!("{client},{scheme}://{also}:{}", m.client_port),
            None => client.clone(),
        };
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        // A watchdog shell runs etcd and kills it when this test process ends (a process-wide
        // etcd is never dropped) or when told to (SIGTERM).
        let child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("sh")
            .env("EBB_TEST_PID", std::process::id().to_string())
            .env("EBB_TEST_ETCD_DIR", self.dir.path())
            .args(["--name", &m.name, "--data-dir"])
            .arg(&data)
            .args([
                "--listen-client-urls",
                &listen,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                &initial,
                "--initial-cluster-state",
                "new",
            ])
            .args(["--initial-cluster-token", "ebb-test"])
            .args(if self.auth == Auth::Plain {
                Vec::new()
            } else {
                vec![
                    "--cert-file".to_string(),
                    self.pki.cert.to_string_lossy().into_owned(),
                    "--key-file".to_string(),
                    self.pki.key.to_string_lossy().into_owned(),
                ]
            })
            .args(if self.auth == Auth::ClientCert {
                vec![
                    "--client-cert-auth".to_string(),
                    "--trusted-ca-file".to_string(),
                    self.pki.ca.to_string_lossy().into_owned(),
                ]
            } else {
                Vec::new()
            })
            // etcd's default limits (128 operations and 1.5 MiB a transaction), and quick
            // elections on loopback.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start etcd: {e}"));
        m.child = Some(child);
    }

    /// The process id of member `i`'s etcd (its wrapper's child), while it runs (Linux).
    pub fn member_pid(&self, i: usize) -> Option<u32> {
        let wrapper = self.members[i].child.as_ref()?.id();
        let children =
            std::fs::read_to_string(format!("/proc/{wrapper}/task/{wrapper}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// SIGKILLs member `i`.
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    fn scheme(&self) -> &'static str {
        if self.auth == Auth::Plain {
            "http"
        } else {
            "https"
        }
    }

    /// The other address the members listen on, if any.
    pub fn also_on(&self) -> Option<&str> {
        self.also_on.as_deref()
    }

    /// Every member's client URL, comma-separated.
    pub fn endpoints(&self) -> String {
        self.endpoints_at("127.0.0.1")
    }

    /// Every member's client URL on `address` (127.0.0.1, or the address it was also started
    /// on), comma-separated.
    pub fn endpoints_at(&self, address: &str) -> String {
        self.members
            .iter()
            .map(|m| format!("{}://{address}:{}", self.scheme(), m.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Waits until every running member says it is healthy (it has a leader).
    pub fn wait_healthy(&mut self) {
        assert!(
            self.healthy_within(Duration::from_secs(30)),
            "etcd never became healthy"
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
    }
}

/// Deletes every key of the installation under `prefix` in the shared etcd: the
/// installation's store is gone, as a deleted redb file would be.
pub fn delete_installation(prefix: &str) {
    let prefix = prefix.to_string();
    shared().admin(|mut c| async move {
        c.delete(prefix, Some(DeleteOptions::new().with_prefix()))
            .await
            .map(|_| ())
    });
}

/// How many keys of `cluster` start with `prefix`.
pub fn count_keys(cluster: &Cluster, prefix: &str) -> u64 {
    let prefix = prefix.to_string();
    cluster.admin(|mut c| async move {
        c.get(
            prefix,
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .map(|r| u64::try_from(r.count()).unwrap_or(0))
    })
}
