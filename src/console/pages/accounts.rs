//! `/accounts?metadata=KEY:VALUE` (the pair repeated for each, up to four; none:
//! every account): the accounts whose metadata holds every pair, by id
//! (ListAccounts), each a link to its page, paged with the API's own tokens
//! (`&page_token=`, bound to the pairs).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::super::auth::Viewer;
use super::super::failure;
use super::super::frame::{Nav, html};
use super::super::query::{Repeated, SearchQuery, Tidy, form_fields};
use super::super::state::Console;
use super::super::view::{AccountView, search_href};
use crate::grpc::reads;
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

pub(crate) async fn page(
    State(console): State<Console>,
    viewer: Viewer,
    _: Tidy,
    Repeated(query): Repeated<SearchQuery>,
) -> Response {
    let reader = console.reader();
    let client = viewer.client.clone();
    let answer = async {
        let metadata = query.pairs()?;
        let request = pb::ListAccountsRequest {
            metadata: metadata.clone(),
            page_size: 0,
            page_token: query.page_token.clone(),
        };
        let reply = reader
            .serve(
                &viewer.client,
                &["ListAccounts"],
                Console::call(),
                |call| async move {
                    reader
                        .read::<reads::ListAccounts>(request, &client, &call)
                        .await
                },
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
        first_page: query.page_token.is_empty(),
        first: search_href("/accounts", &metadata, &[]),
        next_page: (!reply.next_page_token.is_empty()).then(|| {
            search_href(
                "/accounts",
                &metadata,
                &[("page_token", &reply.next_page_token)],
            )
        }),
    };
    html(StatusCode::OK, &page)
}
