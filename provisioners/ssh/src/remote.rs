//! The shell that runs on a remote node: one service-script attempt, and a program that
//! outlives the connection (and ebb) and is found again after a restart.
//!
//! Everything is POSIX `sh` plus `setsid` (util-linux), which every Linux machine has. Files
//! travel inside the script as here-documents fed on standard input to `sh -s`, so nothing
//! is limited by the length of a command line. The node's directory for the run (`D`) holds:
//! - for service scripts, `scripts/<service>.<action>.sh`, `cluster.json` and `logs/`, and
//!   per attempt name `attempts/<service>.<action>.pid` and `.result`: a check runs beside a
//!   task or another service's check without touching their files;
//! - `program/` for the program: `launch.sh` (what to run), `launched/` (made exactly once,
//!   just before the program starts), `wrapper.pid`, `pid` (the program's process group),
//!   `stdout.log`, `stderr.log` and `exit` (its status, written by the wrapper when it ends);
//!   a fenced program also `fence` (until when it may run, on the node's own clock),
//!   `guard.sh` (what stops it then) and, once stopped so, `fenced`.

use std::collections::BTreeMap;

use crate::quote;

/// The command that reads a script on standard input.
pub const SH: &str = "sh -s";

/// Appends `cat > path <<'DELIM' ... DELIM` writing `content` to `path` (relative to the
/// script's directory).
fn write_file(script: &mut String, path: &str, content: &str) {
    let mut delim = String::from("EBB_EOF");
    while content.contains(&delim) {
        delim.push('_');
    }
    script.push_str(&format!("cat > {} <<'{delim}'\n", quote(path)));
    script.push_str(content);
    if !content.ends_with('\n') {
        script.push('\n');
    }
    script.push_str(&delim);
    script.push('\n');
}

fn exports(script: &mut String, env: &BTreeMap<String, String>) {
    for (k, v) in env {
        script.push_str(&format!("export {k}={}\n", quote(v)));
    }
}

/// The line that separates a script attempt's output from its result file.
pub fn result_marker(nonce: &str) -> String {
    format!("--ebb-result-{nonce}--")
}

/// One attempt of a service script in `dir`: writes the script and `cluster.json` (renamed
/// into place, so an attempt beside it never reads half a file), runs the script in its own
/// session (so a timed-out attempt's processes can be killed as a group, by its pid file)
/// with output to a log file (so a daemon it starts cannot hold the connection open), then
/// prints the log, [`result_marker`] and the result file, and exits with the script's status.
/// Its pid file is its `name`'s own, its result file its own.
///
/// One attempt of a `name` runs at a time on a node: the script runs under `flock` on the
/// name's lock file (held by `flock` itself, so a daemon the script starts does not hold it).
/// An attempt a lost server began goes on after its server is gone; the next owner's attempt
/// of the same action waits for it to end, then runs (and finds what it started), rather than
/// starting a second daemon beside it. It says so in its output when it waits. A node without
/// `flock` (util-linux) runs the script at once, and says that too.
pub fn attempt(
    dir: &str,
    name: &str,
    body: &str,
    cluster_json: &str,
    env: &BTreeMap<String, String>,
    nonce: &str,
) -> String {
    let mut s = String::from("set -e\n");
    s.push_str(&format!(
        "mkdir -p {d} && cd {d}\nmkdir -p scripts logs attempts\n",
        d = quote(dir)
    ));
    // Renamed into place: an earlier attempt still running reads the script it began with.
    let script = format!("scripts/{name}.sh");
    let staged_script = format!("{script}.{nonce}");
    write_file(&mut s, &staged_script, body);
    s.push_str(&format!(
        "mv -f {} {}\n",
        quote(&staged_script),
        quote(&script)
    ));
    let staged = format!("cluster.json.{nonce}");
    write_file(&mut s, &staged, cluster_json);
    s.push_str(&format!("mv -f {} cluster.json\n", quote(&staged)));
    let (pid, lock) = attempt_files(name);
    let result = format!("attempts/{name}.{nonce}.result");
    exports(&mut s, env);
    s.push_str(&format!(
        "export EBB_WORK_DIR=\"$PWD\" EBB_RESULT_FILE=\"$PWD\"/{} \
         EBB_CLUSTER_FILE=\"$PWD/cluster.json\"\n",
        quote(&result)
    ));
    let log = format!("logs/{name}.{nonce}.log");
    s.push_str("set +e\n");
    s.push_str(&format!(
        "( exec setsid sh -c {run} {script} {pid} {lock} > {log} 2>&1 < /dev/null )\n",
        run = quote(RUN),
        script = quote(&script),
        pid = quote(&pid),
        lock = quote(&lock),
        log = quote(&log),
    ));
    s.push_str("status=$?\n");
    // The end of the script's output and the start of its result file: a script that prints
    // (or writes) gigabytes sends ebb no more than these.
    s.push_str(&format!("tail -c {ATTEMPT_OUTPUT} {}\n", quote(&log)));
    s.push_str(&format!(
        "printf '\\n%s\\n' {}\n",
        quote(&result_marker(nonce))
    ));
    s.push_str(&format!(
        "head -c {RESULT_BYTES} {r} 2>/dev/null\nrm -f {r}\nexit $status\n",
        r = quote(&result)
    ));
    s
}

