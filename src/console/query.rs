//! A page's query string, read into a struct of its fields by axum's `Query`,
//! or by axum-extra's where a search form sends one field several times
//! (`metadata=…&metadata=…`: axum's own refuses a field given twice). A query
//! that does not read (a one-value field given twice) is a 400 page, as a bad
//! field is; the pages parse the values themselves, to say which is wrong.
//!
//! What the pages read from their addresses is here too: an id, and a search's
//! pairs (`?metadata=KEY:VALUE`, once per pair).

use std::collections::BTreeMap;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::{IntoResponse as _, Redirect, Response};
use serde::de::DeserializeOwned;

use super::failure;
use super::frame::Nav;
use super::view::address;
use crate::error::Error;
use crate::ledger::FieldViolation;

/// The query read by axum's `Query`: each field once.
#[derive(Debug)]
pub(super) struct Params<T>(pub(super) T);

/// The query read by axum-extra's `Query`: a `Vec` field gathers every value
/// its name is given.
#[derive(Debug)]
pub(super) struct Repeated<T>(pub(super) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        axum::extract::Query::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(fields)| Self(fields))
            .map_err(|rejection| unread(&rejection.body_text()))
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Repeated<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        axum_extra::extract::Query::from_request_parts(parts, state)
            .await
            .map(|axum_extra::extract::Query(fields)| Self(fields))
            .map_err(|rejection| unread(&rejection.body_text()))
    }
}

fn unread(why: &str) -> Response {
    let violation = FieldViolation::new("query", why.to_owned());
    failure::page(&Error::InvalidRequest(vec![violation]), Nav::anonymous())
}

/// A search form sends its blank fields too (`metadata=&account_id=`); a page
/// that takes this is answered, when any is blank, with a redirect to the same
/// address without them, so the address a person copies names only what was
/// asked.
#[derive(Debug)]
pub(super) struct Tidy;

impl<S: Send + Sync> FromRequestParts<S> for Tidy {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let Params(given) =
            Params::<Vec<(String, String)>>::from_request_parts(parts, state).await?;
        if !given.iter().any(|(_, value)| value.trim().is_empty()) {
            return Ok(Self);
        }
        let kept: Vec<(&str, &str)> = given
            .iter()
            .filter(|(_, value)| !value.trim().is_empty())
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        Err(Redirect::to(&address(parts.uri.path(), &kept)).into_response())
    }
}

/// The pair fields a search form offers: as many as a search takes (SPEC 3.11).
const FORM_PAIRS: usize = 4;

/// An id from a page's address or query, as a number for its request; what is
/// not one is an invalid request, as the API's own parsing would say of a bad
/// field (0 reaches that parsing, which refuses it).
pub(super) fn id(field: &'static str, raw: &str) -> Result<u64, Error> {
    raw.trim().parse().map_err(|_| {
        Error::InvalidRequest(vec![FieldViolation::new(
            field,
            "must be a positive whole number",
        )])
    })
}

/// A search's query (`/accounts`, `/entries`), read by axum-extra's `Query`:
/// its pairs, the account searched in (`/entries` only), the page.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct SearchQuery {
    #[serde(default)]
    metadata: Vec<String>,
    #[serde(default)]
    pub(super) account_id: String,
    #[serde(default)]
    pub(super) page_token: String,
}

impl SearchQuery {
    /// Its pairs: each `KEY:VALUE`, split at the first colon (a key has none; a
    /// value may), blank ones (a form's unused fields) skipped. A pair without a
    /// colon, or a key given twice (the request's pairs are a map), is an
    /// invalid request; whether the keys and values are valid, and how many may
    /// be given, is the read's own parsing to say.
    pub(super) fn pairs(&self) -> Result<BTreeMap<String, String>, Error> {
        let mut pairs = BTreeMap::new();
        for pair in self.metadata.iter().filter(|p| !p.trim().is_empty()) {
            let Some((key, value)) = pair.split_once(':') else {
                return Err(invalid("metadata", "each pair must be KEY:VALUE"));
            };
            if pairs.insert(key.to_owned(), value.to_owned()).is_some() {
                return Err(invalid("metadata", "each key may be given once"));
            }
        }
        Ok(pairs)
    }
}

