//! What frames every page: the navigation bar, which says who is reading, and
//! the rendering of a page's template into an answer.

use askama::Template;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse as _, Response};

use crate::grpc::auth::Client;

/// Who is reading, for the navigation bar: their client id with authentication
/// on, nothing without.
#[derive(Debug, Clone)]
pub(super) struct Nav {
    /// The client's id; `None` without authentication.
    pub(super) who: Option<String>,
}

impl Nav {
    pub(super) fn of(client: &Client, authenticated: bool) -> Self {
        Self {
            who: authenticated.then(|| client.namespace.as_str().to_owned()),
        }
    }

    /// The navigation of a page shown to nobody in particular (health, errors
    /// before a token was read).
    pub(super) fn anonymous() -> Self {
        Self { who: None }
    }
}

/// A rendered page with its status; a template that fails to render (a bug) is
/// a 500 with a line of text.
pub(super) fn html<T: Template>(status: StatusCode, page: &T) -> Response {
    match page.render() {
        Ok(body) => (status, Html(body)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a console page did not render");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
        }
    }
}
