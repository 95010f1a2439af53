//! Request bodies arrive within a time limit, and one peer has only so many requests in
//! flight.
//!
//! A client that sends a request head promising a body and then nothing holds a connection,
//! a descriptor and a worker's attention for as long as the body is awaited; a thousand such
//! clients, with no token at all (the sign-in form takes a body), would stop the server
//! answering anyone. So every request takes a slot of its peer address (at most
//! [`PER_PEER`] in flight, long polls included; the UI's event streams have shares of
//! their own), every request that carries a
//! body a second one (at most [`BODIES_PER_PEER`]); past either, it is answered 429 and its
//! connection closed. A body must keep arriving: [`IDLE`] without a byte, or [`WHOLE`] in
//! all, and the request is answered 408 and its connection closed. (A connection that sends
//! no request head within 5 s, or stays idle for 5 s between requests, is closed by the
//! server.) Behind a proxy every client shares the proxy's address, so its share is the
//! proxy's.

use std::future::Future as _;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::http::{StatusCode, header};
use actix_web::middleware::Next;
use actix_web::{HttpMessage as _, HttpResponse, web};
use futures_util::Stream;

use crate::runtime::shares::{Share, Shares};

/// Requests one peer address may have in flight at once.
pub const PER_PEER: usize = 256;
/// Requests with a body one peer address may have in flight at once.
pub const BODIES_PER_PEER: usize = 64;
/// Longest a body may pause between two chunks.
pub const IDLE: Duration = Duration::from_secs(10);
/// Longest a whole body may take to arrive.
pub const WHOLE: Duration = Duration::from_secs(60);

/// Each peer address's slots: of requests, and of requests with bodies. One for the whole
/// server, kept as app data of its own.
#[derive(Debug, Clone)]
pub struct PeerSlots {
    requests: Shares<IpAddr>,
    bodies: Shares<IpAddr>,
}

/// The peer slots a server starts with.
pub fn peer_slots() -> PeerSlots {
    PeerSlots {
        requests: Shares::new(PER_PEER),
        bodies: Shares::new(BODIES_PER_PEER),
    }
}

/// Whether a request carries a body: a length above zero, or chunks.
fn has_body(req: &ServiceRequest) -> bool {
    let headers = req.headers();
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match length {
        Some(n) => n > 0,
        None => headers.contains_key(header::TRANSFER_ENCODING),
    }
}

/// An answer after which the connection is closed (what is left of its body is not read).
fn closing(status: StatusCode, message: &str) -> HttpResponse {
    let mut res = HttpResponse::build(status)
        .insert_header(header::ContentType::json())
        .body(serde_json::json!({"code": status.as_u16(), "message": message}).to_string());
    res.head_mut()
        .set_connection_type(actix_web::http::ConnectionType::Close);
    res
}

/// The middleware: a slot per request and one more per request with a body, and a deadline
/// on its body.
pub async fn bound(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let body = has_body(&req);
    let slots = req.app_data::<web::Data<PeerSlots>>().cloned();
    let mut held: Vec<Share<IpAddr>> = Vec::new();
    if let (Some(slots), Some(peer)) = (slots, req.peer_addr().map(|a| a.ip())) {
        let mut kinds = vec![(&slots.requests, PER_PEER, "requests")];
        if body {
            kinds.push((&slots.bodies, BODIES_PER_PEER, "requests with bodies"));
        }
        for (shares, limit, what) in kinds {
            match shares.try_take(peer) {
                Some(slot) => held.push(slot),
                None => {
                    let message =
                        format!("this address has {limit} {what} in flight already; wait for them");
                    let res = closing(StatusCode::TOO_MANY_REQUESTS, &message);
                    return Ok(req.into_response(res));
                }
            }
        }
    }
    if !body {
        let res = next.call(req).await;
        drop(held);
        return res.map(|r| r.map_into_boxed_body());
    }
    let timed_out = Arc::new(AtomicBool::new(false));
    let payload = Deadline {
        inner: req.take_payload(),
        idle: Box::pin(tokio::time::sleep(IDLE)),
        whole: Box::pin(tokio::time::sleep(WHOLE)),
        timed_out: Arc::clone(&timed_out),
    };
    req.set_payload(Payload::Stream {
        payload: Box::pin(payload),
    });
    let res = next.call(req).await;
    drop(held);
    if timed_out.load(Ordering::SeqCst) {
        let message = format!(
            "the request's body did not arrive in time (a pause of {}s, or {}s in all)",
            IDLE.as_secs(),
            WHOLE.as_secs()
        );
        return match res {
            Ok(r) => {
                let (req, _) = r.into_parts();
                Ok(ServiceResponse::new(
                    req,
                    closing(StatusCode::REQUEST_TIMEOUT, &message),
                ))
            }
            Err(e) => Err(e),
        };
    }
    res.map(|r| r.map_into_boxed_body())
}

/// A body stream that fails once it pauses [`IDLE`] or takes [`WHOLE`] in all.
struct Deadline {
    inner: Payload,
    idle: Pin<Box<tokio::time::Sleep>>,
    whole: Pin<Box<tokio::time::Sleep>>,
    timed_out: Arc<AtomicBool>,
}

impl Stream for Deadline {
    type Item = Result<web::Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Poll::Ready(item) = Pin::new(&mut self.inner).poll_next(cx) {
            if item.is_some() {
                let next = tokio::time::Instant::now() + IDLE;
                self.idle.as_mut().reset(next);
            }
            return Poll::Ready(item);
        }
        let idle = self.idle.as_mut().poll(cx).is_ready();
        let whole = self.whole.as_mut().poll(cx).is_ready();
        if idle || whole {
            self.timed_out.store(true, Ordering::SeqCst);
            let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "the body stopped arriving");
            return Poll::Ready(Some(Err(PayloadError::Io(e))));
        }
        Poll::Pending
    }
}
