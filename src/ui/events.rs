//! A run page's live events: server-sent events, and polling when the server's streams are
//! taken.
//!
//! Each open stream holds a connection for minutes, so streams are bounded ([`streams`](crate::api::streams)):
//! a server's, each token's and each address's share.
//! A page whose stream finds no room is not refused: it gets the events it has not seen and
//! the status, at once, and a `retry` that has the browser come back in a few seconds: it
//! polls until a stream is free.

use std::time::Duration;

use actix_web::{HttpMessage as _, HttpRequest, HttpResponse, web};
use maud::html;

use super::layout::{Answer, need};
use super::runs::{event_item, live};
use crate::api::state::{RunPath, State};
use crate::model::access::Caller;
use crate::model::event::RunEvent;
use crate::model::run::RunKey;
use crate::service::history;
use crate::service::runs;

/// Longest one event stream stays open; the browser then reconnects where it left off.
const STREAM_LIFE: Duration = Duration::from_secs(300);
/// How long one wait for news lasts before the stream sends a heartbeat.
const HEARTBEAT: Duration = Duration::from_secs(20);
/// Most events the first answer of a stream carries (the newest).
const FIRST_EVENTS: usize = 1000;
/// How soon a browser comes back: after a stream ends, and while it polls.
const RETRY: &str = "retry: 2000\n\n";
const POLL_RETRY: &str = "retry: 5000\n\n";

/// One server-sent event: its name, id and HTML, one `data:` line per line. Every line
/// break the event stream format knows (`\n`, `\r\n`, a lone `\r`) starts a new `data:`
/// line, so nothing in the HTML can start a field of its own.
fn sse(name: &str, id: Option<u64>, html: &str) -> web::Bytes {
    let mut out = String::with_capacity(html.len() + 64);
    out.push_str("event: ");
    out.push_str(name);
    out.push('\n');
    if let Some(id) = id {
        out.push_str(&format!("id: {id}\n"));
    }
    for line in html.replace("\r\n", "\n").split(['\n', '\r']) {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    web::Bytes::from(out)
}

/// The events of a batch, then a nudge for the parts of the page that follow the status.
fn batch(events: &[RunEvent]) -> web::Bytes {
    let mut out = Vec::new();
    if let Some(last) = events.last() {
        let items = html! { @for e in events { (event_item(e)) } };
        out.extend_from_slice(&sse("events", Some(last.seq), &items.into_string()));
        out.extend_from_slice(&sse("status", None, ""));
    }
    web::Bytes::from(out)
}

/// Where an event stream is.
enum Step {
    /// Send the first events, then go on from the newest (or end, when polling).
    First(Vec<RunEvent>, u64),
    /// Wait for events after this one.
    After(u64),
    /// Done: nothing more to send.
    Done,
}

/// `GET .../events`: the run's events as they happen (server-sent events). The stream starts
/// after `Last-Event-ID` when the browser reconnects, sends each new batch, and ends once the
/// run is over (`end`) or after a few minutes (the browser reconnects where it left off).
/// Without room for a stream, the answer is one poll (see the module).
pub async fn events(state: State, path: web::Path<RunPath>, req: HttpRequest) -> Answer {
    let key: RunKey = path.into_inner().into();
    let after = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let token = req
        .extensions()
        .get::<Caller>()
        .map_or_else(String::new, |c| c.name.clone());
    let open = state.streams.open(&token, req.peer_addr().map(|a| a.ip()));
    let mut first = need(history::history(&state.runtime, key.clone(), after, None).await)?;
    if first.len() > FIRST_EVENTS {
        first.drain(..first.len() - FIRST_EVENTS);
    }
    let polling = open.is_none();
    let until = tokio::time::Instant::now() + STREAM_LIFE;
    let runtime = state.runtime.clone();
    let start = Step::First(first, after);
    let stream = futures_util::stream::unfold((start, open), move |(step, open)| {
        let (runtime, key) = (runtime.clone(), key.clone());
        async move {
            let (chunk, next) = match step {
                Step::Done => return None,
                Step::First(events, after) => {
                    let newest = events.last().map_or(after, |e| e.seq);
                    let retry = if polling { POLL_RETRY } else { RETRY };
                    let mut out = retry.as_bytes().to_vec();
                    out.extend_from_slice(&batch(&events));
                    if events.is_empty() {
                        // Mark where the page is, so a reconnect starts here.
                        out.extend_from_slice(format!("id: {newest}\n\n").as_bytes());
                    }
                    if polling {
                        // The page's status follows, and the browser comes back soon.
                        out.extend_from_slice(&sse("status", None, ""));
                        (web::Bytes::from(out), Step::Done)
                    } else {
                        (web::Bytes::from(out), Step::After(newest))
                    }
                }
                Step::After(after) => {
                    if tokio::time::Instant::now() >= until {
                        return None;
                    }
                    let events =
                        history::history(&runtime, key.clone(), after, Some(HEARTBEAT)).await;
                    match events {
                        Ok(events) if !events.is_empty() => {
                            let newest = events.last().map_or(after, |e| e.seq);
                            (batch(&events), Step::After(newest))
                        }
                        Ok(_) => match runs::get(&runtime, key.clone()).await {
                            Ok(run) if live(&run) => (
                                web::Bytes::from_static(b": still here\n\n"),
                                Step::After(after),
                            ),
                            // Over: the page has every event; tell it to stop listening.
                            Ok(_) => {
                                let mut out = sse("status", None, "").to_vec();
                                out.extend_from_slice(&sse("end", None, ""));
                                (web::Bytes::from(out), Step::Done)
                            }
                            Err(_) => return None,
                        },
                        Err(_) => return None,
                    }
                }
            };
            Some((Ok::<_, actix_web::Error>(chunk), (next, open)))
        }
    });
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-store"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_data_line_per_line_whatever_breaks_it() {
        let b = sse("events", Some(7), "<li>a</li>\n<li>b</li>");
        assert_eq!(
            std::str::from_utf8(&b).expect("utf-8"),
            "event: events\nid: 7\ndata: <li>a</li>\ndata: <li>b</li>\n\n"
        );
        // A lone carriage return is a line break to a browser: it must not start a field.
        let b = sse("events", None, "x\revent: end\r\ndata: y");
        assert_eq!(
            std::str::from_utf8(&b).expect("utf-8"),
            "event: events\ndata: x\ndata: event: end\ndata: data: y\n\n"
        );
    }
}
