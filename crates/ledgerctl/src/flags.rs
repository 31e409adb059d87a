//! A request's fields as a subcommand's flags (SPEC 5), and the flags given
//! back as the request. Both walk the request's descriptor with [`shape`], so
//! every field has its flag and every flag its field:
//!
//! - a field is `--` its name in kebab-case; a repeated one names one
//!   occurrence (`legs` is `--leg`, `account_ids` `--account-id`) and is given
//!   once per value, in order; its plural is an alias;
//! - `idempotency_key` is `--idempotency-key`, `--key` for short;
//! - a bool is a switch; a map is `--metadata KEY=VALUE`, once per pair;
//! - a singular message (not a duration or a time) is flattened: its fields are
//!   flags of their own, named as its fields (`--min-balance` of `limits`), or
//!   `--limits-min-balance` where that name is taken. It is always sent, empty
//!   when none of its flags is given: an empty message is proto3's
//!   all-defaults, which the contract reads as absent where the field may be
//!   absent, and needs where it is required (SetLimits' `limits`);
//! - the fields of one `oneof` exclude each other;
//! - an amount of money (`money`) is two flags: `--amount 10.00`, in its
//!   currency's units, and `--amount-minor 1000`; one of them, and for a
//!   request's own amount exactly one. A request with amounts but no currency
//!   takes a `--currency` of ledgerctl's own, not sent, to read them in;
//! - no other flag is required: proto3 has none, and a field the call needs and
//!   lacks is the service's `INVALID_ARGUMENT`, naming the field.
//!
//! Values are read by `values`; help comes from the proto's comments.

use std::collections::HashSet;
use std::ffi::OsStr;

use clap::builder::{PossibleValue, TypedValueParser};
use clap::{Arg, ArgAction, ArgGroup, ArgMatches};
use heck::ToKebabCase as _;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage as _, Value,
};

use crate::contract::{self, KEY_FIELD};
use crate::money::{self, CURRENCY};
use crate::values;

/// The id of an amount's flag in minor units: its field's path and this.
const MINOR: &str = "~minor";
/// The id of `--currency` where the request has no currency of its own.
const OWN_CURRENCY: &str = "~currency";

/// The help of a keyed call's key: what ledgerctl does without it.
const KEY_HELP: &str = "The operation's idempotency key; without it one is made and printed \
                        before the first attempt: retry with it, never with a new one.";

/// How a field is given on the command line.
enum Shape {
    /// A switch: given, the field is true.
    Switch,
    /// One value.
    One,
    /// A value per occurrence, in order.
    Many,
    /// `KEY=VALUE` per occurrence.
    Pairs,
    /// Its message's fields, each a flag of its own.
    Flattened(MessageDescriptor),
}

/// How `field` is given, within the messages `outer` flattened around it (a
/// message that holds itself is given as protobuf JSON instead of without
/// end).
fn shape(field: &FieldDescriptor, outer: &[MessageDescriptor]) -> Shape {
    let kind = field.kind();
    match kind {
        _ if field.is_map() => Shape::Pairs,
        _ if field.is_list() => Shape::Many,
        Kind::Bool => Shape::Switch,
        Kind::Message(message) if !values::is_value(&field.kind()) && !outer.contains(&message) => {
            Shape::Flattened(message)
        }
        _ => Shape::One,
    }
}

/// A subcommand's flags and the groups of its oneofs.
#[derive(Debug, Default)]
pub(crate) struct Flags {
    pub(crate) args: Vec<Arg>,
    pub(crate) groups: Vec<ArgGroup>,
}

/// Builds [`Flags`]: the names taken so far, and where it is in the request.
struct Builder {
    taken: HashSet<String>,
    keyed: bool,
    flags: Flags,
    outer: Vec<MessageDescriptor>,
}

