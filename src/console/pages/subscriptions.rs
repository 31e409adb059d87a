//! `/subscriptions`: the viewer's subscriptions (ListSubscriptions), oldest
//! first, each with its state, its cursor, how far it is behind the stream
//! (the highest sequence this instance knows of, less its cursor) and its last
//! error; paged with the API's own tokens (`?page_token=`).

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::super::auth::Viewer;
use super::super::failure;
use super::super::frame::{Nav, html};
use super::super::query::Tidy;
use super::super::state::Console;
use crate::grpc::reads;
use crate::proto::pb;

#[derive(Debug, serde::Deserialize)]
pub(crate) struct PageQuery {
    #[serde(default)]
    page_token: String,
}

/// One subscription as the table shows it.
struct Row {
    id: u64,
    url: String,
    filter: String,
    state: &'static str,
    cursor: u64,
    behind: u64,
    last_error: String,
}

#[derive(askama::Template)]
#[template(path = "subscriptions.html")]
struct SubscriptionsPage {
    nav: Nav,
    rows: Vec<Row>,
    /// The highest sequence assigned, as this instance knows it.
    head: u64,
    first_page: bool,
    next_page: Option<String>,
}

pub(crate) async fn page(
    State(console): State<Console>,
    viewer: Viewer,
    _: Tidy,
    Query(query): Query<PageQuery>,
) -> Response {
    let reader = console.reader();
    let client = viewer.client.clone();
    let request = pb::ListSubscriptionsRequest {
        page_size: 0,
        page_token: query.page_token.clone(),
    };
    let answer = reader
        .serve(
            &viewer.client,
            &["ListSubscriptions"],
            Console::call(),
            |call| async move {
                reader
                    .read::<reads::ListSubscriptions>(request, &client, &call)
                    .await
            },
        )
        .await;
    let reply = match answer {
        Ok(reply) => reply,
        Err(e) => return failure::page(&e, viewer.nav),
    };
    let head = reader.assigned();
    let page = SubscriptionsPage {
        nav: viewer.nav,
        rows: reply.subscriptions.iter().map(|s| row(s, head)).collect(),
        head,
        first_page: query.page_token.is_empty(),
        next_page: (!reply.next_page_token.is_empty()).then(|| {
            let token: String =
                form_urlencoded::byte_serialize(reply.next_page_token.as_bytes()).collect();
            format!("/subscriptions?page_token={token}")
        }),
    };
    html(StatusCode::OK, &page)
}

fn row(s: &pb::Subscription, head: u64) -> Row {
    let mut filter = Vec::new();
    if !s.account_ids.is_empty() {
        let ids: Vec<String> = s.account_ids.iter().map(u64::to_string).collect();
        filter.push(format!("accounts {}", ids.join(", ")));
    }
    if !s.kinds.is_empty() {
        let kinds: Vec<&str> = s
            .kinds()
            .map(|k| k.as_str_name().trim_start_matches("ENTRY_KIND_"))
            .collect();
        filter.push(format!("kinds {}", kinds.join(", ")));
    }
    let mut pairs: Vec<String> = s.metadata.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    pairs.sort();
    if !pairs.is_empty() {
        filter.push(format!("metadata {}", pairs.join(", ")));
    }
    Row {
        id: s.subscription_id,
        url: s.url.clone(),
        filter: if filter.is_empty() {
            "every entry".to_owned()
        } else {
            filter.join("; ")
        },
        state: s
            .state()
            .as_str_name()
            .trim_start_matches("SUBSCRIPTION_STATE_"),
        cursor: s.cursor,
        behind: head.saturating_sub(s.cursor),
        last_error: s.last_error.clone(),
    }
}
