//! A key's stored outcome as the key page shows it (`pages::key`). A reply is
//! read as its method's reply message, through the contract's descriptors (so
//! a method added to the proto shows without a change here), and shown as the
//! pages show what it holds: its entries as a journal's rows, an account or a
//! hold with the figures of its own page, any other field one row each (ids
//! linked), 0 and empty ones too. A decline is its status: code, reason,
//! message, and its metadata, each value as the API gives it and as a person
//! reads it (an amount in its currency, a hold's state as a word).

use std::borrow::Cow;
use std::sync::OnceLock;

use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, MessageDescriptor, ReflectMessage as _, Value,
};
use tonic_types::StatusExt as _;

use super::view::{AccountView, EntryView, HoldView, key_href, short, time};
use crate::error::Error;
use crate::ledger::Namespace;
use crate::proto::{code_name, money, pb};

/// The names of a decline's metadata that are amounts of its account's
/// currency (SPEC 4).
const AMOUNTS: &[&str] = &[
    "amount",
    "available",
    "balance",
    "held",
    "max_balance",
    "min_balance",
    "refundable",
];

/// A stored reply, as the pages show what it holds.
#[derive(Default)]
pub(super) struct Reply {
    pub(super) accounts: Vec<AccountView>,
    pub(super) holds: Vec<HoldView>,
    pub(super) entries: Vec<EntryView>,
    /// Its other fields, one row each, nested ones indented.
    pub(super) rows: Vec<Row>,
}

/// A stored decline's status.
pub(super) struct Decline {
    pub(super) code: &'static str,
    pub(super) message: String,
    pub(super) reason: String,
    pub(super) domain: String,
    pub(super) metadata: Vec<Detail>,
    /// Other details: field violations, and the like.
    pub(super) details: Vec<String>,
}

/// One name of a decline's metadata: its value as the API gives it, and as a
/// person reads it (an amount in its currency, a state as a word).
pub(super) struct Detail {
    pub(super) name: String,
    pub(super) value: String,
    pub(super) shown: String,
}

/// One field of a decoded reply, indented by its depth.
pub(super) struct Row {
    pub(super) depth: usize,
    pub(super) name: String,
    pub(super) value: String,
    /// The page of the id, key or entry the value names.
    pub(super) href: Option<String>,
}

pub(super) fn decline(status: &tonic::Status, currency: Option<&str>) -> Decline {
    let details = status.get_error_details();
    let (reason, domain, mut metadata) = details.error_info().map_or_else(
        || (String::new(), String::new(), Vec::new()),
        |info| {
            let metadata: Vec<Detail> = info
                .metadata
                .iter()
                .map(|(name, value)| detail(name, value, currency))
                .collect();
            (info.reason.clone(), info.domain.clone(), metadata)
        },
    );
    metadata.sort_by(|a, b| a.name.cmp(&b.name));
    let mut other = Vec::new();
    if let Some(bad) = details.bad_request() {
        for v in &bad.field_violations {
            other.push(format!("{}: {}", v.field, v.description));
        }
    }
    if let Some(retry) = details.retry_info().and_then(|r| r.retry_delay) {
        other.push(format!("retry after {retry:?}"));
    }
    Decline {
        code: code_name(status.code()),
        message: status.message().to_owned(),
        reason,
        domain,
        metadata,
        details: other,
    }
}

/// A decline's metadata value as a person reads it: an amount in `currency`
/// (in minor units, marked, when it is not known), a hold's state as a word.
fn detail(name: &str, value: &str, currency: Option<&str>) -> Detail {
    let shown = match (name, value.parse::<i64>()) {
        (name, Ok(minor)) if AMOUNTS.contains(&name) => {
            money::format(minor, currency.unwrap_or_default())
        }
        ("state", _) => short_state(value),
        _ => value.to_owned(),
    };
    Detail {
        name: name.to_owned(),
        value: value.to_owned(),
        shown,
    }
}

