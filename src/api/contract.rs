//! What each route takes and answers, as types the document is made from.
//!
//! A handler's argument types ([`Takes`]) say what it reads (a JSON body, query parameters)
//! and its return type ([`Gives`]) says what it answers: [`Reply<T>`] is a `T` as JSON with
//! status 200 (or the `STATUS` it names). A row of the route table is made from the handler
//! itself ([`Route::api`](crate::api::route::Route::api)), so the OpenAPI document describes
//! exactly the types the handler parses and serializes; it cannot drift from them.

use actix_web::body::BoxBody;
use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{FromRequest, HttpRequest, HttpResponse, Responder, web};
use schemars::generate::{Contract, SchemaSettings};
use schemars::{JsonSchema, SchemaGenerator};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::api::error::ApiError;

/// A successful answer: a body of type `T` as JSON with status `STATUS`, or the answer of
/// the server the request was forwarded to (the same operation there, so the same contract).
#[derive(Debug)]
pub struct Answer<T, const STATUS: u16 = 200> {
    body: Sent<T>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

#[derive(Debug)]
enum Sent<T> {
    Body(T),
    Forwarded(HttpResponse),
}

/// What a handler returns: an [`Answer`] or an error.
pub type Reply<T, const STATUS: u16 = 200> = Result<Answer<T, STATUS>, ApiError>;

/// `value` with status 200.
pub fn ok<T>(value: T) -> Reply<T> {
    Ok(Answer::new(value))
}

impl<T, const STATUS: u16> Answer<T, STATUS> {
    pub fn new(body: T) -> Self {
        Answer {
            body: Sent::Body(body),
            headers: Vec::new(),
        }
    }

    /// The answer of another server, passed on as it came.
    pub fn forwarded(response: HttpResponse) -> Self {
        Answer {
            body: Sent::Forwarded(response),
            headers: Vec::new(),
        }
    }

    /// With header `name: value` (a value that is not a valid header is left out).
    pub fn header(mut self, name: HeaderName, value: &str) -> Self {
        if let Ok(value) = HeaderValue::from_str(value) {
            self.headers.push((name, value));
        }
        self
    }
}

impl<T: Serialize, const STATUS: u16> Responder for Answer<T, STATUS> {
    type Body = BoxBody;

    fn respond_to(self, _: &HttpRequest) -> HttpResponse {
        let mut response = match self.body {
            Sent::Forwarded(response) => return response,
            Sent::Body(body) => {
                let status = StatusCode::from_u16(STATUS).unwrap_or(StatusCode::OK);
                HttpResponse::build(status).json(body)
            }
        };
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response
    }
}

/// The Prometheus text exposition format (`GET /metrics`).
#[derive(Debug)]
pub struct Prometheus(pub String);

impl Responder for Prometheus {
    type Body = BoxBody;

    fn respond_to(self, _: &HttpRequest) -> HttpResponse {
        HttpResponse::Ok()
            .content_type("text/plain; version=0.0.4; charset=utf-8")
            .body(self.0)
    }
}

/// Typed query parameters: `T`'s fields by name; one that does not parse is a 400 naming it.
/// Parameters `T` does not name are ignored.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned> FromRequest for Query<T> {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        std::future::ready(parse_query(req.query_string()).map(Query))
    }
}

/// Parses query string `query` into `T`, naming the parameter at fault.
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let pairs = form_urlencoded::parse(query.as_bytes());
    let deserializer = serde_urlencoded::Deserializer::new(pairs);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        if path == "." || path.is_empty() {
            ApiError::Query(format!("string cannot be read: {message}"))
        } else {
            ApiError::Query(format!("'{path}' {message}"))
        }
    })
}

/// A boolean query parameter: `true` or `false`, as the document says.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Flag(pub bool);

impl std::str::FromStr for Flag {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "true" => Ok(Flag(true)),
            "false" => Ok(Flag(false)),
            _ => Err(format!("must be true or false, got '{text}'")),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Flag {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The query parameters each method of one resource takes, by name.
pub type Params = std::sync::Arc<[(actix_web::http::Method, Vec<String>)]>;

/// Refuses a request whose query names a parameter its operation does not take (a typo such
/// as `?limt=5` is a 400 naming it, not silently ignored). Methods the resource does not
/// have go on to their 405.
pub async fn known_query(
    params: Params,
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<BoxBody>,
) -> Result<actix_web::dev::ServiceResponse<BoxBody>, actix_web::Error> {
    if let Some((_, names)) = params.iter().find(|(m, _)| m == req.method()) {
        let query = req.query_string();
        let unknown = form_urlencoded::parse(query.as_bytes())
            .map(|(key, _)| key)
            .find(|key| !names.iter().any(|n| n == key));
        if let Some(key) = unknown {
            let takes = if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            };
            let mut shown: String = key.chars().take(64).collect();
            if shown.len() < key.len() {
                shown.push_str("...");
            }
            return Err(ApiError::Query(format!(
                "'{shown}' is not a parameter of {} {}; it takes {takes}",
                req.method(),
                crate::api::pattern::shown(&req.match_pattern().unwrap_or_default())
            ))
            .into());
        }
    }
    next.call(req).await
}

/// Boolean query parameter `name` of `req` ([`Flag`]): absent is false.
pub fn flag(req: &HttpRequest, name: &str) -> Result<bool, ApiError> {
    let found = form_urlencoded::parse(req.query_string().as_bytes()).find(|(k, _)| k == name);
    match found {
        None => Ok(false),
        Some((_, value)) => value
            .parse::<Flag>()
            .map(|f| f.0)
            .map_err(|m| ApiError::Query(format!("'{name}' {m}"))),
    }
}

impl JsonSchema for Flag {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Flag".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "boolean"})
    }
}

