//! Starts the real `ebb serve` binary on an ephemeral port with a temporary data dir, and
//! talks to it over HTTP.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use serde_json::Value;

/// Log lines of a server, filled in by a reader thread.
pub type Logs = Arc<Mutex<Vec<String>>>;

pub const EBB: &str = env!("CARGO_BIN_EXE_ebb");

/// A running server. Killed when dropped, with whatever its clusters' `local` nodes still run
/// (the daemons of a cluster the test left live): a test's engines do not outlive it.
pub struct Server {
    child: Option<Child>,
    /// Its `--work-dir`, where its `local` nodes' sandboxes are.
    work_dir: std::path::PathBuf,
    pub url: String,
    logs: Logs,
    http: reqwest::blocking::Client,
    token: Option<String>,
    /// The API's contract every answer is checked against, fetched from the server at the
    /// first call (`None` inside: not checked).
    contract: std::sync::OnceLock<Option<super::contract::Contract>>,
    checked: bool,
}

/// Options for starting a server.
#[derive(Default, Clone)]
pub struct Options {
    /// A fixed token for `ebb serve` (`EBB_TOKEN`); without one, the harness sends the first
    /// token the server wrote to its data dir (or `client_token`).
    pub token: Option<String>,
    /// The token to send when the server is given none and wrote none (another server of its
    /// installation made the first token).
    pub client_token: Option<String>,
    /// More `ebb serve` arguments.
    pub args: Vec<String>,
    /// Another `ebb` to start (a benchmark's build from before a change); this build's by
    /// default.
    pub binary: Option<std::path::PathBuf>,
    /// The server's working directory (a relative data dir is relative to it).
    pub cwd: Option<std::path::PathBuf>,
    /// More environment variables for the server.
    pub env: Vec<(String, String)>,
    /// Let the server make its own name; else it is `ebb` (unless `args` give one), so a test
    /// that loses the store keeps its resources' server tag.
    pub generated_name: bool,
    /// Do not check answers against the API's contract (the benchmarks time their calls).
    pub unchecked: bool,
    /// Start the server with at most this many open files (util-linux's `prlimit`).
    pub files: Option<u64>,
    /// Start the server in this network namespace (`ip netns exec`); give it a `--bind` on
    /// the namespace's address.
    pub netns: Option<String>,
}

/// The work directory the harness gives a server on `data_dir` (inside it, so a test's
/// temporary directory holds everything).
pub fn work_dir(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("work")
}

impl Server {
    /// Starts a server on a fresh data dir that lives as long as `dir`.
    pub fn start(dir: &tempfile::TempDir) -> Server {
        Server::start_at(dir.path(), Options::default())
    }

    pub fn start_at(data_dir: &Path, options: Options) -> Server {
        let binary = options.binary.clone().unwrap_or_else(|| EBB.into());
        // `ip netns exec` and `prlimit` each exec what follows: the child's pid is the server's.
        let mut argv: Vec<std::ffi::OsString> = Vec::new();
        if let Some(space) = &options.netns {
            argv.extend(["ip", "netns", "exec", space.as_str()].map(Into::into));
        }
        if let Some(n) = options.files {
            argv.extend([
                "prlimit".into(),
                format!("--nofile={n}:{n}").into(),
                "--".into(),
            ]);
        }
        argv.push(binary.into_os_string());
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        cmd.args(["serve", "--log-format", "json", "--workers", "2"])
            .args(if options.args.iter().any(|a| a == "--bind") {
                &[][..]
            } else {
                &["--bind", "127.0.0.1:0"][..]
            })
            .arg("--data-dir")
            .arg(data_dir)
            .args(&options.args)
            .args(if options.args.iter().any(|a| a == "--store") {
                Vec::new()
            } else {
                store_args(data_dir)
            })
            .args(if options.args.iter().any(|a| a == "--work-dir") {
                Vec::new()
            } else {
                vec!["--work-dir".into(), work_dir(data_dir)]
            })
            .args(
                if options.generated_name || options.args.iter().any(|a| a == "--server-name") {
                    Vec::<String>::new()
                } else {
                    vec!["--server-name".into(), "ebb".into()]
                },
            )
            .current_dir(options.cwd.as_deref().unwrap_or(Path::new(".")))
            .env_remove("EBB_TOKEN")
            .env_remove("EBB_TOKEN_FILE")
            .env_remove("EBB_BIND")
            .env_remove("EBB_DATA_DIR")
            .env_remove("EBB_STORE")
            .env_remove("EBB_ETCD_ENDPOINTS")
            .env_remove("EBB_ETCD_CA_CERT")
            .env_remove("EBB_ETCD_CERT")
            .env_remove("EBB_ETCD_KEY")
            .env_remove("EBB_ETCD_USER")
            .env_remove("EBB_ETCD_PASSWORD_FILE")
            .env_remove("EBB_ETCD_INSECURE")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(token) = &options.token {
            cmd.env("EBB_TOKEN", token);
        }
        cmd.envs(options.env.iter().map(|(k, v)| (k, v)));
        let (child, url, logs) =
            spawn_and_wait(cmd).unwrap_or_else(|e| panic!("server did not start: {e}"));
        let written = match &options.cwd {
            Some(cwd) if data_dir.is_relative() => cwd.join(data_dir),
            _ => data_dir.to_path_buf(),
        };
        let token = options
            .token
            .or_else(|| first_token(&written))
            .or(options.client_token);
        let work = options
            .args
            .windows(2)
            .find(|w| w[0] == "--work-dir")
            .map(|w| std::path::PathBuf::from(&w[1]))
            .unwrap_or_else(|| work_dir(data_dir));
        let work = match (work.is_relative(), &options.cwd) {
            (true, Some(cwd)) => cwd.join(work),
            _ => std::path::absolute(&work).unwrap_or(work),
        };
        Server {
            child: Some(child),
            work_dir: work,
            url,
            logs,
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("http client"),
            token,
            contract: std::sync::OnceLock::new(),
            checked: !options.unchecked,
        }
    }