/// `HOLD_STATE_CAPTURED` as `CAPTURED`.
fn short_state(name: &str) -> String {
    pb::HoldState::from_str_name(name).map_or_else(
        || name.to_owned(),
        |s| short(s.as_str_name(), "HOLD_STATE_").to_owned(),
    )
}

/// A stored reply of `method` (`/ledger.v1.Ledger/Charge`), as `viewer` sees
/// it: decoded as the method's reply message.
pub(super) fn reply(method: &str, bytes: &[u8], viewer: &Namespace) -> Result<Reply, Error> {
    let message = DynamicMessage::decode(reply_type(method)?, bytes)
        .map_err(|e| Error::internal(format!("a stored reply does not decode: {e}")))?;
    shown(&message, viewer)
}

/// A stored decline as the status it was: its code, message and details.
pub(super) fn status(stored: &tonic_types::pb::Status) -> tonic::Status {
    tonic::Status::with_details(
        tonic::Code::from_i32(stored.code),
        stored.message.clone(),
        stored.encode_to_vec().into(),
    )
}

/// A reply's entries, holds and accounts, each as its own page shows it, and
/// its other fields as rows; every field, when it is 0 too, but a message that
/// is not there.
fn shown(message: &DynamicMessage, viewer: &Namespace) -> Result<Reply, Error> {
    let mut reply = Reply::default();
    for (field, value) in present(message) {
        let items: Vec<&Value> = match value.as_ref() {
            Value::List(items) => items.iter().collect(),
            one => vec![one],
        };
        for item in items {
            match item {
                Value::Message(inner) => reply.add(inner, &field, viewer)?,
                other => field_row(
                    field.name(),
                    field.name(),
                    other,
                    &field,
                    0,
                    &mut reply.rows,
                ),
            }
        }
    }
    Ok(reply)
}

impl Reply {
    fn add(
        &mut self,
        message: &DynamicMessage,
        field: &FieldDescriptor,
        viewer: &Namespace,
    ) -> Result<(), Error> {
        let unread = |e: prost::DecodeError| Error::internal(format!("a stored reply: {e}"));
        match message.descriptor().full_name() {
            "ledger.v1.Entry" => {
                let entry = message.transcode_to::<pb::Entry>().map_err(unread)?;
                self.entries.push(EntryView::seen_by(&entry, viewer));
            }
            "ledger.v1.Hold" => {
                let hold = message.transcode_to::<pb::Hold>().map_err(unread)?;
                self.holds.push(HoldView::seen_by(&hold, viewer));
            }
            "ledger.v1.Account" => {
                let account = message.transcode_to::<pb::Account>().map_err(unread)?;
                self.accounts.push(AccountView::from(&account));
            }
            _ => {
                let value = Value::Message(message.clone());
                field_row(field.name(), field.name(), &value, field, 0, &mut self.rows);
            }
        }
        Ok(())
    }
}

/// The contract's descriptors, with the well-known types it imports.
fn pool() -> Result<&'static DescriptorPool, Error> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| Error::internal(format!("the contract's descriptors: {e}")))
}

/// The reply message of a full method name (`/ledger.v1.Ledger/Charge`).
fn reply_type(method: &str) -> Result<MessageDescriptor, Error> {
    let name = method.rsplit('/').next().unwrap_or_default();
    pool()?
        .get_service_by_name("ledger.v1.Ledger")
        .and_then(|service| service.methods().find(|m| m.name() == name))
        .map(|m| m.output())
        .ok_or_else(|| Error::internal(format!("no method {method} in the contract")))
}

/// The fields of `message` in the proto's order, 0 and empty ones too; one that
/// may be absent (a message, an `optional`) only where it is there.
fn present(message: &DynamicMessage) -> Vec<(FieldDescriptor, Cow<'_, Value>)> {
    message
        .descriptor()
        .fields()
        .filter(|field| !field.supports_presence() || message.has_field(field))
        .map(|field| {
            let value = message.get_field(&field);
            (field, value)
        })
        .collect()
}

