//! The processes of one plugin: started when a call needs one, kept for the next call, and
//! killed (with everything they started) when they crash, hang, exit or write something that
//! is not an answer. A call through a broken process fails as one attempt; the next call
//! starts a fresh process.
//!
//! Each process answers one call at a time; up to the descriptor's `concurrency` run at once.
//! A plugin gets a clean environment (`PATH`, `LANG`, `HOME` and `TMPDIR` in its own directory,
//! and the protocol's version): what a call needs, secrets included, travels in the call.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;

use crate::descriptor::Descriptor;
use crate::protocol::{Answer, Hello, MAX_MESSAGE, Method, Request};

/// The most lines of a plugin's stderr kept for the next error message and log.
const TAIL_LINES: usize = 40;
/// The longest stderr line kept; the rest of it is dropped.
const TAIL_LINE: usize = 2048;

/// How a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The plugin answered with an error.
    Answered {
        message: String,
        retryable: bool,
        property: Option<String>,
        kind: ebb_spi::ErrorKind,
    },
    /// The process failed: it could not start, crashed, hung, exited, or wrote something that
    /// is not an answer. It was killed; the next call starts another.
    Broken(String),
}

/// How a plugin fares, for `GET /v3/provisioners`, `ebb plugin list` and the UI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    pub calls: u64,
    /// Calls the plugin answered with an error.
    pub errors: u64,
    /// Calls whose process broke.
    pub broken: u64,
    /// Processes started.
    pub starts: u64,
    /// Why the last call that broke did, while no call has succeeded since.
    pub failing: Option<String>,
}

/// The processes of one plugin.
#[derive(Debug)]
pub struct Pool {
    descriptor: Arc<Descriptor>,
    slots: Vec<tokio::sync::Mutex<Option<Worker>>>,
    permits: Semaphore,
    health: Mutex<Health>,
}

#[derive(Debug)]
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<Tail>>,
    /// A call was sent and its answer not read (the call's future was dropped): the process
    /// cannot be trusted with the next one.
    busy: bool,
    next_call: u64,
}

/// A process slot held by a call. When the call's future is dropped mid-way (a task's time
/// limit ran out, a server's operation was cancelled), the process it was talking to is
/// killed there and then, with everything it started: nothing of an abandoned call runs on.
struct Held<'a>(tokio::sync::MutexGuard<'a, Option<Worker>>);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.0.as_ref().is_some_and(|w| w.busy) {
            kill(self.0.take());
        }
    }
}

impl std::ops::Deref for Held<'_> {
    type Target = Option<Worker>;
    fn deref(&self) -> &Option<Worker> {
        &self.0
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Option<Worker> {
        &mut self.0
    }
}

/// The last lines a plugin wrote to stderr.
#[derive(Debug, Default)]
struct Tail {
    lines: VecDeque<String>,
    /// Lines not yet logged.
    fresh: usize,
}

impl Pool {
    pub fn new(descriptor: Arc<Descriptor>) -> Self {
        let n = descriptor.concurrency as usize;
        Self {
            slots: (0..n).map(|_| tokio::sync::Mutex::new(None)).collect(),
            permits: Semaphore::new(n),
            descriptor,
            health: Mutex::new(Health::default()),
        }
    }

    pub fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    /// The plugin's directory under the server's work dir `work_dir`: its processes' `HOME`.
    pub fn home(&self, work_dir: &Path) -> PathBuf {
        work_dir.join("plugins").join(self.descriptor.name)
    }