/// A search form's pair fields, filled with the pairs searched for, then blank.
pub(super) fn form_fields(pairs: &BTreeMap<String, String>) -> Vec<String> {
    let mut fields: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    fields.resize(fields.len().max(FORM_PAIRS), String::new());
    fields
}

pub(super) fn invalid(field: &'static str, description: &'static str) -> Error {
    Error::InvalidRequest(vec![FieldViolation::new(field, description)])
}

#[cfg(test)]
mod tests {
    use axum::http::Request;
    use axum_extra::extract::Query;

    use super::super::view::search_href;
    use super::*;

    async fn tidied(uri: &str) -> Option<String> {
        let (mut parts, ()) = Request::get(uri).body(()).unwrap().into_parts();
        let answer = Tidy::from_request_parts(&mut parts, &()).await.err()?;
        Some(answer.headers()["location"].to_str().unwrap().to_owned())
    }

    #[tokio::test]
    async fn a_forms_blank_fields_are_dropped_from_its_address() {
        assert_eq!(
            tidied("/entries?metadata=a%3A1&metadata=&metadata=+&account_id=").await,
            Some("/entries?metadata=a%3A1".to_owned())
        );
        assert_eq!(
            tidied("/accounts?metadata=").await,
            Some("/accounts".to_owned())
        );
        assert_eq!(tidied("/entries?metadata=a%3A1&page_token=t").await, None);
        assert_eq!(tidied("/entries").await, None);
    }

    #[derive(Debug, serde::Deserialize)]
    struct One {
        key: Option<String>,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Many {
        #[serde(default)]
        metadata: Vec<String>,
    }

    #[tokio::test]
    async fn a_field_given_twice_is_gathered_or_refused() {
        let (mut parts, ()) = Request::get("/x?key=a&key=b&metadata=1&metadata=2")
            .body(())
            .unwrap()
            .into_parts();
        let Repeated(many) = Repeated::<Many>::from_request_parts(&mut parts, &())
            .await
            .unwrap();
        assert_eq!(many.metadata, ["1", "2"]);
        let refused = Params::<One>::from_request_parts(&mut parts, &())
            .await
            .unwrap_err();
        assert_eq!(refused.status(), 400);
        let (mut parts, ()) = Request::get("/x").body(()).unwrap().into_parts();
        let Params(none) = Params::<One>::from_request_parts(&mut parts, &())
            .await
            .unwrap();
        assert_eq!(none.key, None);
    }

    fn read(address: &str) -> SearchQuery {
        Query::try_from_uri(&address.parse().unwrap()).unwrap().0
    }

    #[test]
    fn a_searchs_pairs_are_read_from_its_address() {
        let query = "/entries?metadata=order_id%3AA-1&metadata=&metadata=note%3Aa%3Ab+c%26d&x=y";
        let pairs = read(query).pairs().unwrap();
        assert_eq!(
            pairs.into_iter().collect::<Vec<_>>(),
            [
                ("note".to_owned(), "a:b c&d".to_owned()),
                ("order_id".to_owned(), "A-1".to_owned())
            ]
        );
        assert!(read("/entries").pairs().unwrap().is_empty());
        for bad in [
            "/entries?metadata=no-colon",
            "/entries?metadata=k%3A1&metadata=k%3A2",
        ] {
            assert!(read(bad).pairs().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_searchs_address_reads_back_as_its_pairs() {
        let pairs: BTreeMap<String, String> = [("k.1", "ü & = : +"), ("k-2", "")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let address = search_href("/entries", &pairs, &[("page_token", "t"), ("x", "")]);
        assert!(address.ends_with("&page_token=t"), "{address}");
        let back = read(&address);
        assert_eq!(back.pairs().unwrap(), pairs);
        assert_eq!(back.page_token, "t");
        assert_eq!(form_fields(&pairs).len(), FORM_PAIRS);
        assert_eq!(
            search_href("/accounts", &BTreeMap::<String, String>::new(), &[]),
            "/accounts"
        );
    }
}
