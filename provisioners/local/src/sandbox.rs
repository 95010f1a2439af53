//! Sandboxes on this host: one directory and one loopback address per node.
//!
//! A sandbox lives at `<root>/<run>/<node>` with a `node.json` describing it; its id is
//! `<run>/<node>`, so the identity is deterministic and a repeated create finds the first one.
//! Addresses are taken from 127.0.1.1 upwards, skipping those held by live sandboxes, under an
//! exclusive lock on the root, and claimed host-wide: a claim is a file named after the
//! address in the user's claims directory (`$EBB_LOOPBACK_DIR`, else
//! `<tmp>/ebb-loopback-<uid>`) holding the sandbox's directory, so two servers on one host
//! (or two test servers at once) never give two live nodes one address, and the engines on
//! them can bind the same ports side by side. A claim whose sandbox is gone is taken over. Processes started in a sandbox carry `EBB_WORK_DIR=<dir>` in
//! their environment; deleting the sandbox stops every such process before removing the
//! directory. Blocking IO throughout.
//!
//! What is listed and deleted is only what ebb made: a sandbox's run and node directories
//! must be real directories (never a symbolic link) of the server's user, and its
//! `node.json` a regular file whose id names the directory it lies in. Anything else under
//! the root (a link planted to another directory, another user's directory, a record that
//! claims another sandbox's id) is neither listed nor deleted.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ebb_spi::{ProvisionError, Resource, ResourceKey, ResourceState, Tags};
use serde::{Deserialize, Serialize};

/// Environment variable that marks a process as started in a sandbox.
pub const WORK_DIR_ENV: &str = "EBB_WORK_DIR";

/// How long deleting a sandbox waits for its processes to stop after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// `node.json`: what a sandbox is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub id: String,
    pub tags: Tags,
    pub address: Ipv4Addr,
    pub dir: PathBuf,
    pub created_at: u64,
}

impl Node {
    pub fn resource(&self) -> Resource {
        let dir = self.dir.display().to_string();
        Resource {
            id: self.id.clone(),
            state: ResourceState::Running,
            tags: self.tags.clone(),
            address: Some(self.address.to_string()),
            properties: [("workDir".to_string(), dir)].into_iter().collect(),
        }
    }
}

fn io(what: &str, path: &Path, e: std::io::Error) -> ProvisionError {
    ProvisionError::retryable(format!("{what} {}: {e}", path.display()))
}

/// The sandboxes under one root directory.
#[derive(Debug, Clone)]
pub struct Sandboxes {
    root: PathBuf,
    /// Where addresses are claimed host-wide.
    claims: PathBuf,
}

/// The environment variable that moves the claims directory.
pub const CLAIMS_ENV: &str = "EBB_LOOPBACK_DIR";

/// The user's claims directory.
fn default_claims() -> PathBuf {
    std::env::var_os(CLAIMS_ENV).map_or_else(
        || {
            let uid = rustix::process::geteuid().as_raw();
            std::env::temp_dir().join(format!("ebb-loopback-{uid}"))
        },
        PathBuf::from,
    )
}

impl Sandboxes {
    pub fn new(root: PathBuf) -> Self {
        Self::with_claims(root, default_claims())
    }

    /// Sandboxes under `root` whose addresses are claimed in `claims`.
    pub fn with_claims(root: PathBuf, claims: PathBuf) -> Self {
        Self { root, claims }
    }