/// The flags of `request`'s fields; `reserved`: the names the command line
/// has already (the global flags'). `keyed`: the key is the call's own, made
/// when not given.
pub(crate) fn flags(
    request: &MessageDescriptor,
    keyed: bool,
    reserved: &HashSet<String>,
) -> Result<Flags, String> {
    let mut taken = reserved.clone();
    // The request's own fields keep their names; a flattened message's fields
    // give way to them.
    for field in request.fields() {
        if matches!(
            shape(&field, std::slice::from_ref(request)),
            Shape::Flattened(_)
        ) {
            continue;
        }
        let mut all = names(&field);
        if is_amount(&field, std::slice::from_ref(request)) {
            all.push(format!("{}-minor", field.name().to_kebab_case()));
        }
        for name in all {
            if !taken.insert(name.clone()) {
                return Err(format!(
                    "{}: --{name} is taken by another flag",
                    field.full_name()
                ));
            }
        }
    }
    let mut builder = Builder {
        taken,
        keyed,
        flags: Flags::default(),
        outer: vec![request.clone()],
    };
    builder.message(request, &[])?;
    if has_amounts(request, &mut vec![request.clone()]) && !money::names_currency(request) {
        if !builder.taken.insert(CURRENCY.to_owned()) {
            return Err(format!("{}: --{CURRENCY} is taken", request.full_name()));
        }
        builder.flags.args.push(
            Arg::new(OWN_CURRENCY)
                .long(CURRENCY)
                .value_name("CURRENCY")
                .help(
                    "The currency to read the amounts in (2.50 of USD): that of what the \
                     call names. Not sent: the request has no currency, and the service \
                     uses its own.",
                ),
        );
    }
    Ok(builder.flags)
}

/// Whether `field` is an amount given on one flag (an amount of a repeated
/// message, `--leg 1:2:97:USD`, is written in minor units).
fn is_amount(field: &FieldDescriptor, outer: &[MessageDescriptor]) -> bool {
    money::is_money(field) && matches!(shape(field, outer), Shape::One)
}

/// Whether any of `message`'s flags is an amount.
fn has_amounts(message: &MessageDescriptor, outer: &mut Vec<MessageDescriptor>) -> bool {
    message.fields().any(|field| match shape(&field, outer) {
        Shape::Flattened(inner) => {
            outer.push(inner.clone());
            let found = has_amounts(&inner, outer);
            outer.pop();
            found
        }
        _ => is_amount(&field, outer),
    })
}

/// A top-level field's flag and its aliases: `--leg` and `--legs`, `--key`.
fn names(field: &FieldDescriptor) -> Vec<String> {
    let name = field.name().to_kebab_case();
    let mut names = vec![];
    if field.is_list() {
        names.push(singular(&name));
    }
    if !names.contains(&name) {
        names.push(name);
    }
    if field.name() == KEY_FIELD {
        names.push("key".into());
    }
    names
}

/// One occurrence of a repeated field: `legs` is `leg`, `entries` `entry`.
fn singular(name: &str) -> String {
    match (name.strip_suffix("ies"), name.strip_suffix('s')) {
        (Some(stem), _) => format!("{stem}y"),
        (None, Some(stem)) if !stem.ends_with('s') => stem.to_owned(),
        _ => name.to_owned(),
    }
}

/// A flag's id: the field's path in the request, `limits.min_balance`.
fn id(path: &[&str]) -> String {
    path.join(".")
}

impl Builder {
    fn message(&mut self, message: &MessageDescriptor, path: &[&str]) -> Result<(), String> {
        for field in message.fields() {
            let mut at = path.to_vec();
            at.push(field.name());
            if let Shape::Flattened(inner) = shape(&field, &self.outer) {
                self.outer.push(inner.clone());
                self.message(&inner, &at)?;
                self.outer.pop();
                continue;
            }
            if is_amount(&field, &self.outer) {
                self.amount(&field, &at)?;
                continue;
            }
            let arg = self.arg(&field, &at)?;
            self.flags.args.push(arg);
        }
        for oneof in message.oneofs().filter(|oneof| !oneof.is_synthetic()) {
            let members: Vec<String> = oneof
                .fields()
                .filter(|field| !matches!(shape(field, &self.outer), Shape::Flattened(_)))
                .map(|field| id(&[path, &[field.name()]].concat()))
                .collect();
            let name = format!("oneof {}", id(&[path, &[oneof.name()]].concat()));
            self.flags
                .groups
                .push(ArgGroup::new(name).args(members).multiple(false));
        }
        Ok(())
    }

