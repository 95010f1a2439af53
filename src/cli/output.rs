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
