//! The API's contract as an OpenAPI 3.1 document (`GET /v3/openapi.json`), generated from
//! the route table, so a route cannot exist without being described: every path and method,
//! its path and query parameters, its body and answer (schemas from the Rust types its
//! handler parses and serializes, [`contract`](crate::api::contract)), the token and the role
//! it needs (`x-ebb-need`), and the one error shape every failure answers with.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::api::contract::{Generators, Parts};
use crate::api::error::ErrorBody;
use crate::api::route::Route;
use crate::model::access::Need;

/// The document as the API serves it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(transparent)]
pub struct Document(pub Value);

impl schemars::JsonSchema for Document {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "OpenApiDocument".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "This document: OpenAPI 3.1.",
            "type": "object",
            "required": ["openapi", "info", "paths"]
        })
    }
}

/// Where the schemas of the document live.
const SCHEMAS: &str = "#/components/schemas/";

/// The statuses a route may answer with an error, by what it needs. Any request may be
/// answered 408 (its body stopped arriving) and 429 (its address has its share in flight).
fn errors(route: &Route) -> Vec<u16> {
    let mut out = vec![400, 404, 408, 429, 503];
    if route.need != Need::Public {
        out.extend([401, 403]);
    }
    if route.method != actix_web::http::Method::GET {
        out.extend([405, 409, 413, 415]);
    }
    out.sort_unstable();
    out
}

/// An operation id from a route: `GET /namespaces/{ns}/profiles` → `get_namespaces_ns_profiles`.
fn operation_id(route: &Route) -> String {
    let mut id = route.method.as_str().to_ascii_lowercase();
    for part in crate::api::pattern::shown(route.path)
        .split('/')
        .filter(|p| !p.is_empty())
    {
        id.push('_');
        id.push_str(
            &part
                .trim_matches(|c| c == '{' || c == '}')
                .replace('-', "_"),
        );
    }
    id
}

/// What a route needs, as the document says it.
fn need_text(need: Need) -> String {
    match need {
        Need::Public => "public".into(),
        Need::Token => "any token".into(),
        Need::AnyAdmin => "admin of some namespace, or instance admin".into(),
        Need::Namespace(role) => format!("{role} in the namespace, or instance admin"),
        Need::Instance => "instance admin".into(),
        Need::Metrics => "instance admin, or a token given metrics".into(),
    }
}

/// The OpenAPI document of every route.
pub fn document(table: &[Route]) -> Value {
    let mut generators = Generators::default();
    let mut parts: Vec<Parts> = table
        .iter()
        .map(|route| {
            route
                .doc
                .map(|doc| doc.parts(&mut generators))
                .unwrap_or_default()
        })
        .collect();
    let error = generators.answers.subschema_for::<ErrorBody>().to_value();
    let schemas = schemas(&mut generators, &mut parts);
    let mut paths = Map::new();
    for (route, parts) in table.iter().zip(parts) {
        let item = paths
            .entry(route.url())
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .expect("a path item is an object");
        item.insert(
            route.method.as_str().to_ascii_lowercase(),
            operation(route, parts),
        );
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "ebb",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A runtime for ephemeral clusters: profiles, provisioners, and a supervisor per program run. CDAP v3 paths where CDAP has them."
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "An ebb token (ebb_...): `ebb token create`."}
            },
            "schemas": schemas,
            "responses": {
                "Error": {
                    "description": "What went wrong, naming the field at fault",
                    "content": {"application/json": {"schema": error}}
                }
            }
        }
    })
}

/// The operation object of `route`, from what its handler's types describe.
fn operation(route: &Route, parts: Parts) -> Value {
    let choices = crate::api::pattern::choices(route.path);
    let mut params: Vec<Value> = crate::api::pattern::shown(route.path)
        .split('/')
        .filter_map(|p| Some(p.strip_prefix('{')?.strip_suffix('}')?.to_string()))
        .map(|name| {
            // Every name in a path is checked as one, but an operation's number and a
            // segment of a few fixed values.
            let schema = if let Some((_, values)) = choices.iter().find(|(n, _)| *n == name) {
                json!({"type": "string", "enum": values})
            } else if name == "op" {
                json!({"type": "string", "pattern": "^[0-9]{1,10}$"})
            } else {
                json!({"type": "string", "pattern": crate::model::names::PATTERN})
            };
            json!({"name": name, "in": "path", "required": true, "schema": schema})
        })
        .collect();
    params.extend(parts.query);
    let mut responses = Map::new();
    let (status, media, schema) = parts.reply.unwrap_or((200, "application/json", json!({})));
    responses.insert(
        status.to_string(),
        json!({"description": "Done", "content": {media: {"schema": schema}}}),
    );
    for code in errors(route) {
        responses.insert(
            code.to_string(),
            json!({"$ref": "#/components/responses/Error"}),
        );
    }
    let mut operation = json!({
        "operationId": operation_id(route),
        "parameters": params,
        "responses": responses,
        "x-ebb-need": need_text(route.need),
    });
    if route.need == Need::Public {
        operation["security"] = json!([]);
    }
    if let Some((schema, required)) = parts.body {
        operation["requestBody"] = json!({
            "required": required,
            "content": {"application/json": {"schema": schema}}
        });
    }
    operation
}

/// The schemas the operations refer to. Answers are described as they are serialized and
/// bodies as they are parsed; where a type's two schemas differ (a field with a default need
/// not be sent, but is always answered), the parsed one is `<Name>Input`, and the bodies' and
/// query parameters' references say so.
fn schemas(generators: &mut Generators, parts: &mut [Parts]) -> Map<String, Value> {
    let mut schemas = generators.answers.take_definitions(true);
    let bodies = generators.bodies.take_definitions(true);
    let renamed: BTreeMap<String, String> = bodies
        .iter()
        .filter(|(name, schema)| schemas.get(*name).is_some_and(|s| s != *schema))
        .map(|(name, _)| (name.clone(), format!("{name}Input")))
        .collect();
    for (name, mut schema) in bodies {
        rename_refs(&mut schema, &renamed);
        let name = renamed.get(&name).cloned().unwrap_or(name);
        schemas.insert(name, schema);
    }
    for part in parts {
        if let Some((schema, _)) = &mut part.body {
            rename_refs(schema, &renamed);
        }
        for param in &mut part.query {
            rename_refs(param, &renamed);
        }
    }
    schemas
}

/// Points the references in `value` at the renamed schemas.
fn rename_refs(value: &mut Value, renamed: &BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key == "$ref"
                    && let Some(name) = v.as_str().and_then(|r| r.strip_prefix(SCHEMAS))
                    && let Some(new) = renamed.get(name)
                {
                    *v = Value::String(format!("{SCHEMAS}{new}"));
                } else {
                    rename_refs(v, renamed);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename_refs(v, renamed)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}
