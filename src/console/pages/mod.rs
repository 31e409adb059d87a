//! One module per page. A page reads through the console's `Reader` under the
//! grants of the RPCs it mirrors, and renders their answers; the addresses are
//! SPEC 6's. A search by metadata (`/accounts`, `/entries`) names its pairs as
//! `?metadata=KEY:VALUE`, once per pair, form-urlencoded: the same address
//! whether typed, linked from a pair on a page, or sent by a search form.

pub(super) mod account;
pub(super) mod accounts;
pub(super) mod balance;
pub(super) mod entry;
pub(super) mod health;
pub(super) mod hold;
pub(super) mod home;
pub(super) mod key;
pub(super) mod search;
pub(super) mod tail;

use std::borrow::Cow;
use std::collections::BTreeMap;

use axum::http::Uri;
use axum::response::{IntoResponse as _, Redirect, Response};

use crate::error::Error;
use crate::ledger::FieldViolation;

/// The pair fields a search form offers: as many as a search takes (SPEC 3.11).
const FORM_PAIRS: usize = 4;

/// An id from a page's address or query, as a number for its request; what is
/// not one is an invalid request, as the API's own parsing would say of a bad
/// field (0 reaches that parsing, which refuses it).
fn id(field: &'static str, raw: &str) -> Result<u64, Error> {
    raw.trim().parse().map_err(|_| {
        Error::InvalidRequest(vec![FieldViolation::new(
            field,
            "must be a positive whole number",
        )])
    })
}

/// A page token for an address's query string.
fn token_query(name: &str, token: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair(name, token)
        .finish()
}

/// The pairs of a search's address: each `metadata=KEY:VALUE`, split at the
/// first colon (a key has none; a value may), blank ones (a form's unused
/// fields) skipped. A pair without a colon, or a key given twice (the request's
/// pairs are a map), is an invalid request; whether the keys and values are
/// valid, and how many may be given, is the read's own parsing to say.
fn metadata_filter(query: Option<&str>) -> Result<BTreeMap<String, String>, Error> {
    let mut pairs = BTreeMap::new();
    let given = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(name, value)| name == "metadata" && !value.trim().is_empty());
    for (_, pair) in given {
        let Some((key, value)) = pair.split_once(':') else {
            return Err(invalid("metadata", "each pair must be KEY:VALUE"));
        };
        if pairs.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(invalid("metadata", "each key may be given once"));
        }
    }
    Ok(pairs)
}

/// The address of a search at `path` for `pairs`, with `more` parameters (a
/// page token, an account) where they are not empty.
fn search_address(path: &str, pairs: &BTreeMap<String, String>, more: &[(&str, &str)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        query.append_pair("metadata", &format!("{key}:{value}"));
    }
    for (name, value) in more.iter().filter(|(_, v)| !v.is_empty()) {
        query.append_pair(name, value);
    }
    let query = query.finish();
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    }
}

/// A search form's pair fields, filled with the pairs searched for, then blank.
fn form_fields(pairs: &BTreeMap<String, String>) -> Vec<String> {
    let mut fields: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    fields.resize(fields.len().max(FORM_PAIRS), String::new());
    fields
}

/// A search form sends its blank fields too (`metadata=&account_id=`); the
/// answer to such an address is a redirect to the same address without them, so
/// the address a person copies names only what was asked. `None`: none blank.
fn tidied(uri: &Uri) -> Option<Response> {
    let query = uri.query()?;
    let blank = |(_, v): &(Cow<'_, str>, Cow<'_, str>)| v.trim().is_empty();
    if !form_urlencoded::parse(query.as_bytes()).any(|p| blank(&p)) {
        return None;
    }
    let kept = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form_urlencoded::parse(query.as_bytes()).filter(|p| !blank(p)))
        .finish();
    let path = uri.path();
    let address = if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{kept}")
    };
    Some(Redirect::to(&address).into_response())
}

fn invalid(field: &'static str, description: &'static str) -> Error {
    Error::InvalidRequest(vec![FieldViolation::new(field, description)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_searchs_pairs_are_read_from_its_address() {
        let query = "metadata=order_id%3AA-1&metadata=&metadata=note%3Aa%3Ab+c%26d&x=y";
        let pairs = metadata_filter(Some(query)).unwrap();
        assert_eq!(
            pairs.into_iter().collect::<Vec<_>>(),
            [
                ("note".to_owned(), "a:b c&d".to_owned()),
                ("order_id".to_owned(), "A-1".to_owned())
            ]
        );
        assert!(metadata_filter(None).unwrap().is_empty());
        for bad in ["metadata=no-colon", "metadata=k%3A1&metadata=k%3A2"] {
            assert!(metadata_filter(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_searchs_address_reads_back_as_its_pairs() {
        let pairs: BTreeMap<String, String> = [("k.1", "ü & = : +"), ("k-2", "")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let address = search_address("/entries", &pairs, &[("page_token", "t"), ("x", "")]);
        let (path, query) = address.split_once('?').unwrap();
        assert_eq!(path, "/entries");
        assert!(query.ends_with("&page_token=t"), "{query}");
        let back = metadata_filter(Some(query)).unwrap();
        assert_eq!(back.get("k.1").map(String::as_str), Some("ü & = : +"));
        assert_eq!(form_fields(&pairs).len(), FORM_PAIRS);
        assert_eq!(
            search_address("/accounts", &BTreeMap::new(), &[]),
            "/accounts"
        );
    }

    #[test]
    fn a_forms_blank_fields_are_dropped_from_its_address() {
        let sent: Uri = "/entries?metadata=a%3A1&metadata=&metadata=+&account_id="
            .parse()
            .unwrap();
        let answer = tidied(&sent).unwrap();
        assert_eq!(answer.headers()["location"], "/entries?metadata=a%3A1");
        let bare: Uri = "/accounts?metadata=".parse().unwrap();
        assert_eq!(tidied(&bare).unwrap().headers()["location"], "/accounts");
        let clean: Uri = "/entries?metadata=a%3A1&page_token=t".parse().unwrap();
        assert!(tidied(&clean).is_none() && tidied(&"/entries".parse().unwrap()).is_none());
    }
}