    pub fn health(&self) -> Health {
        self.health.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// Sends `request` to a process of the plugin and returns the answer's result. `home` is
    /// the plugin's own directory (`HOME`, `TMPDIR`); `redact` masks the call's secrets in
    /// anything kept or logged.
    pub async fn call(
        &self,
        request: Request<'_>,
        home: &Path,
        redact: &(dyn Fn(&str) -> String + Sync),
    ) -> Result<Value, CallError> {
        self.call_within(request, home, redact, self.descriptor.timeout)
            .await
    }

    /// [`Pool::call`] with a time limit of its own (an automator's action has one).
    pub async fn call_within(
        &self,
        mut request: Request<'_>,
        home: &Path,
        redact: &(dyn Fn(&str) -> String + Sync),
        timeout: std::time::Duration,
    ) -> Result<Value, CallError> {
        let method = request.method;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| CallError::Broken("the plugin is shutting down".into()))?;
        let mut slot = Held(self.free_slot().await);
        let slot = &mut *slot;
        let outcome = tokio::time::timeout(timeout, async {
            if slot.as_ref().is_some_and(|w| w.busy) {
                kill(slot.take());
            }
            if slot.is_none() {
                *slot = Some(self.start(home).await?);
                self.note(|h| h.starts += 1);
                metrics::counter!("ebb_plugin_starts_total", "plugin" => self.descriptor.name)
                    .increment(1);
            }
            let worker = slot
                .as_mut()
                .ok_or_else(|| CallError::Broken("no process".into()))?;
            worker.next_call += 1;
            request.call = worker.next_call;
            worker.exchange(&request).await
        })
        .await
        .unwrap_or_else(|_| {
            Err(CallError::Broken(format!(
                "did not answer {} within {}",
                method.as_str(),
                humantime::format_duration(timeout)
            )))
        });
        let tail = slot.as_ref().map(|w| w.take_fresh()).unwrap_or_default();
        let name = self.descriptor.name;
        for line in &tail {
            tracing::info!(plugin = name, "{}", redact(line));
        }
        let outcome = match outcome {
            Err(CallError::Broken(why)) => {
                let stderr = slot.as_ref().map(|w| w.tail()).unwrap_or_default();
                kill(slot.take());
                let why = if stderr.is_empty() {
                    why
                } else {
                    format!("{why}; its stderr ended: {}", redact(&stderr))
                };
                Err(CallError::Broken(redact(&why)))
            }
            Err(CallError::Answered {
                message,
                retryable,
                property,
                kind,
            }) => Err(CallError::Answered {
                message: redact(&message),
                retryable,
                property,
                kind,
            }),
            Ok(v) => Ok(v),
        };
        let label = match &outcome {
            Ok(_) => "ok",
            Err(CallError::Answered { .. }) => "error",
            Err(CallError::Broken(_)) => "broken",
        };
        metrics::counter!(
            "ebb_plugin_calls_total",
            "plugin" => name,
            "method" => method.as_str(),
            "outcome" => label
        )
        .increment(1);
        self.note(|h| {
            h.calls += 1;
            match &outcome {
                Ok(_) => h.failing = None,
                Err(CallError::Answered { .. }) => {
                    h.errors += 1;
                    h.failing = None;
                }
                Err(CallError::Broken(why)) => {
                    h.broken += 1;
                    h.failing = Some(why.clone());
                }
            }
        });
        if let Err(CallError::Broken(why)) = &outcome {
            tracing::warn!(
                plugin = name,
                method = method.as_str(),
                "plugin call broke: {why}"
            );
        }
        outcome
    }

    fn note(&self, f: impl FnOnce(&mut Health)) {
        if let Ok(mut h) = self.health.lock() {
            f(&mut h);
        }
    }

