//! The web console (SPEC 6): pages for people, served by the ledger process itself
//! (`--console-addr`), from the same reads as the gRPC API.
//!
//! Every page reads through [`Reader`], the read RPCs the gRPC service answers
//! with: the same parsing, page tokens and database reads, so a page shows
//! exactly what the RPC answers; and through its [`Admission`](crate::grpc::Admission),
//! so a page is granted and limited as the RPCs it mirrors are (the account
//! page needs GetAccount, ListEntries and ListHolds; the searches ListAccounts
//! and SearchEntries; a balance at a point GetBalance), and counts under the same
//! limit of concurrent calls; the tail is a WatchEntries watcher, under the
//! watchers' limit.
//!
//! Read-only by construction: the console holds a `Reader`, whose database handle
//! (`db::Reads`) has no way to the keyed path, and its router has GET (and so
//! HEAD) routes only, besides `POST /login` and `POST /logout`, which set and
//! clear a cookie. Any other method on any address is answered 405, and an
//! address that names nothing 404, each with a page.
//!
//! - `auth`: with tokens configured, the token form, the cookie that keeps the
//!   token, and the client it names.
//! - `failure`: errors as HTTP answers, by their gRPC status (SPEC 6's mapping).
//! - `view`: values as people read them: times in UTC, amounts with their
//!   currency, every id a link.
//! - `pages`: one module per page.
//! - `assets`: the stylesheet and the tail's script, compiled into the binary.

mod assets;
mod auth;
mod failure;
mod pages;
mod view;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse as _, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tonic_health::server::HealthService;

use crate::call::Call;
use crate::grpc::Reader;
use crate::grpc::auth::{Client, Tokens};

/// How long a page's reads may take before it is answered 504: a person waits
/// for a page about as long as a client waits for a read.
const PAGE_DEADLINE: Duration = Duration::from_secs(10);

/// What every page needs: the reads, the health state, and the tokens.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

struct Inner {
    reader: Reader,
    /// The gRPC health service's state, which `/health` shows.
    health: HealthService,
    /// The clients' tokens; `None`: no authentication, every reader anonymous.
    tokens: Option<Tokens>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("authenticated", &self.inner.tokens.is_some())
            .finish_non_exhaustive()
    }
}

impl Console {
    pub fn new(reader: Reader, health: HealthService, tokens: Option<Tokens>) -> Self {
        Self {
            inner: Arc::new(Inner {
                reader,
                health,
                tokens,
            }),
        }
    }

    fn reader(&self) -> &Reader {
        &self.inner.reader
    }

    /// A page's call: its deadline starts now.
    fn call() -> Call {
        Call::new(Some(tokio::time::Instant::now() + PAGE_DEADLINE))
    }

    /// The router: the pages' addresses (SPEC 6), GET only but for the login and
    /// logout posts, and pages for everything else.
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
            .route("/health", get(pages::health::page))
            .route("/login", get(auth::form).post(auth::login))
            .route("/logout", post(auth::logout))
            .route("/assets/console.css", get(assets::stylesheet))
            .route("/assets/tail.js", get(assets::script))
            .fallback(failure::unrouted)
            .method_not_allowed_fallback(failure::method_not_allowed)
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

/// Who is reading, for the navigation bar: their client id with authentication
/// on, nothing without.
#[derive(Debug, Clone)]
struct Nav {
    /// The client's id; `None` without authentication.
    who: Option<String>,
}

impl Nav {
    fn of(client: &Client, authenticated: bool) -> Self {
        Self {
            who: authenticated.then(|| client.namespace.as_str().to_owned()),
        }
    }

    /// The navigation of a page shown to nobody in particular (health, errors
    /// before a token was read).
    fn anonymous() -> Self {
        Self { who: None }
    }
}

/// A rendered page with its status; a template that fails to render (a bug) is
/// a 500 with a line of text.
fn html<T: Template>(status: StatusCode, page: &T) -> Response {
    match page.render() {
        Ok(body) => (status, Html(body)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a console page did not render");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
        }
    }
}
