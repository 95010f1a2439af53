//! What ebb's Google Cloud provisioners (`gcp-compute`, `gcp-dataproc`) share: credentials,
//! labels, request ids, client caching and error classes.
//!
//! Credentials: `anonymous=true` (stand-ins and emulators), else the service-account key JSON
//! in `accountKey` (a `${secure(name)}` reference), else Application Default Credentials.
//! ebb's tags become labels (`ebb:run` → `ebb-run`), since label keys allow no `:`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use ebb_spi::{Context, PropertyKind, PropertySpec, ProvisionError, ResourceKey, Tags};
use google_cloud_auth::credentials::Credentials;

/// The service-account key (JSON) to call the API with.
pub const ACCOUNT_KEY: PropertySpec = PropertySpec::secret("accountKey", PropertyKind::Text);
/// The API's endpoint, for a stand-in or a private endpoint.
pub const ENDPOINT: PropertySpec =
    PropertySpec::optional("endpoint", PropertyKind::Text).author_only();
/// Call without credentials (a stand-in or an emulator).
pub const ANONYMOUS: PropertySpec =
    PropertySpec::optional("anonymous", PropertyKind::Boolean).author_only();
/// More labels for every resource: `key=value,...`.
pub const LABELS: PropertySpec = PropertySpec::optional("labels", PropertyKind::Text);

/// The credentials `ctx` asks for.
pub fn credentials(ctx: &Context) -> Result<Credentials, ProvisionError> {
    if ctx.property(ANONYMOUS.name) == Some("true") {
        return Ok(google_cloud_auth::credentials::anonymous::Builder::new().build());
    }
    if let Some(key) = ctx.property(ACCOUNT_KEY.name) {
        let json: serde_json::Value = serde_json::from_str(key).map_err(|e| {
            ProvisionError::fatal(format!("property 'accountKey' is not a JSON key: {e}"))
        })?;
        return google_cloud_auth::credentials::service_account::Builder::new(json)
            .build()
            .map_err(|e| ProvisionError::fatal(format!("property 'accountKey': {e}")));
    }
    google_cloud_auth::credentials::Builder::default()
        .build()
        .map_err(|e| {
            ProvisionError::fatal(format!(
                "no Google credentials: set accountKey, or provide Application Default Credentials ({e})"
            ))
        })
}

/// A label key or value: lower case letters, digits, `-` and `_`, at most 63 characters.
pub fn label_value(text: &str) -> String {
    text.chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect()
}

/// ebb's tags as labels (`ebb:run` → `ebb-run`), with the profile's `labels`.
pub fn labels(ctx: &Context, tags: &Tags) -> Result<HashMap<String, String>, ProvisionError> {
    let mut out: HashMap<String, String> = parse_labels(ctx.property(LABELS.name).unwrap_or(""))
        .map_err(ProvisionError::fatal)?
        .into_iter()
        .collect();
    for (k, v) in tags {
        out.insert(label_value(&k.replace(':', "-")), label_value(v));
    }
    Ok(out)
}

/// `key=value,...`; keys starting `ebb-` or `goog` are refused.
pub fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("property 'labels': '{item}' is not key=value"))?;
        let k = k.trim();
        if k.is_empty() || k.starts_with("ebb-") || k.starts_with("goog") || label_value(k) != k {
            return Err(format!(
                "property 'labels': '{k}' is not a label key ebb may set (lower case, digits, - and _; not ebb- or goog)"
            ));
        }
        out.insert(k.to_string(), label_value(v.trim()));
    }
    Ok(out)
}

/// Checks `properties` against `spec`, and the `labels` property's syntax.
pub fn validate(
    spec: &ebb_spi::ProvisionerSpec,
    properties: &ebb_spi::Properties,
) -> Result<(), ebb_spi::PropertyError> {
    ebb_spi::validate_properties(spec, properties)?;
    if let Some(text) = properties.get(LABELS.name) {
        parse_labels(text).map_err(|e| ebb_spi::PropertyError::new(LABELS.name, e))?;
    }
    Ok(())
}

/// The ebb tags among `labels` (`ebb-run` → `ebb:run`).
pub fn tags_of<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Tags {
    labels
        .into_iter()
        .filter_map(|(k, v)| Some((format!("ebb:{}", k.strip_prefix("ebb-")?), v.clone())))
        .collect()
}