    fn arg(&mut self, field: &FieldDescriptor, path: &[&str]) -> Result<Arg, String> {
        let mut names = if path.len() == 1 {
            names(field)
        } else {
            vec![self.nested_name(field, path)?]
        };
        let long = names.remove(0);
        let mut arg = Arg::new(id(path)).long(long);
        for alias in names {
            arg = if alias == "key" {
                arg.visible_alias(alias)
            } else {
                arg.alias(alias)
            };
        }
        let key = self.keyed && path == [KEY_FIELD];
        let arg = help(arg, field, key);
        Ok(match shape(field, &self.outer) {
            Shape::Switch => arg.action(ArgAction::SetTrue),
            Shape::Pairs => arg
                .action(ArgAction::Append)
                .value_name("KEY=VALUE")
                .value_parser(pair_parser(field)),
            Shape::Many => valued(arg.action(ArgAction::Append), field),
            Shape::One if key => arg
                .action(ArgAction::Set)
                .value_name(KEY_FIELD.to_uppercase())
                .value_parser(non_empty),
            Shape::One | Shape::Flattened(_) => valued(arg.action(ArgAction::Set), field),
        })
    }

    /// An amount's two flags, in its currency's units and in minor units: at
    /// most one of them, exactly one for an amount of the request's own.
    fn amount(&mut self, field: &FieldDescriptor, path: &[&str]) -> Result<(), String> {
        let long = if path.len() == 1 {
            field.name().to_kebab_case()
        } else {
            self.nested_name(field, path)?
        };
        let minor_long = format!("{long}-minor");
        if path.len() > 1 && !self.taken.insert(minor_long.clone()) {
            return Err(format!("{}: --{minor_long} is taken", field.full_name()));
        }
        // The field's comment speaks of the wire (minor units): it follows
        // as what the field is.
        let comment = contract::comment(&field.parent_file(), field.path()).unwrap_or_default();
        let units_help = format!(
            "In its currency's units, with exactly the currency's decimals: 10.00 of USD, \
             1000 of JPY, 1.000 of KWD. Or --{minor_long}."
        );
        let minor_help = format!("The same in minor units: 1000 for 10.00 USD. Or --{long}.");
        let with_comment = |help: &str, comment: &str| {
            if comment.is_empty() {
                help.to_owned()
            } else {
                format!("{help} The field: {comment}")
            }
        };
        let summary = contract::summary(&comment);
        let units_id = id(path);
        let minor_id = format!("{units_id}{MINOR}");
        let units = Arg::new(units_id.clone())
            .long(long.clone())
            .value_name("AMOUNT")
            .allow_negative_numbers(true)
            .help(with_comment(&units_help, summary))
            .long_help(with_comment(&units_help, &comment));
        let minor = Arg::new(minor_id.clone())
            .long(minor_long)
            .value_name("MINOR_UNITS")
            .allow_negative_numbers(true)
            .value_parser(Parser(field.kind()))
            .help(with_comment(&minor_help, summary))
            .long_help(with_comment(&minor_help, &comment));
        let required = path.len() == 1 && !field.supports_presence();
        self.flags.args.extend([units, minor]);
        self.flags.groups.push(
            ArgGroup::new(format!("amount {units_id}"))
                .args([units_id, minor_id])
                .multiple(false)
                .required(required),
        );
        Ok(())
    }

    /// A flattened field's flag: its own name, or its path's where that is
    /// taken.
    fn nested_name(&mut self, field: &FieldDescriptor, path: &[&str]) -> Result<String, String> {
        let own = field.name().to_kebab_case();
        let qualified = path.join("_").to_kebab_case();
        [own, qualified]
            .into_iter()
            .find(|name| self.taken.insert(name.clone()))
            .ok_or_else(|| format!("{}: every name for it is taken", field.full_name()))
    }
}

