//! The console's only assets, compiled into the binary: a stylesheet and the
//! tail's script. Nothing is fetched from anywhere else.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse as _, Response};

const STYLESHEET: &str = include_str!("assets/console.css");
const SCRIPT: &str = include_str!("assets/tail.js");

/// Kept for a few minutes: a restart with a new build is picked up soon after.
const CACHE: &str = "public, max-age=300";

pub(super) async fn stylesheet() -> Response {
    asset(STYLESHEET, "text/css; charset=utf-8")
}

pub(super) async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(CACHE));
    response
}
