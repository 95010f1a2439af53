//! Launching a run's program so that it outlives the server, and finding it again.
//!
//! The program is started by a small launcher, `ebb shim <run-dir>`, in its own process
//! group: the shim starts the command, records its pid and start time in `program.json`,
//! waits, and adds the exit status to the same file. Before spawning, the server takes an exclusive lock on
//! `launch.json` (which says what to run) and hands that open file to the shim as its stdin,
//! so the lock is held for exactly as long as the shim lives, whoever its parent is. That
//! makes launching exactly-once across crashes:
//! - lock held by someone else: the shim is alive; re-attach and wait for the lock to free;
//! - lock free and `program.json` has an exit: the program ended; read its status;
//! - lock free, `program.json` without an exit: the shim died; the program is lost;
//! - lock free and neither: nothing was started (the server died before spawning); launch.
//!
//! Signals go to the program's process group only after checking that the recorded pid still
//! has the recorded start time, so a recycled pid is never signalled.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::fence;
use crate::model::run::Exit;

/// What to run; also the lock the shim holds for its whole life.
const LAUNCH: &str = "launch.json";
/// The program's pid, start time and, once it ended, its exit status.
const PROGRAM: &str = "program.json";
/// The program's standard output, in the run directory.
pub const STDOUT: &str = "stdout.log";
/// The program's standard error, in the run directory.
pub const STDERR: &str = "stderr.log";

/// Variables passed from the server's environment to programs and service scripts;
/// everything else comes from their own `env` and ebb's `EBB_*` variables (so a token in the
/// server's environment never reaches them).
const PASSED_ENV: &[&str] = &["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// The server's values of [`PASSED_ENV`] that are set.
pub fn passed_env() -> impl Iterator<Item = (&'static str, std::ffi::OsString)> {
    PASSED_ENV
        .iter()
        .filter_map(|k| Some((*k, std::env::var_os(k)?)))
}

/// What to run, written to `launch.json` for the shim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchFile {
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
}

/// The running program, as the shim records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProgramFile {
    /// `None` when the command could not be started.
    pid: Option<i32>,
    start_ticks: u64,
    exit: Option<Exit>,
    /// Its launcher stopped it: its owner's lease could no longer be confirmed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    fenced: bool,
}

/// What [`start`] found or did.
#[derive(Debug)]
pub enum Started {
    /// Launched now; the shim is our child.
    Child(tokio::process::Child),
    /// Launched earlier and still running (the shim holds the lock).
    Running,
    /// Launched earlier and ended.
    Ended(Exit),
    /// Launched earlier, but the shim died without recording how the program ended.
    Lost,
    /// Launched earlier and stopped by its launcher: its owner's hold on the run could not be
    /// confirmed in time (see [`super::fence`]).
    Fenced,
}

/// The JSON in `path`; `None` when it is missing or torn (a writer died mid-write).
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `value` over `path` with a single write at offset 0, space-padded (still JSON) to
/// at least the file's old length, so no truncation is needed: a process killed at any
/// instant leaves the old or the new content, never a torn one. With `durable`, then syncs
/// the file, and its directory when the file is new, so the record also outlives a crash of
/// the machine: whether a program may have started, and how it ended, decide whether it is
/// launched again.
fn write_json<T: Serialize>(path: &Path, value: &T, durable: Durable) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut json = serde_json::to_vec(value).map_err(io::Error::other)?;
    let existed = path.exists();
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    let previous = file.metadata()?.len() as usize;
    json.resize(json.len().max(previous), b' ');
    file.write_all_at(&json, 0)?;
    if durable == Durable::Yes {
        file.sync_all()?;
        if !existed && let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
    }
    Ok(())
}

/// Whether a record must outlive a crash of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durable {
    Yes,
    /// A crash of the machine ends the program too: nothing depends on the record then.
    No,
}

fn open_lock(run_dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(run_dir.join(LAUNCH))
}

