//! `/accounts?metadata=KEY:VALUE` (the pair repeated for each, up to four; none:
//! every account): the accounts whose metadata holds every pair, by id
//! (ListAccounts), each a link to its page, paged with the API's own tokens
//! (`&page_token=`, bound to the pairs).

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;

use super::super::auth::{Viewer, query_value};
use super::super::view::AccountView;
use super::super::{Console, Nav, failure, html};
use super::{form_fields, metadata_filter, search_address, tidied};
use crate::proto::pb;

#[derive(askama::Template)]
#[template(path = "accounts.html")]
struct AccountsPage {
    nav: Nav,
    /// The pairs searched for, as the form's fields show them.
    fields: Vec<String>,
    /// Whether any pair was given (else every account is listed).
    filtered: bool,
    accounts: Vec<AccountView>,
    /// Whether this is the listing's first page, and the address of its first.
    first_page: bool,
    first: String,
    /// The address of the next page, if there is one.
    next_page: Option<String>,
}

pub(crate) async fn page(State(console): State<Console>, uri: Uri, viewer: Viewer) -> Response {
    if let Some(redirect) = tidied(&uri) {
        return redirect;
    }
    let page_token = query_value(uri.query(), "page_token").unwrap_or_default();
    let reader = console.reader();
    let token = page_token.clone();
    let answer = async {
        let metadata = metadata_filter(uri.query())?;
        let request = pb::ListAccountsRequest {
            metadata: metadata.clone(),
            page_size: 0,
            page_token: token,
        };
        let reply = reader
            .serve(
                &viewer.client,
                &["ListAccounts"],
                Console::call(),
                |call| async move { reader.list_accounts(request, &call).await },
            )
            .await?;
        Ok((metadata, reply))
    }
    .await;
    let (metadata, reply) = match answer {
        Ok(read) => read,
        Err(e) => return failure::page(&e, viewer.nav),
    };
    let page = AccountsPage {
        nav: viewer.nav,
        fields: form_fields(&metadata),
        filtered: !metadata.is_empty(),
        accounts: reply.accounts.iter().map(AccountView::from).collect(),
        first_page: page_token.is_empty(),
        first: search_address("/accounts", &metadata, &[]),
        next_page: (!reply.next_page_token.is_empty()).then(|| {
            search_address(
                "/accounts",
                &metadata,
                &[("page_token", &reply.next_page_token)],
            )
        }),
    };
    html(StatusCode::OK, &page)
}