    /// Locks the claims directory (made owner-only if missing; one that is a link or not the
    /// user's own is refused).
    fn lock_claims(&self) -> Result<File, ProvisionError> {
        use std::os::unix::fs::DirBuilderExt as _;
        match fs::DirBuilder::new().mode(0o700).create(&self.claims) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io("cannot create", &self.claims, e)),
        }
        if !own_dir(&self.claims) {
            return Err(ProvisionError::fatal(format!(
                "{} (where local nodes claim their loopback addresses) is not a directory of the server's user: remove it, or set {CLAIMS_ENV} to another",
                self.claims.display()
            )));
        }
        lock_in(&self.claims)
    }

    /// The addresses claimed by live sandboxes anywhere on this host (under any root).
    fn claimed(&self) -> Result<BTreeSet<Ipv4Addr>, ProvisionError> {
        let entries = fs::read_dir(&self.claims).map_err(|e| io("cannot list", &self.claims, e))?;
        let mut out = BTreeSet::new();
        for entry in entries.flatten() {
            let Some(address) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<Ipv4Addr>().ok())
            else {
                continue;
            };
            let Ok(holder) = fs::read_to_string(entry.path()) else {
                continue;
            };
            let record = Path::new(holder.trim()).join("node.json");
            let live = fs::read(&record)
                .ok()
                .and_then(|b| serde_json::from_slice::<Node>(&b).ok())
                .is_some_and(|n| n.address == address);
            if live {
                out.insert(address);
            }
        }
        Ok(out)
    }

    /// Claims `address` for the sandbox in `dir`.
    fn claim(&self, address: Ipv4Addr, dir: &Path) -> Result<(), ProvisionError> {
        let path = self.claims.join(address.to_string());
        let tmp = self.claims.join(format!(".{address}.tmp"));
        fs::write(&tmp, dir.display().to_string()).map_err(|e| io("cannot write", &tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| io("cannot write", &path, e))
    }

    /// Gives up the claim on `address` if the sandbox in `dir` holds it.
    fn release(&self, address: Ipv4Addr, dir: &Path) {
        let path = self.claims.join(address.to_string());
        let Ok(_lock) = self.lock_claims() else {
            return;
        };
        if fs::read_to_string(&path).is_ok_and(|h| Path::new(h.trim()) == dir) {
            let _ = fs::remove_file(&path);
        }
    }

    /// The directory of sandbox `id` (`<run>/<node>`), refusing ids that could escape the root.
    fn dir(&self, id: &str) -> Result<PathBuf, ProvisionError> {
        let parts: Vec<&str> = id.split('/').collect();
        let safe = |p: &&str| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if parts.len() != 2 || !parts.iter().all(safe) {
            return Err(ProvisionError::fatal(format!(
                "'{id}' is not a local sandbox id (<run>/<node>)"
            )));
        }
        Ok(self.root.join(parts[0]).join(parts[1]))
    }

    fn lock(&self) -> Result<File, ProvisionError> {
        fs::create_dir_all(&self.root).map_err(|e| io("cannot create", &self.root, e))?;
        lock_in(&self.root)
    }

    /// The sandbox in `dir` (`<root>/<run>/<node>`), if ebb made one there: the directories
    /// are the server user's own and no link, and the record names this directory.
    fn read(&self, dir: &Path) -> Result<Option<Node>, ProvisionError> {
        let (Some(node), Some(run_dir)) = (dir.file_name(), dir.parent()) else {
            return Ok(None);
        };
        let Some(run) = run_dir.file_name() else {
            return Ok(None);
        };
        if !own_dir(run_dir) || !own_dir(dir) {
            return Ok(None);
        }
        let path = dir.join("node.json");
        if fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_file()) {
            return Ok(None);
        }
        let id = format!("{}/{}", run.to_string_lossy(), node.to_string_lossy());
        Ok(self
            .read_record(&path)?
            .filter(|n| n.id == id && n.dir == dir))
    }

    fn read_record(&self, path: &Path) -> Result<Option<Node>, ProvisionError> {
        match fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                ProvisionError::fatal(format!("{} is unreadable: {e}", path.display()))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("cannot read", path, e)),
        }
    }

    /// Every live sandbox.
    pub fn list(&self) -> Result<Vec<Node>, ProvisionError> {
        let mut out = Vec::new();
        let runs = match fs::read_dir(&self.root) {
            Ok(runs) => runs,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io("cannot list", &self.root, e)),
        };
        for run in runs.flatten() {
            let Ok(nodes) = fs::read_dir(run.path()) else {
                continue;
            };
            for node in nodes.flatten() {
                if let Some(found) = self.read(&node.path())? {
                    out.push(found);
                }
            }
        }
        Ok(out)
    }

    /// Creates the sandbox of `key`, carrying `tags` (the key's and the framework's labels),
    /// or returns it if it exists.
    pub fn create(&self, key: &ResourceKey, tags: Tags) -> Result<Resource, ProvisionError> {
        let id = format!("{}/{}", key.run, key.node);
        let dir = self.dir(&id)?;
        let _lock = self.lock()?;
        if let Some(node) = self.read(&dir)? {
            return Ok(node.resource());
        }
        let _claims = self.lock_claims()?;
        let mut taken: BTreeSet<Ipv4Addr> = self.list()?.into_iter().map(|n| n.address).collect();
        taken.extend(self.claimed()?);
        let address = (1u32..)
            .map(|i| Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 0, 1, 0)) + i))
            .find(|a| !taken.contains(a))
            .expect("127.0.0.0/8 has room for every sandbox this host can hold");
        fs::create_dir_all(&dir).map_err(|e| io("cannot create", &dir, e))?;
        if !dir.parent().is_some_and(own_dir) || !own_dir(&dir) {
            return Err(ProvisionError::fatal(format!(
                "{} is not a directory of the server's user (a symbolic link planted there?): no sandbox is made in it",
                dir.display()
            )));
        }
        // Claimed before the record is written: a crash between the two leaves a claim whose
        // sandbox is not live, which the next create takes over.
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        self.claim(address, &dir)?;
        let node = Node {
            id,
            tags,
            address,
            dir: dir.clone(),
            created_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        };
        let tmp = dir.join(".node.json.tmp");
        let bytes = serde_json::to_vec_pretty(&node).expect("a node serializes");
        fs::write(&tmp, bytes).map_err(|e| io("cannot write", &tmp, e))?;
        fs::rename(&tmp, dir.join("node.json")).map_err(|e| io("cannot write", &tmp, e))?;
        Ok(node.resource())
    }

    /// The sandbox of `key`, if it exists.
    pub fn find(&self, key: &ResourceKey) -> Result<Option<Resource>, ProvisionError> {
        let dir = self.dir(&format!("{}/{}", key.run, key.node))?;
        Ok(self.read(&dir)?.map(|n| n.resource()))
    }

    /// Sandbox `id`, if it exists.
    pub fn describe(&self, id: &str) -> Result<Option<Resource>, ProvisionError> {
        Ok(self.read(&self.dir(id)?)?.map(|n| n.resource()))
    }

    /// Stops every process started in sandbox `id` and removes it. Gone already is fine;
    /// a directory ebb did not make there (a link, another user's) is refused, never
    /// followed.
    pub fn delete(&self, id: &str) -> Result<(), ProvisionError> {
        let dir = self.dir(id)?;
        let run_dir = dir.parent().unwrap_or(&self.root);
        if fs::symlink_metadata(&dir).is_err() {
            return Ok(());
        }
        if !own_dir(run_dir) || !own_dir(&dir) {
            return Err(ProvisionError::fatal(format!(
                "{} is not a sandbox directory ebb made (a symbolic link, or not the server user's own): left alone",
                dir.display()
            )));
        }
        stop_processes_in(&dir);
        let address = self.read(&dir)?.map(|n| n.address);
        // node.json goes first, so a crash half-way leaves nothing that looks live.
        match fs::remove_file(dir.join("node.json")) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("cannot remove", &dir, e)),
        }
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("cannot remove", &dir, e)),
        }
        if let Some(address) = address {
            self.release(address, &std::path::absolute(&dir).unwrap_or(dir.clone()));
        }
        if let Some(run_dir) = dir.parent() {
            let _ = fs::remove_dir(run_dir); // only succeeds once the run's last node is gone
        }
        Ok(())
    }
}