    /// The server's contract, fetched at the first call.
    fn contract(&self) -> Option<&super::contract::Contract> {
        self.contract
            .get_or_init(|| {
                if !self.checked {
                    return None;
                }
                let doc: Value = self
                    .http
                    .get(format!("{}/v3/openapi.json", self.url))
                    .send()
                    .and_then(|r| r.error_for_status())
                    .and_then(|r| r.json())
                    .unwrap_or_else(|e| panic!("the server's OpenAPI document: {e}"));
                Some(super::contract::Contract::new(doc))
            })
            .as_ref()
    }

    /// The token the harness sends.
    pub fn token(&self) -> Option<String> {
        self.token.clone()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Log lines (JSON) printed so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().expect("logs").clone()
    }

    fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<String>,
        token: Option<&str>,
    ) -> (u16, Value) {
        self.send_with(method, path, body, token.or(self.token.as_deref()))
    }

    /// Sends `method` on `path` with `body`, with `token` as the bearer token, or with no
    /// token at all.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        self.send_with(method, path, body.map(|b| b.to_string()), token)
    }

    fn send_with(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<String>,
        token: Option<&str>,
    ) -> (u16, Value) {
        let method_text = method.to_string();
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        let method = method_text;
        let res = req.send().unwrap_or_else(|e| panic!("{path}: {e}"));
        let code = res.status().as_u16();
        let text = res.text().expect("body");
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if let Some(contract) = self.contract()
            && let Err(broken) = contract.check(&method, path, code, &json)
        {
            panic!("the answer to {method} {path} breaks the API's contract: {broken}");
        }
        (code, json)
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None, None)
    }

    pub fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::PUT, path, Some(body.to_string()), None)
    }

    pub fn put_raw(&self, path: &str, body: &str) -> (u16, Value) {
        self.send(reqwest::Method::PUT, path, Some(body.to_string()), None)
    }

    pub fn post(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, None, None)
    }

    pub fn delete(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::DELETE, path, None, None)
    }

    pub fn request(&self, method: &str, path: &str, token: Option<&str>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        self.send(method, path, None, token)
    }

    /// SIGTERM, then wait for the exit.
    pub fn terminate(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        signal(child.id(), "TERM");
        child.wait().expect("wait")
    }

    /// Waits until the server exits on its own, at most `limit`.
    pub fn wait_exit(mut self, limit: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                started.elapsed() < limit,
                "the server did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: the process gets no chance to clean up.
    pub fn kill(mut self) {
        let mut child = self.child.take().expect("running");
        signal(child.id(), "KILL");
        child.wait().expect("wait");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A server stopped on purpose (`kill`, `terminate`) leaves its nodes to the next one.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            super::process::end_started_under(&self.work_dir);
        }
    }
}

pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig} {pid} failed");
}

/// Spawns `cmd` and waits for its "listening" log line; returns the child, its URL and the
/// log lines (kept up to date by a reader thread, which also keeps the pipe drained).
pub fn spawn_and_wait(mut cmd: Command) -> Result<(Child, String, Logs), String> {
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let stderr = child.stderr.take().expect("stderr piped");
    let logs = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel();
    {
        let logs = Arc::clone(&logs);
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["message"] == "listening"
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(v["url"].as_str().unwrap_or_default().to_string());
                }
                logs.lock().expect("logs").push(line);
            }
        });
    }
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(url) => Ok((child, url, logs)),
        Err(_) => {
            let _ = child.kill();
            let status = child.wait().ok();
            Err(format!(
                "no 'listening' line; exit {status:?}; logs: {:?}",
                logs.lock().expect("logs")
            ))
        }
    }
}

