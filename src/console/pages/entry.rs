//! `/entries/{entry_id}`: one journal entry (GetEntry), each id it names a link:
//! its account, the counterparty of a transfer, the entry a refund returns, the
//! hold a capture took, the key it was written under.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::super::auth::Viewer;
use super::super::failure;
use super::super::frame::{Nav, html};
use super::super::query::id;
use super::super::state::Console;
use super::super::view::EntryView;
use crate::grpc::reads;
use crate::proto::pb;

#[derive(askama::Template)]
#[template(path = "entry.html")]
struct EntryPage {
    nav: Nav,
    entry: EntryView,
}

pub(crate) async fn page(
    State(console): State<Console>,
    Path(raw): Path<String>,
    viewer: Viewer,
) -> Response {
    let reader = console.reader();
    let client = viewer.client.clone();
    let answer = async {
        let entry_id = id("entry_id", &raw)?;
        let request = pb::GetEntryRequest { entry_id };
        reader
            .serve(
                &viewer.client,
                &["GetEntry"],
                Console::call(),
                |call| async move {
                    reader
                        .read::<reads::GetEntry>(request, &client, &call)
                        .await
                },
            )
            .await
    }
    .await;
    match answer {
        Ok(entry) => html(
            StatusCode::OK,
            &EntryPage {
                nav: viewer.nav,
                entry: EntryView::seen_by(&entry, &viewer.client.namespace),
            },
        ),
        Err(e) => failure::page(&e, viewer.nav),
    }
}
