//! `/keys?key=KEY`: what happened under a key in the reader's namespace
//! (LookupKey): the method, when, and its stored outcome, decoded. A reply is
//! read as its method's reply message, through the contract's descriptors (so a
//! method added to the proto shows without a change here), field by field, each
//! id a link; a decline shows its code, reason, message and metadata.

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MessageDescriptor, ReflectMessage as _, Value,
};
use tonic_types::StatusExt as _;

use super::super::auth::{Viewer, query_value};
use super::super::view::{key_href, time};
use super::super::{Console, Nav, failure, html};
use crate::error::Error;
use crate::proto::{code_name, pb};

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
    /// The stored reply, one row per field.
    Reply(Vec<Row>),
    Decline(Decline),
}

/// A stored decline's status.
struct Decline {
    code: &'static str,
    message: String,
    reason: String,
    domain: String,
    metadata: Vec<(String, String)>,
    /// Other details: field violations, and the like.
    details: Vec<String>,
}

/// One field of a decoded reply, indented by its depth.
struct Row {
    depth: usize,
    name: String,
    value: String,
    /// The page of the id, key or entry the value names.
    href: Option<String>,
}

pub(crate) async fn page(State(console): State<Console>, uri: Uri, viewer: Viewer) -> Response {
    let key = query_value(uri.query(), "key").unwrap_or_default();
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
                let record = reader.lookup_key(request, &client, &call).await?;
                shown(&record)
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

fn shown(record: &pb::KeyRecord) -> Result<Record, Error> {
    let outcome = match &record.outcome {
        Some(pb::key_record::Outcome::Reply(bytes)) => {
            let message = DynamicMessage::decode(reply_type(&record.method)?, bytes.as_slice())
                .map_err(|e| Error::internal(format!("a stored reply does not decode: {e}")))?;
            let mut rows = Vec::new();
            fields(&message, 0, &mut rows);
            Outcome::Reply(rows)
        }
        Some(pb::key_record::Outcome::Error(status)) => Outcome::Decline(decline(status)),
        None => return Err(Error::internal("a key record without an outcome")),
    };
    Ok(Record {
        method: record.method.clone(),
        created_at: time(record.created_at.as_ref()),
        outcome,
    })
}

fn decline(stored: &tonic_types::pb::Status) -> Decline {
    let status = tonic::Status::with_details(
        tonic::Code::from_i32(stored.code),
        stored.message.clone(),
        stored.encode_to_vec().into(),
    );
    let details = status.get_error_details();
    let (reason, domain, mut metadata) = details.error_info().map_or_else(
        || (String::new(), String::new(), Vec::new()),
        |info| {
            let metadata: Vec<(String, String)> = info.metadata.clone().into_iter().collect();
            (info.reason.clone(), info.domain.clone(), metadata)
        },
    );
    metadata.sort();
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

/// The fields of `message` that are set, in the proto's order, nested messages
/// below their name; timestamps and durations on one row.
fn fields(message: &DynamicMessage, depth: usize, rows: &mut Vec<Row>) {
    for (field, value) in message.fields() {
        let name = field.name();
        match value {
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
    field: &prost_reflect::FieldDescriptor,
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

fn scalar(value: &Value, field: &prost_reflect::FieldDescriptor) -> String {
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

    /// A stored charge reply reads back field by field, its ids and key linked.
    #[test]
    fn a_stored_reply_is_decoded_by_its_method() {
        let reply = pb::ChargeReply {
            entry: Some(pb::Entry {
                entry_id: 12,
                account_id: 3,
                kind: pb::EntryKind::Charge.into(),
                amount: 30,
                currency: "USD".into(),
                balance_after: 70,
                idempotency_key: "req 42".into(),
                ..pb::Entry::default()
            }),
        };
        let record = pb::KeyRecord {
            idempotency_key: "req 42".into(),
            method: "/ledger.v1.Ledger/Charge".into(),
            created_at: None,
            outcome: Some(pb::key_record::Outcome::Reply(reply.encode_to_vec())),
        };
        let Outcome::Reply(rows) = shown(&record).unwrap().outcome else {
            panic!("a reply");
        };
        let find = |name: &str| rows.iter().find(|r| r.name == name).unwrap();
        assert_eq!(find("entry").depth, 0);
        assert_eq!(
            (
                find("entry_id").value.as_str(),
                find("entry_id").href.as_deref()
            ),
            ("12", Some("/entries/12"))
        );
        assert_eq!(find("account_id").href.as_deref(), Some("/accounts/3"));
        assert_eq!(find("kind").value, "ENTRY_KIND_CHARGE");
        assert_eq!(find("balance_after").value, "70");
        assert_eq!(
            find("idempotency_key").href.as_deref(),
            Some("/keys?key=req+42")
        );
    }
}