/// The fields of `message`, nested messages below their name; timestamps and
/// durations on one row.
fn fields(message: &DynamicMessage, depth: usize, rows: &mut Vec<Row>) {
    for (field, value) in present(message) {
        let name = field.name();
        match value.as_ref() {
            Value::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    field_row(&format!("{name}[{i}]"), name, item, &field, depth, rows);
                }
            }
            other => field_row(name, name, other, &field, depth, rows),
        }
    }
}

fn field_row(
    label: &str,
    name: &str,
    value: &Value,
    field: &FieldDescriptor,
    depth: usize,
    rows: &mut Vec<Row>,
) {
    let row = |value: String, href: Option<String>| Row {
        depth,
        name: label.to_owned(),
        value,
        href,
    };
    match value {
        Value::Message(inner) => match inner.descriptor().full_name() {
            "google.protobuf.Timestamp" => {
                let at = inner.transcode_to::<prost_types::Timestamp>().ok();
                rows.push(row(time(at.as_ref()), None));
            }
            "google.protobuf.Duration" => {
                let text = inner
                    .transcode_to::<prost_types::Duration>()
                    .map_or_else(|e| e.to_string(), |d| d.to_string());
                rows.push(row(text, None));
            }
            _ => {
                rows.push(row(String::new(), None));
                fields(inner, depth + 1, rows);
            }
        },
        Value::U64(id) => rows.push(row(id.to_string(), link(name, *id))),
        Value::String(text) if name == "idempotency_key" => {
            rows.push(row(text.clone(), Some(key_href(text))));
        }
        other => rows.push(row(scalar(other, field), None)),
    }
}

/// The page of an id, by the field that holds it.
fn link(field: &str, id: u64) -> Option<String> {
    if id == 0 {
        return None;
    }
    let path = match field {
        "account_id" | "counterparty_account_id" | "from_account_id" | "to_account_id" => {
            "accounts"
        }
        "entry_id" | "refunded_entry_id" | "reverses_entry_id" => "entries",
        "hold_id" => "holds",
        _ => return None,
    };
    Some(format!("/{path}/{id}"))
}

