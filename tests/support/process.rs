//! Child processes the tests start: killed when dropped, and the stand-ins that print the port
//! they listen on as their first line. Standard library only, so that a provisioner crate's own
//! tests can include this file too (`#[path]`).
// Each crate that includes this file uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A child process, killed (and reaped) when dropped.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` with its stdout piped and waits up to `limit` for its first line, which must be
/// `{prefix}{port}`; returns the process and `http://127.0.0.1:{port}`. Panics saying what the
/// process printed if it does not.
pub fn start_listener(mut cmd: Command, prefix: &str, limit: Duration) -> (Process, String) {
    let mut child = Process(
        cmd.stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}")),
    );
    let stdout = child.0.stdout.take().expect("stdout piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut first = String::new();
        let _ = BufReader::new(stdout).read_line(&mut first);
        let _ = tx.send(first);
    });
    let line = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{cmd:?} did not start within {limit:?}"));
    let port = line
        .trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{cmd:?} said {line:?}"));
    (child, format!("http://127.0.0.1:{port}"))
}

/// Runs `script` (under the repository `root`), which installs what some tests need when it is
/// missing; fails saying why those tests cannot run if it cannot.
pub fn ensure_installed(root: &Path, script: &str, what: &str) {
    let out = Command::new("sh")
        .arg(root.join(script))
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "these tests need {what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs setup `script` (under the repository `root`), which makes a virtualenv with what
/// some tests need and prints its python; fails saying these tests need `what` when it
/// cannot.
pub fn python_from(root: &Path, script: &str, what: &str) -> PathBuf {
    let out = Command::new(root.join(script))
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} failed ({}): these tests need {what}",
        out.status
    );
    PathBuf::from(String::from_utf8(out.stdout).expect("utf-8").trim())
}

/// Starts the moto server (`tests/support/moto/server.py` under the repository `root`), the
/// EC2 stand-in, from the virtualenv `tests/support/moto/setup.sh` makes: it installs moto the
/// first time, and the test fails loudly if it cannot.
pub fn start_moto(root: &Path) -> (Process, String) {
    let support = root.join("tests/support/moto");
    let python = python_from(
        root,
        "tests/support/moto/setup.sh",
        "python3 with venv and PyPI access to install moto[server]",
    );
    let mut cmd = Command::new(python);
    cmd.arg(support.join("server.py")).stderr(Stdio::null());
    start_listener(cmd, "listening ", Duration::from_secs(90))
}

/// The processes whose environment says they were started in a sandbox under `dir`
/// (`EBB_WORK_DIR=<dir>/...`, or a program's `EBB_PROGRAM_MARK=<dir>/...`): each pid with its
/// command line (arguments joined by spaces).
pub fn started_under(dir: &Path) -> Vec<(i32, String)> {
    // A daemon's or a script's environment names its sandbox; a program's (its own and what it
    // started, a Spark driver say) names its mark file there.
    let markers: Vec<Vec<u8>> = ["EBB_WORK_DIR", "EBB_PROGRAM_MARK"]
        .iter()
        .map(|var| format!("{var}={}/", dir.display()).into_bytes())
        .collect();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|v| markers.iter().any(|m| v.starts_with(m)))
            })
        })
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let words: Vec<String> = cmdline
                .split(|b| *b == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect();
            (pid, words.join(" "))
        })
        .collect()
}

/// SIGKILLs every process whose environment says it was started in a `local` sandbox under
/// `dir` (`EBB_WORK_DIR=<dir>/...`), until a scan finds none.
pub fn end_started_under(dir: &Path) {
    for _ in 0..20 {
        let found = started_under(dir);
        if found.is_empty() {
            return;
        }
        for (pid, _) in found {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
