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
    Account, Decline, Entry, EntryKind, KeyedOutcome, OutcomeEncoder, StoredOutcome,
};
use crate::proto::pb;

/// Encodes outcomes as the protobuf replies and `google.rpc.Status` the wire carries.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProtoEncoder;

impl OutcomeEncoder for ProtoEncoder {
    fn account_opened(&self, account: &Account) -> StoredOutcome {
        success(&pb::OpenAccountReply {
            account: Some(account_message(account)),
        })
    }

    fn posted(&self, entry: &Entry) -> StoredOutcome {
        let entry_message = Some(entry_message(entry));
        match entry.kind {
            EntryKind::Charge => success(&pb::ChargeReply {
                entry: entry_message,
            }),
            EntryKind::Credit => success(&pb::CreditReply {
                entry: entry_message,
            }),
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

fn success(reply: &impl Message) -> StoredOutcome {
    StoredOutcome {
        code: Code::Ok as i32,
        body: reply.encode_to_vec(),
    }
}

pub(super) fn account_message(account: &Account) -> pb::Account {
    pb::Account {
        account_id: account.id.get(),
        currency: account.currency.to_string(),
        balance: account.balance,
        created_at: Some(timestamp(account.created_at)),
    }
}

fn entry_message(entry: &Entry) -> pb::Entry {
    pb::Entry {
        entry_id: entry.id,
        account_id: entry.account_id.get(),
        kind: match entry.kind {
            EntryKind::Charge => pb::EntryKind::Charge,
            EntryKind::Credit => pb::EntryKind::Credit,
        }
        .into(),
        amount: entry.amount.get(),
        currency: entry.currency.to_string(),
        balance_after: entry.balance_after,
        idempotency_key: entry.idempotency_key.as_str().to_owned(),
        description: entry.description.as_str().to_owned(),
        created_at: Some(timestamp(entry.created_at)),
    }
}

fn timestamp(at: DateTime<Utc>) -> prost_types::Timestamp {
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