fn scalar(value: &Value, field: &FieldDescriptor) -> String {
    match value {
        Value::EnumNumber(number) => field
            .kind()
            .as_enum()
            .and_then(|e| e.get_value(*number))
            .map_or_else(|| number.to_string(), |v| v.name().to_owned()),
        Value::String(text) => text.clone(),
        Value::Bytes(bytes) => format!("{} bytes", bytes.len()),
        Value::Bool(b) => b.to_string(),
        Value::I32(n) => n.to_string(),
        Value::I64(n) => n.to_string(),
        Value::U32(n) => n.to_string(),
        Value::U64(n) => n.to_string(),
        Value::F32(n) => n.to_string(),
        Value::F64(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(method: &str, reply: &impl prost::Message) -> Reply {
        let message = DynamicMessage::decode(
            reply_type(method).unwrap(),
            reply.encode_to_vec().as_slice(),
        )
        .unwrap();
        shown(&message, &Namespace::anonymous()).unwrap()
    }

    fn entry(entry_id: u64, account_id: u64, kind: pb::EntryKind, amount: i64) -> pb::Entry {
        pb::Entry {
            entry_id,
            account_id,
            kind: kind.into(),
            amount,
            currency: "USD".into(),
            idempotency_key: "req 42".into(),
            ..pb::Entry::default()
        }
    }

    /// A post's reply is its entries, one row each, whatever its legs: two legs
    /// are four rows, with a leg 0 and a balance of 0 shown.
    #[test]
    fn a_stored_replys_entries_are_a_journals_rows() {
        let entries = (0..2)
            .flat_map(|leg| {
                let out = entry(10 + 2 * leg, 1, pb::EntryKind::TransferOut, 500);
                let into = entry(11 + 2 * leg, 2, pb::EntryKind::TransferIn, 500);
                [out, into].map(|e| pb::Entry {
                    leg: u32::try_from(leg).unwrap(),
                    ..e
                })
            })
            .collect();
        let reply = decoded("/ledger.v1.Ledger/Post", &pb::PostReply { entries });
        assert!(reply.rows.is_empty() && reply.holds.is_empty() && reply.accounts.is_empty());
        let rows: Vec<(u64, u64, &str, u32, &str, &str)> = reply
            .entries
            .iter()
            .map(|e| {
                let amount = e.amount.shown.as_str();
                let after = e.balance_after.shown.as_str();
                (e.entry_id, e.account_id, e.kind, e.leg, amount, after)
            })
            .collect();
        assert_eq!(
            rows,
            [
                (10, 1, "TRANSFER_OUT", 0, "5.00 USD", "0.00 USD"),
                (11, 2, "TRANSFER_IN", 0, "5.00 USD", "0.00 USD"),
                (12, 1, "TRANSFER_OUT", 1, "5.00 USD", "0.00 USD"),
                (13, 2, "TRANSFER_IN", 1, "5.00 USD", "0.00 USD"),
            ]
        );
        assert_eq!(
            reply.entries[0].key_href.as_deref(),
            Some("/keys?key=req+42")
        );
    }

    /// A capture's reply is its hold, as the hold's page shows it, and its
    /// entry; an account's opening, the account as its page shows it.
    #[test]
    fn a_stored_replys_hold_and_account_are_their_pages_figures() {
        let hold = pb::Hold {
            hold_id: 4,
            amount: 70,
            captured_amount: 55,
            currency: "JPY".into(),
            state: pb::HoldState::Captured.into(),
            ..pb::Hold::default()
        };
        let capture = pb::CaptureHoldReply {
            hold: Some(hold),
            entry: Some(entry(9, 3, pb::EntryKind::Capture, 55)),
        };
        let reply = decoded("/ledger.v1.Ledger/CaptureHold", &capture);
        let hold = &reply.holds[0];
        assert_eq!(
            (
                hold.state,
                hold.amount.shown.as_str(),
                hold.captured_amount.minor
            ),
            ("CAPTURED", "70 JPY", 55)
        );
        assert_eq!(reply.entries[0].kind, "CAPTURE");
        assert!(reply.rows.is_empty());
        let opened = pb::OpenAccountReply {
            account: Some(pb::Account {
                account_id: 3,
                currency: "KWD".into(),
                ..pb::Account::default()
            }),
        };
        let reply = decoded("/ledger.v1.Ledger/OpenAccount", &opened);
        assert_eq!(reply.accounts[0].balance.shown, "0.000 KWD");
        assert!(reply.entries.is_empty() && reply.rows.is_empty());
    }

    /// A message of another kind (a method added later) is shown field by
    /// field, 0 and empty ones too, its ids linked; a message not there is not.
    #[test]
    fn another_message_is_shown_field_by_field() {
        let balance = pb::Balance {
            account_id: 3,
            currency: "USD".into(),
            ..pb::Balance::default()
        };
        let message = DynamicMessage::decode(
            pool()
                .unwrap()
                .get_message_by_name("ledger.v1.Balance")
                .unwrap(),
            balance.encode_to_vec().as_slice(),
        )
        .unwrap();
        let mut rows = Vec::new();
        fields(&message, 0, &mut rows);
        let shown: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.name.as_str(), r.value.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                ("account_id", "3"),
                ("currency", "USD"),
                ("balance", "0"),
                ("sequence", "0")
            ]
        );
        assert_eq!(rows[0].href.as_deref(), Some("/accounts/3"));
    }

    #[test]
    fn a_declines_amounts_read_in_its_currency() {
        let shown = |name: &str, value: &str, currency| detail(name, value, currency).shown;
        assert_eq!(shown("available", "-5000", Some("USD")), "-50.00 USD");
        assert_eq!(shown("refundable", "25", Some("JPY")), "25 JPY");
        assert_eq!(shown("amount", "99", None), "99 (minor units)");
        assert_eq!(shown("account_id", "7", Some("USD")), "7");
        assert_eq!(shown("state", "HOLD_STATE_CAPTURED", None), "CAPTURED");
        assert_eq!(detail("balance", "100", Some("USD")).value, "100");
    }
}