/// What runs in an attempt's own session: `sh -c RUN script pid-file lock-file`. It writes
/// its pid (the group's), then runs the script under the lock, saying so when an earlier
/// attempt holds it.
const RUN: &str = "echo $$ > \"$1\"; \
    if command -v flock > /dev/null 2>&1; then \
      flock -n \"$2\" true || echo \"ebb: an earlier attempt of this action still runs on this node (its server may have been lost): waiting for it to end\"; \
      exec flock -o \"$2\" sh \"$0\"; \
    fi; \
    echo \"ebb: flock is missing on this node: an earlier attempt of this action is not waited for\"; \
    exec sh \"$0\"";

/// Bytes of the end of an attempt's output a node sends back.
pub const ATTEMPT_OUTPUT: usize = 1 << 20;
/// Bytes of the start of an attempt's result file a node sends back.
pub const RESULT_BYTES: usize = 64 * 1024;

/// The pid file and the lock file of attempts named `name`, relative to the node's
/// directory.
fn attempt_files(name: &str) -> (String, String) {
    (
        format!("attempts/{name}.pid"),
        format!("attempts/{name}.lock"),
    )
}

/// Splits an attempt's standard output into the script's output and its result file.
pub fn split_attempt_output(stdout: &str, nonce: &str) -> (String, String) {
    let marker = format!("\n{}\n", result_marker(nonce));
    match stdout.rsplit_once(&marker) {
        Some((log, result)) => (log.trim().to_string(), result.to_string()),
        None => (stdout.trim().to_string(), String::new()),
    }
}

/// Kills what a timed-out attempt named `name` in `dir` still runs.
pub fn kill_attempt(dir: &str, name: &str) -> String {
    let (pid, _) = attempt_files(name);
    format!(
        "cd {d} 2>/dev/null && [ -s {p} ] && kill -s KILL -- -\"$(cat {p})\" 2>/dev/null; true",
        d = quote(dir),
        p = quote(&pid)
    )
}

/// The program's directory under a node's directory.
pub fn program_dir(dir: &str) -> String {
    format!("{}/program", dir.trim_end_matches('/'))
}

/// The variable that marks every process of a program launched on a node: the program's
/// directory. It is in the program's environment only (never a service's), and every process
/// it starts inherits it, whatever session or group it moves to.
pub const PROGRAM_MARK: &str = "EBB_PROGRAM_MARK";

/// The node's clock for fences, in hundredths of a second: `/proc/uptime`, the time since
/// boot (`CLOCK_BOOTTIME`), which a step of the wall clock does not move.
const NOW_CS: &str = "now_cs() { read up rest < /proc/uptime; echo \"${up%.*}${up#*.}\"; }\n";

