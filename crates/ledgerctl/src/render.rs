//! Replies as protobuf JSON (as grpcurl prints them: camelCase names, 64-bit
//! integers as strings, enums by name, RFC 3339 timestamps; default values left
//! out) or as a table for people; declines likewise. Both read the messages
//! through their descriptors (prost-reflect), so a field added to the proto shows
//! up without a change here.

use std::fmt::Write as _;
use std::sync::OnceLock;

use ledger_client::{Decline, code_name, pb};
use prost_reflect::{
    DescriptorPool, DynamicMessage, MessageDescriptor, ReflectMessage as _, SerializeOptions, Value,
};
use serde_json::{Map, Value as Json, json};

use crate::cli::Output;

/// The contract's descriptors (with the well-known types it imports).
fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET)
            .unwrap_or_else(|e| unreachable!("the generated descriptor set decodes: {e}"))
    })
}

fn descriptor(name: &str) -> Result<MessageDescriptor, String> {
    pool()
        .get_message_by_name(name)
        .ok_or_else(|| format!("no message {name} in the contract"))
}

/// `message` (of the contract's type `name`, e.g. `ledger.v1.ChargeReply`) read
/// through its descriptor.
pub(crate) fn dynamic<M: prost::Message>(
    message: &M,
    name: &str,
) -> Result<DynamicMessage, String> {
    decode(&message.encode_to_vec(), name)
}

fn decode(bytes: &[u8], name: &str) -> Result<DynamicMessage, String> {
    DynamicMessage::decode(descriptor(name)?, bytes).map_err(|e| format!("{name}: {e}"))
}

/// The reply type of a full method name (`/ledger.v1.Ledger/Charge`).
fn reply_type(method: &str) -> Result<MessageDescriptor, String> {
    let name = method.rsplit('/').next().unwrap_or_default();
    pool()
        .get_service_by_name("ledger.v1.Ledger")
        .and_then(|service| service.methods().find(|m| m.name() == name))
        .map(|m| m.output())
        .ok_or_else(|| format!("no method {method} in the contract"))
}

fn json_of(message: &DynamicMessage) -> Json {
    let mut json = message
        .serialize_with_options(serde_json::value::Serializer, &SerializeOptions::new())
        .unwrap_or_else(|e| json!({ "unprintable": e.to_string() }));
    sort_maps(&mut json);
    json
}

/// Puts the pairs of every `metadata` map in key order: a map comes out of
/// reflection in hash order, and the same reply must print the same way.
fn sort_maps(json: &mut Json) {
    match json {
        Json::Object(fields) => {
            for (name, value) in fields.iter_mut() {
                if let (true, Json::Object(pairs)) = (name == "metadata", &mut *value) {
                    pairs.sort_keys();
                }
                sort_maps(value);
            }
        }
        Json::Array(items) => items.iter_mut().for_each(sort_maps),
        _ => {}
    }
}

/// A reply, in the chosen form.
pub(crate) fn reply(message: &DynamicMessage, output: Output) -> String {
    match output {
        Output::Json => pretty(&json_of(message)),
        Output::Table => {
            let mut out = String::new();
            table(message, 0, &mut out);
            out
        }
    }
}

/// The first line of `watch-entries` as a table: the columns' names.
pub(crate) fn entry_header() -> String {
    let names = [
        "SEQUENCE",
        "ENTRY_ID",
        "ACCOUNT_ID",
        "KIND",
        "AMOUNT",
        "BALANCE_AFTER",
        "CURRENCY",
        "CREATED_AT",
        "KEY / DESCRIPTION",
    ];
    columns(names.map(str::to_owned))
}