/// The field's comment as help (its first sentence; all of it with
/// `--help`), with what its form adds.
fn help(arg: Arg, field: &FieldDescriptor, key: bool) -> Arg {
    let comment = if key {
        Some(KEY_HELP.to_owned())
    } else {
        contract::comment(&field.parent_file(), field.path())
    }
    .unwrap_or_default();
    let form = values::form(&field.kind());
    let hint = match (shape(field, &[]), &form) {
        (Shape::Pairs, _) => {
            Some("KEY=VALUE, once per pair (a key given twice keeps its last value).".to_owned())
        }
        (Shape::Many, values::Form::Listed(message)) => Some(format!(
            "Once per {}, in order: {}{}",
            message.name(),
            values::LISTED,
            if message.fields().any(|field| money::is_money(&field)) {
                " Amounts in minor units."
            } else {
                ""
            }
        )),
        (Shape::Many, values::Form::Json(message)) => Some(format!(
            "Once per {}, in order, as protobuf JSON.",
            message.name()
        )),
        (Shape::Many, _) => Some(
            ["Once per value, in order.".to_owned()]
                .into_iter()
                .chain(form.hint())
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => form.hint(),
    };
    let with_hint = |text: &str| match &hint {
        Some(hint) => format!("{text} {hint}").trim().to_owned(),
        None => text.to_owned(),
    };
    let summary = contract::summary(&comment);
    let arg = arg.help(with_hint(summary));
    if summary == comment {
        arg
    } else {
        arg.long_help(with_hint(&comment))
    }
}

/// A flag that takes a value of the field's type.
fn valued(arg: Arg, field: &FieldDescriptor) -> Arg {
    let kind = field.kind();
    let value_name = values::form(&kind).value_name();
    // A negative number is a number, also for an unsigned field: refused by
    // its parser, which says what the field expects, not taken for a flag.
    let numeric = !matches!(
        kind,
        Kind::Bool | Kind::String | Kind::Bytes | Kind::Message(_) | Kind::Enum(_)
    );
    arg.value_name(value_name.unwrap_or_else(|| field.name().to_uppercase()))
        .allow_negative_numbers(numeric)
        .value_parser(Parser(kind))
}

/// A keyed call's key, when given, is not empty: an empty one (`--key
/// "$UNSET"`) is refused rather than replaced by a new key, which would
/// execute the operation again.
fn non_empty(text: &str) -> Result<Value, String> {
    if text.is_empty() {
        return Err("an empty key: leave the flag out to have one made".into());
    }
    Ok(Value::String(text.to_owned()))
}

fn pair_parser(
    field: &FieldDescriptor,
) -> impl Fn(&str) -> Result<(MapKey, Value), String> + Clone + Send + Sync + 'static {
    let entry = match field.kind() {
        Kind::Message(entry) => Some(entry),
        _ => None,
    };
    move |text: &str| match &entry {
        Some(entry) => values::pair(entry, text),
        None => Err("not a map".into()),
    }
}

/// A value of one kind, read by `values`; an enum's names are its possible
/// values (for the help and the shell's completion).
#[derive(Clone)]
struct Parser(Kind);

impl TypedValueParser for Parser {
    type Value = Value;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> Result<Value, clap::Error> {
        let kind = self.0.clone();
        (move |text: &str| values::parse(&kind, text)).parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        let Kind::Enum(values) = &self.0 else {
            return None;
        };
        Some(Box::new(
            values::enum_names(values)
                .into_iter()
                .map(PossibleValue::new),
        ))
    }
}

/// The request the flags in `matches` give, as [`flags`] made them.
pub(crate) fn request(
    request: &MessageDescriptor,
    matches: &ArgMatches,
) -> Result<DynamicMessage, String> {
    let mut message = DynamicMessage::new(request.clone());
    fill(&mut message, matches, &[], &mut vec![request.clone()])?;
    Ok(message)
}

