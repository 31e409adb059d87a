//! Replies as protobuf JSON (as grpcurl prints them: camelCase names, 64-bit
//! integers as strings, enums by name, RFC 3339 timestamps; default values left
//! out; amounts in minor units, as on the wire) or for people; declines
//! likewise. Both read the messages through their descriptors (prost-reflect),
//! so a field added to the proto shows up without a change here.
//!
//! For people, every field is shown, zero or not; amounts in their currency's
//! units (`10.00 USD`, by `money`), enum values as the word their name ends in
//! (`TRANSFER_OUT`, `HELD`). A reply with a repeated message (a list or a
//! search) is a table, a row per item under a header, as kubectl prints one:
//! the columns that say something (not a field empty in every row, a map, a
//! nested message, a currency its amounts already name), all of them with
//! `-o wide`. Any other reply is a block of names and values.

use std::fmt::Write as _;

use ledger_client::{Decline, code_name, pb};
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage as _,
    SerializeOptions, Value,
};
use serde_json::{Map, Value as Json, json};

use crate::contract;
use crate::money;
use crate::output::Output;
use crate::values;

/// The message that says what happened under a key: its stored reply is
/// shown decoded, never as bytes.
const KEY_RECORD: &str = "ledger.v1.KeyRecord";

/// `message` (of the contract's type `name`, e.g. `ledger.v1.Entry`) read
/// through its descriptor.
pub(crate) fn dynamic<M: prost::Message>(
    message: &M,
    name: &str,
) -> Result<DynamicMessage, String> {
    let bytes = message.encode_to_vec();
    DynamicMessage::decode(contract::message(name)?, bytes.as_slice())
        .map_err(|e| format!("{name}: {e}"))
}

/// The reply type of a full method name, as a `KeyRecord` stores it.
fn reply_type(method: &str) -> Result<MessageDescriptor, String> {
    let name = method.rsplit('/').next().unwrap_or_default();
    contract::service(contract::pool())?
        .methods()
        .find(|m| m.name() == name)
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

/// A reply, in the chosen form; a `KeyRecord` with its outcome decoded.
pub(crate) fn reply(message: &DynamicMessage, output: Output) -> Result<String, String> {
    if message.descriptor().full_name() == KEY_RECORD {
        let record = message
            .transcode_to::<pb::KeyRecord>()
            .map_err(|e| format!("{KEY_RECORD}: {e}"))?;
        return key_record(&record, output);
    }
    Ok(match output {
        Output::Json => pretty(&json_of(message)),
        Output::Table | Output::Wide => {
            let mut out = String::new();
            if listed(message).is_empty() {
                table(message, 0, None, &mut out);
            } else {
                lists(message, output == Output::Wide, &mut out);
            }
            out
        }
    })
}

/// The repeated message fields of `message`: the lists a reply is a table of.
fn listed(message: &DynamicMessage) -> Vec<FieldDescriptor> {
    message
        .descriptor()
        .fields()
        .filter(|field| field.is_list() && matches!(field.kind(), Kind::Message(_)))
        .collect()
}

/// A reply that holds lists: each as a table (under its name where there are
/// several), then the rest of the reply that is set (a `next_page_token`).
fn lists(message: &DynamicMessage, wide: bool, out: &mut String) {
    let lists = listed(message);
    for field in &lists {
        if lists.len() > 1 {
            let _ = writeln!(out, "{}", field.name());
        }
        let Kind::Message(item) = field.kind() else {
            continue;
        };
        let value = message.get_field(field);
        let rows: Vec<&DynamicMessage> = value
            .as_list()
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_message)
            .collect();
        if rows.is_empty() {
            let _ = writeln!(out, "no {}", field.name().replace('_', " "));
            continue;
        }
        rows_table(&item, &rows, wide, out);
    }
    let mut rest = String::new();
    for (field, value) in message.fields() {
        if !lists.contains(&field) {
            line(&mut rest, 0, field.name(), &cell(value, &field, None));
        }
    }
    if !rest.is_empty() {
        let _ = write!(out, "\n{rest}");
    }
}

