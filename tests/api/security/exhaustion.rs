//! Without a token, no one exhausts the server: not its memory through metrics labels, not
//! its descriptors through bodies that never arrive.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::server::Server;

/// Sends `text` over a new connection, without a token, and returns what came back (the
/// server closes after answering).
fn send_plain(server: &Server, text: &str) -> String {
    let addr = server.url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    stream.write_all(text.as_bytes()).expect("send");
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply
}

#[test]
fn unknown_methods_do_not_become_metric_series() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    for i in 0..300 {
        let reply = send_plain(
            &server,
            &format!(
                "XMETHOD{i} /v3/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            ),
        );
        assert!(reply.starts_with("HTTP/1.1 4"), "{reply}");
    }
    let (code, text) = server.get("/metrics");
    assert_eq!(code, 200);
    let text = text.as_str().expect("text").to_string();
    assert!(!text.contains("XMETHOD"), "a method became a label");
    assert!(
        text.lines()
            .any(|l| l.starts_with("ebb_http_requests_total") && l.contains("method=\"other\"")),
        "unknown methods are counted as 'other'"
    );
    let series = text
        .lines()
        .filter(|l| l.starts_with("ebb_http_request"))
        .count();
    assert!(series < 100, "{series} series after 300 requests");
}

/// Opens a connection and sends a request head that promises a body it never sends: the
/// sign-in form's, or an API write's.
fn stall(server: &Server, form: bool) -> TcpStream {
    let addr = server.url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).expect("connect");
    let (line, kind, start) = if form {
        (
            "POST /ui/login",
            "application/x-www-form-urlencoded",
            "token=",
        )
    } else {
        ("PUT /v3/namespaces/x", "application/json", "{")
    };
    let head = format!(
        "{line} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {kind}\r\nContent-Length: 100\r\n\r\n{start}"
    );
    stream.write_all(head.as_bytes()).expect("send");
    stream
}

#[test]
fn stalled_bodies_do_not_stop_the_server_answering() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Fewer descriptors than stalled requests, as on many hosts.
    let options = crate::support::server::Options {
        files: Some(1_024),
        ..Default::default()
    };
    let server = Server::start_at(dir.path(), options);
    let mut stalled: Vec<(bool, TcpStream)> = Vec::new();
    for i in 0..1_100 {
        let form = i % 2 == 0;
        stalled.push((form, stall(&server, form)));
    }
    // The server answers others at once: the health check, and a client of the API.
    let (code, _) = server.get("/v3/health");
    assert_eq!(code, 200, "the server stopped answering");
    let (code, body) = server.get("/v3/namespaces");
    assert_eq!(code, 200, "{body}");
    // Every stalled request is answered (refused, or timed out: the sign-in form's after
    // its time limit) and its connection closed.
    for (form, mut s) in stalled {
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        assert!(reply.starts_with("HTTP/1.1 4"), "{reply}");
        if form {
            assert!(
                reply.starts_with("HTTP/1.1 408") || reply.starts_with("HTTP/1.1 429"),
                "{reply}"
            );
        }
    }
    let (code, _) = server.get("/v3/health");
    assert_eq!(code, 200);
}

#[test]
fn one_address_holds_only_so_many_requests_and_others_are_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir);
    crate::support::runs::deploy(
        &server,
        "a",
        &crate::support::runs::while_the_test_runs(),
        serde_json::json!({}),
    );
    let run = crate::support::runs::start(&server, "a", serde_json::json!({}));
    let token = server.token().expect("token");
    let addr = server.url.trim_start_matches("http://").to_string();
    // Long polls that wait for events that will not come: each holds a request in flight.
    let poll = format!(
        "GET {run}/events?after=99999999999999999&wait=30s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    let held: Vec<TcpStream> = (0..256)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).expect("connect");
            s.write_all(poll.as_bytes()).expect("send");
            s
        })
        .collect();
    // Once the server holds them all, any other request from this address is refused.
    let probe = "GET /v3/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let refused = (0..200).find_map(|_| {
        std::thread::sleep(Duration::from_millis(50));
        let reply = send_plain(&server, probe);
        reply.starts_with("HTTP/1.1 429").then_some(reply)
    });
    let refused = refused.expect("the 257th request in flight from one address is refused");
    assert!(refused.contains("256 requests in flight"), "{refused}");
    // Another address is answered at once.
    let other = reqwest::blocking::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let reply = other
        .get(format!("{}/v3/namespaces", server.url))
        .bearer_auth(&token)
        .send()
        .expect("another address is answered");
    assert_eq!(reply.status().as_u16(), 200);
    // (Their server-side waits end with their time; the run stops from the other address.)
    drop(held);
    let reply = other
        .post(format!("{}{run}/stop", server.url))
        .bearer_auth(&token)
        .send()
        .expect("stop");
    assert_eq!(reply.status().as_u16(), 200);
}
