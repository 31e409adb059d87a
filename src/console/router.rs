//! The console's addresses (SPEC 6), each to its page, and how it is served:
//! GET (and so HEAD) routes only but for the login and logout posts, a page for
//! every other address and method, every request checked for the console's own
//! names first, and the headers every answer carries.

use std::future::Future;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use axum::routing::{get, post};
use tokio::net::TcpListener;

use super::state::Console;
use super::{assets, auth, failure, host, pages};

impl Console {
    /// The router: the pages' addresses (SPEC 6), GET only but for the login and
    /// logout posts, and pages for everything else; each for requests sent to
    /// the console's own names alone.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(pages::home::page))
            .route("/find", get(pages::home::find))
            .route("/accounts", get(pages::accounts::page))
            .route("/accounts/{account_id}", get(pages::account::page))
            .route("/accounts/{account_id}/balance", get(pages::balance::page))
            .route("/entries", get(pages::search::page))
            .route("/entries/{entry_id}", get(pages::entry::page))
            .route("/holds/{hold_id}", get(pages::hold::page))
            .route("/keys", get(pages::key::page))
            .route("/tail", get(pages::tail::page))
            .route("/tail/events", get(pages::tail::events))
            .route("/subscriptions", get(pages::subscriptions::page))
            .route("/health", get(pages::health::page))
            .route("/login", get(auth::form).post(auth::login))
            .route("/logout", post(auth::logout))
            .route("/assets/console.css", get(assets::stylesheet))
            .route("/assets/tail.js", get(assets::script))
            .fallback(failure::unrouted)
            .method_not_allowed_fallback(failure::method_not_allowed)
            .layer(axum::middleware::from_fn_with_state(
                self.names().clone(),
                host::checked,
            ))
            .layer(axum::middleware::map_response(guarded))
            .with_state(self)
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then lets the
/// requests in flight finish (a tail's stream ends when its watcher does).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Headers on every answer: the pages load nothing but their own assets, are
/// framed by nothing, and say nothing of themselves to other sites (a referrer
/// only to the console itself: with none at all, a browser sends its form posts
/// with `Origin: null`, which the login refuses).
async fn guarded(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}
