//! `/`: where a person starts: the accounts' first page (ListAccounts) to a
//! reader granted it, and to others a line that says why it is missing; forms,
//! which need no grant, that open an account, an entry or a hold by id, search
//! entries by metadata, or look up a key's outcome; the way to the tail. `/find`
//! turns a form's id into the page's address.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Redirect, Response};

use super::super::auth::Viewer;
use super::super::failure;
use super::super::frame::{Nav, html};
use super::super::query::{Params, form_fields, id};
use super::super::state::Console;
use super::super::view::{AccountView, search_href};
use crate::grpc::reads;
use crate::proto::pb;

#[derive(askama::Template)]
#[template(path = "home.html")]
struct HomePage {
    nav: Nav,
    /// The accounts' first page; `None` to a reader not granted ListAccounts.
    accounts: Option<Vec<AccountView>>,
    /// The address of the accounts' next page, if there is one.
    next_page: Option<String>,
    /// The search form's blank pair fields and account.
    fields: Vec<String>,
    account: String,
}

pub(crate) async fn page(State(console): State<Console>, viewer: Viewer) -> Response {
    let reader = console.reader();
    let client = viewer.client.clone();
    let listed = if viewer.client.may_call("ListAccounts") {
        let request = pb::ListAccountsRequest::default();
        let read = reader
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
            .await;
        match read {
            Ok(reply) => Some(reply),
            Err(e) => return failure::page(&e, viewer.nav),
        }
    } else {
        None
    };
    let none = BTreeMap::new();
    let next_page = listed
        .as_ref()
        .filter(|r| !r.next_page_token.is_empty())
        .map(|r| search_href("/accounts", &none, &[("page_token", &r.next_page_token)]));
    let page = HomePage {
        nav: viewer.nav,
        accounts: listed.map(|r| r.accounts.iter().map(AccountView::from).collect()),
        next_page,
        fields: form_fields(&none),
        account: String::new(),
    };
    html(StatusCode::OK, &page)
}

/// What `/find` is asked for: one of the home page's forms' ids.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Find {
    #[serde(rename = "account_id")]
    account: Option<String>,
    #[serde(rename = "entry_id")]
    entry: Option<String>,
    #[serde(rename = "hold_id")]
    hold: Option<String>,
}

/// `/find?account_id=N` (or `entry_id`, `hold_id`): a redirect to its page.
pub(crate) async fn find(viewer: Viewer, Params(asked): Params<Find>) -> Response {
    let target = [
        ("account_id", asked.account, "/accounts"),
        ("entry_id", asked.entry, "/entries"),
        ("hold_id", asked.hold, "/holds"),
    ]
    .into_iter()
    .find_map(|(field, raw, path)| {
        let raw = raw.filter(|v| !v.trim().is_empty())?;
        Some(id(field, &raw).map(|n| format!("{path}/{n}")))
    });
    match target {
        Some(Ok(address)) => Redirect::to(&address).into_response(),
        Some(Err(e)) => failure::page(&e, viewer.nav),
        None => Redirect::to("/").into_response(),
    }
}