/// Whether the shim of `run_dir` is alive (holds the lock).
fn shim_alive(run_dir: &Path) -> io::Result<bool> {
    let lock = open_lock(run_dir)?;
    match lock.try_lock() {
        Ok(()) => Ok(false),
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

/// How the program of `run_dir` ended, once the shim is gone.
fn ended(run_dir: &Path) -> io::Result<Started> {
    Ok(match read_json::<ProgramFile>(&run_dir.join(PROGRAM))? {
        Some(ProgramFile {
            exit: Some(_),
            fenced: true,
            ..
        }) => Started::Fenced,
        Some(ProgramFile {
            exit: Some(exit), ..
        }) => Started::Ended(exit),
        _ => Started::Lost,
    })
}

/// This build's id (see `build.rs`): `ebb` and `ebb-shim` built from one tree say the same.
pub const BUILD_ID: &str = env!("EBB_BUILD_ID");

/// How `ebb-shim` is asked for its build's id.
pub const BUILD_ID_FLAG: &str = "--build-id";

/// How long `ebb-shim` has to say its build's id.
const BUILD_ID_WAIT: Duration = Duration::from_secs(5);

/// The program launcher for a server whose executable is `ebb`: the small `ebb-shim` built
/// beside it if it is there and of this build (it starts in about half the CPU time and a
/// quarter of the memory of the whole `ebb`, once per run), else `ebb` itself. Either is
/// started as `<exe> shim <run-dir>`. One of another build (left by an earlier `cargo build`
/// when `cargo run` built `ebb` alone) is not used: it would launch programs as that build
/// did.
pub fn launcher(ebb: PathBuf) -> PathBuf {
    let shim = ebb.with_file_name("ebb-shim");
    if !shim.is_file() {
        return ebb;
    }
    match build_of(&shim) {
        Some(id) if id == BUILD_ID => shim,
        found => {
            tracing::warn!(
                shim = %shim.display(),
                shim.build = found.as_deref().unwrap_or("unknown"),
                build = BUILD_ID,
                "the ebb-shim beside this server is of another build: programs are launched by `ebb shim` instead (`cargo build --release` builds both)"
            );
            ebb
        }
    }
}

/// The build id `shim` says, if it says one in time.
fn build_of(shim: &Path) -> Option<String> {
    let mut child = std::process::Command::new(shim)
        .arg(BUILD_ID_FLAG)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let waited = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if waited.elapsed() < BUILD_ID_WAIT => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(None) | Err(_) => break None,
        }
    };
    if !status.is_some_and(|s| s.success()) {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    // What it printed is in the pipe: it has exited.
    let mut out = String::new();
    io::Read::read_to_string(&mut io::Read::take(child.stdout.take()?, 64), &mut out).ok()?;
    Some(out.trim().to_string())
}

/// The variable a program finds its run token in.
pub const RUN_TOKEN_ENV: &str = "EBB_RUN_TOKEN";

/// Launches `launch` with the shim at `exe` in `run_dir`, unless it was launched before; the
/// program gets `run_token` through the shim's environment, never a file. Blocking (small
/// file IO and one spawn).
pub fn start(
    exe: &Path,
    run_dir: &Path,
    launch: &LaunchFile,
    run_token: &str,
) -> io::Result<Started> {
    fs::create_dir_all(run_dir)?;
    let mut lock = open_lock(run_dir)?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(Started::Running),
        Err(TryLockError::Error(e)) => return Err(e),
    }
    if run_dir.join(PROGRAM).exists() {
        return ended(run_dir);
    }
    fs::create_dir_all(&launch.cwd)?;
    // Rewritten on every attempt: an attempt the server died in never reached the spawn.
    lock.set_len(0)?;
    lock.write_all(&serde_json::to_vec(launch).map_err(io::Error::other)?)?;
    lock.seek(SeekFrom::Start(0))?;
    let stdout = File::create(run_dir.join(STDOUT))?;
    let stderr = File::create(run_dir.join(STDERR))?;
    // The shim outlives the server and a program can read its environment: it gets the same
    // clean one as the program, never the server's.
    let child = tokio::process::Command::new(exe)
        .arg("shim")
        .arg(run_dir)
        .env_clear()
        .envs(passed_env())
        .env(RUN_TOKEN_ENV, run_token)
        .stdin(Stdio::from(lock))
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn()?;
    Ok(Started::Child(child))
}