/// How often a fenced program's guard looks at its fence.
pub const GUARD_POLL_CS: u64 = 20;

/// Stops a fenced program once the node's clock passes its fence: marks it `fenced` first
/// (so its status says why), then ends its group and what it left ([`end_script`]). A fence
/// that cannot be read keeps the last instant read. Ends when the program has.
fn guard_script() -> String {
    format!(
        "{NOW_CS}until=$(cat fence)\n\
         while [ ! -e exit ]; do\n\
         \x20 u=$(cat fence 2>/dev/null) && until=$u\n\
         \x20 if [ \"$(now_cs)\" -gt \"$until\" ]; then\n\
         \x20   : > fenced\n\
         \x20   kill -s KILL -- -\"$(cat pid)\" 2>/dev/null\n\
         \x20   sh end.sh\n\
         \x20   exit 0\n\
         \x20 fi\n\
         \x20 sleep {}.{:02}\n\
         done\n",
        GUARD_POLL_CS / 100,
        GUARD_POLL_CS % 100
    )
}

/// Shell that sets the fence of the program in the program directory it runs in: it may run
/// for `ahead_cs` hundredths of a second more, on the node's clock.
fn fence_line(ahead_cs: u64) -> String {
    format!("{NOW_CS}echo $(( $(now_cs) + {ahead_cs} )) > fence.tmp && mv -f fence.tmp fence\n")
}

/// Moves the fence of the program in `dir` on: it may run `ahead_cs` hundredths of a second
/// more. Only a fenced program that has neither ended nor been stopped by its guard.
pub fn renew(dir: &str, ahead_cs: u64) -> String {
    format!(
        "( cd {} 2>/dev/null && [ -e fence ] && [ ! -e fenced ] && [ ! -e exit ] && {{\n{}}} ); true\n",
        quote(&program_dir(dir)),
        fence_line(ahead_cs)
    )
}

/// Launches the program once: writes `launch.sh`, `end.sh` and `cluster.json`, then (unless
/// `launched/` exists: it was launched before) starts a detached wrapper that runs the program
/// in its own session, records its pid, waits, writes its exit status to `exit`, and then runs
/// `end.sh`: what is left of the program's process group is killed, and every process of the
/// SSH user that carries the program's mark ([`PROGRAM_MARK`]: what it detached with setsid,
/// say). Only a process that dropped its whole environment (`env -i`) escapes. Prints
/// `launched` or `already`.
///
/// With `fence_cs`, the program is fenced: it may run that many hundredths of a second on the
/// node's clock unless [`renew`] moves its fence on, and a guard beside it stops it when the
/// fence passes (its status is then [`ProgramState::Fenced`]).
pub fn launch(
    dir: &str,
    command: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&str>,
    cluster_json: &str,
    fence_cs: Option<u64>,
) -> String {
    let p = program_dir(dir);
    // The launch script holds the run's token: only the node's SSH user may read what it
    // writes.
    let mut s = String::from("set -e\numask 077\n");
    s.push_str(&format!("mkdir -p {p} && cd {p}\n", p = quote(&p)));
    s.push_str("if [ -d launched ]; then echo already; exit 0; fi\n");
    write_file(&mut s, "cluster.json", cluster_json);
    let mut launch = String::new();
    exports(&mut launch, env);
    launch.push_str(&format!("export {PROGRAM_MARK}={}\n", quote(&p)));
    launch.push_str("export EBB_CLUSTER_FILE=\"$PWD/cluster.json\"\n");
    match cwd {
        Some(cwd) => launch.push_str(&format!("mkdir -p {c} && cd {c}\n", c = quote(cwd))),
        None => launch.push_str("mkdir -p work && cd work\n"),
    }
    launch.push_str("exec");
    for arg in command {
        launch.push(' ');
        launch.push_str(&quote(arg));
    }
    launch.push('\n');
    write_file(&mut s, "launch.sh", &launch);
    write_file(&mut s, "end.sh", &end_script(&p));
    if let Some(ahead) = fence_cs {
        write_file(&mut s, "guard.sh", &guard_script());
        s.push_str(&fence_line(ahead));
    }
    // Made last: a launch cut short before this line is simply done again.
    s.push_str("mkdir launched 2>/dev/null || { echo already; exit 0; }\n");
    s.push_str(
        "nohup setsid sh -c 'setsid sh launch.sh > stdout.log 2> stderr.log < /dev/null & \
         p=$!; echo $p > pid.tmp && mv pid.tmp pid; \
         if [ -e guard.sh ]; then sh guard.sh > /dev/null 2>&1 < /dev/null & fi; \
         wait $p; echo $? > exit.tmp && mv exit.tmp exit; \
         sh end.sh' > /dev/null 2>&1 < /dev/null &\n",
    );
    s.push_str("echo $! > wrapper.pid\n");
    s.push_str("i=0; while [ ! -e pid ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done\n");
    s.push_str("echo launched\n");
    s
}

