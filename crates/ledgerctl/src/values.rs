//! A flag's text into a field's value, by the field's type (SPEC 5): numbers,
//! text, an enum by its name with or without its prefix, a duration as
//! humantime writes one (`10m`), a time in RFC 3339, `KEY=VALUE` for a map's
//! pair, and a message of a repeated field as its fields in order,
//! colon-separated (`1:2:97:USD`), or as protobuf JSON where a field of it
//! cannot be written so. Each error names what the field expects.

use std::fmt::Display;

use heck::ToShoutySnakeCase as _;
use prost_reflect::{DynamicMessage, EnumDescriptor, Kind, MapKey, MessageDescriptor, Value};

const DURATION: &str = "google.protobuf.Duration";
const TIMESTAMP: &str = "google.protobuf.Timestamp";

/// How a message's fields are written on one flag.
pub(crate) const LISTED: &str = "its fields colon-separated, as the message orders them (the last \
                                 takes the rest; those left out at the end keep their defaults).";

/// How a value of a kind is written.
pub(crate) enum Form {
    /// A number, text, or an enum's name.
    Plain,
    /// humantime's: `30s`, `15m`, `7days`.
    Duration,
    /// RFC 3339, UTC.
    Time,
    /// A message's fields in order, colon-separated.
    Listed(MessageDescriptor),
    /// A message as protobuf JSON: one with a field that is not a single
    /// value.
    Json(MessageDescriptor),
}

pub(crate) fn form(kind: &Kind) -> Form {
    match kind {
        Kind::Message(message) if message.full_name() == DURATION => Form::Duration,
        Kind::Message(message) if message.full_name() == TIMESTAMP => Form::Time,
        Kind::Message(message) if listable(message) => Form::Listed(message.clone()),
        Kind::Message(message) => Form::Json(message.clone()),
        _ => Form::Plain,
    }
}

impl Form {
    /// The flag's value name, where it is not the field's own.
    pub(crate) fn value_name(&self) -> Option<String> {
        match self {
            Self::Listed(message) => Some(
                message
                    .fields()
                    .map(|field| field.name().to_uppercase())
                    .collect::<Vec<_>>()
                    .join(":"),
            ),
            Self::Json(_) => Some("JSON".into()),
            Self::Plain | Self::Duration | Self::Time => None,
        }
    }

    /// What the help says of one value.
    pub(crate) fn hint(&self) -> Option<String> {
        match self {
            Self::Plain => None,
            Self::Duration => Some("A duration: 30s, 15m, 7days.".into()),
            Self::Time => Some("A time in RFC 3339, UTC: 2026-12-31T23:59:59Z.".into()),
            Self::Listed(message) => Some(format!("A {}: {LISTED}", message.name())),
            Self::Json(message) => Some(format!("A {} as protobuf JSON.", message.name())),
        }
    }
}

/// Whether a value of this kind is one flag's value (a scalar, an enum, a
/// duration or a time) rather than a message of fields.
pub(crate) fn is_value(kind: &Kind) -> bool {
    matches!(form(kind), Form::Plain | Form::Duration | Form::Time)
}

/// A message whose every field is a single value: written colon-separated.
fn listable(message: &MessageDescriptor) -> bool {
    message
        .fields()
        .all(|field| !field.is_list() && !field.is_map() && scalar_kind(&field.kind()))
}

fn scalar_kind(kind: &Kind) -> bool {
    !matches!(kind, Kind::Message(_))
}

/// One value of `kind` from its text.
pub(crate) fn parse(kind: &Kind, text: &str) -> Result<Value, String> {
    match (form(kind), kind) {
        (Form::Duration, Kind::Message(message)) => duration(message, text),
        (Form::Time, Kind::Message(message)) => timestamp(message, text),
        (Form::Listed(message), _) => listed(&message, text),
        (Form::Json(message), _) => json(&message, text),
        (_, Kind::Enum(values)) => enumerated(values, text),
        (_, scalar) => number_or_text(scalar, text),
    }
}

