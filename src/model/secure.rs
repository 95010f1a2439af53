//! Secure keys as the API shows and takes them: metadata, never the data.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What the API shows of a secure key: never its data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyMetadata {
    pub name: String,
    pub description: String,
    pub created_epoch_ms: u64,
    pub properties: BTreeMap<String, String>,
}

/// The body of `PUT .../securekeys/{name}` (CDAP's shape). Its `Debug` hides the data.
#[derive(Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"data": "s3cret", "description": "a password"}))]
pub struct KeySpec {
    #[serde(default)]
    pub description: Option<String>,
    pub data: String,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

impl std::fmt::Debug for KeySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySpec")
            .field("description", &self.description)
            .field("data", &format_args!("({} bytes)", self.data.len()))
            .field("properties", &self.properties)
            .finish()
    }
}
