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

fn read(req: &HttpRequest, payload: &mut Payload) -> Reading<web::BytesMut> {
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
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        ApiError::Body {
            field: if path == "." { "body".into() } else { path },
            message: e.into_inner().to_string(),
        }
    })
}
