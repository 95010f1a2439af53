//! Reading what the command line gives: API paths of named entities, durations, NAME=VALUE
//! pairs, JSON files.

use std::path::Path;

use serde_json::Value;

use super::args::ProfileTarget;
use super::client::CliError;

/// The API path of a profile named on the command line.
pub fn profile_path(target: &ProfileTarget) -> Result<String, CliError> {
    scoped_path("profiles", &target.profile, &target.namespace)
}

/// The API path of a scoped entity (`profiles`, `templates`): `SYSTEM:<name>` at the top
/// level, `USER:<name>` or `<name>` in `namespace`.
pub fn scoped_path(kind: &str, scoped: &str, namespace: &str) -> Result<String, CliError> {
    let (scope, name) = match scoped.split_once(':') {
        Some((s, n)) => (s.to_ascii_uppercase(), n),
        None => ("USER".to_string(), scoped),
    };
    match scope.as_str() {
        "SYSTEM" => Ok(format!("/v3/{kind}/{name}")),
        "USER" => Ok(format!("/v3/namespaces/{namespace}/{kind}/{name}")),
        other => Err(CliError::Usage(format!(
            "unknown scope '{other}': use SYSTEM:<name>, USER:<name> or <name>"
        ))),
    }
}

pub fn duration(flag: &str, value: &str) -> Result<u64, CliError> {
    ebb_spi::parse_duration(value)
        .map(|d| d.as_secs())
        .map_err(|e| CliError::Usage(format!("{flag} {e}")))
}

pub fn split_pair(pair: &str) -> Result<(&str, &str), CliError> {
    match pair.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k, v)),
        _ => Err(CliError::Usage(format!("'{pair}' is not NAME=VALUE"))),
    }
}

pub fn read_json(file: &Path) -> Result<Value, CliError> {
    let bad = |reason: String| CliError::File {
        path: file.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))
}
