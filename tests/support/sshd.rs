//! A real OpenSSH server for tests: Debian's `sshd` on a free port of several loopback
//! addresses (each one a "machine"), with a fresh host key and a client key it accepts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::process::Process;

/// A running sshd. Killed when dropped.
pub struct Sshd {
    _process: Process,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub addresses: Vec<String>,
    pub user: String,
    /// The client's private key (OpenSSH format), which sshd accepts for `user`.
    pub client_key: String,
    /// The host's public key: `type base64`.
    pub host_key: String,
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Installs sshd when missing (tests/support/sshd/setup.sh), or fails saying why.
fn ensure_installed() {
    super::process::ensure_installed(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        "tests/support/sshd/setup.sh",
        "OpenSSH's server",
    );
}

fn keygen(path: &Path) {
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "ebb-test", "-f"])
        .arg(path));
}

fn free_port(address: &str) -> u16 {
    std::net::TcpListener::bind((address, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Sshd {
    /// Starts sshd listening on `addresses` (e.g. 127.0.1.11): one port on each.
    pub fn start(addresses: &[&str]) -> Sshd {
        Sshd::start_in(None, addresses)
    }

    /// Starts sshd in network namespace `space` (`ip netns exec`) when given one, listening
    /// on `addresses` there (which the host reaches).
    pub fn start_in(space: Option<&str>, addresses: &[&str]) -> Sshd {
        ensure_installed();
        let dir = tempfile::tempdir().expect("tempdir");
        let host_key = dir.path().join("host_key");
        let client_key = dir.path().join("client_key");
        keygen(&host_key);
        keygen(&client_key);
        let authorized = dir.path().join("authorized_keys");
        std::fs::copy(client_key.with_extension("pub"), &authorized).expect("authorized_keys");
        let user = run(Command::new("id").arg("-un"));
        if run(Command::new("id").arg("-u")) == "0" {
            std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        }
        for _ in 0..5 {
            // A namespace of a test's own has every port free.
            let port = free_port(if space.is_some() {
                "127.0.0.1"
            } else {
                addresses[0]
            });
            let config = dir.path().join("sshd_config");
            let mut text = format!(
                "Port {port}\nHostKey {}\nAuthorizedKeysFile {}\nPidFile {}\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 StrictModes no\nPermitRootLogin prohibit-password\nMaxStartups 100\n\
                 MaxSessions 100\nLogLevel VERBOSE\n",
                host_key.display(),
                authorized.display(),
                dir.path().join("sshd.pid").display(),
            );
            for a in addresses {
                text.push_str(&format!("ListenAddress {a}\n"));
            }
            std::fs::write(&config, text).expect("sshd_config");
            let log = std::fs::File::create(dir.path().join("sshd.log")).expect("log");
            let mut command = match space {
                Some(space) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", space, "/usr/sbin/sshd"]);
                    c
                }
                None => Command::new("/usr/sbin/sshd"),
            };
            let mut child = Process(
                command
                    .args(["-D", "-e", "-f"])
                    .arg(&config)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("sshd starts"),
            );
            let started = Instant::now();
            let up = loop {
                if let Ok(Some(_)) = child.0.try_wait() {
                    break false; // the port was taken meanwhile; try another
                }
                if addresses
                    .iter()
                    .all(|a| std::net::TcpStream::connect((*a, port)).is_ok())
                {
                    break true;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "sshd did not listen: {}",
                    std::fs::read_to_string(dir.path().join("sshd.log")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(20));
            };
            if up {
                let pubkey = std::fs::read_to_string(host_key.with_extension("pub")).expect("pub");
                let host_key = pubkey
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ");
                return Sshd {
                    _process: child,
                    port,
                    addresses: addresses.iter().map(|a| a.to_string()).collect(),
                    user,
                    client_key: std::fs::read_to_string(&client_key).expect("key"),
                    host_key,
                    dir,
                };
            }
        }
        panic!(
            "sshd did not start: {}",
            std::fs::read_to_string(dir.path().join("sshd.log")).unwrap_or_default()
        );
    }

    /// The `hosts` property: `user@address:port` for each address.
    pub fn hosts(&self) -> String {
        self.addresses
            .iter()
            .map(|a| format!("{}@{a}:{}", self.user, self.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `known_hosts` lines for every address.
    pub fn known_hosts(&self) -> String {
        self.addresses
            .iter()
            .map(|a| format!("[{a}]:{} {}\n", self.port, self.host_key))
            .collect()
    }

    /// A directory the "machines" keep the runs' directories in.
    pub fn remote_dir(&self) -> PathBuf {
        self.dir.path().join("remote")
    }

    /// What sshd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}
