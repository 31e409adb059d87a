//! Each call's place is taken before its request is read: under the limit of
//! calls (refused at once past it), and a share of the memory budget weighed by
//! the request's size, which the gRPC length prefix tells before the message
//! arrives. A call that does not fit waits, in order of arrival, within its
//! deadline (or `--pool-timeout` without one), its message unread in the
//! connection's HTTP/2 window; past that it is refused (RESOURCE_EXHAUSTED /
//! TOO_MANY_CALLS) having done nothing. A call is counted before its first
//! bytes are read, and gives its place back (DEADLINE_EXCEEDED) if they do not
//! come within the same wait. The place is the [`Call`]'s: the handler finds
//! the call in the request's extensions, and the reply holds it until it is
//! sent, so a place is given back only when nothing of the call is left.
//! WatchEntries streams are not weighed: they are bounded by their own limit
//! and buffers.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream;
use http_body::{Frame, SizeHint};
use http_body_util::{BodyExt as _, BodyStream, StreamBody};
use strum::IntoEnumIterator;
use tokio::time::Instant;
use tonic::body::Body;
use tonic::server::NamedService;
use tower::Service;

use super::admission::{Admission, READ_BYTES};
use super::batch;
use super::deadline;
use super::reads::ReadRpc;
use super::status::report;
use crate::call::Call;
use crate::error::{Error, Recorded};
use crate::ops::Method;
use crate::telemetry::metrics;

/// What a call weighs besides its request: its task, its state, the statements
/// it sends and its reply, for a call of a few entries.
const CALL_BYTES: usize = 8 * 1024;
/// What a call holds for each byte of its request: the bytes as read, the
/// decoded message, and its work: a post's entries, their rows and statements,
/// some 220 bytes for each of the two entries of a leg that takes 12 to 16
/// bytes on the wire (a post of 256 legs held about 110 KB in flight).
const REQUEST_FACTOR: usize = 32;
/// The length prefix of a gRPC message: a compression flag and four bytes of
/// length.
const PREFIX: usize = 5;

/// What a request weighs besides its bytes: one call's state, or a batch's
/// calls'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Weight {
    /// One call's state.
    Call(usize),
    /// A request of many calls (a batch): `each` for every call its length
    /// could hold at `least` bytes a call on the wire, up to the `most` it
    /// runs at once (its bytes, weighed apart, hold the others).
    Calls {
        each: usize,
        least: usize,
        most: usize,
    },
}

impl Weight {
    /// The bytes a request of `length` bytes is weighed at.
    fn of(self, length: usize) -> usize {
        let base = match self {
            Self::Call(bytes) => bytes,
            Self::Calls { each, least, most } => {
                each.saturating_mul((length / least.max(1)).saturating_add(1).min(most))
            }
        };
        base.saturating_add(length.saturating_mul(REQUEST_FACTOR))
    }

    /// What a request whose length is not known (malformed, or too large for
    /// tonic, which refuses it unread) is weighed at: one call's state.
    fn least(self) -> usize {
        match self {
            Self::Call(bytes) | Self::Calls { each: bytes, .. } => bytes,
        }
    }
}

/// How a call of `method` (the path's last segment) is weighed; `None` for a
/// call that is not: a WatchEntries stream, or a method the service does not
/// have (tonic answers UNIMPLEMENTED at once).
fn weight_of(method: &str) -> Option<Weight> {
    if <Method as IntoEnumIterator>::iter().any(|m| m.name() == method) {
        Some(Weight::Call(CALL_BYTES))
    } else if <ReadRpc as IntoEnumIterator>::iter().any(|r| r.name() == method) {
        Some(Weight::Call(READ_BYTES))
    } else if method == batch::BATCH {
        Some(Weight::Calls {
            each: CALL_BYTES,
            least: batch::LEAST_ITEM_BYTES,
            most: batch::CHAINS_AT_ONCE,
        })
    } else {
        None
    }
}

/// Wraps the ledger's service: every call takes its place before its request
/// is read.
#[derive(Debug, Clone)]
pub struct Weighed<S> {
    inner: S,
    admission: Admission,
    /// Larger requests are left to tonic to refuse, unread.
    max_message_bytes: usize,
}

impl<S> Weighed<S> {
    pub fn new(inner: S, admission: Admission, max_message_bytes: usize) -> Self {
        Self {
            inner,
            admission,
            max_message_bytes,
        }
    }
}