/// An operation's parts that a handler's types describe.
#[derive(Debug, Default)]
pub struct Parts {
    /// The request body's schema, and whether it must be sent.
    pub body: Option<(Value, bool)>,
    /// Query parameters, as OpenAPI parameter objects.
    pub query: Vec<Value>,
    /// The success status, its media type and schema.
    pub reply: Option<(u16, &'static str, Value)>,
}

/// The schema generators of one document: answers are described as they are serialized,
/// bodies as they are parsed (a field with a default need not be sent; unknown fields may be
/// refused). Their definitions meet in `components/schemas`
/// ([`openapi`](crate::api::openapi) keeps the two apart where they differ).
#[derive(Debug)]
pub struct Generators {
    pub answers: SchemaGenerator,
    pub bodies: SchemaGenerator,
}

impl Default for Generators {
    fn default() -> Self {
        let settings = |contract| {
            let mut s = SchemaSettings::draft2020_12();
            s.definitions_path = "/components/schemas/".into();
            s.meta_schema = None;
            s.contract = contract;
            s
        };
        Generators {
            answers: settings(Contract::Serialize).into_generator(),
            bodies: settings(Contract::Deserialize).into_generator(),
        }
    }
}

/// How a part of a handler's arguments shows in its operation.
pub trait Takes {
    /// Adds what this argument reads to `parts`; most read nothing a document shows.
    fn describe(_parts: &mut Parts, _generators: &mut Generators) {}
}

/// How a handler's answer shows in its operation.
pub trait Gives {
    fn describe(parts: &mut Parts, generators: &mut Generators);
}

impl<T: JsonSchema, const STATUS: u16> Gives for Reply<T, STATUS> {
    fn describe(parts: &mut Parts, generators: &mut Generators) {
        let schema = generators.answers.subschema_for::<T>().to_value();
        parts.reply = Some((STATUS, "application/json", schema));
    }
}

impl Gives for Result<Prometheus, ApiError> {
    fn describe(parts: &mut Parts, _: &mut Generators) {
        parts.reply = Some((200, "text/plain", json!({"type": "string"})));
    }
}

impl<T: JsonSchema> Takes for crate::api::body::Json<T> {
    fn describe(parts: &mut Parts, generators: &mut Generators) {
        let schema = generators.bodies.subschema_for::<T>().to_value();
        parts.body = Some((schema, true));
    }
}

impl<T: JsonSchema> Takes for crate::api::body::OrDefault<T> {
    fn describe(parts: &mut Parts, generators: &mut Generators) {
        let schema = generators.bodies.subschema_for::<T>().to_value();
        parts.body = Some((schema, false));
    }
}

impl<T: JsonSchema> Takes for Query<T> {
    fn describe(parts: &mut Parts, generators: &mut Generators) {
        let schema = T::json_schema(&mut generators.bodies).to_value();
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(properties) = schema["properties"].as_object() {
            for (name, schema) in properties {
                let mut schema = schema.clone();
                let description = schema.as_object_mut().and_then(|s| s.remove("description"));
                let mut param = json!({
                    "name": name,
                    "in": "query",
                    "required": required.contains(&name.as_str()),
                    "schema": not_null(schema),
                });
                if let Some(text) = description {
                    param["description"] = text;
                }
                parts.query.push(param);
            }
        }
    }
}

/// `schema` without its `null`: a query parameter left out is `None`; it cannot be null.
fn not_null(mut schema: Value) -> Value {
    if let Some(fields) = schema.as_object_mut()
        && fields.get("default") == Some(&Value::Null)
    {
        fields.remove("default");
    }
    if let Some(Value::Array(types)) = schema.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            schema["type"] = only.clone();
        }
    }
    if let Some(Value::Array(any)) = schema.get("anyOf") {
        let rest: Vec<&Value> = any.iter().filter(|s| s["type"] != "null").collect();
        if let [only] = rest.as_slice() {
            return (*only).clone();
        }
    }
    schema
}

impl<T> Takes for web::Data<T> {}
impl<T> Takes for web::Path<T> {}
impl Takes for HttpRequest {}
impl Takes for crate::model::access::Caller {}

macro_rules! takes_tuple {
    ($($name:ident),*) => {
        impl<$($name: Takes),*> Takes for ($($name,)*) {
            #[allow(unused_variables)]
            fn describe(parts: &mut Parts, generators: &mut Generators) {
                $($name::describe(parts, generators);)*
            }
        }
    };
}

takes_tuple!();
takes_tuple!(A);
takes_tuple!(A, B);
takes_tuple!(A, B, C);
takes_tuple!(A, B, C, D);
takes_tuple!(A, B, C, D, E);
takes_tuple!(A, B, C, D, E, F);
