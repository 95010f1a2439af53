//! Durations in API bodies: whole seconds, or text a person types (`"8h"`, `"90s"`).

use serde::Deserialize;

/// Longest timeout or keepalive accepted: ten years, far beyond any sensible value, short of
/// overflow in deadline arithmetic.
pub const MAX_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// Longest text of a duration (`"1h 30m"`) accepted.
const MAX_SECONDS_TEXT: usize = 64;

/// A duration in whole seconds: a non-negative JSON number, or text a person types (`"8h"`,
/// `"90s"`, `"1h 30m"`), parsed with humantime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(pub u64);

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let secs = match serde_json::Value::deserialize(d)? {
            serde_json::Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    u
                } else if n.as_i64().is_some_and(|i| i < 0) || n.as_f64().is_some_and(|f| f < 0.0) {
                    return Err(D::Error::custom(format!("must not be negative, got {n}")));
                } else {
                    return Err(D::Error::custom(format!("must be whole seconds, got {n}")));
                }
            }
            serde_json::Value::String(s) if s.len() > MAX_SECONDS_TEXT => {
                return Err(D::Error::custom(format!(
                    "must be at most {MAX_SECONDS_TEXT} characters, got {}",
                    s.len()
                )));
            }
            serde_json::Value::String(s) => ebb_spi::parse_duration(&s)
                .map_err(D::Error::custom)?
                .as_secs(),
            other @ (serde_json::Value::Null
            | serde_json::Value::Bool(_)
            | serde_json::Value::Array(_)
            | serde_json::Value::Object(_)) => {
                return Err(D::Error::custom(format!(
                    "expected seconds or a duration like \"8h\", got {other}"
                )));
            }
        };
        if secs > MAX_SECONDS {
            return Err(D::Error::custom(format!(
                "must be at most {MAX_SECONDS} seconds (ten years), got {secs}"
            )));
        }
        Ok(Seconds(secs))
    }
}

impl schemars::JsonSchema for Seconds {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Seconds".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Whole seconds (at most ten years), or a duration as text: \"8h\", \"90s\", \"1h 30m\".",
            "oneOf": [
                {"type": "integer", "minimum": 0, "maximum": MAX_SECONDS},
                {"type": "string", "maxLength": MAX_SECONDS_TEXT}
            ]
        })
    }
}
