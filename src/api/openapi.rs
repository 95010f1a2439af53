//! The API's contract as an OpenAPI 3.1 document (`GET /v3/openapi.json`), generated from
//! the route table, so a route cannot exist without being described: every path and method,
//! its path parameters, the token and the role it needs (`x-ebb-need`), and the one error
//! shape every failure answers with.
//!
//! Bodies and answers are described as JSON for now; their schemas from the Rust types come
//! next (issue 19).

use serde_json::{Value, json};

use crate::api::route::Route;
use crate::model::access::Need;

/// The statuses a route may answer with an error, by what it needs.
fn errors(route: &Route) -> Vec<u16> {
    let mut out = vec![400, 404, 503];
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
    for part in route.path.split('/').filter(|p| !p.is_empty()) {
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
    }
}

/// The OpenAPI document of every route.
pub fn document(table: &[Route]) -> Value {
    let mut paths = serde_json::Map::new();
    for route in table {
        let url = route.url();
        let params: Vec<Value> = route
            .path
            .split('/')
            .filter_map(|p| p.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| {
                json!({
                    "name": name, "in": "path", "required": true,
                    "schema": {"type": "string", "maxLength": 128}
                })
            })
            .collect();
        let mut responses = serde_json::Map::new();
        responses.insert(
            "200".into(),
            json!({"description": "Done", "content": {"application/json": {"schema": {}}}}),
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
        if !matches!(
            route.method,
            actix_web::http::Method::GET | actix_web::http::Method::DELETE
        ) {
            operation["requestBody"] = json!({
                "required": false,
                "content": {"application/json": {"schema": {}}}
            });
        }
        let item = paths
            .entry(url)
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .expect("a path item is an object");
        item.insert(route.method.as_str().to_ascii_lowercase(), operation);
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
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {
                        "code": {"type": "integer", "minimum": 400, "maximum": 599},
                        "message": {"type": "string"}
                    },
                    "additionalProperties": false
                }
            },
            "responses": {
                "Error": {
                    "description": "What went wrong, naming the field at fault",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
                }
            }
        }
    })
}
