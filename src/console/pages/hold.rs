//! `/holds/{hold_id}`: one hold (GetHold), in its state at the instant it is read
//! (an expired hold shows EXPIRED at once), with its account, its key, and the
//! entry that captured it.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::super::auth::Viewer;
use super::super::failure;
use super::super::frame::{Nav, html};
use super::super::query::id;
use super::super::state::Console;
use super::super::view::HoldView;
use crate::grpc::reads;
use crate::proto::pb;

#[derive(askama::Template)]
#[template(path = "hold.html")]
struct HoldPage {
    nav: Nav,
    hold: HoldView,
    /// The CAPTURE entry of a captured hold.
    capture: Option<u64>,
}

pub(crate) async fn page(
    State(console): State<Console>,
    Path(raw): Path<String>,
    viewer: Viewer,
) -> Response {
    let reader = console.reader();
    let client = viewer.client.clone();
    let answer = async {
        let hold_id = id("hold_id", &raw)?;
        reader
            .serve(
                &viewer.client,
                &["GetHold"],
                Console::call(),
                |call| async move {
                    let hold = reader
                        .read::<reads::GetHold>(pb::GetHoldRequest { hold_id }, &client, &call)
                        .await?;
                    let capture = if hold.state() == pb::HoldState::Captured {
                        reader.capture_of(hold_id, &call).await?
                    } else {
                        None
                    };
                    Ok((hold, capture))
                },
            )
            .await
    }
    .await;
    match answer {
        Ok((hold, capture)) => html(
            StatusCode::OK,
            &HoldPage {
                nav: viewer.nav,
                hold: HoldView::seen_by(&hold, &viewer.client.namespace),
                capture,
            },
        ),
        Err(e) => failure::page(&e, viewer.nav),
    }
}