/// One entry of the change stream on one line: a table row under
/// [`entry_header`], or one compact protobuf JSON object (JSON Lines).
pub(crate) fn entry_line(entry: &pb::Entry, output: Output) -> Result<String, String> {
    if output == Output::Json {
        let mut text = serde_json::to_string(&json_of(&dynamic(entry, "ledger.v1.Entry")?))
            .map_err(|e| e.to_string())?;
        text.push('\n');
        return Ok(text);
    }
    let mut key = entry.idempotency_key.clone();
    if !entry.description.is_empty() {
        let _ = write!(key, " / {}", entry.description);
    }
    Ok(columns([
        entry.sequence.to_string(),
        entry.entry_id.to_string(),
        entry.account_id.to_string(),
        entry.kind().as_str_name().to_owned(),
        entry.amount.to_string(),
        entry.balance_after.to_string(),
        entry.currency.clone(),
        entry.created_at.as_ref().map(time).unwrap_or_default(),
        key,
    ]))
}

/// A time to the microsecond, as the ledger keeps it, always with six digits:
/// protobuf's own form drops them on a whole millisecond or second, and a column
/// of times would lose its alignment.
fn time(t: &prost_types::Timestamp) -> String {
    let text = t.to_string();
    let Some(head) = text.strip_suffix('Z') else {
        return text;
    };
    match head
        .rsplit_once('.')
        .map_or(0, |(_, fraction)| fraction.len())
    {
        0 => format!("{head}.000000Z"),
        digits @ 1..6 => format!("{head}{}Z", "0".repeat(6 - digits)),
        _ => text,
    }
}

/// Left-aligned but for the two amounts; minor units, as on the wire.
fn columns(
    [
        sequence,
        entry,
        account,
        kind,
        amount,
        balance,
        currency,
        created,
        key,
    ]: [String; 9],
) -> String {
    let line = format!(
        "{sequence:<8}  {entry:<8}  {account:<10}  {kind:<23}  {amount:>10}  {balance:>13}  \
         {currency:<8}  {created:<30}  {key}"
    );
    format!("{}\n", line.trim_end())
}

/// A `KeyRecord`, its stored reply decoded as its method's reply, or its stored
/// decline parsed.
pub(crate) fn key_record(record: &pb::KeyRecord, output: Output) -> Result<String, String> {
    let mut head = dynamic(record, "ledger.v1.KeyRecord")?;
    head.clear_field_by_name("reply");
    head.clear_field_by_name("error");
    let outcome = match &record.outcome {
        Some(pb::key_record::Outcome::Reply(bytes)) => Some(Ok(DynamicMessage::decode(
            reply_type(&record.method)?,
            bytes.as_slice(),
        )
        .map_err(|e| format!("the stored reply: {e}"))?)),
        Some(pb::key_record::Outcome::Error(status)) => {
            Some(Err(Decline::from_stored(status, None)))
        }
        None => None,
    };
    Ok(match output {
        Output::Json => {
            let mut doc = json_of(&head);
            if let (Json::Object(fields), Some(outcome)) = (&mut doc, &outcome) {
                let (name, value) = match outcome {
                    Ok(stored) => ("reply", json_of(stored)),
                    Err(decline) => ("error", decline_json(decline)),
                };
                fields.insert(name.into(), value);
            }
            pretty(&doc)
        }
        Output::Table => {
            let mut out = String::new();
            table(&head, 0, &mut out);
            match &outcome {
                Some(Ok(stored)) => {
                    out.push_str("reply\n");
                    table(stored, 1, &mut out);
                }
                Some(Err(decline)) => {
                    out.push_str("error\n");
                    decline_table(decline, 1, &mut out);
                }
                None => {}
            }
            out
        }
    })
}

/// A decline, in the chosen form.
pub(crate) fn decline(decline: &Decline, output: Output) -> String {
    match output {
        Output::Json => pretty(&decline_json(decline)),
        Output::Table => {
            let mut out = String::new();
            decline_table(decline, 0, &mut out);
            out
        }
    }
}

fn decline_json(decline: &Decline) -> Json {
    let mut doc = Map::new();
    doc.insert("code".into(), code_name(decline.code).into());
    doc.insert("message".into(), decline.message.clone().into());
    doc.insert("reason".into(), decline.reason.as_str().into());
    if !decline.metadata.is_empty() {
        doc.insert("metadata".into(), json!(decline.metadata));
    }
    if !decline.violations.is_empty() {
        let violations: Vec<Json> = decline
            .violations
            .iter()
            .map(|v| json!({ "field": v.field, "description": v.description }))
            .collect();
        doc.insert("fieldViolations".into(), violations.into());
    }
    Json::Object(doc)
}

