//! Path patterns of the route tables as people read them: `{type:workflows|spark}` is the
//! router's, `{type}` the document's, the metrics' and the messages'.

/// Path pattern `pattern` as shown (in the document, the metrics, messages): each
/// `{name:pattern}` as `{name}`.
pub fn shown(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..=open]);
        rest = &rest[open + 1..];
        let close = rest.find('}').unwrap_or(rest.len());
        let name = &rest[..close];
        out.push_str(name.split_once(':').map_or(name, |(n, _)| n));
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

/// The values `{name:a|b}` in `pattern` may take, by name.
pub fn choices(pattern: &str) -> Vec<(&str, Vec<&str>)> {
    pattern
        .split('/')
        .filter_map(|p| p.strip_prefix('{')?.strip_suffix('}'))
        .filter_map(|p| p.split_once(':'))
        .map(|(name, pattern)| (name, pattern.split('|').collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_shows_its_names_and_offers_its_choices() {
        let p = "/namespaces/{ns}/apps/{app}/{type:workflows|spark}/{program}/runs/{run}";
        assert_eq!(
            shown(p),
            "/namespaces/{ns}/apps/{app}/{type}/{program}/runs/{run}"
        );
        assert_eq!(choices(p), [("type", vec!["workflows", "spark"])]);
        assert_eq!(shown("/health"), "/health");
        assert!(choices("/health").is_empty());
    }
}