/// What ends what a program left (see [`launch`]), for the program marked with `mark`: its
/// group, then every process carrying the mark, a few rounds (one may fork while it runs).
fn end_script(mark: &str) -> String {
    format!(
        "kill -s KILL -- -\"$(cat pid)\" 2>/dev/null\n\
         mark={}={}\n\
         for round in 1 2 3; do\n\
         \x20 for e in /proc/[0-9]*/environ; do\n\
         \x20   p=${{e#/proc/}}; p=${{p%/environ}}\n\
         \x20   if tr '\\0' '\\n' < \"$e\" 2>/dev/null | grep -qxF \"$mark\"; then kill -s KILL \"$p\" 2>/dev/null; fi\n\
         \x20 done\n\
         done\n\
         true\n",
        PROGRAM_MARK,
        quote(mark)
    )
}

/// What the program of a node is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramState {
    /// Never launched.
    None,
    /// Launched; the wrapper has not recorded itself yet.
    Starting,
    Running,
    /// Ended with this `$?`-style status (128+N for signal N).
    Exited(i32),
    /// Launched, but the wrapper is gone without recording an exit (the machine restarted).
    Lost,
    /// Stopped by its guard: its fence passed before anyone moved it on.
    Fenced,
}

/// Prints the program's [`ProgramState`] as one word (and the status).
pub fn status(dir: &str) -> String {
    format!(
        "cd {} 2>/dev/null || {{ echo none; exit 0; }}\n\
         ended() {{ if [ -e fenced ]; then echo fenced; else echo \"exited $(cat exit)\"; fi; }}\n\
         if [ -e exit ]; then ended\n\
         elif [ ! -d launched ]; then echo none\n\
         elif [ ! -s wrapper.pid ]; then echo starting\n\
         elif kill -0 \"$(cat wrapper.pid)\" 2>/dev/null; then echo running\n\
         elif [ -e exit ]; then ended\n\
         else echo lost; fi\n",
        quote(&program_dir(dir))
    )
}

/// Reads what [`status`] printed.
pub fn parse_status(text: &str) -> Option<ProgramState> {
    let mut words = text.split_whitespace();
    Some(match words.next()? {
        "none" => ProgramState::None,
        "starting" => ProgramState::Starting,
        "running" => ProgramState::Running,
        "lost" => ProgramState::Lost,
        "fenced" => ProgramState::Fenced,
        "exited" => ProgramState::Exited(words.next()?.parse().ok()?),
        _ => return None,
    })
}

/// Prints at most `count` bytes of the program's output file `name` (`stdout.log`,
/// `stderr.log`) from byte `from` on.
pub fn output_since(dir: &str, name: &str, from: u64, count: usize) -> String {
    format!(
        "cd {} 2>/dev/null && [ -e {n} ] && tail -c +{} {n} | head -c {count}; true",
        quote(&program_dir(dir)),
        from + 1,
        n = quote(name),
    )
}

