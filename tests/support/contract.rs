//! The API's contract, checked on every answer the test harness receives: the status is one
//! the operation documents, and the body validates against the document's schema for it
//! (JSON Schema 2020-12, with the `jsonschema` crate). The harness fetches the document from
//! each server it starts (`GET /v3/openapi.json`), so every integration test that calls the
//! API checks the answers it records against it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// A server's OpenAPI document and the validators made from it so far.
pub struct Contract {
    doc: Value,
    validators: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

impl Contract {
    pub fn new(doc: Value) -> Contract {
        Contract {
            doc,
            validators: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the answer `status` with `body` to `method` on `path` (with its query) keeps
    /// the contract; what breaks it when not. Paths outside the API (the web UI) are not in
    /// the document and pass.
    pub fn check(&self, method: &str, path: &str, status: u16, body: &Value) -> Result<(), String> {
        let path = path.split('?').next().unwrap_or(path);
        if !path.starts_with("/v3/") && path != "/metrics" {
            return Ok(());
        }
        let method = method.to_ascii_lowercase();
        let operation = self
            .template(path)
            .and_then(|t| Some((t.clone(), self.doc["paths"][&t].get(&method)?)));
        let Some((template, operation)) = operation else {
            // No such operation: the router's JSON 404 or 405.
            if status != 404 && status != 405 {
                return Err(format!(
                    "{status} from a path and method the document does not have"
                ));
            }
            return self.validate("/components/responses/Error", body);
        };
        let status_text = status.to_string();
        let Some(answer) = operation["responses"].get(&status_text) else {
            return Err(format!(
                "{status} is not an answer {method} {template} documents"
            ));
        };
        let answer_at = match answer["$ref"].as_str() {
            Some(reference) => reference.trim_start_matches('#').to_string(),
            None => format!(
                "/paths/{}/{method}/responses/{status}",
                template.replace('~', "~0").replace('/', "~1")
            ),
        };
        let content = &self
            .doc
            .pointer(&answer_at)
            .expect("the answer is in the document")["content"];
        if content.get("application/json").is_none() {
            return Ok(());
        }
        self.validate(&answer_at, body)
            .map_err(|e| format!("{method} {template} answered {status}: {e}"))
    }

    /// Validates `body` against the JSON schema of the answer at pointer `answer_at`.
    fn validate(&self, answer_at: &str, body: &Value) -> Result<(), String> {
        let schema_at = format!("{answer_at}/content/application~1json/schema");
        let validator = {
            let mut validators = self.validators.lock().expect("validators");
            match validators.get(&schema_at) {
                Some(v) => Arc::clone(v),
                None => {
                    let mut root = self.doc.clone();
                    // A URI fragment: the braces of path templates are percent-encoded.
                    let fragment = schema_at.replace('{', "%7B").replace('}', "%7D");
                    root["$ref"] = json!(format!("#{fragment}"));
                    let made = jsonschema::draft202012::options()
                        .build(&root)
                        .map_err(|e| format!("the schema at {schema_at} does not compile: {e}"))?;
                    let made = Arc::new(made);
                    validators.insert(schema_at.clone(), Arc::clone(&made));
                    made
                }
            }
        };
        let errors: Vec<String> = validator
            .iter_errors(body)
            .take(5)
            .map(|e| format!("at '{}': {}", e.instance_path(), e))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            let mut shown = body.to_string();
            shown.truncate(2000);
            Err(format!("{}; the body was {shown}", errors.join("; ")))
        }
    }

    /// The document's path template `path` matches, the one with the most literal segments
    /// when several do.
    fn template(&self, path: &str) -> Option<String> {
        let segments: Vec<&str> = path.split('/').collect();
        let paths = self.doc["paths"].as_object()?;
        paths
            .keys()
            .filter_map(|template| {
                let parts: Vec<&str> = template.split('/').collect();
                if parts.len() != segments.len() {
                    return None;
                }
                let mut literal = 0;
                for (part, segment) in parts.iter().zip(&segments) {
                    if part.starts_with('{') {
                        if segment.is_empty() {
                            return None;
                        }
                    } else if part != segment {
                        return None;
                    } else {
                        literal += 1;
                    }
                }
                Some((literal, template))
            })
            .max_by_key(|(literal, _)| *literal)
            .map(|(_, t)| t.clone())
    }
}