fn decline_table(decline: &Decline, depth: usize, out: &mut String) {
    let mut row = |name: &str, value: &str| line(out, depth, name, value);
    row("code", code_name(decline.code));
    row("reason", decline.reason.as_str());
    row("message", &decline.message);
    for (name, value) in &decline.metadata {
        row(name, value);
    }
    for violation in &decline.violations {
        row(&violation.field, &violation.description);
    }
}

fn pretty(doc: &Json) -> String {
    let mut text = serde_json::to_string_pretty(doc).unwrap_or_default();
    text.push('\n');
    text
}

/// Fields whose value is an amount of money, in minor units of the message's
/// `currency`.
const AMOUNTS: &[&str] = &[
    "amount",
    "balance",
    "balance_after",
    "held",
    "available",
    "captured_amount",
];

fn table(message: &DynamicMessage, depth: usize, out: &mut String) {
    let currency = message
        .get_field_by_name("currency")
        .and_then(|c| c.as_str().map(str::to_owned))
        .filter(|c| !c.is_empty());
    for (field, value) in message.fields() {
        let name = field.name();
        match value {
            Value::Message(inner) => message_row(inner, name, depth, out),
            // Metadata: one line, its pairs in key order.
            Value::Map(pairs) => {
                let mut shown: Vec<String> = pairs
                    .iter()
                    .map(|(k, v)| {
                        let key = k.as_str().unwrap_or_default();
                        format!("{key}={}", v.as_str().unwrap_or_default())
                    })
                    .collect();
                shown.sort();
                line(out, depth, name, &shown.join(", "));
            }
            Value::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    let label = format!("{name}[{i}]");
                    match item {
                        Value::Message(inner) => message_row(inner, &label, depth, out),
                        other => line(out, depth, &label, &scalar(other, &field)),
                    }
                }
            }
            other => {
                let mut text = scalar(other, &field);
                if let (true, Some(currency)) = (AMOUNTS.contains(&name), &currency) {
                    let _ = write!(text, " {currency} (minor units)");
                }
                line(out, depth, name, &text);
            }
        }
    }
}

/// A nested message: a timestamp, a duration or limits on one line, anything
/// else as a block of its own.
fn message_row(inner: &DynamicMessage, name: &str, depth: usize, out: &mut String) {
    match inner.descriptor().full_name() {
        "google.protobuf.Timestamp" => {
            let text = inner
                .transcode_to::<prost_types::Timestamp>()
                .map_or_else(|e| e.to_string(), |t| time(&t));
            line(out, depth, name, &text);
        }
        "google.protobuf.Duration" => {
            let text = inner
                .transcode_to::<prost_types::Duration>()
                .map_or_else(|e| e.to_string(), |d| d.to_string());
            line(out, depth, name, &text);
        }
        "ledger.v1.AccountLimits" => {
            let text = inner
                .transcode_to::<pb::AccountLimits>()
                .map_or_else(|e| e.to_string(), |l| limits(&l));
            line(out, depth, name, &text);
        }
        _ => {
            let _ = writeln!(out, "{}{name}", "  ".repeat(depth));
            table(inner, depth + 1, out);
        }
    }
}

/// Limits as a person reads them: `floor -5000, ceiling 250000`, `no floor,
/// no ceiling` (the defaults, `floor 0, no ceiling`, shown like any other).
fn limits(limits: &pb::AccountLimits) -> String {
    let floor = if limits.no_min_balance {
        "no floor".to_owned()
    } else {
        format!("floor {}", limits.min_balance)
    };
    let ceiling = limits
        .max_balance
        .map_or_else(|| "no ceiling".to_owned(), |c| format!("ceiling {c}"));
    format!("{floor}, {ceiling}")
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

fn line(out: &mut String, depth: usize, name: &str, value: &str) {
    let indent = "  ".repeat(depth);
    let width = 23_usize.saturating_sub(indent.len());
    let _ = writeln!(out, "{indent}{name:<width$} {value}");
}
