//! `/accounts/{account_id}`: an account's figures (GetAccount: balance, held,
//! available, limits), a chart of its balance, its open holds with their expiry
//! (ListHolds), and a page of its journal with each entry's running balance
//! (ListEntries), paged with the API's own tokens (`?page_token=`; the holds',
//! if more than a page are open, `?holds_page_token=`). The reader needs all
//! three grants. The chart draws the page's running balances, and, where the
//! journal goes on past the page and the reader is granted GetBalance, the
//! balance GetBalance answers at [`SAMPLES`] points up to the last sequence
//! assigned.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::super::auth::Viewer;
use super::super::chart::{self, Chart, Point};
use super::super::failure;
use super::super::frame::{Nav, html};
use super::super::query::{Params, id};
use super::super::state::Console;
use super::super::view::{AccountView, EntryView, HoldView, address, ceiling, floor};
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::grpc::{Reader, reads};
use crate::proto::pb;

/// The RPCs the page shows the answers of.
const GRANTS: &[&str] = &["GetAccount", "ListEntries", "ListHolds"];

/// How many balances the chart reads past the page, when the journal goes on:
/// enough for the line's shape, few enough that a page stays a few reads.
const SAMPLES: u64 = 10;

#[derive(askama::Template)]
#[template(path = "account.html")]
struct AccountPage {
    nav: Nav,
    account: AccountView,
    /// The balance's line; `None` with no numbered entry on the page.
    chart: Option<Chart>,
    entries: Vec<EntryView>,
    /// Whether this is the journal's first page.
    first_page: bool,
    /// The address of the journal's next page, if there is one.
    next_page: Option<String>,
    holds: Vec<HoldView>,
    /// The address of the next page of open holds, if there is one.
    more_holds: Option<String>,
}

/// The pages of the journal and of the open holds asked for; none: the first.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Pages {
    #[serde(default)]
    page_token: String,
    #[serde(default)]
    holds_page_token: String,
}

/// What the page shows, as read.
struct Read {
    account: pb::Account,
    journal: pb::ListEntriesReply,
    holds: pb::ListHoldsReply,
    /// Balances past the page, for the chart.
    beyond: Vec<Point>,
}

pub(crate) async fn page(
    State(console): State<Console>,
    Path(raw): Path<String>,
    viewer: Viewer,
    Params(pages): Params<Pages>,
) -> Response {
    let reader = console.reader();
    let client = viewer.client.clone();
    let (journal_token, open_token) = (pages.page_token.clone(), pages.holds_page_token.clone());
    let charted = viewer.client.may_call("GetBalance");
    let answer = async {
        let account_id = id("account_id", &raw)?;
        reader
            .serve(&viewer.client, GRANTS, Console::call(), |call| async move {
                // Before the account: every entry numbered up to here is in the
                // balance read next, so the chart's line runs up to it.
                let assigned = reader.assigned();
                let account = reader
                    .read::<reads::GetAccount>(pb::GetAccountRequest { account_id }, &client, &call)
                    .await?;
                let journal = pb::ListEntriesRequest {
                    account_id,
                    page_size: 0,
                    page_token: journal_token,
                };
                let journal = reader
                    .read::<reads::ListEntries>(journal, &client, &call)
                    .await?;
                let holds = pb::ListHoldsRequest {
                    account_id,
                    page_size: 0,
                    page_token: open_token,
                };
                let holds = reader
                    .read::<reads::ListHolds>(holds, &client, &call)
                    .await?;
                let last = numbered(&journal.entries).last().map(|p| p.sequence);
                let beyond = match last {
                    Some(last) if charted && !journal.next_page_token.is_empty() => {
                        beyond(reader, &client, account_id, last, assigned, &call).await?
                    }
                    _ => Vec::new(),
                };
                Ok(Read {
                    account,
                    journal,
                    holds,
                    beyond,
                })
            })
            .await
    }
    .await;
    match answer {
        Ok(read) => html(StatusCode::OK, &shown(read, &pages, viewer)),
        Err(e) => failure::page(&e, viewer.nav),
    }
}

/// The page's entries that are numbered, as the chart's points: one not yet
/// numbered (just committed) has no place on its axis, and the balance now
/// covers it.
fn numbered(entries: &[pb::Entry]) -> Vec<Point> {
    entries
        .iter()
        .filter(|e| e.sequence > 0)
        .map(|e| Point {
            sequence: e.sequence,
            balance: e.balance_after,
        })
        .collect()
}

/// The balance at up to [`SAMPLES`] points after sequence `after` up to
/// `assigned`, spread evenly (GetBalance), each at the entry it stood after.
async fn beyond(
    reader: &Reader,
    client: &Client,
    account_id: u64,
    after: u64,
    assigned: u64,
    call: &Call,
) -> Result<Vec<Point>, Error> {
    let mut points: Vec<Point> = Vec::new();
    let span = u128::from(assigned.saturating_sub(after));
    for i in 1..=SAMPLES {
        let step = span * u128::from(i) / u128::from(SAMPLES);
        let at = after.saturating_add(u64::try_from(step).unwrap_or(u64::MAX));
        if at <= points.last().map_or(after, |p| p.sequence) {
            continue;
        }
        let request = pb::GetBalanceRequest {
            account_id,
            as_of_sequence: at,
            as_of_time: None,
        };
        let balance = reader
            .read::<reads::GetBalance>(request, client, call)
            .await?;
        if balance.sequence > points.last().map_or(after, |p| p.sequence) {
            points.push(Point {
                sequence: balance.sequence,
                balance: balance.balance,
            });
        }
    }
    Ok(points)
}

fn shown(read: Read, pages: &Pages, viewer: Viewer) -> AccountPage {
    let Read {
        account,
        journal,
        holds,
        beyond,
    } = read;
    let here = format!("/accounts/{}", account.account_id);
    let next_page = (!journal.next_page_token.is_empty()).then(|| {
        let tokens = [
            ("page_token", journal.next_page_token.as_str()),
            ("holds_page_token", &pages.holds_page_token),
        ];
        address(&here, &tokens)
    });
    let more_holds = (!holds.next_page_token.is_empty()).then(|| {
        let tokens = [
            ("page_token", pages.page_token.as_str()),
            ("holds_page_token", &holds.next_page_token),
        ];
        address(&here, &tokens)
    });
    let chart = chart::draw(&chart::Inputs {
        currency: &account.currency,
        journal: &numbered(&journal.entries),
        beyond: &beyond,
        more: next_page.is_some(),
        now: account.balance,
        floor: floor(account.limits.as_ref()),
        ceiling: ceiling(account.limits.as_ref()),
    });
    let seer = &viewer.client.namespace;
    AccountPage {
        account: AccountView::from(&account),
        chart,
        entries: journal
            .entries
            .iter()
            .map(|e| EntryView::seen_by(e, seer))
            .collect(),
        first_page: pages.page_token.is_empty(),
        next_page,
        holds: holds
            .holds
            .iter()
            .map(|h| HoldView::seen_by(h, seer))
            .collect(),
        more_holds,
        nav: viewer.nav,
    }
}
