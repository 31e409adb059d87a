//! `/accounts/{account_id}`: an account's figures (GetAccount: balance, held,
//! available, limits), its open holds with their expiry (ListHolds), and a page
//! of its journal with each entry's running balance (ListEntries), paged with the
//! API's own tokens (`?page_token=`; the holds', if more than a page are open,
//! `?holds_page_token=`). The reader needs all three grants.

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::super::auth::{Viewer, query_value};
use super::super::view::{AccountView, EntryView, HoldView};
use super::super::{Console, Nav, failure, html};
use super::{id, token_query};
use crate::proto::pb;

/// The RPCs the page shows the answers of.
const GRANTS: &[&str] = &["GetAccount", "ListEntries", "ListHolds"];

#[derive(askama::Template)]
#[template(path = "account.html")]
struct AccountPage {
    nav: Nav,
    account: AccountView,
    entries: Vec<EntryView>,
    /// Whether this is the journal's first page.
    first_page: bool,
    /// The address of the journal's next page, if there is one.
    next_page: Option<String>,
    holds: Vec<HoldView>,
    /// The address of the next page of open holds, if there is one.
    more_holds: Option<String>,
}

pub(crate) async fn page(
    State(console): State<Console>,
    Path(raw): Path<String>,
    uri: Uri,
    viewer: Viewer,
) -> Response {
    let page_token = query_value(uri.query(), "page_token").unwrap_or_default();
    let holds_token = query_value(uri.query(), "holds_page_token").unwrap_or_default();
    let reader = console.reader();
    let (journal_token, open_token) = (page_token.clone(), holds_token.clone());
    let answer = async {
        let account_id = id("account_id", &raw)?;
        reader
            .serve(&viewer.client, GRANTS, Console::call(), |call| async move {
                let account = reader
                    .get_account(pb::GetAccountRequest { account_id }, &call)
                    .await?;
                let journal = pb::ListEntriesRequest {
                    account_id,
                    page_size: 0,
                    page_token: journal_token,
                };
                let journal = reader.list_entries(journal, &call).await?;
                let holds = pb::ListHoldsRequest {
                    account_id,
                    page_size: 0,
                    page_token: open_token,
                };
                let holds = reader.list_holds(holds, &call).await?;
                Ok((account, journal, holds))
            })
            .await
    }
    .await;
    let (account, journal, holds) = match answer {
        Ok(read) => read,
        Err(e) => return failure::page(&e, viewer.nav),
    };
    let here = format!("/accounts/{}", account.account_id);
    let next_page = (!journal.next_page_token.is_empty()).then(|| {
        let mut address = format!(
            "{here}?{}",
            token_query("page_token", &journal.next_page_token)
        );
        if !holds_token.is_empty() {
            address = format!(
                "{address}&{}",
                token_query("holds_page_token", &holds_token)
            );
        }
        address
    });
    let more_holds = (!holds.next_page_token.is_empty()).then(|| {
        let holds = token_query("holds_page_token", &holds.next_page_token);
        if page_token.is_empty() {
            format!("{here}?{holds}")
        } else {
            format!("{here}?{}&{holds}", token_query("page_token", &page_token))
        }
    });
    let page = AccountPage {
        nav: viewer.nav,
        account: AccountView::from(&account),
        entries: journal.entries.iter().map(EntryView::from).collect(),
        first_page: page_token.is_empty(),
        next_page,
        holds: holds.holds.iter().map(HoldView::from).collect(),
        more_holds,
    };
    html(StatusCode::OK, &page)
}