/// Sends `signal` (TERM, KILL) to the program's process group if it still runs.
pub fn signal(dir: &str, signal: &str) -> String {
    format!(
        "( cd {} 2>/dev/null && [ ! -e exit ] && [ -s pid ] && kill -s {signal} -- -\"$(cat pid)\" 2>/dev/null ); true",
        quote(&program_dir(dir))
    )
}

/// What a refused directory's error starts with: someone else planted it.
pub const REFUSED: &str = "ebb: refusing";

/// The run's directory above the node's directory `dir`.
fn parent_of(dir: &str) -> String {
    match dir.trim_end_matches('/').rsplit_once('/') {
        Some((parent, _)) if !parent.is_empty() => parent.to_string(),
        _ => String::from("."),
    }
}

/// Shell that exits 3 unless each of `dirs` is missing, or a real directory (not a symbolic
/// link) owned by the user ebb logs in as: in a directory others can write to (a shared
/// `remoteDir` such as /tmp), a planted link must not steer a `mkdir`, a `kill` or an `rm -rf`.
pub fn guard(dirs: &[&str]) -> String {
    let mut s = String::new();
    for d in dirs {
        let d = quote(d);
        s.push_str(&format!(
            "if [ -L {d} ] || {{ [ -e {d} ] && {{ [ ! -d {d} ] || [ ! -O {d} ]; }}; }}; then echo \"{REFUSED} \"{d}\": a symbolic link, or not a directory of $(id -un)\" >&2; exit 3; fi\n"
        ));
    }
    s
}

/// Makes the node's directory `dir` (and the run's above it) owner-only, refusing planted
/// links and directories of other users before and after.
pub fn make(dir: &str) -> String {
    let parent = parent_of(dir);
    let checks = guard(&[&parent, dir]);
    format!(
        "{checks}( umask 077 && mkdir -p {d} ) || exit 1\n{checks}",
        d = quote(dir)
    )
}