/// Waits until the program of `run_dir` ends; `child` is the shim when we launched it.
pub async fn wait(run_dir: PathBuf, child: Option<tokio::process::Child>) -> io::Result<Started> {
    if let Some(mut child) = child {
        child.wait().await?;
    } else {
        while shim_alive(&run_dir)? {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    ended(&run_dir)
}

/// The start time of process `pid` in clock ticks since boot (field 22 of its stat).
fn start_ticks(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Sends `signal` to the program's process group if the recorded process is still the one the
/// shim started. Returns whether a signal was sent.
fn signal(run_dir: &Path, signal: rustix::process::Signal) -> io::Result<bool> {
    let Some(ProgramFile {
        pid: Some(pid),
        start_ticks: ticks,
        exit: None,
        ..
    }) = read_json::<ProgramFile>(&run_dir.join(PROGRAM))?
    else {
        return Ok(false);
    };
    if start_ticks(pid) != Some(ticks) {
        return Ok(false);
    }
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return Ok(false);
    };
    Ok(rustix::process::kill_process_group(pid, signal).is_ok())
}

/// Stops the program of `run_dir`: SIGTERM to its process group, SIGKILL after `grace`.
/// Returns once the shim is gone (it records the exit).
pub async fn kill(run_dir: PathBuf, grace: Duration) -> io::Result<()> {
    let started = tokio::time::Instant::now();
    let mut termed = false;
    loop {
        if !shim_alive(&run_dir)? && !run_dir.join(LAUNCH).exists() {
            return Ok(()); // never launched
        }
        if !termed {
            termed = signal(&run_dir, rustix::process::Signal::TERM)?;
        } else if started.elapsed() >= grace {
            signal(&run_dir, rustix::process::Signal::KILL)?;
        }
        if !shim_alive(&run_dir)? {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `ebb shim <run-dir>` process: starts the program, records it, waits, records the exit.
/// Returns the shim's exit code.
pub fn shim(run_dir: &Path) -> i32 {
    match shim_inner(run_dir) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ebb shim: {e}");
            let failed = ProgramFile {
                pid: None,
                start_ticks: 0,
                exit: Some(Exit {
                    code: Some(127),
                    signal: None,
                }),
                fenced: false,
            };
            let _ = write_json(&run_dir.join(PROGRAM), &failed, Durable::Yes);
            1
        }
    }
}

fn shim_inner(run_dir: &Path) -> io::Result<()> {
    let launch: LaunchFile = read_json(&run_dir.join(LAUNCH))?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "launch.json is missing"))?;
    let (exe, args) = launch
        .command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the command is empty"))?;
    // Recorded durably before the program can start: after any crash, even of the machine, a
    // record without an exit means "may have run" (lost), never "never ran" (launched again).
    let mut program = ProgramFile {
        pid: None,
        start_ticks: 0,
        exit: None,
        fenced: false,
    };
    write_json(&run_dir.join(PROGRAM), &program, Durable::Yes)?;
    // What the program leaves running (a process it detached with setsid, a daemon) becomes
    // this shim's child when its parent ends, and is stopped with the rest when the program
    // ends: nothing of one run lives on into the next run on its cluster.
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    let mut command = std::process::Command::new(exe);
    command
        .args(args)
        .env_clear()
        .envs(passed_env())
        .envs(&launch.env)
        .envs(std::env::var_os(RUN_TOKEN_ENV).map(|t| (RUN_TOKEN_ENV, t)))
        .current_dir(&launch.cwd)
        .stdin(Stdio::null())
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot start '{exe}': {e}")))?;
    let pid = child.id() as i32;
    program.pid = Some(pid);
    program.start_ticks = start_ticks(pid).unwrap_or(0);
    write_json(&run_dir.join(PROGRAM), &program, Durable::No)?;
    // Fenced (a store of several servers): the program lives while its owner's fence lies
    // ahead of the host's clock.
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fencing = fence::read(run_dir).map(|until| {
        let (run_dir, ended) = (run_dir.to_path_buf(), std::sync::Arc::clone(&ended));
        std::thread::spawn(move || guard(&run_dir, until, pid, &ended))
    });
    let status = child.wait()?;
    ended.store(true, std::sync::atomic::Ordering::SeqCst);
    program.fenced = fencing.and_then(|t| t.join().ok()).unwrap_or(false);
    program.exit = Some(Exit {
        code: status.code(),
        signal: status.signal(),
    });
    write_json(&run_dir.join(PROGRAM), &program, Durable::Yes)?;
    end_leftovers(pid);
    Ok(())
}

/// Watches the fence of `run_dir` (first `until`) until `ended`: once the host's clock has
/// passed it, kills process group `group` and says so. Returns whether it did.
fn guard(
    run_dir: &Path,
    mut until: u64,
    group: i32,
    ended: &std::sync::atomic::AtomicBool,
) -> bool {
    while !ended.load(std::sync::atomic::Ordering::SeqCst) {
        // A fence that cannot be read keeps the last instant read.
        until = fence::read(run_dir).unwrap_or(until);
        if fence::now_ns() >= until {
            if let Some(group) = rustix::process::Pid::from_raw(group) {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
            eprintln!(
                "ebb shim: the program is stopped: its server's ownership of the run could not be confirmed in time (the server was stopped, paused or cut off from etcd), and another server may take the run over"
            );
            return true;
        }
        std::thread::sleep(fence::POLL);
    }
    false
}

/// How long the shim keeps stopping what the program left (each round kills every child it
/// has, then reaps them).
const LEFTOVER_ROUNDS: usize = 500;

/// Stops everything the program left running: its process group, then, round by round, every
/// process whose parent is this shim (a subreaper: the program's orphans, whatever session
/// or group they moved to, are its children), until none is left.
fn end_leftovers(group: i32) {
    use rustix::process::{Pid, Signal, WaitOptions};
    if let Some(group) = Pid::from_raw(group) {
        let _ = rustix::process::kill_process_group(group, Signal::KILL);
    }
    let me = rustix::process::getpid().as_raw_nonzero().get();
    for _ in 0..LEFTOVER_ROUNDS {
        let children = children_of(me);
        if children.is_empty() {
            return;
        }
        for child in children {
            if let Some(pid) = Pid::from_raw(child) {
                let _ = rustix::process::kill_process(pid, Signal::KILL);
            }
        }
        while let Ok(Some(_)) = rustix::process::waitpid(None, WaitOptions::NOHANG) {}
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The processes whose parent is `parent`, from `/proc`.
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rfind(')')
                    .and_then(|i| stat[i + 1..].split_whitespace().nth(1)?.parse::<i32>().ok())
                    == Some(parent)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launch_is_recorded_before_the_program_can_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run_dir = dir.path().join("run");
        fs::create_dir_all(&run_dir).expect("run dir");
        let launch = LaunchFile {
            command: vec![
                "sh".into(),
                "-c".into(),
                "cat \"$RUN/program.json\" > \"$RUN/seen\"".into(),
            ],
            env: [("RUN".to_string(), run_dir.display().to_string())].into(),
            cwd: dir.path().join("work"),
        };
        fs::create_dir_all(&launch.cwd).expect("cwd");
        fs::write(
            run_dir.join(LAUNCH),
            serde_json::to_vec(&launch).expect("json"),
        )
        .expect("launch");
        assert_eq!(shim(&run_dir), 0);
        let seen: ProgramFile =
            serde_json::from_slice(&fs::read(run_dir.join("seen")).expect("seen"))
                .expect("the program found a record of its own launch");
        assert_eq!(seen.exit, None);
        match ended(&run_dir).expect("ended") {
            Started::Ended(exit) => assert_eq!(exit.code, Some(0)),
            other @ (Started::Child(_) | Started::Running | Started::Lost | Started::Fenced) => {
                panic!("{other:?}")
            }
        }
    }

    #[test]
    fn the_small_launcher_is_used_when_it_lies_beside_ebb() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ebb = dir.path().join("ebb");
        fs::write(&ebb, b"").expect("ebb");
        assert_eq!(launcher(ebb.clone()), ebb, "none beside it: ebb itself");
        fs::create_dir(dir.path().join("ebb-shim")).expect("dir");
        assert_eq!(
            launcher(ebb.clone()),
            ebb,
            "a directory of that name is not it"
        );
        fs::remove_dir(dir.path().join("ebb-shim")).expect("rmdir");
        let shim = dir.path().join("ebb-shim");
        let says = |id: &str| {
            // Written aside and renamed in: a file still open for writing cannot be run.
            let aside = dir.path().join("shim.tmp");
            fs::write(
                &aside,
                format!("#!/bin/sh\n[ \"$1\" = {BUILD_ID_FLAG} ] && echo {id}\n"),
            )
            .expect("shim");
            fs::set_permissions(&aside, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("chmod");
            fs::rename(&aside, &shim).expect("rename");
        };
        says(BUILD_ID);
        assert_eq!(launcher(ebb.clone()), shim, "one of this build");
        says("0123456789abcdef");
        assert_eq!(
            launcher(ebb.clone()),
            ebb,
            "one of another build is not used"
        );
        fs::write(&shim, b"").expect("empty");
        assert_eq!(launcher(ebb.clone()), ebb, "nor one that says nothing");
    }

    #[test]
    fn a_launch_cut_off_before_its_pid_is_lost_not_repeated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run_dir = dir.path().join("run");
        fs::create_dir_all(&run_dir).expect("run dir");
        // What a crash right after the launching record, before the spawn, leaves behind.
        let launching = ProgramFile {
            pid: None,
            start_ticks: 0,
            exit: None,
            fenced: false,
        };
        write_json(&run_dir.join(PROGRAM), &launching, Durable::Yes).expect("record");
        let launch = LaunchFile {
            command: vec!["true".into()],
            env: BTreeMap::new(),
            cwd: dir.path().to_path_buf(),
        };
        let exe = Path::new("/nonexistent/ebb");
        assert!(matches!(
            start(exe, &run_dir, &launch, "ebbrun_t").expect("start"),
            Started::Lost
        ));
    }
}
