//! Who reads the console. Without tokens, everyone is the anonymous client, as on
//! the gRPC API. With tokens, a page asks for one (401 with a form); `POST /login`
//! checks it and keeps it in a cookie that scripts cannot read (`HttpOnly`) and
//! that no other site's page sends (`SameSite=Strict`); `POST /logout` clears it.
//! The token is then checked on every request, like a bearer token, so removing a
//! client from the tokens file ends its sessions at the next restart.
//!
//! The posts only set or clear the cookie. A post whose `Origin` is another site's
//! is refused, so no other site can log a browser in under a token of its own.

use axum::body::Bytes;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse as _, Redirect, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::{Console, Nav, html};
use crate::grpc::auth::Client;

/// The cookie that keeps the token (base64url, so any token fits a cookie).
const COOKIE: &str = "ledger_console_token";

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
    problem: Option<&'static str>,
}

/// The reader of a request, taken by every page as an argument; with tokens
/// configured and none (or an unknown one) in its cookie, the page is not run
/// and the answer is the form (401), to come back to the page asked for.
impl FromRequestParts<Console> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Response> {
        let Some(tokens) = &console.inner.tokens else {
            let client = Client::anonymous();
            let nav = Nav::of(&client, false);
            return Ok(Self { client, nav });
        };
        let known = cookie_token(&parts.headers).and_then(|token| tokens.client(&token).cloned());
        if let Some(client) = known {
            let nav = Nav::of(&client, true);
            return Ok(Self { client, nav });
        }
        let next = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        Err(form_page(StatusCode::UNAUTHORIZED, next, None))
    }
}

fn form_page(status: StatusCode, next: &str, problem: Option<&'static str>) -> Response {
    let page = LoginPage {
        nav: Nav::anonymous(),
        next: local_path(next).to_owned(),
        problem,
    };
    html(status, &page)
}

/// `GET /login`: the form, to come back to `?next=`.
pub(super) async fn form(uri: Uri) -> Response {
    let next = query_value(uri.query(), "next").unwrap_or_else(|| "/".to_owned());
    form_page(StatusCode::OK, &next, None)
}

/// `POST /login` (form: `token`, `next`): a known token is kept in the cookie and
/// the browser sent on to `next`; an unknown one gets the form again, 401.
pub(super) async fn login(
    State(console): State<Console>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refused) = same_origin(&headers) {
        return *refused;
    }
    let field = |name: &str| {
        form_urlencoded::parse(&body)
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    let next = field("next").unwrap_or_else(|| "/".to_owned());
    let next = local_path(&next).to_owned();
    let Some(tokens) = &console.inner.tokens else {
        return Redirect::to(&next).into_response();
    };
    let token = field("token").unwrap_or_default();
    let token = token.trim();
    if tokens.client(token).is_none() {
        return form_page(
            StatusCode::UNAUTHORIZED,
            &next,
            Some("that token is not known"),
        );
    }
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        URL_SAFE_NO_PAD.encode(token)
    );
    with_cookie(Redirect::to(&next).into_response(), &cookie)
}

/// `POST /logout`: the cookie is cleared.
pub(super) async fn logout(headers: HeaderMap) -> Response {
    if let Err(refused) = same_origin(&headers) {
        return *refused;
    }
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    with_cookie(Redirect::to("/").into_response(), &cookie)
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
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

/// The token in the request's cookie, if any.
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .and_then(|(_, value)| URL_SAFE_NO_PAD.decode(value).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
}

/// `next` if it is a path of this console, else `/`: the form never sends a
/// browser to another site.
fn local_path(next: &str) -> &str {
    let local = next.starts_with('/') && !next.starts_with("//") && !next.contains('\\');
    if local { next } else { "/" }
}

/// The first value of `name` in a form-urlencoded query.
pub(super) fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_sends_a_browser_only_to_a_page_of_its_own() {
        assert_eq!(
            local_path("/accounts/1?page_token=x"),
            "/accounts/1?page_token=x"
        );
        for elsewhere in [
            "https://evil.example/",
            "//evil.example/",
            "/\\evil",
            "",
            "x",
        ] {
            assert_eq!(local_path(elsewhere), "/", "{elsewhere}");
        }
    }

    #[test]
    fn the_token_is_read_back_from_its_cookie() {
        let mut headers = HeaderMap::new();
        let value = format!(
            "theme=dark; {COOKIE}={}",
            URL_SAFE_NO_PAD.encode("s3cret; x")
        );
        headers.insert(header::COOKIE, HeaderValue::from_str(&value).unwrap());
        assert_eq!(cookie_token(&headers).as_deref(), Some("s3cret; x"));
        assert_eq!(cookie_token(&HeaderMap::new()), None);
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
