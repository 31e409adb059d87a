//! Outcomes as bytes: the encoding stored under a key, and the rendering of those
//! bytes back into a reply or a status. The original answer and every replay are
//! rendered from the same stored bytes, so they cannot differ.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use prost::Message;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Response, Status};

use super::status::{REPLAYED_HEADER, from_decline, report};
use crate::error::Error;
use crate::ledger::{
    Account, AccountId, Decline, Entry, EntryId, EntryKind, Hold, HoldId, HoldState, KeyedOutcome,
    OutcomeEncoder, Reply, StoredOutcome,
};
use crate::proto::pb;

/// Encodes outcomes as the protobuf replies and `google.rpc.Status` the wire carries.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProtoEncoder;

impl OutcomeEncoder for ProtoEncoder {
    fn reply(&self, reply: &Reply) -> StoredOutcome {
        let body = match reply {
            Reply::OpenAccount(account) => pb::OpenAccountReply {
                account: Some(account_message(account)),
            }
            .encode_to_vec(),
            Reply::Credit(entry) => pb::CreditReply {
                entry: Some(entry_message(entry)),
            }
            .encode_to_vec(),
            Reply::Charge(entry) => pb::ChargeReply {
                entry: Some(entry_message(entry)),
            }
            .encode_to_vec(),
            Reply::Transfer { debit, credit } => pb::TransferReply {
                debit: Some(entry_message(debit)),
                credit: Some(entry_message(credit)),
            }
            .encode_to_vec(),
            Reply::Refund(entry) => pb::RefundReply {
                entry: Some(entry_message(entry)),
            }
            .encode_to_vec(),
            Reply::PlaceHold(hold) => pb::PlaceHoldReply {
                hold: Some(hold_message(hold, hold.state)),
            }
            .encode_to_vec(),
            Reply::CaptureHold { hold, entry } => pb::CaptureHoldReply {
                hold: Some(hold_message(hold, hold.state)),
                entry: Some(entry_message(entry)),
            }
            .encode_to_vec(),
            Reply::VoidHold(hold) => pb::VoidHoldReply {
                hold: Some(hold_message(hold, hold.state)),
            }
            .encode_to_vec(),
        };
        StoredOutcome {
            code: Code::Ok as i32,
            body,
        }
    }

    fn declined(&self, decline: &Decline) -> StoredOutcome {
        let status = from_decline(decline);
        StoredOutcome {
            code: status.code() as i32,
            // tonic's details are the encoded google.rpc.Status: code, message, details.
            body: status.details().to_vec(),
        }
    }
}

pub(super) fn account_message(account: &Account) -> pb::Account {
    pb::Account {
        account_id: account.id.get(),
        currency: account.currency.to_string(),
        balance: account.balance,
        created_at: Some(timestamp(account.created_at)),
        held: account.held,
        available: account.available(),
    }
}

pub(super) fn entry_message(entry: &Entry) -> pb::Entry {
    pb::Entry {
        entry_id: entry.id.get(),
        account_id: entry.account_id.get(),
        kind: entry_kind(entry.kind).into(),
        amount: entry.amount.get(),
        currency: entry.currency.to_string(),
        balance_after: entry.balance_after,
        idempotency_key: entry.idempotency_key.as_str().to_owned(),
        description: entry.description.as_str().to_owned(),
        created_at: Some(timestamp(entry.created_at)),
        counterparty_account_id: entry.counterparty.map_or(0, AccountId::get),
        refunded_entry_id: entry.refunded_entry.map_or(0, EntryId::get),
        hold_id: entry.hold.map_or(0, HoldId::get),
    }
}

fn entry_kind(kind: EntryKind) -> pb::EntryKind {
    match kind {
        EntryKind::Charge => pb::EntryKind::Charge,
        EntryKind::Credit => pb::EntryKind::Credit,
        EntryKind::TransferOut => pb::EntryKind::TransferOut,
        EntryKind::TransferIn => pb::EntryKind::TransferIn,
        EntryKind::Refund => pb::EntryKind::Refund,
        EntryKind::Capture => pb::EntryKind::Capture,
    }
}

/// A hold as the wire shows it in `state` (its state at the instant it is shown).
pub(super) fn hold_message(hold: &Hold, state: HoldState) -> pb::Hold {
    pb::Hold {
        hold_id: hold.id.get(),
        account_id: hold.account_id.get(),
        amount: hold.amount.get(),
        currency: hold.currency.to_string(),
        state: hold_state(state).into(),
        captured_amount: hold.captured_amount,
        description: hold.description.as_str().to_owned(),
        idempotency_key: hold.idempotency_key.as_str().to_owned(),
        created_at: Some(timestamp(hold.created_at)),
        expires_at: Some(timestamp(hold.expires_at)),
    }
}

fn hold_state(state: HoldState) -> pb::HoldState {
    match state {
        HoldState::Held => pb::HoldState::Held,
        HoldState::Captured => pb::HoldState::Captured,
        HoldState::Voided => pb::HoldState::Voided,
        HoldState::Expired => pb::HoldState::Expired,
    }
}

pub(super) fn timestamp(at: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.timestamp(),
        // Always below 10^9, so it fits.
        nanos: i32::try_from(at.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

/// Renders a stored outcome as the RPC's answer. prost encodes a message
/// deterministically, so the reply's wire bytes are the stored bytes.
pub(super) fn render<M: Message + Default>(keyed: KeyedOutcome) -> Result<Response<M>, Status> {
    let KeyedOutcome { outcome, replayed } = keyed;
    let mut metadata = MetadataMap::new();
    if replayed {
        metadata.insert(REPLAYED_HEADER, MetadataValue::from_static("true"));
    }
    if outcome.code == Code::Ok as i32 {
        let reply = M::decode(outcome.body.as_slice()).map_err(|e| {
            report(&Error::internal(format!(
                "stored reply does not decode: {e}"
            )))
        })?;
        let mut response = Response::new(reply);
        *response.metadata_mut() = metadata;
        return Ok(response);
    }
    let status = tonic_types::pb::Status::decode(outcome.body.as_slice()).map_err(|e| {
        report(&Error::internal(format!(
            "stored status does not decode: {e}"
        )))
    })?;
    Err(Status::with_details_and_metadata(
        Code::from_i32(outcome.code),
        status.message,
        Bytes::from(outcome.body),
        metadata,
    ))
}