fn number_or_text(kind: &Kind, text: &str) -> Result<Value, String> {
    fn number<T: std::str::FromStr<Err: Display>>(
        text: &str,
        what: &str,
        value: impl Fn(T) -> Value,
    ) -> Result<Value, String> {
        text.parse::<T>()
            .map(value)
            .map_err(|e| format!("{e}; expects {what}"))
    }
    match kind {
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            number(text, "a whole number (32-bit)", Value::I32)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => number(text, "a whole number", Value::I64),
        Kind::Uint32 | Kind::Fixed32 => {
            number(text, "a whole number, 0 or more (32-bit)", Value::U32)
        }
        Kind::Uint64 | Kind::Fixed64 => number(text, "a whole number, 0 or more", Value::U64),
        Kind::Float => number(text, "a number", Value::F32),
        Kind::Double => number(text, "a number", Value::F64),
        Kind::Bool => number(text, "true or false", Value::Bool),
        // Bytes as the text's own (UTF-8) bytes: no request takes bytes yet.
        Kind::Bytes => Ok(Value::Bytes(text.as_bytes().to_vec().into())),
        Kind::String | Kind::Message(_) | Kind::Enum(_) => Ok(Value::String(text.to_owned())),
    }
}

/// An enum's value by its name, with or without the enum's prefix, in any
/// case: `CHARGE` or `ENTRY_KIND_CHARGE`.
fn enumerated(values: &EnumDescriptor, text: &str) -> Result<Value, String> {
    let wanted = text.to_uppercase();
    let prefix = enum_prefix(values);
    values
        .values()
        .find(|value| value.name() == wanted || value.name() == format!("{prefix}{wanted}"))
        .map(|value| Value::EnumNumber(value.number()))
        .ok_or_else(|| format!("expects one of {}", enum_names(values).join(", ")))
}

/// `ENTRY_KIND_` for `EntryKind`: the prefix every value's name carries.
pub(crate) fn enum_prefix(values: &EnumDescriptor) -> String {
    format!("{}_", values.name().to_shouty_snake_case())
}

/// An enum's names without their prefix, as the help lists them.
pub(crate) fn enum_names(values: &EnumDescriptor) -> Vec<String> {
    let prefix = enum_prefix(values);
    values
        .values()
        .map(|value| {
            let name = value.name();
            name.strip_prefix(&prefix).unwrap_or(name).to_owned()
        })
        .collect()
}

fn duration(message: &MessageDescriptor, text: &str) -> Result<Value, String> {
    let length = humantime::parse_duration(text)
        .map_err(|e| format!("{e}: give a duration like 30s, 15m or 7days"))?;
    let length = prost_types::Duration::try_from(length).map_err(|e| e.to_string())?;
    transcoded(message, &length)
}

fn timestamp(message: &MessageDescriptor, text: &str) -> Result<Value, String> {
    let time = humantime::parse_rfc3339(text)
        .map_err(|e| format!("{e}: give a UTC time like 2026-12-31T23:59:59Z"))?;
    transcoded(message, &prost_types::Timestamp::from(time))
}

fn transcoded(message: &MessageDescriptor, value: &impl prost::Message) -> Result<Value, String> {
    let mut dynamic = DynamicMessage::new(message.clone());
    dynamic
        .transcode_from(value)
        .map_err(|e| format!("{}: {e}", message.full_name()))?;
    Ok(Value::Message(dynamic))
}

/// `KEY=VALUE`: a map's pair, the key up to the first `=` (the value may hold
/// `=`), each parsed as the map's key and value types.
pub(crate) fn pair(entry: &MessageDescriptor, text: &str) -> Result<(MapKey, Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    let key = match parse(&entry.map_entry_key_field().kind(), key)? {
        Value::String(s) => MapKey::String(s),
        Value::Bool(b) => MapKey::Bool(b),
        Value::I32(n) => MapKey::I32(n),
        Value::I64(n) => MapKey::I64(n),
        Value::U32(n) => MapKey::U32(n),
        Value::U64(n) => MapKey::U64(n),
        other => return Err(format!("{other:?} cannot be a map's key")),
    };
    Ok((key, parse(&entry.map_entry_value_field().kind(), value)?))
}