/// Rows of `item`s under a header of their fields' names, each column as
/// wide as its widest cell; numbers and amounts to the right.
fn rows_table(item: &MessageDescriptor, rows: &[&DynamicMessage], wide: bool, out: &mut String) {
    let has_money = item.fields().any(|field| money::is_money(&field));
    let says_something = |field: &FieldDescriptor| {
        let nested = matches!(field.kind(), Kind::Message(_)) && !values::is_value(&field.kind());
        let named_in_amounts = has_money && field.name() == money::CURRENCY;
        !(field.is_map() || nested || named_in_amounts)
            && rows.iter().any(|row| row.has_field(field))
    };
    let columns: Vec<FieldDescriptor> = item
        .fields()
        .filter(|field| wide || says_something(field))
        .collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let currency = money::currency_of(row, None);
            columns
                .iter()
                .map(|field| field_text(row, field, currency.as_deref()))
                .collect()
        })
        .collect();
    let header: Vec<String> = columns
        .iter()
        .map(|field| field.name().to_uppercase())
        .collect();
    let widths: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(i, name)| {
            cells
                .iter()
                .filter_map(|row| row.get(i))
                .chain([name])
                .map(|text| text.chars().count())
                .max()
                .unwrap_or_default()
        })
        .collect();
    for row in [header].iter().chain(&cells) {
        let mut text = String::new();
        for ((value, field), width) in row.iter().zip(&columns).zip(&widths) {
            if !text.is_empty() {
                text.push_str("  ");
            }
            if numeric(field) {
                let _ = write!(text, "{value:>width$}");
            } else {
                let _ = write!(text, "{value:<width$}");
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    }
}

/// Whether a column of `field` reads best aligned to the right.
fn numeric(field: &FieldDescriptor) -> bool {
    !field.is_list()
        && !field.is_map()
        && matches!(
            field.kind(),
            Kind::Int32
                | Kind::Sint32
                | Kind::Sfixed32
                | Kind::Int64
                | Kind::Sint64
                | Kind::Sfixed64
                | Kind::Uint32
                | Kind::Fixed32
                | Kind::Uint64
                | Kind::Fixed64
                | Kind::Float
                | Kind::Double
        )
}

/// One field of `message` as one line's text: a value, a time, limits,
/// `KEY=VALUE` pairs in key order, `-` for a message not set, protobuf JSON
/// for another message or a list.
fn field_text(message: &DynamicMessage, field: &FieldDescriptor, currency: Option<&str>) -> String {
    let value = message.get_field(field);
    match &*value {
        Value::Map(pairs) => pairs_text(pairs),
        Value::List(_) => {
            serde_json::to_string(&json_of(message).get(field.json_name())).unwrap_or_default()
        }
        Value::Message(_) if !message.has_field(field) => "-".to_owned(),
        Value::Message(inner) => one_line(inner, currency)
            .unwrap_or_else(|| serde_json::to_string(&json_of(inner)).unwrap_or_default()),
        other => cell(other, field, currency),
    }
}

/// Metadata on one line, its pairs in key order.
fn pairs_text(pairs: &std::collections::HashMap<MapKey, Value>) -> String {
    let mut shown: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            let key = k.as_str().unwrap_or_default();
            format!("{key}={}", v.as_str().unwrap_or_default())
        })
        .collect();
    shown.sort();
    shown.join(", ")
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
    let dynamic = dynamic(entry, "ledger.v1.Entry")?;
    let currency = Some(entry.currency.as_str());
    let text = |name: &str| {
        dynamic
            .descriptor()
            .get_field_by_name(name)
            .map(|field| field_text(&dynamic, &field, currency))
            .unwrap_or_default()
    };
    Ok(columns([
        text("sequence"),
        text("entry_id"),
        text("account_id"),
        text("kind"),
        text("amount"),
        text("balance_after"),
        text("created_at"),
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

/// Left-aligned but for the two amounts, in their currency's units; fixed
/// widths, since a stream's rows are printed as they come.
fn columns(
    [
        sequence,
        entry,
        account,
        kind,
        amount,
        balance,
        created,
        key,
    ]: [String; 8],
) -> String {
    let line = format!(
        "{sequence:<8}  {entry:<8}  {account:<10}  {kind:<12}  {amount:>14}  {balance:>16}  \
         {created:<27}  {key}"
    );
    format!("{}\n", line.trim_end())
}

/// A `KeyRecord`, its stored reply decoded as its method's reply, or its stored
/// decline parsed.
fn key_record(record: &pb::KeyRecord, output: Output) -> Result<String, String> {
    let mut head = dynamic(record, KEY_RECORD)?;
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
        Output::Table | Output::Wide => {
            let mut out = String::new();
            table(&head, 0, None, &mut out);
            match &outcome {
                Some(Ok(stored)) => {
                    out.push_str("reply\n");
                    table(stored, 1, None, &mut out);
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
        Output::Table | Output::Wide => {
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

/// A message as a block of names and values, every field shown (a `oneof`'s
/// only as the one set); `outer`: the currency of the message that holds it.
fn table(message: &DynamicMessage, depth: usize, outer: Option<&str>, out: &mut String) {
    let currency = money::currency_of(message, outer);
    for field in message.descriptor().fields() {
        let chosen = field
            .containing_oneof()
            .is_none_or(|oneof| oneof.is_synthetic());
        if !chosen && !message.has_field(&field) {
            continue;
        }
        let name = field.name();
        let value = message.get_field(&field);
        match &*value {
            Value::Message(inner) if message.has_field(&field) => {
                message_row(inner, name, depth, currency.as_deref(), out);
            }
            Value::List(items) if !field.is_map() => {
                for (i, item) in items.iter().enumerate() {
                    let label = format!("{name}[{i}]");
                    match item {
                        Value::Message(inner) => {
                            message_row(inner, &label, depth, currency.as_deref(), out);
                        }
                        other => line(out, depth, &label, &cell(other, &field, None)),
                    }
                }
            }
            _ => line(
                out,
                depth,
                name,
                &field_text(message, &field, currency.as_deref()),
            ),
        }
    }
}

/// A nested message: a timestamp, a duration or limits on one line, anything
/// else as a block of its own.
fn message_row(
    inner: &DynamicMessage,
    name: &str,
    depth: usize,
    currency: Option<&str>,
    out: &mut String,
) {
    if let Some(text) = one_line(inner, currency) {
        line(out, depth, name, &text);
    } else {
        let _ = writeln!(out, "{}{name}", "  ".repeat(depth));
        table(inner, depth + 1, currency, out);
    }
}

/// A message that reads on one line: a time, a duration, limits.
fn one_line(inner: &DynamicMessage, currency: Option<&str>) -> Option<String> {
    Some(match inner.descriptor().full_name() {
        "google.protobuf.Timestamp" => inner
            .transcode_to::<prost_types::Timestamp>()
            .map_or_else(|e| e.to_string(), |t| time(&t)),
        "google.protobuf.Duration" => inner
            .transcode_to::<prost_types::Duration>()
            .map_or_else(|e| e.to_string(), |d| d.to_string()),
        "ledger.v1.AccountLimits" => inner
            .transcode_to::<pb::AccountLimits>()
            .map_or_else(|e| e.to_string(), |l| limits(&l, currency)),
        _ => return None,
    })
}

/// Limits as a person reads them: `floor -50.00 USD, ceiling 2500.00 USD`,
/// `no floor, no ceiling` (the defaults, `floor 0.00 USD, no ceiling`, shown
/// like any other).
fn limits(limits: &pb::AccountLimits, currency: Option<&str>) -> String {
    let floor = if limits.no_min_balance {
        "no floor".to_owned()
    } else {
        format!("floor {}", money::format(limits.min_balance, currency))
    };
    let ceiling = limits.max_balance.map_or_else(
        || "no ceiling".to_owned(),
        |c| format!("ceiling {}", money::format(c, currency)),
    );
    format!("{floor}, {ceiling}")
}

/// A single value: an amount in `currency`'s units, an enum value as its
/// word, anything else as itself.
fn cell(value: &Value, field: &FieldDescriptor, currency: Option<&str>) -> String {
    match value {
        Value::I64(minor) if money::is_money(field) => money::format(*minor, currency),
        Value::EnumNumber(number) => field.kind().as_enum().map_or_else(
            || number.to_string(),
            |values| {
                let prefix = values::enum_prefix(values);
                values.get_value(*number).map_or_else(
                    || number.to_string(),
                    |v| {
                        v.name()
                            .strip_prefix(&prefix)
                            .unwrap_or(v.name())
                            .to_owned()
                    },
                )
            },
        ),
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
    let text = format!("{indent}{name:<width$} {value}");
    let _ = writeln!(out, "{}", text.trim_end());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(entry_id: u64, kind: pb::EntryKind, amount: i64, balance_after: i64) -> pb::Entry {
        pb::Entry {
            entry_id,
            account_id: 1,
            kind: kind.into(),
            amount,
            currency: "USD".into(),
            balance_after,
            idempotency_key: format!("k-{entry_id}"),
            ..pb::Entry::default()
        }
    }

    fn shown<M: prost::Message>(message: &M, name: &str, output: Output) -> String {
        reply(&dynamic(message, name).unwrap(), output).unwrap()
    }

    #[test]
    fn a_single_reply_shows_every_field_with_amounts_and_words() {
        let account = pb::Account {
            account_id: 7,
            currency: "KWD".into(),
            balance: -1500,
            held: 0,
            available: -1500,
            limits: Some(pb::AccountLimits {
                min_balance: -2000,
                no_min_balance: false,
                max_balance: Some(i64::MAX),
            }),
            ..pb::Account::default()
        };
        assert_eq!(
            shown(&account, "ledger.v1.Account", Output::Table),
            "account_id              7\n\
             currency                KWD\n\
             balance                 -1.500 KWD\n\
             created_at              -\n\
             held                    0.000 KWD\n\
             available               -1.500 KWD\n\
             limits                  floor -2.000 KWD, ceiling 9223372036854775.807 KWD\n\
             metadata\n"
        );
        let hold = pb::Hold {
            hold_id: 3,
            amount: 1000,
            currency: "JPY".into(),
            state: pb::HoldState::Held.into(),
            ..pb::Hold::default()
        };
        let text = shown(&hold, "ledger.v1.Hold", Output::Table);
        assert!(text.contains("\nstate                   HELD\n"), "{text}");
        assert!(
            text.contains("\namount                  1000 JPY\n"),
            "{text}"
        );
        assert!(text.contains("\ncaptured_amount         0 JPY\n"), "{text}");
        assert!(text.contains("\naccount_id              0\n"), "{text}");
    }

    #[test]
    fn an_unknown_currency_shows_minor_units_marked_and_extremes_exactly() {
        let balance = pb::Balance {
            account_id: 1,
            currency: "XAU".into(),
            balance: i64::MIN,
            ..pb::Balance::default()
        };
        let text = shown(&balance, "ledger.v1.Balance", Output::Table);
        assert!(
            text.contains("\nbalance                 -9223372036854775808 XAU (minor units)\n"),
            "{text}"
        );
        assert!(
            text.contains("\nlimits                  -\n"),
            "absent, not the defaults: {text}"
        );
        let account = pb::Account {
            currency: "USD".into(),
            balance: i64::MAX,
            ..pb::Account::default()
        };
        let text = shown(&account, "ledger.v1.Account", Output::Table);
        assert!(text.contains(" 92233720368547758.07 USD\n"), "{text}");
    }

    #[test]
    fn a_list_is_a_table_a_row_per_item() {
        let reply = pb::ListEntriesReply {
            entries: vec![
                entry(1, pb::EntryKind::Credit, 10_000, 10_000),
                entry(2, pb::EntryKind::TransferOut, 5, 9_995),
            ],
            next_page_token: "more".into(),
        };
        assert_eq!(
            shown(&reply, "ledger.v1.ListEntriesReply", Output::Table),
            "ENTRY_ID  ACCOUNT_ID  KIND              AMOUNT  BALANCE_AFTER  IDEMPOTENCY_KEY\n\
             \x20      1           1  CREDIT        100.00 USD     100.00 USD  k-1\n\
             \x20      2           1  TRANSFER_OUT    0.05 USD      99.95 USD  k-2\n\
             \n\
             next_page_token         more\n"
        );
        let wide = shown(&reply, "ledger.v1.ListEntriesReply", Output::Wide);
        let header = wide.lines().next().unwrap();
        assert!(
            header.contains("  CURRENCY  ")
                && header.contains("  LEG  ")
                && header.ends_with("  REVERSES_ENTRY_ID"),
            "{header}"
        );
        assert!(wide.lines().nth(1).unwrap().contains("  -  "), "{wide}");
        let json = shown(&reply, "ledger.v1.ListEntriesReply", Output::Json);
        assert!(json.contains("\"amount\": \"10000\""), "{json}");
        let empty = pb::ListHoldsReply::default();
        assert_eq!(
            shown(&empty, "ledger.v1.ListHoldsReply", Output::Table),
            "no holds\n"
        );
    }

    #[test]
    fn a_stream_row_reads_as_a_table_row_does() {
        let mut credit = entry(4, pb::EntryKind::Credit, 100, 250);
        credit.sequence = 9;
        let line = entry_line(&credit, Output::Table).unwrap();
        assert_eq!(
            line,
            "9         4         1           CREDIT              1.00 USD          2.50 USD  \
             -                            k-4\n"
        );
    }
}
