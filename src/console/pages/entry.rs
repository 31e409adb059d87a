//! `/entries/{entry_id}`: one journal entry (GetEntry), each id it names a link:
//! its account, the counterparty of a transfer, the entry a refund returns, the
//! hold a capture took, the key it was written under.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::super::auth::Viewer;
use super::super::view::EntryView;
use super::super::{Console, Nav, failure, html};
use super::id;
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
    let answer = async {
        let entry_id = id("entry_id", &raw)?;
        let request = pb::GetEntryRequest { entry_id };
        reader
            .serve(
                &viewer.client,
                &["GetEntry"],
                Console::call(),
                |call| async move { reader.get_entry(request, &call).await },
            )
            .await
    }
    .await;
    match answer {
        Ok(entry) => html(
            StatusCode::OK,
            &EntryPage {
                nav: viewer.nav,
                entry: EntryView::from(&entry),
            },
        ),
        Err(e) => failure::page(&e, viewer.nav),
    }
}
