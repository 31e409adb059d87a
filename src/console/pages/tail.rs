//! `/tail` (`?account_id=` for one account): the change stream, live. The page
//! is a table that its script fills from `/tail/events`, a stream of
//! Server-Sent Events fed by a WatchEntries watcher (`db::watch`, counted under
//! the watchers' limit), each event's `id` the entry's sequence. A browser that
//! loses the stream (a dropped connection, a server restarted on the same port)
//! reconnects with `Last-Event-ID`, and the stream resumes after that sequence:
//! no entry missed, none twice. Without JavaScript, the page says so.

use std::convert::Infallible;
use std::time::Duration;

use askama::Template as _;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse as _, Response};
use futures::Stream;

use super::super::auth::Viewer;
use super::super::failure;
use super::super::frame::{Nav, html};
use super::super::query::{Params, id};
use super::super::state::Console;
use super::super::view::EntryView;
use crate::db::Entries;
use crate::error::Error;
use crate::ledger::Namespace;
use crate::proto::pb;

/// How soon a browser reconnects after the stream breaks (the SSE `retry`).
const RECONNECT: Duration = Duration::from_millis(500);

#[derive(askama::Template)]
#[template(path = "tail.html")]
struct TailPage {
    nav: Nav,
    account: Option<u64>,
    /// The sequence the page follows from: the highest assigned when it was
    /// made.
    after: u64,
    /// The address of its events.
    events: String,
}

/// One entry's row, as an event carries it.
#[derive(askama::Template)]
#[template(path = "tail_row.html")]
struct TailRow {
    entry: EntryView,
}

/// What a tail follows: `?account_id=` (none: every account), and for its
/// events, `after=` a sequence.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Followed {
    #[serde(default)]
    account_id: String,
    after: Option<String>,
}

impl Followed {
    /// The account named, if any.
    fn account(&self) -> Result<Option<u64>, Error> {
        let raw = self.account_id.trim();
        (!raw.is_empty()).then(|| id("account_id", raw)).transpose()
    }
}

/// The tail's watcher, as WatchEntries opens one (a grant of its own, the
/// account checked, a place under the watchers' limit).
async fn watch(
    console: &Console,
    viewer: &Viewer,
    account_id: u64,
    after: u64,
) -> Result<Entries, Error> {
    if !viewer.client.may_call("WatchEntries") {
        return Err(Error::PermissionDenied("WatchEntries"));
    }
    let request = pb::WatchEntriesRequest {
        after_sequence: after,
        account_id,
    };
    console.reader().watch(&request).await
}

pub(crate) async fn page(
    State(console): State<Console>,
    viewer: Viewer,
    Params(followed): Params<Followed>,
) -> Response {
    let after = console.reader().assigned();
    // Opened and dropped: the page answers as WatchEntries would (403, 404, 503)
    // before the browser opens the stream.
    let checked = match followed.account() {
        Ok(account) => watch(&console, &viewer, account.unwrap_or(0), after)
            .await
            .map(|_| account),
        Err(e) => Err(e),
    };
    let account = match checked {
        Ok(account) => account,
        Err(e) => return failure::page(&e, viewer.nav),
    };
    let mut events = format!("/tail/events?after={after}");
    if let Some(account) = account {
        events = format!("{events}&account_id={account}");
    }
    let page = TailPage {
        nav: viewer.nav,
        account,
        after,
        events,
    };
    html(StatusCode::OK, &page)
}

/// `/tail/events?after=N[&account_id=A]`: the stream, after `Last-Event-ID` when
/// the browser sends one (it resumes), else after `N`.
pub(crate) async fn events(
    State(console): State<Console>,
    headers: HeaderMap,
    viewer: Viewer,
    Params(followed): Params<Followed>,
) -> Response {
    let resumed = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let opened = async {
        let account = followed.account()?;
        let after = match resumed {
            Some(after) => after,
            None => followed
                .after
                .as_deref()
                .map(|raw| id("after", raw))
                .transpose()?
                .unwrap_or_else(|| console.reader().assigned()),
        };
        watch(&console, &viewer, account.unwrap_or(0), after).await
    }
    .await;
    match opened {
        Ok(entries) => Sse::new(stream(entries, viewer.client.namespace))
            .keep_alive(KeepAlive::default())
            .into_response(),
        Err(e) => failure::page(&e, viewer.nav),
    }
}

/// The watcher's entries as events, as `viewer` sees them; the stream ends where
/// the watcher does (at shutdown, the browser then reconnects elsewhere or
/// later).
fn stream(entries: Entries, viewer: Namespace) -> impl Stream<Item = Result<Event, Infallible>> {
    let first = Event::default().retry(RECONNECT).comment("following");
    let rest = futures::stream::unfold(entries, move |mut entries| {
        let viewer = viewer.clone();
        async move {
            match entries.recv().await? {
                Ok(entry) => Some((Ok(event(&entry, &viewer)), entries)),
                Err(error) => {
                    tracing::info!(error = error.label(), "console tail ended");
                    None
                }
            }
        }
    });
    futures::StreamExt::chain(futures::stream::once(async { Ok(first) }), rest)
}

fn event(entry: &crate::ledger::Entry, viewer: &Namespace) -> Event {
    let message = crate::ops::entry_message(entry);
    let row = TailRow {
        entry: EntryView::seen_by(&message, viewer),
    };
    let data = row.render().unwrap_or_default().replace('\n', "");
    Event::default()
        .event("entry")
        .id(message.sequence.to_string())
        .data(data)
}