    async fn free_slot(&self) -> tokio::sync::MutexGuard<'_, Option<Worker>> {
        // A permit is held, so at least one slot is free: take the first that is.
        for slot in &self.slots {
            if let Ok(guard) = slot.try_lock() {
                return guard;
            }
        }
        self.slots[0].lock().await
    }

    /// Starts a process of the plugin and greets it.
    async fn start(&self, home: &Path) -> Result<Worker, CallError> {
        let d = &self.descriptor;
        std::fs::create_dir_all(home)
            .map_err(|e| CallError::Broken(format!("cannot make {}: {e}", home.display())))?;
        restrict(home);
        if let Some(guard) = &d.guard {
            (guard.0)(&d.dir).map_err(|e| {
                CallError::Broken(format!("its directory is not safe to run from: {e}"))
            })?;
        }
        let program = program(&d.dir, &d.command[0]);
        let mut child = Command::new(&program)
            .args(&d.command[1..])
            .current_dir(&d.dir)
            .env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
            )
            .env("LANG", "C.UTF-8")
            .env("HOME", home)
            .env("TMPDIR", home)
            .env("EBB_PLUGIN_PROTOCOL", crate::PROTOCOL.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| CallError::Broken(format!("cannot start {}: {e}", program.display())))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            kill_child(&mut child);
            return Err(CallError::Broken("its pipes could not be opened".into()));
        };
        let tail = Arc::new(Mutex::new(Tail::default()));
        tokio::spawn(drain(stderr, Arc::clone(&tail)));
        let mut worker = Worker {
            child,
            stdin,
            stdout: BufReader::with_capacity(64 * 1024, stdout),
            stderr: tail,
            busy: false,
            next_call: 0,
        };
        let mut hello = Request::new(Method::Hello);
        hello.protocol = Some(crate::PROTOCOL);
        let greeting = worker.exchange(&hello).await.map_err(|e| match e {
            CallError::Answered { message, .. } => {
                CallError::Broken(format!("refused hello: {message}"))
            }
            broken @ CallError::Broken(_) => broken,
        });
        let greeting = greeting.and_then(|v| {
            serde_json::from_value::<Hello>(v)
                .map_err(|e| CallError::Broken(format!("answered hello with {e}")))
        });
        let check = greeting.and_then(|h| {
            if h.protocol != crate::PROTOCOL {
                Err(format!(
                    "speaks plugin protocol {}, this ebb {}",
                    h.protocol,
                    crate::PROTOCOL
                ))
            } else if h.name != d.name {
                Err(format!(
                    "says it is '{}', its descriptor '{}'",
                    h.name, d.name
                ))
            } else {
                Ok(())
            }
            .map_err(CallError::Broken)
        });
        match check {
            Ok(()) => Ok(worker),
            Err(e) => {
                let stderr = worker.tail();
                kill(Some(worker));
                Err(match e {
                    CallError::Broken(why) if !stderr.is_empty() => {
                        CallError::Broken(format!("{why}; its stderr ended: {stderr}"))
                    }
                    broken @ CallError::Broken(_) => broken,
                    answered @ CallError::Answered { .. } => answered,
                })
            }
        }
    }
}

impl Worker {
    /// Writes one request and reads its answer.
    async fn exchange(&mut self, request: &Request<'_>) -> Result<Value, CallError> {
        let mut line = serde_json::to_vec(request)
            .map_err(|e| CallError::Broken(format!("the request cannot be written: {e}")))?;
        if line.len() > MAX_MESSAGE {
            return Err(CallError::Answered {
                message: format!("the request is larger than {MAX_MESSAGE} bytes"),
                retryable: false,
                property: None,
                kind: ebb_spi::ErrorKind::Other,
            });
        }
        line.push(b'\n');
        self.busy = true;
        let io = |e: std::io::Error| CallError::Broken(format!("cannot be written to: {e}"));
        self.stdin.write_all(&line).await.map_err(io)?;
        self.stdin.flush().await.map_err(io)?;
        let answer = match read_line(&mut self.stdout, MAX_MESSAGE).await {
            Ok(Some(answer)) => answer,
            Ok(None) => {
                let status = match self.child.try_wait() {
                    Ok(Some(status)) => format!(" ({status})"),
                    _ => String::new(),
                };
                return Err(CallError::Broken(format!("exited{status}")));
            }
            Err(e) => return Err(CallError::Broken(e)),
        };
        self.busy = false;
        let answer: Answer = serde_json::from_slice(&answer).map_err(|e| {
            CallError::Broken(format!(
                "wrote what is not an answer ({e}): {}",
                preview(&answer)
            ))
        })?;
        if answer.call != request.call {
            return Err(CallError::Broken(format!(
                "answered call {} when asked call {}",
                answer.call, request.call
            )));
        }
        match (answer.result, answer.error) {
            (_, Some(error)) => Err(CallError::Answered {
                kind: error.kind(),
                message: error.message,
                retryable: error.retryable,
                property: error.property,
            }),
            (result, None) => Ok(result.unwrap_or(Value::Null)),
        }
    }