/// An exclusive lock on `dir/.lock` (made if missing), held while the file is open.
fn lock_in(dir: &Path) -> Result<File, ProvisionError> {
    let path = dir.join(".lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io("cannot open", &path, e))?;
    file.lock().map_err(|e| io("cannot lock", &path, e))?;
    Ok(file)
}

/// Whether `path` is a directory of the server's user, and no symbolic link.
fn own_dir(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    fs::symlink_metadata(path)
        .is_ok_and(|m| m.file_type().is_dir() && m.uid() == rustix::process::geteuid().as_raw())
}

/// Pids of the processes whose environment says they were started in `dir`.
pub fn processes_in(dir: &Path) -> Vec<i32> {
    let marker = format!("{WORK_DIR_ENV}={}", dir.display()).into_bytes();
    let Ok(procs) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == marker.as_slice()))
        })
        .collect()
}

fn signal(pid: i32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// SIGTERM to every process started in `dir`, SIGKILL to those still there after a grace.
/// Returns once two scans in a row find none, so a process missed by one scan of a busy
/// `/proc` is caught by the next.
fn stop_processes_in(dir: &Path) {
    let deadline = Instant::now() + STOP_GRACE;
    let mut quiet_scans = 0;
    while quiet_scans < 2 {
        let pids = processes_in(dir);
        if pids.is_empty() {
            quiet_scans += 1;
        } else {
            quiet_scans = 0;
            let sig = if Instant::now() < deadline {
                rustix::process::Signal::TERM
            } else {
                rustix::process::Signal::KILL
            };
            for pid in pids {
                signal(pid, sig);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(node: &str) -> ResourceKey {
        ResourceKey::new("r1", node)
    }

    #[test]
    fn creates_once_with_distinct_addresses_and_deletes() {
        let root = tempfile::tempdir().expect("tempdir");
        let sandboxes =
            Sandboxes::with_claims(root.path().to_path_buf(), root.path().join("claims"));
        let a = sandboxes
            .create(&key("master"), key("master").tags())
            .expect("create");
        let again = sandboxes
            .create(&key("master"), key("master").tags())
            .expect("create again");
        let b = sandboxes
            .create(&key("worker-1"), key("worker-1").tags())
            .expect("create worker");
        assert_eq!(a, again, "a repeated create finds the first sandbox");
        assert_ne!(a.address, b.address);
        assert_eq!(a.address.as_deref(), Some("127.0.1.1"));
        assert_eq!(
            sandboxes.find(&key("worker-1")).expect("find"),
            Some(b.clone())
        );
        assert_eq!(sandboxes.list().expect("list").len(), 2);

        let dir = PathBuf::from(&a.properties["workDir"]);
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .env(WORK_DIR_ENV, &dir)
            .spawn()
            .expect("spawn sleep");
        sandboxes.delete(&a.id).expect("delete");
        let stopped = (0..500).find_map(|_| {
            std::thread::sleep(Duration::from_millis(10));
            child.try_wait().expect("try_wait")
        });
        let _ = child.kill();
        let status = stopped.expect("the sandbox's process was stopped");
        assert!(!status.success(), "ended by a signal: {status:?}");
        assert!(!dir.exists());
        assert_eq!(sandboxes.describe(&a.id).expect("describe"), None);
        sandboxes.delete(&a.id).expect("deleting again succeeds");
        assert!(sandboxes.dir("../x").is_err());
    }

    #[test]
    fn two_roots_on_one_host_never_share_an_address() {
        let claims = tempfile::tempdir().expect("tempdir");
        let (one, two) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let first = Sandboxes::with_claims(one.path().to_path_buf(), claims.path().to_path_buf());
        let second = Sandboxes::with_claims(two.path().to_path_buf(), claims.path().to_path_buf());
        let a = first
            .create(&key("master"), key("master").tags())
            .expect("create");
        let b = second
            .create(&key("master"), key("master").tags())
            .expect("create");
        assert_eq!(a.address.as_deref(), Some("127.0.1.1"));
        assert_eq!(b.address.as_deref(), Some("127.0.1.2"));
        // A deleted sandbox gives its address back.
        first.delete(&a.id).expect("delete");
        let c = second
            .create(&key("worker-1"), key("worker-1").tags())
            .expect("create");
        assert_eq!(c.address.as_deref(), Some("127.0.1.1"));
        // A claim whose sandbox went without a delete (its root removed) is taken over.
        drop(two);
        let d = first
            .create(&key("worker-2"), key("worker-2").tags())
            .expect("create");
        assert_eq!(d.address.as_deref(), Some("127.0.1.1"));
    }

    /// Writes a `node.json` in `dir` that claims sandbox `id`, as someone planting one would.
    fn plant(dir: &Path, id: &str) {
        fs::create_dir_all(dir).expect("mkdir");
        let node = Node {
            id: id.into(),
            tags: key("n").tags(),
            address: Ipv4Addr::new(127, 0, 1, 9),
            dir: dir.to_path_buf(),
            created_at: 0,
        };
        fs::write(
            dir.join("node.json"),
            serde_json::to_vec(&node).expect("json"),
        )
        .expect("write");
        fs::write(dir.join("keep"), "precious").expect("write");
    }

    #[test]
    fn only_what_ebb_made_is_listed_or_deleted() {
        let root = tempfile::tempdir().expect("tempdir");
        let victim = tempfile::tempdir().expect("tempdir");
        let sandboxes =
            Sandboxes::with_claims(root.path().to_path_buf(), root.path().join("claims"));
        // A run directory that is a link to someone else's directory.
        plant(&victim.path().join("n1"), "evil/n1");
        std::os::unix::fs::symlink(victim.path(), root.path().join("evil")).expect("symlink");
        // A record that claims another sandbox's id.
        plant(&root.path().join("a").join("b"), "c/d");
        plant(&root.path().join("c").join("d"), "c/d-other");
        assert_eq!(sandboxes.list().expect("list"), Vec::<Node>::new());
        let err = sandboxes
            .delete("evil/n1")
            .expect_err("a link is not followed");
        assert!(
            err.message.contains("not a sandbox directory ebb made"),
            "{err:?}"
        );
        assert!(victim.path().join("n1").join("keep").exists());
        // A run directory that is a link: nothing is made through it either.
        let made = sandboxes.create(
            &ResourceKey::new("evil", "n2"),
            ResourceKey::new("evil", "n2").tags(),
        );
        assert!(made.is_err(), "{made:?}");
        // Another user's directory, as root can make one.
        if rustix::process::geteuid().is_root() {
            let theirs = root.path().join("o").join("n");
            plant(&theirs, "o/n");
            std::os::unix::fs::chown(&theirs, Some(65534), None).expect("chown");
            assert!(sandboxes.list().expect("list").is_empty());
            assert!(sandboxes.delete("o/n").is_err());
            assert!(theirs.join("keep").exists());
        } else {
            eprintln!("not root: another user's directory cannot be made here, so not checked");
        }
        // What ebb made is still listed and deleted.
        let made = sandboxes
            .create(&key("master"), key("master").tags())
            .expect("create");
        assert_eq!(sandboxes.list().expect("list").len(), 1);
        sandboxes.delete(&made.id).expect("delete");
    }
}