impl<S: NamedService> NamedService for Weighed<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for Weighed<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // The service polled ready is the one that serves (tower's convention).
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let admission = self.admission.clone();
        let max = self.max_message_bytes;
        Box::pin(async move {
            // A clone of the URI shares its bytes.
            let uri = request.uri().clone();
            let method = uri.path().rsplit('/').next().unwrap_or_default();
            let Some(rule) = weight_of(method) else {
                return inner.call(request).await;
            };
            let arrived = Instant::now();
            let call = deadline::call_at_arrival(request.headers());
            let refuse = |e: &Error| {
                let status = report(e);
                metrics::rpc_refused(method, status.code(), arrived.elapsed());
                tracing::debug!(
                    method,
                    error = e.label(),
                    "refused before the request was read"
                );
                status.into_http()
            };
            // Counted before anything of the request is read: what calls that
            // wait for room hold is bounded by their number.
            let counted = match admission.count() {
                Ok(counted) => counted,
                Err(e) => return Ok(refuse(&e)),
            };
            let (mut parts, body) = request.into_parts();
            // A request whose first bytes do not come within its wait gives its
            // place back: a caller cannot hold places by sending nothing.
            let until = admission.until(&call);
            let (length, body) = match tokio::time::timeout_at(until, read_prefix(body)).await {
                Ok(Ok(read)) => read,
                Ok(Err(refused)) => return Ok(refused),
                Err(_) => {
                    let recorded = Recorded::Nothing;
                    return Ok(refuse(&Error::DeadlineExceeded { recorded }));
                }
            };
            let weight = match length {
                Some(length) if length <= max => rule.of(length),
                // Malformed or too large: tonic refuses it without reading on.
                _ => rule.least(),
            };
            if let Err(e) = admission.weigh(counted, weight, &call, until).await {
                return Ok(refuse(&e));
            }
            parts.extensions.insert(call.clone());
            let response = inner.call(http::Request::from_parts(parts, body)).await?;
            Ok(response.map(|reply| Body::new(Holding { reply, _call: call })))
        })
    }
}

/// Reads the request's body up to its first message's length prefix, and gives
/// back the length (`None` when the body ends first) and the body as it was.
async fn read_prefix(mut body: Body) -> Result<(Option<usize>, Body), http::Response<Body>> {
    let mut read = Vec::new();
    let mut head = Vec::with_capacity(PREFIX);
    while head.len() < PREFIX {
        let Some(frame) = body.frame().await else {
            break;
        };
        let frame = frame.map_err(tonic::Status::into_http)?;
        if let Some(data) = frame.data_ref() {
            let wanted = PREFIX - head.len();
            head.extend(data.iter().take(wanted));
        }
        read.push(frame);
    }
    // The compression flag, then the length, big-endian.
    let length = match head.as_slice() {
        [_, a, b, c, d] => {
            Some(usize::try_from(u32::from_be_bytes([*a, *b, *c, *d])).unwrap_or(usize::MAX))
        }
        _ => None,
    };
    // The frames read, then the rest.
    let whole = stream::iter(read.into_iter().map(Ok)).chain(BodyStream::new(body));
    Ok((length, Body::new(StreamBody::new(whole))))
}

/// A reply that keeps its call, and so its place, until it is sent.
struct Holding {
    reply: Body,
    _call: Call,
}

impl http_body::Body for Holding {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.reply).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.reply.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.reply.size_hint()
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn a_keyed_call_weighs_its_request_and_a_read_its_page() {
        let weight = |method, length| weight_of(method).map(|w| w.of(length));
        assert_eq!(
            weight(Method::Charge.name(), 100),
            Some(CALL_BYTES + 100 * REQUEST_FACTOR)
        );
        assert_eq!(
            weight(Method::Post.name(), 10_000),
            Some(CALL_BYTES + 10_000 * REQUEST_FACTOR)
        );
        for read in <ReadRpc as IntoEnumIterator>::iter() {
            assert_eq!(
                weight(read.name(), 40),
                Some(READ_BYTES + 40 * REQUEST_FACTOR)
            );
        }
        assert_eq!(weight(super::super::service::WATCH_ENTRIES, 40), None);
        assert_eq!(weight("NoSuchMethod", 40), None);
        assert_eq!(weight(Method::Post.name(), usize::MAX), Some(usize::MAX));
        // A batch: as the calls its length could hold, up to the 256 it runs
        // at once.
        assert_eq!(
            weight(batch::BATCH, 20),
            Some(3 * CALL_BYTES + 20 * REQUEST_FACTOR)
        );
        assert_eq!(
            weight(batch::BATCH, 1 << 20),
            Some(256 * CALL_BYTES + (1 << 20) * REQUEST_FACTOR)
        );
    }

    fn body_of(chunks: &[&'static [u8]]) -> Body {
        let frames: Vec<Result<Frame<Bytes>, tonic::Status>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::from_static(c))))
            .collect();
        Body::new(http_body_util::StreamBody::new(futures::stream::iter(
            frames,
        )))
    }

    async fn all_of(body: Body) -> Vec<u8> {
        body.collect().await.unwrap().to_bytes().to_vec()
    }

    #[tokio::test]
    async fn the_prefix_is_read_across_frames_and_the_body_given_back_whole() {
        let chunks: &[&'static [u8]] = &[b"\0\0", b"\0\x01", b"\x02abc", b"def"];
        let (length, body) = read_prefix(body_of(chunks)).await.unwrap();
        assert_eq!(length, Some(258));
        assert_eq!(all_of(body).await, b"\0\0\0\x01\x02abcdef");
    }

    #[tokio::test]
    async fn a_body_shorter_than_a_prefix_has_no_length() {
        let (length, body) = read_prefix(body_of(&[b"\0\0"])).await.unwrap();
        assert_eq!(length, None);
        assert_eq!(all_of(body).await, b"\0\0");
        let (length, _) = read_prefix(Body::empty()).await.unwrap();
        assert_eq!(length, None);
    }
}
