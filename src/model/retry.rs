//! Program retries: a program's or a profile's `retry` policy, under which a failed program
//! runs again on the same cluster (the attempts a run made are in `run`).

use serde::{Deserialize, Serialize};

use crate::model::invalid::Invalid;

/// Most attempts a policy may allow, the first included.
pub const MAX_ATTEMPTS: u32 = 10;
/// Most exit codes a policy may name.
pub const MAX_EXIT_CODES: usize = 32;
/// Longest pause before a new attempt: an hour.
pub const MAX_BACKOFF: u64 = 3600;

/// How a failed program runs again on the same cluster: `{"maxAttempts": 3,
/// "onExitCodes"?: [75], "backoff"?: "30s"}`. A program that fails (by its exit status, or
/// lost with the server whose host it ran on) is launched again while attempts are left and
/// its exit code is among `onExitCodes` (any, when none are named); a stopped or timed-out
/// run is never tried again.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Retry {
    /// Attempts in all, the first included (1 to 10).
    pub max_attempts: u32,
    /// The exit codes (1 to 255, at most 32) that are tried again; none: any failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_exit_codes: Vec<i32>,
    /// The pause before each new attempt: seconds, or a duration like `"30s"` (at most an
    /// hour).
    #[serde(default, deserialize_with = "seconds")]
    #[schemars(with = "crate::model::seconds::Seconds")]
    pub backoff: u64,
}

fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    crate::model::seconds::Seconds::deserialize(d).map(|s| s.0)
}

impl Retry {
    /// Checks its bounds; `field` names it in an error (`retry`, `programs[0].retry`).
    pub fn check(&self, field: &str) -> Result<(), Invalid> {
        if !(1..=MAX_ATTEMPTS).contains(&self.max_attempts) {
            return Err(Invalid::new(
                format!("{field}.maxAttempts"),
                format!(
                    "must be between 1 and {MAX_ATTEMPTS}, got {}",
                    self.max_attempts
                ),
            ));
        }
        if self.on_exit_codes.len() > MAX_EXIT_CODES {
            return Err(Invalid::new(
                format!("{field}.onExitCodes"),
                format!("at most {MAX_EXIT_CODES} codes"),
            ));
        }
        if let Some(bad) = self.on_exit_codes.iter().find(|c| !(1..=255).contains(*c)) {
            return Err(Invalid::new(
                format!("{field}.onExitCodes"),
                format!("a failed program exits with 1 to 255, got {bad}"),
            ));
        }
        if self.backoff > MAX_BACKOFF {
            return Err(Invalid::new(
                format!("{field}.backoff"),
                format!(
                    "must be at most an hour ({MAX_BACKOFF} s), got {} s",
                    self.backoff
                ),
            ));
        }
        Ok(())
    }

    /// Whether the attempt numbered `attempt` (from 1), which exited with `code` (`None`:
    /// lost with its server, or ended by a signal), is tried again.
    pub fn again(&self, attempt: u32, code: Option<i32>) -> bool {
        if attempt >= self.max_attempts {
            return false;
        }
        match code {
            // Lost with its server, or ended by a signal: not the program's own verdict.
            None => true,
            Some(code) => self.on_exit_codes.is_empty() || self.on_exit_codes.contains(&code),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_is_tried_again_while_attempts_are_left_and_its_code_is_named() {
        let any = Retry {
            max_attempts: 3,
            on_exit_codes: vec![],
            backoff: 0,
        };
        assert!(any.again(1, Some(1)));
        assert!(any.again(2, Some(7)));
        assert!(!any.again(3, Some(1)), "no attempts left");
        let named = Retry {
            on_exit_codes: vec![75],
            ..any.clone()
        };
        assert!(named.again(1, Some(75)));
        assert!(!named.again(1, Some(1)));
        // Lost with its server, or killed by a signal: tried again whatever the codes.
        assert!(named.again(1, None));
        assert!(named.again(2, None));
        assert!(!named.again(3, None));
    }

    #[test]
    fn its_bounds_are_checked_and_named() {
        let ok = Retry {
            max_attempts: 10,
            on_exit_codes: vec![1, 255],
            backoff: 3600,
        };
        assert_eq!(ok.check("retry"), Ok(()));
        for (bad, field) in [
            (
                Retry {
                    max_attempts: 0,
                    ..ok.clone()
                },
                "retry.maxAttempts",
            ),
            (
                Retry {
                    max_attempts: 11,
                    ..ok.clone()
                },
                "retry.maxAttempts",
            ),
            (
                Retry {
                    on_exit_codes: vec![0],
                    ..ok.clone()
                },
                "retry.onExitCodes",
            ),
            (
                Retry {
                    on_exit_codes: (1..=33).collect(),
                    ..ok.clone()
                },
                "retry.onExitCodes",
            ),
            (
                Retry {
                    backoff: 3601,
                    ..ok.clone()
                },
                "retry.backoff",
            ),
        ] {
            assert_eq!(bad.check("retry").expect_err("bad").field, field);
        }
        let parsed: Retry =
            serde_json::from_value(serde_json::json!({"maxAttempts": 3, "backoff": "30s"}))
                .expect("parsed");
        assert_eq!(parsed.backoff, 30);
        assert!(
            serde_json::from_value::<Retry>(serde_json::json!({"maxAttempts": 3, "tries": 2}))
                .is_err()
        );
    }
}
