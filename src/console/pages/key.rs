//! `/keys?key=KEY`: what happened under a key in the reader's namespace
//! (LookupKey): the method, when, and its stored outcome, decoded (`stored`): a
//! reply as the pages show what it holds, its entries as a journal's table (a
//! post's legs, a transfer's two sides, one row each), an account or a hold
//! with the figures of its own page; a decline's code, reason, message and
//! metadata, its amounts in the currency of the account, entry or hold it
//! names, where the reader may read that.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use tonic_types::StatusExt as _;

use super::super::auth::Viewer;
use super::super::failure;
use super::super::frame::{Nav, html};
use super::super::query::Params;
use super::super::state::Console;
use super::super::stored::{self, Decline, Reply};
use super::super::view::time;
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::grpc::{Reader, reads};
use crate::proto::pb;

#[derive(askama::Template)]
#[template(path = "key.html")]
struct KeyPage {
    nav: Nav,
    /// The key asked about, if one was.
    key: String,
    record: Option<Record>,
}

/// A key's record, as shown.
struct Record {
    method: String,
    created_at: String,
    outcome: Outcome,
}

enum Outcome {
    Reply(Reply),
    Decline(Decline),
}

/// The key asked about; none: the form alone.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Asked {
    #[serde(default)]
    key: String,
}

pub(crate) async fn page(
    State(console): State<Console>,
    viewer: Viewer,
    Params(Asked { key }): Params<Asked>,
) -> Response {
    if key.is_empty() {
        let page = KeyPage {
            nav: viewer.nav,
            key,
            record: None,
        };
        return html(StatusCode::OK, &page);
    }
    let reader = console.reader();
    let client = viewer.client.clone();
    let request = pb::LookupKeyRequest {
        idempotency_key: key.clone(),
    };
    let answer = reader
        .serve(
            &viewer.client,
            &["LookupKey"],
            Console::call(),
            |call| async move {
                let record = reader
                    .read::<reads::LookupKey>(request, &client, &call)
                    .await?;
                shown(&record, reader, &client, &call).await
            },
        )
        .await;
    match answer {
        Ok(record) => html(
            StatusCode::OK,
            &KeyPage {
                nav: viewer.nav,
                key,
                record: Some(record),
            },
        ),
        Err(e) => failure::page(&e, viewer.nav),
    }
}

async fn shown(
    record: &pb::KeyRecord,
    reader: &Reader,
    client: &Client,
    call: &Call,
) -> Result<Record, Error> {
    let outcome = match &record.outcome {
        Some(pb::key_record::Outcome::Reply(bytes)) => {
            Outcome::Reply(stored::reply(&record.method, bytes, &client.namespace)?)
        }
        Some(pb::key_record::Outcome::Error(declined)) => {
            let status = stored::status(declined);
            let named = status
                .get_details_error_info()
                .map(|info| info.metadata)
                .unwrap_or_default();
            let currency = currency_of(&named, reader, client, call).await?;
            Outcome::Decline(stored::decline(&status, currency.as_deref()))
        }
        None => return Err(Error::internal("a key record without an outcome")),
    };
    Ok(Record {
        method: record.method.clone(),
        created_at: time(record.created_at.as_ref()),
        outcome,
    })
}

/// The currency of a decline's amounts: that of the account it names, else of
/// the entry, else of the hold, read if the reader is granted that read; `None`
/// if it names none of those, the reader may not read it, or it does not exist
/// (an unknown account's decline names it).
async fn currency_of(
    named: &std::collections::HashMap<String, String>,
    reader: &Reader,
    client: &Client,
    call: &Call,
) -> Result<Option<String>, Error> {
    let id = |name: &str, grant: &str| {
        let id = named.get(name)?.parse::<u64>().ok()?;
        client.may_call(grant).then_some(id)
    };
    let read = if let Some(account_id) = id("account_id", "GetAccount") {
        let request = pb::GetAccountRequest { account_id };
        reader
            .read::<reads::GetAccount>(request, client, call)
            .await
            .map(|a| a.currency)
    } else if let Some(entry_id) = id("entry_id", "GetEntry") {
        let request = pb::GetEntryRequest { entry_id };
        reader
            .read::<reads::GetEntry>(request, client, call)
            .await
            .map(|e| e.currency)
    } else if let Some(hold_id) = id("hold_id", "GetHold") {
        let request = pb::GetHoldRequest { hold_id };
        reader
            .read::<reads::GetHold>(request, client, call)
            .await
            .map(|h| h.currency)
    } else {
        return Ok(None);
    };
    match read {
        Ok(currency) => Ok(Some(currency)),
        Err(Error::AccountNotFound(_) | Error::EntryNotFound(_) | Error::HoldNotFound(_)) => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}