/// 64-bit FNV-1a of `bytes` from `seed`: stable across builds and platforms.
fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(seed, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A UUID (version 8) derived from `op`, the run, the node and the generation: a resent
/// request carries the same id, so the API answers it with the first one's operation.
pub fn request_id(op: &str, key: &ResourceKey) -> String {
    let text = format!("{op}/{}/{}/{}", key.run, key.node, key.generation);
    let hi = fnv(0xcbf2_9ce4_8422_2325, text.as_bytes());
    let lo = fnv(0x8422_2325_cbf2_9ce4, text.as_bytes());
    let hi = (hi & 0xffff_ffff_ffff_0fff) | 0x8000; // version 8
    let lo = (lo & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000; // RFC 4122 variant
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// How a failed API call ends the step: throttling (HTTP 429, `RESOURCE_EXHAUSTED`, and
/// Compute Engine's 403 `rateLimitExceeded`) is waited out as backpressure; 5xx, timeouts and
/// broken connections are retried; anything else (a bad machine type, a missing permission)
/// is fatal.
pub fn classify(what: &str, e: &google_cloud_gax::error::Error) -> ProvisionError {
    let status = e.http_status_code();
    let message = match e.status() {
        Some(s) => format!("{what}: {:?}: {}", s.code, s.message),
        None => format!("{what}: {e}"),
    };
    let exhausted = e
        .status()
        .is_some_and(|s| s.code == google_cloud_gax::error::rpc::Code::ResourceExhausted);
    // Compute Engine's errors carry no gRPC status: its reason is in the body, its words in
    // the message.
    let mut said = e.http_payload().map(|p| p.to_vec()).unwrap_or_default();
    if let Some(s) = e.status() {
        said.extend_from_slice(s.message.as_bytes());
    }
    if is_throttling(status, exhausted, &said) {
        let after = e
            .http_headers()
            .and_then(|h| h.get("retry-after"))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(std::time::Duration::from_secs);
        return ProvisionError::throttled(after, message);
    }
    let retryable = matches!(status, Some(408 | 429 | 500..=599))
        || e.is_timeout()
        || e.is_io()
        || e.is_connect()
        || e.is_transport()
        || e.is_exhausted();
    if retryable {
        ProvisionError::retryable(message)
    } else {
        ProvisionError::fatal(message)
    }
}

/// Whether an answer (its HTTP status, whether its status is `RESOURCE_EXHAUSTED`, its body
/// and message) is Google throttling the caller: a 403 for a rate (`rateLimitExceeded`, "Rate
/// Limit Exceeded", a quota "per minute") is; any other 403 (a missing permission) is not.
fn is_throttling(status: Option<u16>, exhausted: bool, said: &[u8]) -> bool {
    let said = String::from_utf8_lossy(said).to_ascii_lowercase();
    let rate = [
        "ratelimitexceeded",
        "rate_limit_exceeded",
        "rate limit exceeded",
        "per minute",
    ]
    .iter()
    .any(|w| said.contains(w));
    status == Some(429) || exhausted || (status == Some(403) && rate)
}

/// Whether the call failed with 404.
pub fn is_not_found(e: &google_cloud_gax::error::Error) -> bool {
    e.http_status_code() == Some(404)
}

/// Whether the call failed with 409 (a resource with that name exists).
pub fn is_conflict(e: &google_cloud_gax::error::Error) -> bool {
    e.http_status_code() == Some(409)
}

/// Clients built once per account (endpoint and credentials), so tokens are cached.
#[derive(Debug)]
pub struct Clients<T>(Mutex<HashMap<String, T>>);

impl<T> Default for Clients<T> {
    fn default() -> Self {
        Clients(Mutex::new(HashMap::new()))
    }
}

impl<T: Clone> Clients<T> {
    pub fn get(&self, account: &str) -> Option<T> {
        self.0.lock().ok()?.get(account).cloned()
    }

    pub fn put(&self, account: &str, client: T) {
        if let Ok(mut map) = self.0.lock() {
            map.insert(account.to_string(), client);
        }
    }
}

/// The cache key of `ctx`'s client: endpoint and credentials (the key's hash, never the key).
pub fn account_key(ctx: &Context) -> String {
    let key = ctx.property(ACCOUNT_KEY.name).unwrap_or("");
    format!(
        "{}|{}|{:016x}",
        ctx.property(ENDPOINT.name).unwrap_or(""),
        ctx.property(ANONYMOUS.name).unwrap_or("false"),
        fnv(0xcbf2_9ce4_8422_2325, key.as_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_stable_uuids() {
        let key = ResourceKey::new("0190-run", "master");
        let id = request_id("insert", &key);
        assert_eq!(id, request_id("insert", &key));
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "8", "version 8: {id}");
        assert_ne!(id, request_id("delete", &key));
        let mut next = key.clone();
        next.generation = 1;
        assert_ne!(id, request_id("insert", &next));
    }

    #[test]
    fn throttling_is_told_from_a_missing_permission() {
        let rate = br#"{"error":{"code":403,"message":"Rate Limit Exceeded","errors":[{"reason":"rateLimitExceeded"}]}}"#;
        assert!(is_throttling(Some(403), false, rate));
        let denied = br#"{"error":{"code":403,"message":"Required 'compute.instances.create' permission","errors":[{"reason":"forbidden"}]}}"#;
        assert!(!is_throttling(Some(403), false, denied));
        assert!(is_throttling(Some(429), false, b""));
        assert!(is_throttling(None, true, b""));
        assert!(!is_throttling(Some(500), false, b""));
        let per_minute = b"Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute' of service 'compute.googleapis.com'";
        assert!(is_throttling(Some(403), false, per_minute));
    }

    #[test]
    fn tags_become_labels_and_back() {
        let ctx = Context::new(
            ebb_spi::properties([("labels", "team=data, cost_center=42")]),
            std::path::PathBuf::new(),
        );
        let tags: Tags = [("ebb:run", "0190-abc"), ("ebb:profile", "USER:My Profile")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let labels = labels(&ctx, &tags).expect("valid");
        assert_eq!(labels["ebb-run"], "0190-abc");
        assert_eq!(labels["ebb-profile"], "user_my_profile");
        assert_eq!(labels["team"], "data");
        let back = tags_of(&labels);
        assert_eq!(back["ebb:run"], "0190-abc");
        assert!(!back.contains_key("ebb:team"));
        for bad in ["ebb-run=x", "Team=x", "novalue", "goog-x=1"] {
            assert!(parse_labels(bad).is_err(), "{bad}");
        }
    }
}
