//! A small blocking REST client for the ebb server.

use reqwest::Method;
use reqwest::blocking::{Client as Http, RequestBuilder};
use serde_json::Value;

use super::args::ClientArgs;

/// Why a CLI command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "cannot reach the ebb server at {server}: {reason}; is `ebb serve` running? (set --server or EBB_SERVER)"
    )]
    Unreachable { server: String, reason: String },
    #[error("{message} (HTTP {code})")]
    Server { code: u16, message: String },
    #[error("{0}")]
    Usage(String),
    #[error("cannot read {path}: {reason}")]
    File { path: String, reason: String },
    #[error(
        "the server's answer is not what this ebb expects ({0}); are client and server the same version?"
    )]
    Answer(String),
}

/// The ebb REST API, as seen from the CLI.
#[derive(Debug)]
pub struct Client {
    http: Http,
    base: String,
    token: Option<String>,
}

impl Client {
    pub fn new(args: &ClientArgs) -> Result<Client, CliError> {
        let mut builder = Http::builder().timeout(std::time::Duration::from_secs(60));
        if let Some(path) = &args.ca_cert {
            builder = builder.add_root_certificate(ca_certificate(path)?);
        }
        let http = builder
            .build()
            .map_err(|e| CliError::Usage(format!("cannot set up HTTP: {e}")))?;
        Ok(Client {
            http,
            base: args.server.trim_end_matches('/').to_string(),
            token: token(args)?,
        })
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        req
    }

    /// GETs `path` and reads the answer as a `T` (one of the model's view types).
    pub fn get_as<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        read_answer(self.get(path)?)
    }

    /// POSTs `body` to `path` under a fresh idempotency key (a start), sending it again with
    /// the same key when the server could not be reached or the answer was lost, so a retry
    /// never starts twice.
    pub fn post_once(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        let key = uuid::Uuid::now_v7().to_string();
        let mut tries = 0;
        loop {
            tries += 1;
            match self.send(Method::POST, path, Some(body), Some(&key)) {
                Err(CliError::Unreachable { .. }) if tries < 3 => {
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
                answer => return answer,
            }
        }
    }

    /// Sends a request and returns the JSON answer, or the server's error message.
    pub fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        self.send(method, path, body, None)
    }

    fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Result<Value, CliError> {
        let mut req = self.request(method, path);
        if let Some(body) = body {
            req = req.json(body);
        }
        if let Some(key) = idempotency_key {
            req = req.header("Idempotency-Key", key);
        }
        let res = req.send().map_err(|e| CliError::Unreachable {
            server: self.base.clone(),
            reason: root_cause(&e),
        })?;
        let status = res.status();
        let text = res.text().unwrap_or_default();
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            return Ok(json);
        }
        let message = json
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| json.to_string());
        Err(CliError::Server {
            code: status.as_u16(),
            message,
        })
    }

    pub fn get(&self, path: &str) -> Result<Value, CliError> {
        self.call(Method::GET, path, None)
    }

    /// GET that answers `None` on 404.
    pub fn get_opt(&self, path: &str) -> Result<Option<Value>, CliError> {
        match self.get(path) {
            Ok(v) => Ok(Some(v)),
            Err(CliError::Server { code: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The CA certificate (PEM) in `path`.
pub fn ca_certificate(path: &std::path::Path) -> Result<reqwest::Certificate, CliError> {
    let file = |reason: String| CliError::File {
        path: path.display().to_string(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| file(e.to_string()))?;
    reqwest::Certificate::from_pem(&pem).map_err(|e| file(e.to_string()))
}

/// The token to send: `--token`, else the content of `--token-file`, else the first token
/// `ebb serve` wrote to the data dir, when this user can read it; else none.
fn token(args: &ClientArgs) -> Result<Option<String>, CliError> {
    if let Some(token) = args.token.clone().filter(|t| !t.is_empty()) {
        return Ok(Some(token));
    }
    let read =
        |path: &std::path::Path| std::fs::read_to_string(path).map(|text| text.trim().to_string());
    if let Some(path) = &args.token_file {
        let token = read(path).map_err(|e| CliError::File {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        return Ok(Some(token).filter(|t| !t.is_empty()));
    }
    let first = args.data_dir.join(crate::model::access::FIRST_TOKEN_FILE);
    Ok(read(&first).ok().filter(|t| !t.is_empty()))
}

/// Reads (part of) a server's answer as a `T`, one of the model's types.
pub fn read_answer<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, CliError> {
    serde_json::from_value(v).map_err(|e| CliError::Answer(e.to_string()))
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
