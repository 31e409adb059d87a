//! Outcomes as bytes: the encoding stored under a key, and the rendering of those
//! bytes back into a reply or a status. The original answer and every replay are
//! rendered from the same stored bytes, so they cannot differ.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use prost::Message;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Response, Status};

use super::status::{REPLAYED_HEADER, from_decline, report};
use crate::db::audit::StoredRow;
use crate::error::Error;
use crate::ledger::{
    Account, Decline, Entry, EntryKind, KeyedOutcome, Method, OutcomeEncoder, StoredOutcome,
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

/// Judges a stored outcome for `ledger audit`: a success must decode as its
/// method's reply, and a Credit's or Charge's reply must describe the very entry
/// its key produced; a decline must decode as a `google.rpc.Status` with the stored
/// code and an `ErrorInfo` of this domain. `None` when all holds.
pub fn audit_stored(row: &StoredRow) -> Option<String> {
    let key = format!(
        "key {:?} (namespace {:?})",
        String::from_utf8_lossy(&row.idempotency_key),
        String::from_utf8_lossy(&row.namespace)
    );
    let (Some(code), Some(body)) = (row.outcome_code, row.outcome.as_deref()) else {
        return None; // reported by the set check "every key has an outcome"
    };
    let problem = match (Method::from_code(row.method), code) {
        (None, _) => Some(format!("unknown method {}", row.method)),
        (Some(_), 0) => audit_success(row, body),
        (Some(_), code) => audit_decline(code, body),
    };
    problem.map(|p| format!("{key}: {p}"))
}

fn audit_success(row: &StoredRow, body: &[u8]) -> Option<String> {
    let entry = match Method::from_code(row.method)? {
        Method::OpenAccount => {
            return match pb::OpenAccountReply::decode(body) {
                Ok(pb::OpenAccountReply { account: Some(a) }) if a.account_id > 0 => None,
                Ok(_) => Some("stored OpenAccount reply has no account".into()),
                Err(e) => Some(format!("stored OpenAccount reply does not decode: {e}")),
            };
        }
        Method::Credit => pb::CreditReply::decode(body).map(|r| (r.entry, pb::EntryKind::Credit)),
        Method::Charge => pb::ChargeReply::decode(body).map(|r| (r.entry, pb::EntryKind::Charge)),
    };
    let (entry, kind) = match entry {
        Ok((Some(entry), kind)) => (entry, kind),
        Ok((None, _)) => return Some("stored reply has no entry".into()),
        Err(e) => return Some(format!("stored reply does not decode: {e}")),
    };
    let stored = (
        Some(entry.entry_id),
        Some(entry.account_id),
        Some(entry.amount),
        Some(entry.balance_after),
    );
    let journal = (row.entry_id, row.account_id, row.amount, row.balance_after);
    if stored != journal
        || entry.kind() != kind
        || entry.idempotency_key.as_bytes() != row.idempotency_key
    {
        return Some(format!(
            "stored reply {stored:?} differs from its entry {journal:?}"
        ));
    }
    None
}

fn audit_decline(code: i32, body: &[u8]) -> Option<String> {
    use tonic_types::RpcStatusExt as _;
    let status = match tonic_types::pb::Status::decode(body) {
        Ok(status) => status,
        Err(e) => return Some(format!("stored status does not decode: {e}")),
    };
    if status.code != code {
        return Some(format!(
            "stored status has code {}, its row {code}",
            status.code
        ));
    }
    match status.get_error_details().error_info() {
        Some(info) if info.domain == super::DOMAIN => None,
        _ => Some("stored status has no ErrorInfo of the ledger.v1 domain".into()),
    }
}
