//! Who reads the console. Without tokens, everyone is the anonymous client, as on
//! the gRPC API. With tokens, a page asks for one (401 with a form); `POST /login`
//! checks it, opens a session (`session`: the token is not kept) and names it in
//! a cookie that scripts cannot read (`HttpOnly`), that no other site's page
//! sends (`SameSite=Strict`), and, behind a TLS proxy, that travels over HTTPS
//! alone (`Secure`, `--console-secure-cookie`); `POST /logout` ends the session
//! and clears the cookie.
//!
//! The posts only open or end a session and set or clear its cookie. A post
//! whose `Origin` is another site's is refused, so no other site can log a
//! browser in under a token of its own.

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse as _, Redirect, Response};
use axum_extra::extract::CookieJar;
use axum_extra::extract::cookie::{Cookie, SameSite};

use super::frame::{Nav, html};
use super::query::Params;
use super::state::Console;
use crate::grpc::auth::Client;

/// The cookie that names a browser's session.
const COOKIE: &str = "ledger_console_session";

/// The reader of a page: its client, and how the navigation shows it.
#[derive(Debug, Clone)]
pub(super) struct Viewer {
    pub(super) client: Client,
    pub(super) nav: Nav,
}

/// The token form.
#[derive(askama::Template)]
#[template(path = "login.html")]
struct LoginPage {
    nav: Nav,
    /// Where to go once logged in: the page that asked.
    next: String,
    /// Why the form is shown again.
    problem: Option<String>,
}

/// The reader of a request, taken by every page as an argument: with tokens
/// configured, the client of the session its cookie names; with no cookie, or
/// one whose session has ended or never was, the page is not run and the answer
/// is the form (401), to come back to the page asked for.
impl FromRequestParts<Console> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Response> {
        if console.tokens().is_none() {
            let client = Client::anonymous();
            let nav = Nav::of(&client, false);
            return Ok(Self { client, nav });
        }
        let jar = CookieJar::from_headers(&parts.headers);
        let known = jar
            .get(COOKIE)
            .and_then(|session| console.sessions().client(session.value()));
        if let Some(client) = known {
            let nav = Nav::of(&client, true);
            return Ok(Self { client, nav });
        }
        let next = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        Err(form_page(StatusCode::UNAUTHORIZED, next, None))
    }
}

fn form_page(status: StatusCode, next: &str, problem: Option<String>) -> Response {
    let page = LoginPage {
        nav: Nav::anonymous(),
        next: local_path(next).to_owned(),
        problem,
    };
    html(status, &page)
}

/// Where the form sends a browser once logged in: the page that asked.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Next {
    next: Option<String>,
}

/// `GET /login`: the form, to come back to `?next=`.
pub(super) async fn form(Params(Next { next }): Params<Next>) -> Response {
    form_page(StatusCode::OK, next.as_deref().unwrap_or("/"), None)
}

/// The login form's fields.
#[derive(Debug, serde::Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    token: String,
    next: Option<String>,
}

/// `POST /login` (form: `token`, `next`): a known token opens a session, which
/// the cookie names (ending the one it named before, if any), and the browser is
/// sent on to `next`; an unknown one gets the form again, 401.
pub(super) async fn login(
    State(console): State<Console>,
    jar: CookieJar,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    if let Err(refused) = same_origin(&headers) {
        return *refused;
    }
    let Form(form) = match form {
        Ok(form) => form,
        Err(unread) => {
            return form_page(StatusCode::BAD_REQUEST, "/", Some(unread.body_text()));
        }
    };
    let next = local_path(form.next.as_deref().unwrap_or("/")).to_owned();
    let Some(tokens) = console.tokens() else {
        return Redirect::to(&next).into_response();
    };
    let Some(client) = tokens.client(form.token.trim()) else {
        return form_page(
            StatusCode::UNAUTHORIZED,
            &next,
            Some("that token is not known".to_owned()),
        );
    };
    let sessions = console.sessions();
    if let Some(before) = jar.get(COOKIE) {
        sessions.close(before.value());
    }
    let id = match sessions.open(client) {
        Ok(id) => id,
        Err(e) => {
            tracing::error!(error = %e, "a console session could not be opened");
            let problem = "no session could be opened; try again".to_owned();
            return form_page(StatusCode::SERVICE_UNAVAILABLE, &next, Some(problem));
        }
    };
    let cookie = Cookie::build((COOKIE, id))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(console.secure_cookie());
    (jar.add(cookie), Redirect::to(&next)).into_response()
}

/// `POST /logout`: the session ends and the cookie is cleared.
pub(super) async fn logout(
    State(console): State<Console>,
    jar: CookieJar,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = same_origin(&headers) {
        return *refused;
    }
    if let Some(session) = jar.get(COOKIE) {
        console.sessions().close(session.value());
    }
    (
        jar.remove(Cookie::build(COOKIE).path("/")),
        Redirect::to("/"),
    )
        .into_response()
}

/// Refuses a post sent by another site's page: its `Origin` names another host
/// than the request's. (A post with no `Origin` comes from no page: a command
/// line, which holds the token anyway.)
fn same_origin(headers: &HeaderMap) -> Result<(), Box<Response>> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, rest)| rest);
    match (origin_host, host) {
        (Some(from), Some(host)) if from == host => Ok(()),
        _ => Err(Box::new(
            (StatusCode::FORBIDDEN, "a post from another site").into_response(),
        )),
    }
}

/// `next` if it is a path of this console, else `/`: the form never sends a
/// browser to another site (SPEC 6). A path is visible ASCII, 0x21 to 0x7E
/// (browsers drop a tab or a newline from an address, so `/<TAB>/evil.example`
/// is read as `//evil.example`; and a control character cannot be a header),
/// starting with a single `/` (`//host` and `/\host`, a `\` read as `/`, name
/// another site).
fn local_path(next: &str) -> &str {
    let visible = next.bytes().all(|b| (0x21..=0x7e).contains(&b));
    let local =
        visible && next.starts_with('/') && !next.starts_with("//") && !next.starts_with("/\\");
    if local { next } else { "/" }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn the_form_sends_a_browser_only_to_a_page_of_its_own() {
        for own in [
            "/accounts/1?page_token=x",
            "/",
            "/%09/evil.example/",
            "/a\\b",
        ] {
            assert_eq!(local_path(own), own);
        }
        for elsewhere in [
            "https://evil.example/",
            "//evil.example/",
            "/\\evil",
            "/\t/evil.example/",
            "/\n/evil.example/",
            "/\x01x",
            "/ /evil.example/",
            "/caf\u{e9}",
            "/\x7f",
            "",
            "x",
        ] {
            assert_eq!(local_path(elsewhere), "/", "{elsewhere}");
        }
    }

    #[test]
    fn posts_from_another_site_are_refused() {
        let headers = |origin: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
            h.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
            h
        };
        assert!(same_origin(&headers("http://127.0.0.1:8080")).is_ok());
        assert!(same_origin(&headers("http://evil.example")).is_err());
        assert!(same_origin(&headers("null")).is_err());
        assert!(same_origin(&HeaderMap::new()).is_ok());
    }
}