/// A message as its fields' values in field order, colon-separated, the last
/// taking the rest: `1:2:97:USD:a note: with colons`. Fields left out at the
/// end, or left empty, keep their defaults.
fn listed(message: &MessageDescriptor, text: &str) -> Result<Value, String> {
    let mut listed = DynamicMessage::new(message.clone());
    let parts = text.splitn(message.fields().len().max(1), ':');
    for (field, part) in message.fields().zip(parts) {
        if part.is_empty() {
            continue;
        }
        let value =
            parse(&field.kind(), part).map_err(|e| format!("{}: {part:?}: {e}", field.name()))?;
        listed
            .try_set_field(&field, value)
            .map_err(|e| format!("{}: {e}", field.name()))?;
    }
    Ok(Value::Message(listed))
}

fn json(message: &MessageDescriptor, text: &str) -> Result<Value, String> {
    let mut reader = serde_json::Deserializer::from_str(text);
    DynamicMessage::deserialize(message.clone(), &mut reader)
        .and_then(|parsed| reader.end().map(|()| parsed))
        .map(Value::Message)
        .map_err(|e| format!("not a {} in protobuf JSON: {e}", message.name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::pool;

    /// The type of the contract's first field named `name`: the rules are
    /// the types', whichever request holds one.
    fn kind(name: &str) -> Kind {
        pool()
            .all_messages()
            .find_map(|message| message.get_field_by_name(name))
            .unwrap_or_else(|| panic!("no field {name} in the contract"))
            .kind()
    }

    #[test]
    fn a_leg_reads_its_fields_in_order_the_last_taking_the_rest() {
        let legs = kind("legs");
        let Value::Message(leg) = parse(&legs, "1:2:97:USD").unwrap() else {
            panic!("a message");
        };
        let field = |name: &str| leg.get_field_by_name(name).unwrap().into_owned();
        assert_eq!(field("from_account_id"), Value::U64(1));
        assert_eq!(field("to_account_id"), Value::U64(2));
        assert_eq!(field("amount"), Value::I64(97));
        assert_eq!(field("currency"), Value::String("USD".into()));
        let Value::Message(noted) = parse(&legs, "1:2:3:EUR:a:b").unwrap() else {
            panic!("a message");
        };
        assert_eq!(
            noted.get_field_by_name("description").unwrap().into_owned(),
            Value::String("a:b".into())
        );
        let error = parse(&legs, "1:2:USD").unwrap_err();
        assert!(error.starts_with("amount: \"USD\": "), "{error}");
    }

    #[test]
    fn an_enum_is_read_by_its_name_with_or_without_its_prefix() {
        let kind = kind("kind");
        for text in ["ENTRY_KIND_CHARGE", "CHARGE", "charge"] {
            assert_eq!(parse(&kind, text).unwrap(), Value::EnumNumber(1), "{text}");
        }
        let error = parse(&kind, "DEBIT").unwrap_err();
        assert!(error.contains("CHARGE, CREDIT"), "{error}");
    }

    #[test]
    fn a_duration_a_time_and_a_pair() {
        let Value::Message(ttl) = parse(&kind("ttl"), "10m").unwrap() else {
            panic!("a message");
        };
        let ttl: prost_types::Duration = ttl.transcode_to().unwrap();
        assert_eq!((ttl.seconds, ttl.nanos), (600, 0));
        let as_of = kind("as_of_time");
        assert!(parse(&as_of, "2026-12-31T23:59:59.5Z").is_ok());
        assert!(parse(&as_of, "yesterday").is_err());
        let Kind::Message(entry) = kind("metadata") else {
            panic!("a map");
        };
        assert_eq!(
            pair(&entry, "a=b=c").unwrap(),
            (MapKey::String("a".into()), Value::String("b=c".into()))
        );
        assert!(pair(&entry, "ab").is_err());
    }

    #[test]
    fn numbers_say_what_they_expect() {
        let error = parse(&Kind::Uint64, "-1").unwrap_err();
        assert!(
            error.ends_with("expects a whole number, 0 or more"),
            "{error}"
        );
        assert_eq!(parse(&Kind::Int64, "-5000").unwrap(), Value::I64(-5000));
        assert_eq!(parse(&Kind::Bool, "true").unwrap(), Value::Bool(true));
    }
}
