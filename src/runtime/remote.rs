//! Nodes reached over SSH: service-script attempts and the program run on the node itself.
//!
//! A node is remote when its record carries the `ssh` fact ([`ebb_spi::FACT_SSH`]); its
//! provisioner reported it. The login key and host key policy come from the run's profile
//! (`sshPrivateKey`, resolved from the secure store in memory, `sshHostKeyChecking`,
//! `sshKnownHosts`). Under `accept-new` the host key a node shows at first contact is pinned in
//! its record (`sshHostKey`), and a later connection showing another key is refused.
//!
//! The program runs under a detached wrapper on the master ([`ebb_ssh::remote::launch`]),
//! which records its exit status on the node: a restarted ebb finds it running (or finished)
//! and re-attaches instead of launching it again. Its output is copied into the run's
//! `stdout.log`/`stderr.log` as it comes, from where the local copy ends, so a restart
//! neither loses nor repeats any of it.
//!
//! On a store of several servers the program is fenced, as one on a server's own host is
//! ([`super::fence`]), with one difference: any server can reach the node, so the run's next
//! owner finds the program and watches it on rather than counting it lost. Its guard on the
//! node stops it once no owner has moved its fence on for the owner's lease and
//! [`grace`] more (time for another server to claim the run and log in); each look at the
//! program moves the fence on, while the server looking holds its lease. A server counts a
//! program it cannot reach lost only after [`unreachable_grace`], by when its guard has
//! stopped it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ebb_spi::{FACT_REMOTE_DIR, FACT_SSH_HOST_KEY};
use ebb_ssh::remote::{self, ProgramState};
use ebb_ssh::{Access, Checking, Policy, Session, Target};

use super::deps::Deps;
use crate::model::plan::NodeRecord;
use crate::model::run::Exit;

/// How often a running program is looked at.
const POLL: Duration = Duration::from_secs(1);
/// How long a program may stay "starting" (launched, wrapper not recorded) before it is lost.
const STARTING_GRACE: Duration = Duration::from_secs(30);
/// How long the master may stay unreachable before its program is taken as lost (at least;
/// see [`unreachable_grace`]).
const UNREACHABLE_GRACE: Duration = Duration::from_secs(300);

/// How long past the end of its owner's lease a fenced program on a node may run: three times
/// the lease's time to live, in which another server claims the run (after the lease's end,
/// first the server the run hashes to, after a time to live any) and moves the fence on.
fn grace(ttl: Duration) -> Duration {
    ttl * 3
}

/// How long the master may stay unreachable before its program is taken as lost: long enough
/// that a fenced program's guard has stopped it by then (its fence lies at most a lease and
/// [`grace`] ahead of the last look, and the guard looks every
/// [`remote::GUARD_POLL_CS`]), with [`super::fence::MARGIN`] for the two clocks.
fn unreachable_grace(ttl: Duration) -> Duration {
    UNREACHABLE_GRACE.max(ttl + grace(ttl) + super::fence::MARGIN * 2)
}

/// How far ahead, in hundredths of a second on the node's clock, this server may set the
/// fence of a program now: to the end of its lease and [`grace`] more. `None` on a store of
/// one server (nothing is fenced) and once its lease has passed (another server may hold the
/// run: the fence is left where it is).
fn fence_ahead(deps: &Deps) -> Option<u64> {
    if !deps.store.shared() {
        return None;
    }
    let until = super::fence::until(&deps.store, deps.member.lease())?;
    if until <= super::fence::now_ns() {
        return None;
    }
    centis(ahead(until, deps.member.ttl()))
}

/// How long from now a program on a node may run under a fence of this server's that lies at
/// `until` (the host's monotonic nanoseconds): to it, and [`grace`] more.
pub fn ahead(until: u64, ttl: Duration) -> Duration {
    Duration::from_nanos(until.saturating_sub(super::fence::now_ns())) + grace(ttl)
}

fn centis(d: Duration) -> Option<u64> {
    u64::try_from(d.as_millis() / 10).ok()
}

/// A program its guard on the node stopped: no owner moved its fence on in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced;

