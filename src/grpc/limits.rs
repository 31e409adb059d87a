//! Requests larger than the configured maximum are refused with RESOURCE_EXHAUSTED,
//! the code gRPC specifies for it, before any work. tonic checks each message's
//! length prefix against `max_decoding_message_size` but answers OUT_OF_RANGE; this
//! wrapper gives that answer the right code and the usual `ErrorInfo`. The ledger's
//! own OUT_OF_RANGE (POINT_NOT_REACHED, SPEC 3.10) always carries its `ErrorInfo`
//! in `grpc-status-details-bin`, and tonic's never does: only tonic's is renamed.

use std::task::{Context, Poll};

use futures::FutureExt as _;
use futures::future::Map;
use tonic::Code;
use tonic::server::NamedService;
use tower::Service;

use super::status::with_info;

#[derive(Debug, Clone)]
pub struct ResourceExhausted<S>(pub S);

impl<S: NamedService> NamedService for ResourceExhausted<S> {
    const NAME: &'static str = S::NAME;
}

type Answer<B, E> = Result<http::Response<B>, E>;

impl<S, Req, B> Service<Req> for ResourceExhausted<S>
where
    S: Service<Req, Response = http::Response<B>>,
    B: Default,
{
    type Response = http::Response<B>;
    type Error = S::Error;
    type Future = Map<S::Future, fn(Answer<B, S::Error>) -> Answer<B, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        self.0.call(request).map(rename)
    }
}

fn rename<B: Default, E>(answer: Answer<B, E>) -> Answer<B, E> {
    let response = answer?;
    let headers = response.headers();
    let out_of_range = headers
        .get("grpc-status")
        .is_some_and(|v| v.as_bytes() == b"11");
    if !out_of_range || headers.contains_key("grpc-status-details-bin") {
        return Ok(response);
    }
    Ok(with_info(
        Code::ResourceExhausted,
        "the request message is larger than the server accepts",
        "MESSAGE_TOO_LARGE",
        [],
    )
    .into_http())
}
