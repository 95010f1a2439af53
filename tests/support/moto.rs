//! A real moto server, the EC2 stand-in the aws-ec2 tests run against: one per test, on a
//! free 127.0.0.1 port, from the virtualenv `tests/support/moto/setup.sh` makes (it installs
//! moto the first time; a test fails loudly if it cannot).

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::process::{Process, start_moto};
use super::profiles::put_profile;
use super::server::Server;

/// An AMI moto knows, so that its AMI check (on, as in EC2) passes.
pub const AMI: &str = "ami-1e749f67";
pub const REGION: &str = "us-east-1";
/// The secret the tests keep in ebb's secure store; no ebb answer may ever contain it.
pub const SECRET: &str = "ebb-test-secret-7c1f9a2e";

/// A running moto server; killed when dropped.
pub struct Moto {
    _process: Process,
    pub url: String,
    http: reqwest::blocking::Client,
}

impl Moto {
    pub fn start() -> Moto {
        let (process, url) = start_moto(Path::new(env!("CARGO_MANIFEST_DIR")));
        Moto {
            _process: process,
            url,
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("client"),
        }
    }

    fn control(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self
            .http
            .request(method, format!("{}/_ebb/{path}", self.url));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let text = req
            .send()
            .and_then(|r| r.text())
            .unwrap_or_else(|e| panic!("moto {path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("moto {path}: {e}: {text}"))
    }

    /// Adds a fault (see tests/support/moto/server.py).
    pub fn fault(&self, rule: Value) {
        self.control(reqwest::Method::POST, "faults", Some(rule));
    }

    pub fn clear_faults(&self) {
        self.control(reqwest::Method::DELETE, "faults", None);
    }

    /// Every EC2 call moto answered: `{"action", "filters"}`.
    pub fn calls(&self) -> Vec<Value> {
        self.control(reqwest::Method::GET, "calls", None)
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    pub fn count(&self, action: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| c["action"] == action)
            .count()
    }

    /// Every instance moto holds, terminated ones too.
    pub fn instances(&self) -> Vec<Value> {
        self.control(reqwest::Method::GET, "instances", None)
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The instances of run `run_id`.
    pub fn of_run(&self, run_id: &str) -> Vec<Value> {
        self.instances()
            .into_iter()
            .filter(|i| i["tags"]["ebb:run"] == run_id)
            .collect()
    }

    /// Launches an instance with `tags` through the EC2 API itself, as another client would.
    pub fn run_instance(&self, tags: &[(&str, &str)]) -> String {
        let mut form = vec![
            ("Action".to_string(), "RunInstances".to_string()),
            ("Version".to_string(), "2016-11-15".to_string()),
            ("ImageId".to_string(), AMI.to_string()),
            ("InstanceType".to_string(), "t3.micro".to_string()),
            ("MinCount".to_string(), "1".to_string()),
            ("MaxCount".to_string(), "1".to_string()),
            (
                "TagSpecification.1.ResourceType".to_string(),
                "instance".to_string(),
            ),
        ];
        for (i, (k, v)) in tags.iter().enumerate() {
            form.push((
                format!("TagSpecification.1.Tag.{}.Key", i + 1),
                k.to_string(),
            ));
            form.push((
                format!("TagSpecification.1.Tag.{}.Value", i + 1),
                v.to_string(),
            ));
        }
        let text = self
            .http
            .post(&self.url)
            // Moto routes by the credential scope; it does not check the signature.
            .header(
                "Authorization",
                format!(
                    "AWS4-HMAC-SHA256 Credential=testing/20260101/{REGION}/ec2/aws4_request, SignedHeaders=host, Signature=0"
                ),
            )
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(
                form.iter()
                    .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                    .collect::<Vec<_>>()
                    .join("&"),
            )
            .send()
            .and_then(|r| r.text())
            .expect("RunInstances");
        let start = text.find("<instanceId>").expect("an instance id") + "<instanceId>".len();
        let end = text[start..].find('<').expect("end of id");
        text[start..start + end].to_string()
    }
}

/// Percent-encodes a form value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Keeps [`SECRET`] in the secure store of `default` as `aws-secret`.
pub fn put_secret(server: &Server) {
    let (code, body) = server.put(
        "/v3/namespaces/default/securekeys/aws-secret",
        json!({"description": "moto's secret access key", "data": SECRET}),
    );
    assert_eq!(code, 200, "{body}");
}

/// Creates USER profile `name` in `default` for aws-ec2 against `moto`, its secret a secure
/// reference; `props` add or replace properties.
pub fn aws_profile(
    server: &Server,
    moto: &Moto,
    name: &str,
    props: &[(&str, &str)],
    timeout: Option<u64>,
) {
    let base = [
        ("region", REGION),
        ("accessKeyId", "testing"),
        ("secretAccessKey", "${secure(aws-secret)}"),
        ("endpointUrl", moto.url.as_str()),
        ("imageId", AMI),
        ("instanceType", "t3.micro"),
        ("nodes", "3"),
    ];
    put_profile(server, name, "aws-ec2", &base, props, timeout);
}