/// A remote node: where it is, how to log in, and its directory for the run.
#[derive(Debug, Clone)]
pub struct Node {
    pub access: Access,
    pub target: Target,
    pub checking: Checking,
    pub dir: String,
    pub run: String,
    pub node: String,
}

impl Node {
    /// The remote node `record` of `run`, logging in with the (resolved) `ctx`; `None` when
    /// the node is not reached over SSH.
    pub fn of(
        ctx: &ebb_spi::Context,
        run: &str,
        record: &NodeRecord,
    ) -> Option<Result<Node, String>> {
        record.properties.get(ebb_spi::FACT_SSH)?;
        let access = match Access::from_context(ctx) {
            Ok(a) => a,
            Err(e) => return Some(Err(e.to_string())),
        };
        let (target, checking) = match access.node(&record.properties)? {
            Ok(x) => x,
            Err(e) => return Some(Err(e.to_string())),
        };
        let dir = record
            .properties
            .get(FACT_REMOTE_DIR)
            .cloned()
            .unwrap_or_else(|| ebb_spi::resource::remote_dir(None, run, &record.node));
        Some(Ok(Node {
            access,
            target,
            checking,
            dir,
            run: run.to_string(),
            node: record.node.clone(),
        }))
    }

    /// Logs in; under `accept-new` the key of a first contact is pinned in the node's record.
    pub async fn connect(&self, deps: &Deps) -> Result<Session, String> {
        let session = self
            .access
            .connect(&self.target, self.checking.clone())
            .await
            .map_err(|e| e.to_string())?;
        if self.access.policy() == Policy::AcceptNew && self.checking == Checking::Any {
            let pin = BTreeMap::from([(
                FACT_SSH_HOST_KEY.to_string(),
                session.host_key().to_string(),
            )]);
            super::attempt::merge_properties(deps, &self.run, &self.node, pin)
                .await
                .map_err(|e| format!("cannot pin the host key of {}: {e}", self.target))?;
        }
        Ok(session)
    }
}

/// Kills what an attempt left running when its future is dropped (it timed out).
struct AttemptGuard(Option<(Node, String)>);

impl Drop for AttemptGuard {
    fn drop(&mut self) {
        let Some((node, name)) = self.0.take() else {
            return;
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Ok(session) = node
                    .access
                    .connect(&node.target, node.checking.clone())
                    .await
                {
                    let _ = session
                        .exec(&remote::kill_attempt(&node.dir, &name), b"")
                        .await;
                    session.close().await;
                }
            });
        }
    }
}

