//! Who may talk to the API: clients, not the web pages a browser on this machine happens to
//! show.
//!
//! Without a token, a server on loopback is reachable by every page a local browser opens: a
//! `text/plain` or form POST needs no CORS preflight, and a page on a name the attacker points
//! at 127.0.0.1 (DNS rebinding) even reads the answers. So, for every request:
//! - **Host** must be an IP address, `localhost`, or a name given with `--allowed-host`: a
//!   rebound name is refused before anything is read or done;
//! - a **write** (any method but GET, HEAD, OPTIONS) is refused when the browser says it comes
//!   from another site (`Sec-Fetch-Site: cross-site` or `same-site`), or carries an `Origin`
//!   whose host is not the one the request is addressed to;
//! - a request that declares a **Content-Type** must declare `application/json` (forms and
//!   `text/plain` are refused), so no page can send a body without a preflight. The web UI's
//!   own pages (`/ui`) post forms: there a form body is taken, and the two checks above (with
//!   the session cookie's `SameSite=Strict`) keep other sites out.
//!
//! Pure: the middleware in [`super::guard_origin`] feeds it the headers.

use super::error::ApiError;

/// The headers the check looks at; `None` when absent.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Whether the method changes something.
    pub write: bool,
    pub host: Option<String>,
    pub origin: Option<String>,
    pub fetch_site: Option<String>,
    pub content_type: Option<String>,
    /// The request goes to the web UI, whose pages post HTML forms.
    pub ui: bool,
}

/// The host part of a `Host` header or an origin's authority, lower case, without port.
fn host_name(authority: &str) -> String {
    let authority = authority.trim();
    let host = if let Some(rest) = authority.strip_prefix('[') {
        // [v6]:port
        rest.split(']').next().unwrap_or(rest)
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                authority
            }
        })
    };
    host.to_ascii_lowercase()
}

/// Whether `host` (a name without port) may be addressed.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    host.parse::<std::net::IpAddr>().is_ok()
        || host == "localhost"
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(host))
}

/// Checks `request`; the error says what was refused and how to allow a legitimate client.
pub fn check(request: &Request, allowed: &[String]) -> Result<(), ApiError> {
    if let Some(host) = &request.host {
        let name = host_name(host);
        if !host_allowed(&name, allowed) {
            return Err(ApiError::Forbidden(format!(
                "requests addressed to host '{name}' are refused; use the server's IP address, or start it with --allowed-host {name}"
            )));
        }
    }
    if let Some(content_type) = &request.content_type {
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let form = request.ui && essence == "application/x-www-form-urlencoded";
        if essence != "application/json" && !form {
            return Err(ApiError::UnsupportedMediaType(format!(
                "Content-Type must be application/json, not '{essence}'"
            )));
        }
    }
    if !request.write {
        return Ok(());
    }
    if let Some(site) = &request.fetch_site
        && matches!(site.trim(), "cross-site" | "same-site")
    {
        return Err(ApiError::Forbidden(format!(
            "a write from another site (Sec-Fetch-Site: {site}) is refused"
        )));
    }
    if let Some(origin) = &request.origin {
        let authority = origin
            .split_once("://")
            .map_or(origin.as_str(), |(_, rest)| rest);
        let same = request.host.as_deref().is_some_and(|h| {
            h.trim()
                .eq_ignore_ascii_case(authority.trim_end_matches('/'))
        });
        if !same {
            return Err(ApiError::Forbidden(format!(
                "a write from origin '{origin}' is refused: only clients of the API, or pages served by this server, may write"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(write: bool, host: &str) -> Request {
        Request {
            write,
            host: Some(host.to_string()),
            ..Request::default()
        }
    }

    #[test]
    fn hosts_are_ip_addresses_localhost_or_allowed_names() {
        let allowed = vec!["ebb.internal".to_string()];
        for ok in [
            "127.0.0.1:11015",
            "127.0.0.1",
            "[::1]:11015",
            "localhost:11015",
            "LOCALHOST",
            "10.1.2.3:80",
            "ebb.internal:11015",
        ] {
            assert!(check(&req(false, ok), &allowed).is_ok(), "{ok}");
        }
        for bad in [
            "evil.example:11015",
            "evil.example",
            "127.0.0.1.nip.io:11015",
            "localhost.evil",
        ] {
            let err = check(&req(false, bad), &allowed).expect_err(bad);
            assert_eq!(err.status().as_u16(), 403, "{bad}");
        }
        assert!(
            check(&Request::default(), &[]).is_ok(),
            "no Host at all (HTTP/1.0)"
        );
    }

    #[test]
    fn writes_from_other_sites_and_bodies_not_json_are_refused() {
        let mut r = req(true, "127.0.0.1:11015");
        assert!(
            check(&r, &[]).is_ok(),
            "a client sends neither Origin nor Sec-Fetch-Site"
        );
        r.origin = Some("http://127.0.0.1:11015".into());
        assert!(check(&r, &[]).is_ok(), "a page of this server");
        r.origin = Some("http://evil.example".into());
        assert_eq!(check(&r, &[]).expect_err("origin").status().as_u16(), 403);
        r.origin = Some("null".into());
        assert_eq!(
            check(&r, &[]).expect_err("null origin").status().as_u16(),
            403
        );
        r.origin = None;
        r.fetch_site = Some("cross-site".into());
        assert_eq!(
            check(&r, &[]).expect_err("cross-site").status().as_u16(),
            403
        );
        r.ui = true;
        assert_eq!(
            check(&r, &[])
                .expect_err("cross-site to the UI")
                .status()
                .as_u16(),
            403,
            "the UI's forms are refused from other sites too"
        );
        r.ui = false;
        r.fetch_site = Some("same-origin".into());
        assert!(check(&r, &[]).is_ok());
        let mut read = req(false, "127.0.0.1");
        read.origin = Some("http://evil.example".into());
        assert!(
            check(&read, &[]).is_ok(),
            "reads are not writes (CORS keeps the answer)"
        );
        for (ct, ok) in [
            ("application/json", true),
            ("application/json; charset=utf-8", true),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
            ("multipart/form-data; boundary=x", false),
        ] {
            let mut r = req(true, "127.0.0.1");
            r.content_type = Some(ct.into());
            match check(&r, &[]) {
                Ok(()) => assert!(ok, "{ct}"),
                Err(e) => {
                    assert!(!ok, "{ct}");
                    assert_eq!(e.status().as_u16(), 415);
                }
            }
            r.ui = true;
            let form = ct == "application/x-www-form-urlencoded";
            assert_eq!(check(&r, &[]).is_ok(), ok || form, "{ct} to the UI");
        }
    }
}
