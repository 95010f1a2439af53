//! Human output: aligned tables and durations.

use std::io::Write;

use serde_json::{Value, json};

use super::client::CliError;

/// Writes one line to stdout. When the reader has gone away (`ebb ... | head`), stops quietly
/// with exit code 0 instead of panicking.
pub fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write output: {e}");
        std::process::exit(1);
    }
}

/// `println!` for CLI output, through [`emit`].
macro_rules! out {
    () => {
        $crate::cli::output::emit("")
    };
    ($($arg:tt)*) => {
        $crate::cli::output::emit(&format!($($arg)*))
    };
}
pub(crate) use out;

/// Prints rows under a header, columns padded to their widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        emit(padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// Table rows from a list of objects: one row per object, the text of `fields` in order.
pub fn rows(items: &[Value], fields: &[&str]) -> Vec<Vec<String>> {
    items
        .iter()
        .map(|item| fields.iter().map(|f| text(&item[*f])).collect())
        .collect()
}

/// A JSON value as plain text (strings without quotes, null as "-").
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_) => v.to_string(),
    }
}

/// Seconds as a short human duration (`8h`, `1h 30m`, `0s`); null as "none".
pub fn seconds(v: Option<u64>) -> String {
    match v {
        Some(s) => humantime::format_duration(std::time::Duration::from_secs(s)).to_string(),
        None => "none".into(),
    }
}

/// An epoch-seconds value as a UTC time (`2026-11-22T15:04:17Z`).
pub fn timestamp(v: Option<u64>) -> String {
    match v {
        Some(s) => humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(s),
        )
        .to_string(),
        None => "none".into(),
    }
}

/// How long before `now` epoch-seconds time `then` was, in its largest unit or two: `45s
/// ago`, `3m ago`, `2h 5m ago`, `3d ago`; a time ahead of `now` (clocks apart) is `just now`.
pub fn ago(then: u64, now: u64) -> String {
    let Some(secs) = now.checked_sub(then).filter(|s| *s > 0) else {
        return "just now".into();
    };
    let (d, h, m, s) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60);
    let span = match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h {m}m"),
        (d, 0, _) => format!("{d}d"),
        (d, h, _) => format!("{d}d {h}h"),
    };
    format!("{span} ago")
}

/// An epoch-seconds time as a UTC time and how long ago it was
/// (`2026-11-22T15:04:17Z (3m ago)`); null as "-".
pub fn when(v: Option<u64>, now: u64) -> String {
    match v {
        Some(s) => format!("{} ({})", timestamp(Some(s)), ago(s, now)),
        None => "-".into(),
    }
}

/// Prints JSON for scripts.
pub fn json(v: &Value) {
    emit(&serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()));
}

pub fn list(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

pub fn done(json: bool, message: &str) -> Result<(), CliError> {
    if json {
        self::json(&json!({ "ok": true }));
    } else {
        out!("{message}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_how_long_ago() {
        let now = 1_764_000_000;
        for (then, said) in [
            (now, "just now"),
            (now + 5, "just now"),
            (now - 45, "45s ago"),
            (now - 180, "3m ago"),
            (now - 7_500, "2h 5m ago"),
            (now - 7_200, "2h ago"),
            (now - 3 * 86_400, "3d ago"),
            (now - 86_400 - 3_600 * 5 - 60, "1d 5h ago"),
        ] {
            assert_eq!(ago(then, now), said, "{then}");
        }
        assert_eq!(when(None, now), "-");
        assert_eq!(when(Some(now - 180), now), "2025-11-24T15:57:00Z (3m ago)");
    }
}
