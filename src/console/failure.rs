//! Errors as HTTP answers. An error is first made the gRPC status the API would
//! answer (`grpc::report`, which also logs it once), and that status is mapped to
//! HTTP as SPEC 6 says, so a page and the RPC it mirrors fail alike: invalid 400,
//! not permitted 403, not found 404, a point not reached 409, a purged key 410,
//! the retryable codes 503 with `Retry-After`, a deadline 504. (401 is the token
//! form, `auth`.) The page shows the status's message and reason.

use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use tonic::Code;
use tonic_types::StatusExt as _;

use super::frame::{Nav, html};
use crate::error::Error;

/// A page that says what went wrong.
#[derive(askama::Template)]
#[template(path = "failure.html")]
struct FailurePage {
    nav: Nav,
    status: u16,
    title: &'static str,
    message: String,
    /// The API's reason (`ACCOUNT_NOT_FOUND`), when there is one.
    reason: String,
}

/// The answer to a read that failed with `error`.
pub(super) fn page(error: &Error, nav: Nav) -> Response {
    let status = crate::grpc::report(error);
    let reason = status
        .get_details_error_info()
        .map(|info| info.reason)
        .unwrap_or_default();
    let http = http_status(status.code(), &reason);
    let mut response = html(
        http,
        &FailurePage {
            nav,
            status: http.as_u16(),
            title: http.canonical_reason().unwrap_or("Error"),
            message: status.message().to_owned(),
            reason,
        },
    );
    if http == StatusCode::SERVICE_UNAVAILABLE {
        let after = status
            .get_details_retry_info()
            .and_then(|info| info.retry_delay)
            .map_or(1, |d| {
                (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
            });
        if let Ok(value) = HeaderValue::from_str(&after.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
    }
    response
}

/// SPEC 6's mapping of a gRPC outcome to HTTP.
pub(super) fn http_status(code: Code, reason: &str) -> StatusCode {
    match code {
        Code::InvalidArgument => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::FailedPrecondition if reason == "IDEMPOTENCY_KEY_EXPIRED" => StatusCode::GONE,
        // OUT_OF_RANGE is POINT_NOT_REACHED: a point the ledger has not reached.
        Code::OutOfRange | Code::FailedPrecondition | Code::AlreadyExists => StatusCode::CONFLICT,
        Code::Unavailable | Code::Aborted | Code::ResourceExhausted | Code::Cancelled => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An address that names no page: 404 for a read, 405 for any other method.
pub(super) async fn unrouted(method: Method, uri: Uri) -> Response {
    if method == Method::GET || method == Method::HEAD {
        let page = FailurePage {
            nav: Nav::anonymous(),
            status: 404,
            title: "Not Found",
            message: format!("{} is not a page of this console", uri.path()),
            reason: String::new(),
        };
        return html(StatusCode::NOT_FOUND, &page);
    }
    method_not_allowed(method, uri).await
}

/// A request sent to a name that is not the console's (`host`): 421, and
/// nothing is read.
pub(super) fn misdirected() -> Response {
    let page = FailurePage {
        nav: Nav::anonymous(),
        status: 421,
        title: "Misdirected Request",
        message: "this console answers only to its own names: localhost, its address, \
                  and those given with --console-host"
            .to_owned(),
        reason: String::new(),
    };
    html(StatusCode::MISDIRECTED_REQUEST, &page)
}

/// Any method but GET and HEAD (and the login and logout posts): 405, and
/// nothing is done.
pub(super) async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let page = FailurePage {
        nav: Nav::anonymous(),
        status: 405,
        title: "Method Not Allowed",
        message: format!(
            "{method} is not allowed on {}: the console only reads, and changes nothing",
            uri.path()
        ),
        reason: String::new(),
    };
    let mut response = html(StatusCode::METHOD_NOT_ALLOWED, &page);
    let allow = match uri.path() {
        "/login" => "GET, HEAD, POST",
        "/logout" => "POST",
        _ => "GET, HEAD",
    };
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_outcomes_map_to_http_as_the_contract_says() {
        for (code, reason, http) in [
            (Code::InvalidArgument, "INVALID_REQUEST", 400),
            (Code::InvalidArgument, "INVALID_PAGE_TOKEN", 400),
            (Code::Unauthenticated, "UNAUTHENTICATED", 401),
            (Code::PermissionDenied, "METHOD_NOT_ALLOWED", 403),
            (Code::NotFound, "ACCOUNT_NOT_FOUND", 404),
            (Code::OutOfRange, "POINT_NOT_REACHED", 409),
            (Code::FailedPrecondition, "IDEMPOTENCY_KEY_EXPIRED", 410),
            (Code::Unavailable, "DATABASE_UNAVAILABLE", 503),
            (Code::Aborted, "IDEMPOTENCY_KEY_IN_PROGRESS", 503),
            (Code::ResourceExhausted, "TOO_MANY_CALLS", 503),
            (Code::DeadlineExceeded, "DEADLINE_EXCEEDED", 504),
            (Code::Internal, "INTERNAL", 500),
        ] {
            assert_eq!(
                http_status(code, reason).as_u16(),
                http,
                "{code:?} {reason}"
            );
        }
    }

    /// A retryable error's page says when to come back.
    #[test]
    fn a_retryable_failure_says_when_to_retry() {
        let overloaded = Error::Overloaded {
            limit: 1,
            what: "calls",
        };
        let response = page(&overloaded, Nav::anonymous());
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let missing = page(&Error::AccountNotFound(7), Nav::anonymous());
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        assert!(missing.headers().get(header::RETRY_AFTER).is_none());
    }
}