fn fill(
    message: &mut DynamicMessage,
    matches: &ArgMatches,
    path: &[&str],
    outer: &mut Vec<MessageDescriptor>,
) -> Result<(), String> {
    let descriptor = message.descriptor();
    for field in descriptor.fields() {
        let at = [path, &[field.name()]].concat();
        let id = id(&at);
        let error = |e: clap::parser::MatchesError| format!("{id}: {e}");
        let value = match shape(&field, outer) {
            Shape::One if money::is_money(&field) => amount(matches, &field, &at, outer)?,
            Shape::Switch => matches
                .try_get_one::<bool>(&id)
                .map_err(error)?
                .filter(|on| **on)
                .map(|_| Value::Bool(true)),
            Shape::One => matches.try_get_one::<Value>(&id).map_err(error)?.cloned(),
            Shape::Many => matches
                .try_get_many::<Value>(&id)
                .map_err(error)?
                .map(|values| Value::List(values.cloned().collect())),
            Shape::Pairs => matches
                .try_get_many::<(MapKey, Value)>(&id)
                .map_err(error)?
                .map(|pairs| Value::Map(pairs.cloned().collect())),
            Shape::Flattened(inner) => {
                let mut flattened = DynamicMessage::new(inner.clone());
                outer.push(inner);
                fill(&mut flattened, matches, &at, outer)?;
                outer.pop();
                Some(Value::Message(flattened))
            }
        };
        if let Some(value) = value {
            message
                .try_set_field(&field, value)
                .map_err(|e| format!("{id}: {e}"))?;
        }
    }
    Ok(())
}

/// An amount from whichever of its two flags was given; in its currency's
/// units, read in the currency of the nearest message on its path that names
/// one, or of `--currency` where none does.
fn amount(
    matches: &ArgMatches,
    field: &FieldDescriptor,
    path: &[&str],
    outer: &[MessageDescriptor],
) -> Result<Option<Value>, String> {
    let units_id = id(path);
    let minor_id = format!("{units_id}{MINOR}");
    if let Some(minor) = matches
        .try_get_one::<Value>(&minor_id)
        .map_err(|e| format!("{minor_id}: {e}"))?
    {
        return Ok(Some(minor.clone()));
    }
    let Some(text) = matches
        .try_get_one::<String>(&units_id)
        .map_err(|e| format!("{units_id}: {e}"))?
    else {
        return Ok(None);
    };
    let long = field.name().to_kebab_case();
    let currency = currency_given(matches, path, outer)?;
    let minor = money::parse(&long, text, currency.as_deref())?;
    Ok(Some(match field.kind() {
        Kind::Sint64 | Kind::Sfixed64 | Kind::Int64 => Value::I64(minor),
        other => return Err(format!("{units_id}: {other:?} is not an amount")),
    }))
}

/// The currency given for the amount at `path`: the flag of the nearest
/// message on the path that has a currency, else `--currency`.
fn currency_given(
    matches: &ArgMatches,
    path: &[&str],
    outer: &[MessageDescriptor],
) -> Result<Option<String>, String> {
    for depth in (0..outer.len()).rev() {
        let names = outer.get(depth).is_some_and(money::names_currency);
        let prefix = path.get(..depth).unwrap_or_default();
        if names {
            let currency_id = id(&[prefix, &[CURRENCY]].concat());
            return Ok(matches
                .try_get_one::<Value>(&currency_id)
                .map_err(|e| format!("{currency_id}: {e}"))?
                .and_then(|value| value.as_str().map(str::to_owned)));
        }
    }
    Ok(matches
        .try_get_one::<String>(OWN_CURRENCY)
        .map_err(|e| format!("{OWN_CURRENCY}: {e}"))?
        .cloned())
}

#[cfg(test)]
mod tests {
    use super::singular;

    #[test]
    fn a_repeated_fields_flag_names_one_occurrence() {
        for (plural, one) in [
            ("legs", "leg"),
            ("account-ids", "account-id"),
            ("entries", "entry"),
            ("address", "address"),
            ("metadata", "metadata"),
        ] {
            assert_eq!(singular(plural), one);
        }
    }
}
