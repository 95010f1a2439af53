//! Rules for the names of entities: namespaces, profiles, apps and programs.
//!
//! A name is 1 to 64 of `A-Z a-z 0-9 _ -`. Names become parts of store keys joined by `/`,
//! so this check is also what keeps keys unambiguous.

use crate::model::invalid::Invalid;

/// Longest name allowed.
pub const MAX_LEN: usize = 64;

/// What [`check`] accepts, as a JSON Schema (ECMA-262) pattern.
pub const PATTERN: &str = "^[A-Za-z0-9_-]{1,64}$";

/// The JSON schema of a name: for a field holding one (`#[schemars(schema_with = ...)]`).
pub fn schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "pattern": PATTERN})
}

/// Most names a list in a request may hold.
pub const MAX_LIST: usize = 1000;

/// The JSON schema of a list of names, at most [`MAX_LIST`].
pub fn list_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "string", "pattern": PATTERN},
        "maxItems": MAX_LIST
    })
}

/// The JSON schema of text that is one of `words` in any case (`running`, `RUNNING`): a
/// pattern, since JSON Schema has no case-insensitive `enum`.
pub fn any_case(words: &[&str]) -> schemars::Schema {
    let alternatives: Vec<String> = words
        .iter()
        .map(|w| {
            w.chars()
                .map(|c| {
                    if c.is_ascii_alphabetic() {
                        format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        })
        .collect();
    schemars::json_schema!({
        "type": "string",
        "pattern": format!("^(?:{})$", alternatives.join("|"))
    })
}

/// The names an enum's JSON schema allows (its `enum` values, or its variants' `const`s).
pub fn variants(schema: &schemars::Schema) -> Vec<String> {
    let value = schema.as_value();
    let listed = value["enum"].as_array().into_iter().flatten();
    let one_of = value["oneOf"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|v| {
            v.get("const")
                .into_iter()
                .chain(v["enum"].as_array().into_iter().flatten())
        });
    listed
        .chain(one_of)
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// Checks `value` as the name of a `what` (`"namespace"`, `"profile name"`).
pub fn check(what: &str, value: &str) -> Result<(), Invalid> {
    let ok = !value.is_empty()
        && value.len() <= MAX_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Invalid::new(
            what,
            format!(
                "'{value}' is not a valid name: use 1 to {MAX_LEN} of A-Z, a-z, 0-9, '_' and '-'"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_says_what_check_accepts() {
        // `^[A-Za-z0-9_-]{1,64}$`, read by hand: the same rule in its two forms.
        assert_eq!(PATTERN, format!("^[A-Za-z0-9_-]{{1,{MAX_LEN}}}$"));
    }

    #[test]
    fn any_case_matches_each_word_in_any_case() {
        let schema = any_case(&["RUNNING", "KILLED"]);
        assert_eq!(
            schema.as_value()["pattern"],
            "^(?:[Rr][Uu][Nn][Nn][Ii][Nn][Gg]|[Kk][Ii][Ll][Ll][Ee][Dd])$"
        );
    }

    #[test]
    fn accepts_and_rejects() {
        for good in ["a", "default", "team-a_1", &"x".repeat(64)] {
            assert!(check("name", good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a/b", "ü", "a.b", &"x".repeat(65)] {
            let err = check("profile name", bad).expect_err(bad);
            assert!(err.to_string().starts_with("profile name: "), "{err}");
        }
    }
}
