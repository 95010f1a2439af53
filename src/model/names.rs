//! Rules for the names of entities: namespaces, profiles, apps and programs.
//!
//! A name is 1 to 64 of `A-Z a-z 0-9 _ -`. Names become parts of store keys joined by `/`,
//! so this check is also what keeps keys unambiguous.

use crate::model::invalid::Invalid;

/// Longest name allowed.
pub const MAX_LEN: usize = 64;

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