/// Runs one service-script attempt on `node`; its output is appended to `log` (the node's
/// log in the run directory). How it ended, or why it could not run and its output.
pub async fn attempt(
    deps: &Deps,
    node: &Node,
    name: &str,
    script: &str,
    cluster_json: &str,
    env: &BTreeMap<String, String>,
    log: &Path,
) -> Result<super::attempt::Ended, (String, String)> {
    let fail = |m: String| (m, String::new());
    let session = node.connect(deps).await.map_err(fail)?;
    let nonce = format!("{:016x}", fastrand::u64(..));
    let text = remote::attempt(&node.dir, name, script, cluster_json, env, &nonce);
    let mut guard = AttemptGuard(Some((node.clone(), name.to_string())));
    let out = session.exec(remote::SH, text.as_bytes()).await;
    guard.0 = None;
    session.close().await;
    let out = out.map_err(|e| fail(e.to_string()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (output, result) = remote::split_attempt_output(&stdout, &nonce);
    let mut output = output;
    let stderr = out.stderr_text();
    if !stderr.is_empty() {
        output = format!("{output}\n{stderr}").trim().to_string();
    }
    let log = log.to_path_buf();
    if !output.is_empty() {
        let line = format!("{output}\n");
        let _ = tokio::task::spawn_blocking(move || append(&log, line.as_bytes())).await;
    }
    let tail = super::attempt::tail_of(&output);
    let status = match out.status {
        Some(n) => format!("exited with exit status: {n} on {}", node.target),
        None => format!("on {} ended without an exit status", node.target),
    };
    Ok(super::attempt::Ended {
        code: out.status.and_then(|n| i32::try_from(n).ok()),
        facts: super::attempt::parse_facts(&result),
        tail,
        status,
    })
}

/// Appends `bytes` to `path` as they are, making its directory if need be.
fn append(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(bytes)
}

/// Bytes of a remote program's output fetched in one call.
const CHUNK: usize = 1 << 20;
/// Calls one look at a running program makes per output file, at most.
const CHUNKS_PER_LOOK: usize = 16;
/// Calls the last look, once it ended, may make: enough for all that is kept.
const CHUNKS_AT_END: usize = (MAX_LOG / CHUNK as u64) as usize + 1;
/// Most bytes of each of a remote program's output files kept per run.
pub const MAX_LOG: u64 = 64 << 20;
/// What ends a kept output file that reached [`MAX_LOG`].
const CUT: &str = "\n[ebb: the output beyond 64 MiB is not kept]\n";

/// The remote program of a run: what to launch and where its output goes locally.
#[derive(Debug, Clone)]
pub struct Program {
    pub node: Node,
    /// The run directory on this host, with `stdout.log` and `stderr.log`.
    pub run_dir: PathBuf,
}

/// What [`Program::launch`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launched {
    /// Started now.
    Now,
    /// Started before (by an earlier ebb, or an attempt a crash cut short).
    Before,
}

impl Program {
    /// Launches the program unless it was launched before; fenced `fence` ahead (see
    /// [`remote::launch`]), when given.
    pub async fn launch(
        &self,
        deps: &Deps,
        command: &[String],
        env: &BTreeMap<String, String>,
        cluster_json: &str,
        fence: Option<Duration>,
    ) -> Result<Launched, String> {
        let session = self.node.connect(deps).await?;
        let fence = fence.and_then(centis);
        let text = remote::launch(&self.node.dir, command, env, None, cluster_json, fence);
        let said = session
            .exec(remote::SH, text.as_bytes())
            .await
            .map_err(|e| e.to_string());
        session.close().await;
        let out = said?;
        match out.stdout_text().as_str() {
            "launched" => Ok(Launched::Now),
            "already" => Ok(Launched::Before),
            _ => Err(format!(
                "cannot launch the program on {}: {}",
                self.node.target,
                out.failure()
            )),
        }
    }

    /// Copies the program's new output into the run directory: [`CHUNK`] bytes a call, at
    /// most `calls` calls per file, at most [`MAX_LOG`] per file per run (then a note says
    /// the rest is not kept).
    async fn copy_output(&self, session: &Session, calls: usize) -> Result<(), String> {
        for name in [super::program::STDOUT, super::program::STDERR] {
            let local = self.run_dir.join(name);
            for _ in 0..calls {
                let have = std::fs::metadata(&local).map(|m| m.len()).unwrap_or(0);
                if have >= MAX_LOG {
                    break;
                }
                let want = CHUNK.min(usize::try_from(MAX_LOG - have).unwrap_or(CHUNK));
                let out = session
                    .exec(&remote::output_since(&self.node.dir, name, have, want), b"")
                    .await
                    .map_err(|e| e.to_string())?;
                let mut bytes = out.stdout;
                bytes.truncate(want);
                let got = bytes.len();
                if have + got as u64 >= MAX_LOG {
                    bytes.extend_from_slice(CUT.as_bytes());
                }
                if !bytes.is_empty() {
                    let local = local.clone();
                    tokio::task::spawn_blocking(move || append(&local, &bytes))
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| e.to_string())?;
                }
                if got < want {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Waits until the program ends, copying its output as it comes, and moving its fence on
    /// at each look while this server holds its lease; [`Fenced`] when its guard stopped it.
    pub async fn wait(&self, deps: &Deps) -> Result<Exit, Fenced> {
        let lost = Exit {
            code: None,
            signal: None,
        };
        let mut session: Option<Session> = None;
        let mut unreachable_since: Option<tokio::time::Instant> = None;
        let mut starting_since: Option<tokio::time::Instant> = None;
        loop {
            if session.is_none() {
                match self.node.connect(deps).await {
                    Ok(s) => {
                        session = Some(s);
                        unreachable_since = None;
                    }
                    Err(e) => {
                        let since =
                            *unreachable_since.get_or_insert_with(tokio::time::Instant::now);
                        tracing::warn!(run.id = %self.node.run, error = %e, "cannot reach the program's node");
                        if since.elapsed() > unreachable_grace(deps.member.ttl()) {
                            return Ok(lost);
                        }
                        tokio::time::sleep(POLL * 5).await;
                        continue;
                    }
                }
            }
            let Some(s) = session.as_ref() else { continue };
            let mut look = remote::status(&self.node.dir);
            if let Some(ahead) = fence_ahead(deps) {
                look = format!("{}{look}", remote::renew(&self.node.dir, ahead));
            }
            let looked = async {
                let out = s.exec(&look, b"").await.map_err(|e| e.to_string())?;
                self.copy_output(s, CHUNKS_PER_LOOK).await?;
                Ok::<_, String>(remote::parse_status(&out.stdout_text()))
            }
            .await;
            match looked {
                Err(e) => {
                    tracing::warn!(run.id = %self.node.run, error = %e, "lost the connection to the program's node");
                    if let Some(s) = session.take() {
                        s.close().await;
                    }
                    continue;
                }
                Ok(Some(ProgramState::Exited(status))) => {
                    return self.ended(&mut session, Ok(exit_of(status))).await;
                }
                Ok(Some(ProgramState::Fenced)) => {
                    return self.ended(&mut session, Err(Fenced)).await;
                }
                Ok(Some(ProgramState::Lost | ProgramState::None)) => return Ok(lost),
                Ok(Some(ProgramState::Starting)) => {
                    let since = *starting_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() > STARTING_GRACE {
                        return Ok(lost);
                    }
                }
                Ok(Some(ProgramState::Running)) | Ok(None) => {}
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// How the program ended (`how`), once whatever it wrote last is copied and `session` is
    /// closed.
    async fn ended<T>(&self, session: &mut Option<Session>, how: T) -> T {
        if let Some(s) = session.take() {
            let _ = self.copy_output(&s, CHUNKS_AT_END).await;
            s.close().await;
        }
        how
    }

    /// Stops the program: SIGTERM to its process group, SIGKILL after `grace`.
    pub async fn kill(&self, deps: &Deps, grace: Duration) -> Result<(), String> {
        let session = self.node.connect(deps).await?;
        let started = tokio::time::Instant::now();
        let result = async {
            session
                .exec(&remote::signal(&self.node.dir, "TERM"), b"")
                .await
                .map_err(|e| e.to_string())?;
            loop {
                let out = session
                    .exec(&remote::status(&self.node.dir), b"")
                    .await
                    .map_err(|e| e.to_string())?;
                match remote::parse_status(&out.stdout_text()) {
                    Some(ProgramState::Running | ProgramState::Starting) => {}
                    None
                    | Some(
                        ProgramState::None
                        | ProgramState::Exited(_)
                        | ProgramState::Lost
                        | ProgramState::Fenced,
                    ) => {
                        return Ok(());
                    }
                }
                if started.elapsed() >= grace {
                    session
                        .exec(&remote::signal(&self.node.dir, "KILL"), b"")
                        .await
                        .map_err(|e| e.to_string())?;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        .await;
        session.close().await;
        result
    }
}

/// A shell's `$?` as an exit: 128+N is signal N.
fn exit_of(status: i32) -> Exit {
    if (129..=128 + 64).contains(&status) {
        Exit {
            code: None,
            signal: Some(status - 128),
        }
    } else {
        Exit {
            code: Some(status),
            signal: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_above_128_are_signals() {
        assert_eq!(exit_of(0).code, Some(0));
        assert_eq!(exit_of(7).code, Some(7));
        assert_eq!(exit_of(143).signal, Some(15));
        assert_eq!(exit_of(255).code, Some(255));
    }
}