/// The first token a server wrote to `data_dir`, if it wrote one.
pub fn first_token(data_dir: &Path) -> Option<String> {
    std::fs::read_to_string(data_dir.join("admin.token"))
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// Runs `ebb` to completion and returns (exit code, stdout, stderr).
pub fn run_ebb(args: &[&str], envs: &[(&str, &str)], cwd: Option<&Path>) -> (i32, String, String) {
    let mut cmd = Command::new(EBB);
    cmd.args(args)
        .env_remove("EBB_TOKEN")
        .env_remove("EBB_TOKEN_FILE")
        .env_remove("EBB_DATA_DIR")
        .env_remove("EBB_SERVER");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let out = cmd.output().expect("run ebb");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `ebb serve` that must refuse to start; returns what it printed on stderr.
#[track_caller]
/// Runs `ebb serve` on `data_dir` with `args`, which must make it fail; returns its stderr.
/// The `ebb serve` arguments of the test store for `data_dir`: none for redb, the shared etcd
/// and the directory's prefix for etcd.
pub fn store_args(data_dir: &Path) -> Vec<String> {
    if super::etcd::enabled() {
        super::etcd::serve_args(data_dir)
    } else {
        Vec::new()
    }
}

/// Loses the data dir and the store of the server on it (the server must be stopped).
pub fn lose_store(data_dir: &Path) {
    std::fs::remove_dir_all(data_dir).expect("lose the data dir");
    if super::etcd::enabled() {
        super::etcd::delete_installation(&format!("{}/", super::etcd::prefix_of(data_dir)));
    }
}

/// Where the test store of `data_dir` is, for the library's store functions.
pub fn store_location(data_dir: &Path) -> ebb::store::Location {
    if super::etcd::enabled() {
        super::etcd::shared().location(&super::etcd::prefix_of(data_dir))
    } else {
        ebb::store::Location::Redb(data_dir.to_path_buf())
    }
}

pub fn serve_fails_with(data_dir: &Path, args: &[&str]) -> String {
    serve_fails_at("127.0.0.1:0", data_dir, args)
}

pub fn serve_fails(bind: &str, data_dir: &Path) -> String {
    serve_fails_at(bind, data_dir, &[])
}

/// Runs `ebb serve` on `bind` and `data_dir` with `args`, which must fail; its stderr.
fn serve_fails_at(bind: &str, data_dir: &Path, args: &[&str]) -> String {
    let store = if args.contains(&"--store") {
        Vec::new()
    } else {
        store_args(data_dir)
    };
    // The work dir inside the data dir, as for a server that starts: the default one is a
    // sibling, which a temporary data dir would leave behind.
    let work = work_dir(data_dir).to_str().expect("utf-8 path").to_string();
    let data_dir = data_dir.to_str().expect("utf-8 path");
    let mut all = vec!["serve", "--bind", bind, "--data-dir", data_dir];
    all.extend(store.iter().map(String::as_str));
    if !args.contains(&"--work-dir") {
        all.extend(["--work-dir", work.as_str()]);
    }
    all.extend_from_slice(args);
    let (code, _, stderr) = run_ebb(&all, &[], None);
    assert_eq!(code, 1, "serve should have failed: {stderr}");
    stderr
}

/// Asserts an error reply: the status code, the JSON body shape and a message fragment.
#[track_caller]
pub fn assert_error(reply: (u16, Value), code: u16, fragment: &str) {
    let (got, body) = reply;
    assert_eq!(got, code, "body: {body}");
    assert_eq!(body["code"], code, "body: {body}");
    let message = body["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message in {body}"));
    assert!(
        message.contains(fragment),
        "message {message:?} lacks {fragment:?}"
    );
}

impl Server {
    /// `POST path` with `body`, or `None` when the server could not be reached or answer
    /// (it was killed meanwhile, say).
    pub fn try_post_json(&self, path: &str, body: Value) -> Option<(u16, Value)> {
        let mut req = self.http.post(format!("{}{path}", self.url));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let res = req
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .ok()?;
        let code = res.status().as_u16();
        let text = res.text().ok()?;
        Some((
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    pub fn post_json(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(body.to_string()), None)
    }
}

/// Makes token `name` with `grants` (`{"namespaces": {...}}`, `{"instanceAdmin": true}`)
/// through `server`'s own token; returns its secret.
pub fn make_token(server: &Server, name: &str, grants: Value) -> String {
    let mut body = serde_json::json!({ "name": name });
    body.as_object_mut()
        .expect("object")
        .extend(grants.as_object().expect("grants").clone());
    let (code, made) = server.post_json("/v3/tokens", body);
    assert_eq!(code, 201, "{made}");
    made["token"].as_str().expect("secret").to_string()
}
