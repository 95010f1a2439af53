//! Reading request bodies: a size limit (413 past it) and JSON errors that name the field.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Largest request body accepted: 1 MiB.
pub const MAX_BODY: usize = 1 << 20;

/// A JSON request body of type `T`. An empty body is an error unless `T` is wrapped in
/// [`Option`]-like [`OrDefault`].
#[derive(Debug)]
pub struct Json<T>(pub T);

/// A JSON request body that may be left out (empty means `T::default()`).
#[derive(Debug)]
pub struct OrDefault<T>(pub T);

type Reading<T> = Pin<Box<dyn Future<Output = Result<T, ApiError>>>>;

impl<T: DeserializeOwned + 'static> FromRequest for Json<T> {
    type Error = ApiError;
    type Future = Reading<Self>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let bytes = read(req, payload);
        Box::pin(async move { parse(&bytes.await?).map(Json) })
    }
}

impl<T: DeserializeOwned + Default + 'static> FromRequest for OrDefault<T> {
    type Error = ApiError;
    type Future = Reading<Self>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let bytes = read(req, payload);
        Box::pin(async move {
            let bytes = bytes.await?;
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(OrDefault(T::default()));
            }
            parse(&bytes).map(OrDefault)
        })
    }
}

/// Reads a request body, bounded by [`MAX_BODY`] (a 413 past it, declared or sent).
pub fn read(req: &HttpRequest, payload: &mut Payload) -> Reading<web::BytesMut> {
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let mut payload = payload.take();
    Box::pin(async move {
        if declared.is_some_and(|n| n > MAX_BODY) {
            return Err(ApiError::BodyTooLarge { limit: MAX_BODY });
        }
        let mut buf = web::BytesMut::new();
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(|e| ApiError::Body {
                field: "body".into(),
                message: format!("cannot be read: {e}"),
            })?;
            if buf.len() + chunk.len() > MAX_BODY {
                return Err(ApiError::BodyTooLarge { limit: MAX_BODY });
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    })
}

/// Parses a JSON object, naming the path of the offending field
/// (`provisioner.properties[0].value`).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| ApiError::Body {
        field: "body".into(),
        message: format!("is not valid JSON ({e})"),
    })?;
    if !value.is_object() {
        let got = match value {
            serde_json::Value::Array(_) => "an array",
            serde_json::Value::String(_) => "a string",
            serde_json::Value::Number(_) => "a number",
            serde_json::Value::Bool(_) => "a boolean",
            serde_json::Value::Null | serde_json::Value::Object(_) => "null",
        };
        return Err(ApiError::Body {
            field: "body".into(),
            message: format!("must be a JSON object, got {got}"),
        });
    }
    serde_path_to_error::deserialize(Strict(value)).map_err(|e| {
        let path = e.path().to_string();
        ApiError::Body {
            field: if path == "." { "body".into() } else { path },
            message: e.into_inner().to_string(),
        }
    })
}

/// A JSON value read as strictly as the document describes it: where a struct or a map is
/// expected only an object is taken. (serde also builds a struct from an array of its
/// fields in order, so `"keepalive": [1, 2]` would pass for `{"killed": 1, "failed": 2}`,
/// and a JSON map from `null`.) Everything else reads as `serde_json::Value` does.
struct Strict(serde_json::Value);

impl<'de> serde::Deserializer<'de> for Strict {
    type Error = serde_json::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            serde_json::Value::Object(map) => visitor.visit_map(StrictMap {
                entries: map.into_iter(),
                value: None,
            }),
            serde_json::Value::Array(items) => visitor.visit_seq(StrictSeq(items.into_iter())),
            other @ (serde_json::Value::Null
            | serde_json::Value::Bool(_)
            | serde_json::Value::Number(_)
            | serde_json::Value::String(_)) => other.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_map(visitor)
    }

    fn deserialize_map<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        use serde::de::Error;
        match self.0 {
            serde_json::Value::Object(_) => self.deserialize_any(visitor),
            other @ (serde_json::Value::Null
            | serde_json::Value::Bool(_)
            | serde_json::Value::Number(_)
            | serde_json::Value::String(_)
            | serde_json::Value::Array(_)) => Err(serde_json::Error::invalid_type(
                unexpected(&other),
                &"an object",
            )),
        }
    }

    fn deserialize_option<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            serde_json::Value::Null => visitor.visit_none(),
            serde_json::Value::Bool(_)
            | serde_json::Value::Number(_)
            | serde_json::Value::String(_)
            | serde_json::Value::Array(_)
            | serde_json::Value::Object(_) => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: serde::de::Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct identifier ignored_any
    }
}

/// What a JSON value is, for an error.
fn unexpected(value: &serde_json::Value) -> serde::de::Unexpected<'_> {
    use serde::de::Unexpected;
    match value {
        serde_json::Value::Null => Unexpected::Unit,
        serde_json::Value::Bool(b) => Unexpected::Bool(*b),
        serde_json::Value::Number(_) => Unexpected::Other("a number"),
        serde_json::Value::String(s) => Unexpected::Str(s),
        serde_json::Value::Array(_) => Unexpected::Seq,
        serde_json::Value::Object(_) => Unexpected::Map,
    }
}

struct StrictMap {
    entries: serde_json::map::IntoIter,
    value: Option<serde_json::Value>,
}

impl<'de> serde::de::MapAccess<'de> for StrictMap {
    type Error = serde_json::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        match self.entries.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(serde_json::Value::String(key)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let value = self.value.take().unwrap_or(serde_json::Value::Null);
        seed.deserialize(Strict(value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

struct StrictSeq(std::vec::IntoIter<serde_json::Value>);

impl<'de> serde::de::SeqAccess<'de> for StrictSeq {
    type Error = serde_json::Error;

    fn next_element_seed<T: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        self.0
            .next()
            .map(|v| seed.deserialize(Strict(v)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Inner {
        a: u32,
        b: Option<String>,
    }

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Outer {
        inner: Inner,
        list: Vec<Inner>,
        #[serde(default)]
        maybe: Option<Inner>,
    }

    #[test]
    fn a_struct_is_read_from_an_object_only() {
        let good = br#"{"inner": {"a": 1, "b": "x"}, "list": [{"a": 2, "b": null}]}"#;
        let read: Outer = parse(good).expect("an object");
        assert_eq!(
            read.inner,
            Inner {
                a: 1,
                b: Some("x".into())
            }
        );
        assert_eq!(read.list.len(), 1);
        // serde alone takes an array of the fields in order: refused, naming the field.
        for (bad, field) in [
            (&br#"{"inner": [1, "x"], "list": []}"#[..], "inner"),
            (
                &br#"{"inner": {"a": 1}, "list": [[2, null]]}"#[..],
                "list[0]",
            ),
            (
                &br#"{"inner": {"a": 1}, "list": [], "maybe": [3, null]}"#[..],
                "maybe",
            ),
            (&br#"{"inner": null, "list": []}"#[..], "inner"),
        ] {
            match parse::<Outer>(bad) {
                Err(ApiError::Body { field: f, message }) => {
                    assert_eq!(f, field, "{message}");
                    assert!(message.contains("expected an object"), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
