//! `/entries?metadata=KEY:VALUE` (the pair repeated for each, one to four;
//! `&account_id=N` for one account's): the entries whose metadata holds every
//! pair, in sequence order (SearchEntries), each linked to its page and its
//! account's, paged with the API's own tokens (`&page_token=`, bound to the
//! pairs and the account). Without a pair, the search form alone.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::super::auth::Viewer;
use super::super::failure;
use super::super::frame::{Nav, html};
use super::super::query::{Repeated, SearchQuery, Tidy, form_fields, id};
use super::super::state::Console;
use super::super::view::{EntryView, search_href};
use crate::error::Error;
use crate::grpc::reads;
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

pub(crate) async fn page(
    State(console): State<Console>,
    viewer: Viewer,
    _: Tidy,
    Repeated(query): Repeated<SearchQuery>,
) -> Response {
    let account = query.account_id.trim().to_owned();
    let reader = console.reader();
    let client = viewer.client.clone();
    let answer = async {
        let metadata = query.pairs()?;
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
            page_token: query.page_token.clone(),
        };
        let reply = reader
            .serve(
                &viewer.client,
                &["SearchEntries"],
                Console::call(),
                |call| async move {
                    reader
                        .read::<reads::SearchEntries>(request, &client, &call)
                        .await
                },
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
            search_href("/entries", &metadata, &more)
        });
    let page = SearchPage {
        nav: viewer.nav,
        fields: form_fields(&metadata),
        first: search_href("/entries", &metadata, &[("account_id", &account)]),
        account,
        entries: reply.map(|r| {
            let viewer = &viewer.client.namespace;
            r.entries
                .iter()
                .map(|e| EntryView::seen_by(e, viewer))
                .collect()
        }),
        first_page: query.page_token.is_empty(),
        next_page,
    };
    html(StatusCode::OK, &page)
}
