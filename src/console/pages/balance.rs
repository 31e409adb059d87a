//! `/accounts/{account_id}/balance?as_of_sequence=N` or `?as_of_time=RFC3339`
//! (neither: now): an account's balance and the limits in force at that point,
//! and the entry it stood after (GetBalance, SPEC 3.10). A malformed number or
//! time, or both given, is 400; a point the ledger has not reached is
//! POINT_NOT_REACHED, 409.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::DateTime;

use super::super::auth::Viewer;
use super::super::failure;
use super::super::frame::{Nav, html};
use super::super::query::{Params, Tidy, id, invalid};
use super::super::state::Console;
use super::super::view::BalanceView;
use crate::error::Error;
use crate::grpc::reads;
use crate::proto::pb;

#[derive(askama::Template)]
#[template(path = "balance.html")]
struct BalancePage {
    nav: Nav,
    balance: BalanceView,
    /// The point asked for, as the form shows it (empty: not given).
    as_of_sequence: String,
    as_of_time: String,
}

/// The point asked for; neither: now.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Point {
    #[serde(default)]
    as_of_sequence: String,
    #[serde(default)]
    as_of_time: String,
}

pub(crate) async fn page(
    State(console): State<Console>,
    Path(raw): Path<String>,
    viewer: Viewer,
    _: Tidy,
    Params(point): Params<Point>,
) -> Response {
    let as_of_sequence = point.as_of_sequence.trim().to_owned();
    let as_of_time = point.as_of_time.trim().to_owned();
    let reader = console.reader();
    let client = viewer.client.clone();
    let answer = async {
        let request = pb::GetBalanceRequest {
            account_id: id("account_id", &raw)?,
            as_of_sequence: sequence(&as_of_sequence)?,
            as_of_time: time(&as_of_time)?,
        };
        reader
            .serve(
                &viewer.client,
                &["GetBalance"],
                Console::call(),
                |call| async move {
                    reader
                        .read::<reads::GetBalance>(request, &client, &call)
                        .await
                },
            )
            .await
    }
    .await;
    match answer {
        Ok(balance) => html(
            StatusCode::OK,
            &BalancePage {
                nav: viewer.nav,
                balance: BalanceView::from(&balance),
                as_of_sequence,
                as_of_time,
            },
        ),
        Err(e) => failure::page(&e, viewer.nav),
    }
}

/// `as_of_sequence`: a whole number; empty is 0, not given.
fn sequence(raw: &str) -> Result<u64, Error> {
    if raw.is_empty() {
        return Ok(0);
    }
    raw.parse()
        .map_err(|_| invalid("as_of_sequence", "must be a whole number"))
}

/// `as_of_time`: an RFC 3339 time (`2026-12-31T23:59:59Z`); empty is not given.
fn time(raw: &str) -> Result<Option<prost_types::Timestamp>, Error> {
    if raw.is_empty() {
        return Ok(None);
    }
    let at = DateTime::parse_from_rfc3339(raw).map_err(|_| {
        invalid(
            "as_of_time",
            "must be an RFC 3339 time, such as 2026-12-31T23:59:59Z",
        )
    })?;
    Ok(Some(prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: i32::try_from(at.timestamp_subsec_nanos()).unwrap_or(0),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_is_read_from_the_address() {
        assert_eq!(sequence("").unwrap(), 0);
        assert_eq!(sequence("42").unwrap(), 42);
        assert!(sequence("-1").is_err() && sequence("4x").is_err());
        assert_eq!(time("").unwrap(), None);
        let at = time("2026-12-31T23:59:59.5+01:00").unwrap().unwrap();
        assert_eq!((at.seconds, at.nanos), (1_798_757_999, 500_000_000));
        assert!(time("2026-12-31 23:59").is_err() && time("yesterday").is_err());
    }
}