/// Removes the node's directory for the run, after stopping the program if it still runs;
/// then the run's directory if it is left empty. Never touches anything else, and nothing
/// that is a symbolic link or another user's.
pub fn clean(dir: &str) -> String {
    let d = quote(dir);
    let parent = parent_of(dir);
    format!(
        "{checks}{kill}\nrm -rf {d} && {{ rmdir {p} 2>/dev/null; true; }}",
        checks = guard(&[&parent, dir]),
        kill = signal(dir, "KILL"),
        p = quote(&parent),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sh -s` in `dir`, fed `script`, running.
    fn spawn_sh(script: &str, dir: &std::path::Path) -> std::process::Child {
        use std::io::Write;
        let mut child = std::process::Command::new("sh")
            .arg("-s")
            .current_dir(dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sh runs");
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(script.as_bytes())
            .expect("written");
        child
    }

    fn sh(script: &str, dir: &std::path::Path) -> std::process::Output {
        spawn_sh(script, dir).wait_with_output().expect("sh ends")
    }

    fn temp() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "ebb-remote-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    /// The attempt script, run by a real `sh`: files land, the environment is set, the result
    /// comes back after the marker and the status is the script's.
    #[test]
    fn an_attempt_runs_its_script_and_reports() {
        let home = temp();
        let env = BTreeMap::from([("EBB_NODE".to_string(), "it's master".to_string())]);
        let body = "echo \"node $EBB_NODE\"\necho port=2181 > \"$EBB_RESULT_FILE\"\n\
                    test -s \"$EBB_CLUSTER_FILE\"\nexit 3\n";
        let script = attempt(
            "r1/master",
            "zk.start",
            body,
            "{\"EBB_EOF\": 1}",
            &env,
            "n1",
        );
        let out = sh(&script, &home);
        assert_eq!(out.status.code(), Some(3));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let (log, result) = split_attempt_output(&stdout, "n1");
        assert_eq!(log, "node it's master");
        assert_eq!(result.trim(), "port=2181");
        let cluster = std::fs::read_to_string(home.join("r1/master/cluster.json")).expect("file");
        assert_eq!(cluster.trim(), "{\"EBB_EOF\": 1}");
        let _ = std::fs::remove_dir_all(home);
    }

    /// Two attempts on one node at once (a task and a check, or two services' checks) keep
    /// their own pid and result files: killing one leaves the other running, and each reads
    /// back its own result.
    #[test]
    fn attempts_side_by_side_keep_their_own_files() {
        let home = temp();
        let start = |name: &str, body: &str| {
            spawn_sh(
                &attempt("r1/n1", name, body, "{}", &BTreeMap::new(), name),
                &home,
            )
        };
        let body = |word: &str| format!("echo {word} > \"$EBB_RESULT_FILE\"\nsleep 30\n");
        let zk = start("zk.check", &body("zk"));
        let db = start("db.check", &body("db"));
        let pid = |name: &str| home.join(format!("r1/n1/attempts/{name}.pid"));
        let waited = std::time::Instant::now();
        while !(pid("zk.check").exists() && pid("db.check").exists()) {
            assert!(waited.elapsed().as_secs() < 20, "the attempts never began");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Both results written before either is killed.
        while !(home
            .join("r1/n1/attempts/zk.check.zk.check.result")
            .exists()
            && home
                .join("r1/n1/attempts/db.check.db.check.result")
                .exists())
        {
            assert!(waited.elapsed().as_secs() < 20, "no results");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let killed = sh(&kill_attempt("r1/n1", "zk.check"), &home);
        assert!(killed.status.success());
        let zk = zk.wait_with_output().expect("zk ends");
        let zk_out = String::from_utf8_lossy(&zk.stdout).to_string();
        assert_eq!(split_attempt_output(&zk_out, "zk.check").1.trim(), "zk");
        // The other is still running; then it goes the same way, with its own result.
        let db_pid = std::fs::read_to_string(pid("db.check")).expect("pid");
        let alive = std::process::Command::new("kill")
            .args(["-0", "--", &format!("-{}", db_pid.trim())])
            .status()
            .expect("kill runs");
        assert!(alive.success(), "db's check was killed with zk's");
        sh(&kill_attempt("r1/n1", "db.check"), &home);
        let db = db.wait_with_output().expect("db ends");
        let db_out = String::from_utf8_lossy(&db.stdout).to_string();
        assert_eq!(split_attempt_output(&db_out, "db.check").1.trim(), "db");
        let _ = std::fs::remove_dir_all(home);
    }

    /// An attempt of an action begun while an earlier one of the same action still runs on
    /// the node (a lost server's) waits for it to end, says so, and then runs; a daemon the
    /// earlier one started does not hold it up.
    #[test]
    fn an_attempt_waits_for_an_earlier_one_of_its_action_but_not_for_its_daemon() {
        let home = temp();
        let start = |nonce: &str, body: &str| {
            spawn_sh(
                &attempt("r1/n1", "svc.start", body, "{}", &BTreeMap::new(), nonce),
                &home,
            )
        };
        let first = start(
            "a",
            "echo begun > first\nsleep 60 > /dev/null 2>&1 &\necho $! > daemon\nsleep 1.5\necho done >> first\n",
        );
        let waited = std::time::Instant::now();
        while !home.join("r1/n1/first").exists() {
            assert!(
                waited.elapsed().as_secs() < 20,
                "the first attempt never began"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let second = start("b", "cat first\necho ran > second\n");
        let second = second.wait_with_output().expect("the second ends");
        let out = String::from_utf8_lossy(&second.stdout).to_string();
        let (log, _) = split_attempt_output(&out, "b");
        assert!(log.contains("waiting for it to end"), "{log}");
        assert!(
            log.ends_with("begun\ndone"),
            "it ran before the first ended: {log}"
        );
        assert!(second.status.success(), "{log}");
        let first = first.wait_with_output().expect("the first ends");
        assert!(first.status.success());
        // The first one's daemon runs on, holding nothing: a third attempt runs at once.
        let third = sh(
            &attempt("r1/n1", "svc.start", "true\n", "{}", &BTreeMap::new(), "c"),
            &home,
        );
        let out = String::from_utf8_lossy(&third.stdout).to_string();
        assert!(!out.contains("waiting"), "{out}");
        let daemon = std::fs::read_to_string(home.join("r1/n1/daemon")).expect("daemon");
        let _ = std::process::Command::new("kill")
            .arg(daemon.trim())
            .status();
        let _ = std::fs::remove_dir_all(home);
    }

    /// The program outlives the script that launched it, is launched once however often the
    /// launch runs, and its status and output are read back.
    #[test]
    fn a_program_is_launched_once_and_found_again() {
        let home = temp();
        let cmd = ["sh", "-c", "echo out; echo err >&2; exit 7"].map(String::from);
        let env = BTreeMap::from([("A".to_string(), "1".to_string())]);
        let first = sh(&launch("r/master", &cmd, &env, None, "{}", None), &home);
        assert_eq!(String::from_utf8_lossy(&first.stdout).trim(), "launched");
        let again = sh(&launch("r/master", &cmd, &env, None, "{}", None), &home);
        assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), "already");
        let mut state = None;
        for _ in 0..100 {
            let out = sh(&status("r/master"), &home);
            state = parse_status(&String::from_utf8_lossy(&out.stdout));
            if matches!(state, Some(ProgramState::Exited(_))) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(state, Some(ProgramState::Exited(7)));
        let out = sh(&output_since("r/master", "stdout.log", 0, 1024), &home);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
        let out = sh(&output_since("r/master", "stderr.log", 2, 1024), &home);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "r\n");
        let none = sh(&status("r/worker-1"), &home);
        assert_eq!(
            parse_status(&String::from_utf8_lossy(&none.stdout)),
            Some(ProgramState::None)
        );
        sh(&clean("r/master"), &home);
        assert!(
            !home.join("r").exists(),
            "the run's directory is removed when empty"
        );
        let _ = std::fs::remove_dir_all(home);
    }

    #[test]
    fn a_planted_link_steers_neither_mkdir_nor_rm() {
        let home = temp();
        let victim = home.join("victim");
        std::fs::create_dir_all(victim.join("master")).expect("victim");
        std::fs::write(victim.join("master/precious"), "x").expect("precious");
        // Someone who can write to the shared remoteDir plants the run's directory as a link.
        std::os::unix::fs::symlink(&victim, home.join("r")).expect("link");
        let out = sh(&clean("r/master"), &home);
        assert_eq!(out.status.code(), Some(3));
        assert!(String::from_utf8_lossy(&out.stderr).contains(REFUSED));
        assert!(
            victim.join("master/precious").exists(),
            "nothing was deleted"
        );
        let out = sh(&make("r/worker-1"), &home);
        assert_eq!(out.status.code(), Some(3));
        assert!(
            !victim.join("worker-1").exists(),
            "nothing was made through the link"
        );
        // A link at the node's own directory is refused as well.
        std::fs::remove_file(home.join("r")).expect("unlink");
        std::fs::create_dir(home.join("r")).expect("real run dir");
        std::os::unix::fs::symlink(victim.join("master"), home.join("r/master")).expect("link");
        let out = sh(&clean("r/master"), &home);
        assert_eq!(out.status.code(), Some(3));
        assert!(victim.join("master/precious").exists());
        // Real directories of this user are made owner-only and removed.
        let out = sh(&make("r/worker-2"), &home);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(home.join("r/worker-2"))
            .expect("made")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0);
        let out = sh(&clean("r/worker-2"), &home);
        assert!(out.status.success());
        assert!(!home.join("r/worker-2").exists());
        let _ = std::fs::remove_dir_all(home);
    }

    /// The state of the program in `dir` once it has ended (within 10 s).
    fn ended(home: &std::path::Path, dir: &str) -> Option<ProgramState> {
        let mut state = None;
        for _ in 0..200 {
            let out = sh(&status(dir), home);
            state = parse_status(&String::from_utf8_lossy(&out.stdout));
            if matches!(state, Some(ProgramState::Exited(_) | ProgramState::Fenced)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        state
    }

    /// A fenced program runs while its fence is moved on, and its guard stops it, with what it
    /// left, once the fence passes; a fence moved on after that changes nothing.
    #[test]
    fn a_fenced_program_lives_while_its_fence_is_moved_on() {
        let home = temp();
        // The program leaves a process of its own behind, in a session of its own.
        let cmd = [
            "sh",
            "-c",
            "setsid sleep 600 & echo $! > left; exec sleep 600",
        ]
        .map(String::from);
        let out = sh(
            &launch("r/fenced", &cmd, &BTreeMap::new(), None, "{}", Some(60)),
            &home,
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "launched");
        let began = std::time::Instant::now();
        while began.elapsed() < std::time::Duration::from_secs(2) {
            sh(&renew("r/fenced", 60), &home);
            let out = sh(&status("r/fenced"), &home);
            assert_eq!(
                parse_status(&String::from_utf8_lossy(&out.stdout)),
                Some(ProgramState::Running),
                "a program whose fence is moved on runs"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let stopped = std::time::Instant::now();
        assert_eq!(ended(&home, "r/fenced"), Some(ProgramState::Fenced));
        let took = stopped.elapsed();
        assert!(
            took >= std::time::Duration::from_millis(300)
                && took < std::time::Duration::from_secs(3),
            "stopped {took:?} after its fence was last moved (0.6 s ahead)"
        );
        // What it left (in a session of its own) is stopped too: gone, or a zombie.
        let left = std::fs::read_to_string(home.join("r/fenced/program/work/left")).expect("left");
        let alive = || {
            std::fs::read_to_string(format!("/proc/{}/stat", left.trim())).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next())
                    != Some("Z")
            })
        };
        let looked = std::time::Instant::now();
        while alive() && looked.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(!alive(), "what the program left is stopped with it");
        sh(&renew("r/fenced", 6000), &home);
        assert!(!home.join("r/fenced/program/fence.tmp").exists());
        let out = sh(&status("r/fenced"), &home);
        assert_eq!(
            parse_status(&String::from_utf8_lossy(&out.stdout)),
            Some(ProgramState::Fenced)
        );
        let _ = std::fs::remove_dir_all(home);
    }

    /// An unfenced program (one server, nothing to fence) has no guard, and `renew` gives it
    /// no fence.
    #[test]
    fn an_unfenced_program_has_no_guard() {
        let home = temp();
        let cmd = ["sh", "-c", "sleep 1; exit 3"].map(String::from);
        sh(
            &launch("r/unfenced", &cmd, &BTreeMap::new(), None, "{}", None),
            &home,
        );
        sh(&renew("r/unfenced", 1), &home);
        assert!(!home.join("r/unfenced/program/fence").exists());
        assert!(!home.join("r/unfenced/program/guard.sh").exists());
        assert_eq!(ended(&home, "r/unfenced"), Some(ProgramState::Exited(3)));
        let _ = std::fs::remove_dir_all(home);
    }

    #[test]
    fn a_signalled_program_reports_128_plus_the_signal() {
        let home = temp();
        let cmd = ["sleep", "30"].map(String::from);
        sh(
            &launch("r/m", &cmd, &BTreeMap::new(), None, "{}", None),
            &home,
        );
        sh(&signal("r/m", "TERM"), &home);
        let mut state = None;
        for _ in 0..100 {
            let out = sh(&status("r/m"), &home);
            state = parse_status(&String::from_utf8_lossy(&out.stdout));
            if matches!(state, Some(ProgramState::Exited(_))) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(state, Some(ProgramState::Exited(143)));
        let _ = std::fs::remove_dir_all(home);
    }
}
