//! Human output: aligned tables and durations.

use serde_json::Value;

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
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// A JSON value as plain text (strings without quotes, null as "-").
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Seconds as a short human duration (`8h`, `1h 30m`, `0s`); null as "none".
pub fn seconds(v: &Value) -> String {
    match v.as_u64() {
        Some(s) => humantime::format_duration(std::time::Duration::from_secs(s)).to_string(),
        None => "none".into(),
    }
}

/// Prints JSON for scripts.
pub fn json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}