    /// Its stderr lines not logged yet.
    fn take_fresh(&self) -> Vec<String> {
        let Ok(mut tail) = self.stderr.lock() else {
            return Vec::new();
        };
        let fresh = tail.fresh.min(tail.lines.len());
        tail.fresh = 0;
        tail.lines
            .iter()
            .skip(tail.lines.len() - fresh)
            .cloned()
            .collect()
    }

    /// Its last stderr lines, for an error message.
    fn tail(&self) -> String {
        let Ok(tail) = self.stderr.lock() else {
            return String::new();
        };
        let lines: Vec<&str> = tail
            .lines
            .iter()
            .rev()
            .take(5)
            .map(String::as_str)
            .collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }
}

/// The first 200 characters of what a plugin wrote, for an error message.
fn preview(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).chars().take(200).collect()
}

/// Reads one line of at most `max` bytes (without its newline); `None` at the end of the
/// stream. A longer line is an error: the rest of the stream cannot be trusted.
async fn read_line(
    reader: &mut (impl AsyncBufRead + Unpin),
    max: usize,
) -> Result<Option<Vec<u8>>, String> {
    let mut line = Vec::new();
    loop {
        let buf = reader
            .fill_buf()
            .await
            .map_err(|e| format!("cannot be read from: {e}"))?;
        if buf.is_empty() {
            return Ok((!line.is_empty()).then_some(line));
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], i + 1),
            None => (buf, buf.len()),
        };
        if line.len() + chunk.len() > max {
            return Err(format!("wrote an answer larger than {max} bytes"));
        }
        line.extend_from_slice(chunk);
        let complete = done > chunk.len();
        reader.consume(done);
        if complete {
            return Ok(Some(line));
        }
    }
}

/// Reads a plugin's stderr to its end, keeping its last lines (each cut to [`TAIL_LINE`]
/// bytes): a plugin never blocks on a full pipe, and never fills the server's memory.
async fn drain(stderr: impl AsyncRead + Unpin, tail: Arc<Mutex<Tail>>) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                keep(&tail, &line);
                line.clear();
            } else if line.len() < TAIL_LINE {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        keep(&tail, &line);
    }
}

fn keep(tail: &Mutex<Tail>, line: &[u8]) {
    if let Ok(mut tail) = tail.lock() {
        if tail.lines.len() == TAIL_LINES {
            tail.lines.pop_front();
        }
        tail.lines
            .push_back(String::from_utf8_lossy(line).into_owned());
        tail.fresh = (tail.fresh + 1).min(TAIL_LINES);
    }
}

/// The program of `command[0]`: a path with a `/` is in the plugin's directory (unless
/// absolute); a bare name is looked up on `PATH`.
fn program(dir: &Path, name: &str) -> PathBuf {
    let path = Path::new(name);
    if name.contains('/') && !path.is_absolute() {
        dir.join(path)
    } else {
        path.to_path_buf()
    }
}

/// Keeps the plugin's directory to the server's user: it may hold what a plugin caches.
fn restrict(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
}

/// Kills a worker's process and everything it started (its process group).
fn kill(worker: Option<Worker>) {
    drop(worker);
}

/// A process of a plugin goes with its worker, with its process group: when ebb stops, or
/// drops a process that broke.
impl Drop for Worker {
    fn drop(&mut self) {
        kill_child(&mut self.child);
    }
}

fn kill_child(child: &mut Child) {
    if let Some(pid) = child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(id as i32))
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    // tokio reaps the process once it is gone.
    let _ = child.start_kill();
}
