//! The UI's static files, compiled into the binary: its style sheet and script, and htmx
//! with its server-sent-events extension (vendored from their npm packages by
//! `src/ui/assets/vendor.sh`, which checks their digests).
//!
//! Each is linked with a digest of its content in the URL, so a browser may keep it for a
//! year and still never runs a stale one after an upgrade.

use std::sync::OnceLock;

use actix_web::{HttpRequest, HttpResponse, web};

/// The files: name, content type, content.
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "htmx.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/htmx.min.js"),
    ),
    (
        "htmx-sse.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/htmx-sse.min.js"),
    ),
    (
        "ebb.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/ebb.js"),
    ),
    (
        "ebb.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/ebb.css"),
    ),
];

/// A short digest of `bytes` (FNV-1a, 64 bits): enough to tell versions apart.
fn digest(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The digests of the files, by name, made once.
fn digests() -> &'static Vec<(&'static str, String)> {
    static DIGESTS: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();
    DIGESTS.get_or_init(|| {
        FILES
            .iter()
            .map(|(name, _, bytes)| (*name, digest(bytes)))
            .collect()
    })
}

/// The URL of file `name`, with its digest.
pub fn href(name: &str) -> String {
    let version = digests()
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, d)| d.as_str());
    format!("/ui/assets/{name}?v={version}")
}

/// `GET /ui/assets/{file}`.
pub async fn serve(file: web::Path<String>, req: HttpRequest) -> HttpResponse {
    let Some((_, content_type, bytes)) = FILES.iter().find(|(n, _, _)| *n == file.as_str()) else {
        return HttpResponse::NotFound()
            .content_type("text/plain; charset=utf-8")
            .body("no such file");
    };
    let tag = format!("\"{}\"", digest(bytes));
    let fresh = req
        .headers()
        .get(actix_web::http::header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == tag);
    let mut answer = if fresh {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    answer
        .insert_header((actix_web::http::header::ETAG, tag))
        .insert_header(("Cache-Control", "public, max-age=31536000, immutable"))
        .insert_header(("X-Content-Type-Options", "nosniff"));
    if fresh {
        answer.finish()
    } else {
        answer.content_type(*content_type).body(*bytes)
    }
}
