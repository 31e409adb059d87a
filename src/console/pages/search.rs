//! `/entries?metadata=KEY:VALUE` (the pair repeated for each, one to four;
//! `&account_id=N` for one account's): the entries whose metadata holds every
//! pair, in sequence order (SearchEntries), each linked to its page and its
//! account's, paged with the API's own tokens (`&page_token=`, bound to the
//! pairs and the account). Without a pair, the search form alone.

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::super::auth::{Viewer, query_value};
use super::super::view::EntryView;
use super::super::{Console, Nav, failure, html};
use super::{form_fields, id, metadata_filter, search_address, tidied};
use crate::error::Error;
use crate::proto::pb;

#[derive(askama::Template)]
#[template(path = "search.html")]
struct SearchPage {
    nav: Nav,
    /// The pairs searched for, as the form's fields show them.
    fields: Vec<String>,
    /// The account searched in, as the form shows it (empty: every account).
    account: String,
    /// The entries found; `None` before a search.
    entries: Option<Vec<EntryView>>,
    /// Whether this is the search's first page, and the address of its first.
    first_page: bool,
    first: String,
    /// The address of the next page, if there is one.
    next_page: Option<String>,
}

pub(crate) async fn page(State(console): State<Console>, uri: Uri, viewer: Viewer) -> Response {
    if let Some(redirect) = tidied(&uri) {
        return redirect;
    }
    let query = uri.query();
    let page_token = query_value(query, "page_token").unwrap_or_default();
    let account = query_value(query, "account_id")
        .map(|a| a.trim().to_owned())
        .unwrap_or_default();
    let reader = console.reader();
    let token = page_token.clone();
    let answer = async {
        let metadata = metadata_filter(query)?;
        let account_id = match account.as_str() {
            "" => 0,
            raw => id("account_id", raw)?,
        };
        if metadata.is_empty() {
            return Ok::<_, Error>((metadata, None));
        }
        let request = pb::SearchEntriesRequest {
            metadata: metadata.clone(),
            account_id,
            page_size: 0,
            page_token: token,
        };
        let reply = reader
            .serve(
                &viewer.client,
                &["SearchEntries"],
                Console::call(),
                |call| async move { reader.search_entries(request, &call).await },
            )
            .await?;
        Ok((metadata, Some(reply)))
    }
    .await;
    let (metadata, reply) = match answer {
        Ok(read) => read,
        Err(e) => return failure::page(&e, viewer.nav),
    };
    let next_page = reply
        .as_ref()
        .filter(|r| !r.next_page_token.is_empty())
        .map(|r| {
            let more = [
                ("account_id", account.as_str()),
                ("page_token", &r.next_page_token),
            ];
            search_address("/entries", &metadata, &more)
        });
    let page = SearchPage {
        nav: viewer.nav,
        fields: form_fields(&metadata),
        first: search_address("/entries", &metadata, &[("account_id", &account)]),
        account,
        entries: reply.map(|r| r.entries.iter().map(EntryView::from).collect()),
        first_page: page_token.is_empty(),
        next_page,
    };
    html(StatusCode::OK, &page)
}
