//! Where an installation's store is, as given on the command line.

use super::access::Access;

/// Where an installation's store is: etcd's client URLs, this installation's key prefix, and
/// how to reach etcd securely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub urls: Vec<String>,
    pub prefix: String,
    pub access: Access,
}

impl Endpoints {
    /// Parses a comma-separated list of `http://host:port` or `https://host:port` client URLs
    /// and a key prefix, and checks `access` goes with them (TLS files with `https://`; plain
    /// `http://` only to this machine unless `access.insecure`).
    pub fn parse(urls: &str, prefix: &str, access: Access) -> Result<Endpoints, String> {
        let urls: Vec<String> = urls
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .collect();
        if urls.is_empty() {
            return Err("no etcd endpoint given: pass --etcd-endpoints https://HOST:PORT".into());
        }
        if urls.len() > 16 {
            return Err(format!("{} etcd endpoints given; at most 16", urls.len()));
        }
        let mut hosts = Vec::with_capacity(urls.len());
        let https = urls[0].starts_with("https://");
        for url in &urls {
            let rest = url
                .strip_prefix(if https { "https://" } else { "http://" })
                .ok_or_else(|| {
                    if url.starts_with("http://") || url.starts_with("https://") {
                        format!("etcd endpoint '{url}': every endpoint must use the same scheme, http:// or https://")
                    } else {
                        format!("etcd endpoint '{url}' must start with https:// (or http://)")
                    }
                })?;
            let (host, port) = rest.rsplit_once(':').ok_or_else(|| {
                format!("etcd endpoint '{url}' has no port: write https://HOST:PORT")
            })?;
            if host.is_empty() || port.parse::<u16>().is_err() || url.len() > 256 {
                return Err(format!("etcd endpoint '{url}' is not https://HOST:PORT"));
            }
            hosts.push(host);
        }
        access.check(https, &hosts)?;
        let prefix = prefix.trim_end_matches('/');
        if !prefix.starts_with('/')
            || prefix.len() > 128
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/-_.".contains(c))
        {
            return Err(format!(
                "etcd prefix '{prefix}' must start with '/' and hold only letters, digits, '/', '-', '_' and '.' (at most 128)"
            ));
        }
        Ok(Endpoints {
            urls,
            prefix: prefix.to_string(),
            access,
        })
    }

    pub(super) fn describe(&self) -> String {
        format!("etcd at {} (prefix {})", self.urls.join(","), self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_urls_with_ports_one_scheme_and_a_clean_prefix() {
        let e = Endpoints::parse(
            "http://127.0.0.1:2379, http://localhost:2379",
            "/ebb/",
            Access::default(),
        )
        .expect("ok");
        assert_eq!(e.urls.len(), 2);
        assert_eq!(e.prefix, "/ebb");
        let tls = Access {
            ca_cert: Some("ca.pem".into()),
            ..Access::default()
        };
        Endpoints::parse(
            "https://etcd-1:2379,https://etcd-2:2379",
            "/ebb",
            tls.clone(),
        )
        .expect("https with a CA");
        for (urls, prefix, access, needle) in [
            ("", "/ebb", Access::default(), "no etcd endpoint"),
            (
                "127.0.0.1:2379",
                "/ebb",
                Access::default(),
                "must start with https://",
            ),
            (
                "https://h:2379",
                "/ebb",
                Access::default(),
                "--etcd-ca-cert",
            ),
            (
                "https://h:2379,http://h:2379",
                "/ebb",
                tls.clone(),
                "same scheme",
            ),
            (
                "http://10.0.0.2:2379",
                "/ebb",
                Access::default(),
                "--etcd-insecure",
            ),
            ("http://h", "/ebb", Access::default(), "no port"),
            ("http://h:99999", "/ebb", Access::default(), "HOST:PORT"),
            (
                "http://127.0.0.1:2379",
                "ebb",
                Access::default(),
                "must start with '/'",
            ),
            (
                "http://127.0.0.1:2379",
                "/e b",
                Access::default(),
                "must start with '/'",
            ),
        ] {
            let e = Endpoints::parse(urls, prefix, access).expect_err(urls);
            assert!(e.contains(needle), "{urls} {prefix}: {e}");
        }
    }
}
