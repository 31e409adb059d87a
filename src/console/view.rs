//! The API's messages as the pages show them. Numbers are the API's own (amounts
//! in minor units, beside their currency); times are UTC, in RFC 3339 with
//! microseconds, as the ledger records them; enums by their names without the
//! type's prefix (`CHARGE`); and each id comes with the address of its page.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::proto::pb;

/// A time as the pages show it: `2026-12-03T10:48:00.123456Z`; empty if unset.
pub(super) fn time(at: Option<&prost_types::Timestamp>) -> String {
    at.and_then(|t| DateTime::<Utc>::from_timestamp(t.seconds, u32::try_from(t.nanos).ok()?))
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Micros, true))
        .unwrap_or_default()
}

/// The address of a key's page.
pub(super) fn key_href(key: &str) -> String {
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("key", key)
        .finish();
    format!("/keys?{query}")
}

/// The address of a search by one metadata pair: `/entries` (SearchEntries) or
/// `/accounts` (ListAccounts), `?metadata=KEY:VALUE` form-urlencoded.
pub(super) fn search_href(path: &str, pairs: &[(&str, &str)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        query.append_pair("metadata", &format!("{key}:{value}"));
    }
    format!("{path}?{}", query.finish())
}

/// A metadata pair, with the address of the search for it.
#[derive(Debug, Clone)]
pub(super) struct PairView {
    pub(super) key: String,
    pub(super) value: String,
    pub(super) href: String,
}

/// A message's metadata, sorted by key (the map is a `BTreeMap`), each pair
/// linked to the search at `path` for it.
pub(super) fn pairs(metadata: &BTreeMap<String, String>, path: &str) -> Vec<PairView> {
    metadata
        .iter()
        .map(|(key, value)| PairView {
            href: search_href(path, &[(key, value)]),
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// A floor as people read it: a number, or `none`.
fn floor(limits: Option<&pb::AccountLimits>) -> String {
    match limits {
        Some(l) if l.no_min_balance => "none".to_owned(),
        Some(l) => l.min_balance.to_string(),
        None => "0".to_owned(),
    }
}

/// A ceiling as people read it: a number, or `none`.
fn ceiling(limits: Option<&pb::AccountLimits>) -> String {
    limits
        .and_then(|l| l.max_balance)
        .map_or_else(|| "none".to_owned(), |c| c.to_string())
}

/// An account's figures.
#[derive(Debug, Clone)]
pub(super) struct AccountView {
    pub(super) account_id: u64,
    pub(super) currency: String,
    pub(super) balance: i64,
    pub(super) held: i64,
    pub(super) available: i64,
    pub(super) floor: String,
    pub(super) ceiling: String,
    pub(super) created_at: String,
    /// Its OpenAccount's pairs, each linked to the accounts that hold it.
    pub(super) metadata: Vec<PairView>,
}

impl From<&pb::Account> for AccountView {
    fn from(a: &pb::Account) -> Self {
        Self {
            account_id: a.account_id,
            currency: a.currency.clone(),
            balance: a.balance,
            held: a.held,
            available: a.available,
            floor: floor(a.limits.as_ref()),
            ceiling: ceiling(a.limits.as_ref()),
            created_at: time(a.created_at.as_ref()),
            metadata: pairs(&a.metadata, "/accounts"),
        }
    }
}

/// A journal entry: its figures, and the ids it names (`None` where it names
/// none).
#[derive(Debug, Clone)]
pub(super) struct EntryView {
    pub(super) entry_id: u64,
    pub(super) account_id: u64,
    pub(super) kind: &'static str,
    /// Whether it takes money from the account (CHARGE, TRANSFER_OUT, CAPTURE).
    pub(super) debit: bool,
    pub(super) amount: i64,
    pub(super) currency: String,
    pub(super) balance_after: i64,
    pub(super) idempotency_key: String,
    pub(super) key_href: String,
    pub(super) description: String,
    pub(super) created_at: String,
    /// 0 before the change stream numbered it.
    pub(super) sequence: u64,
    pub(super) leg: u32,
    pub(super) counterparty: Option<u64>,
    pub(super) refunded_entry: Option<u64>,
    /// The entry a reversal entry mirrors.
    pub(super) reversed_entry: Option<u64>,
    pub(super) hold: Option<u64>,
    /// A LIMITS entry's new limits.
    pub(super) limits: Option<(String, String)>,
    /// Its call's pairs, each linked to the entries that hold it.
    pub(super) metadata: Vec<PairView>,
    /// The client that made the call; empty without authentication.
    pub(super) client: String,
}

impl From<&pb::Entry> for EntryView {
    fn from(e: &pb::Entry) -> Self {
        let kind = e.kind();
        let some = |id: u64| (id != 0).then_some(id);
        Self {
            entry_id: e.entry_id,
            account_id: e.account_id,
            kind: short(kind.as_str_name(), "ENTRY_KIND_"),
            debit: matches!(
                kind,
                pb::EntryKind::Charge | pb::EntryKind::TransferOut | pb::EntryKind::Capture
            ),
            amount: e.amount,
            currency: e.currency.clone(),
            balance_after: e.balance_after,
            key_href: key_href(&e.idempotency_key),
            idempotency_key: e.idempotency_key.clone(),
            description: e.description.clone(),
            created_at: time(e.created_at.as_ref()),
            sequence: e.sequence,
            leg: e.leg,
            counterparty: some(e.counterparty_account_id),
            refunded_entry: some(e.refunded_entry_id),
            reversed_entry: some(e.reverses_entry_id),
            hold: some(e.hold_id),
            limits: e
                .limits
                .as_ref()
                .map(|l| (floor(Some(l)), ceiling(Some(l)))),
            metadata: pairs(&e.metadata, "/entries"),
            client: e.client.clone(),
        }
    }
}

/// A hold's figures.
#[derive(Debug, Clone)]
pub(super) struct HoldView {
    pub(super) hold_id: u64,
    pub(super) account_id: u64,
    pub(super) amount: i64,
    pub(super) currency: String,
    pub(super) state: &'static str,
    pub(super) captured_amount: i64,
    pub(super) description: String,
    pub(super) idempotency_key: String,
    pub(super) key_href: String,
    pub(super) created_at: String,
    pub(super) expires_at: String,
    /// Its PlaceHold's pairs, each linked to the entries that hold it.
    pub(super) metadata: Vec<PairView>,
    /// The client that placed it; empty without authentication.
    pub(super) client: String,
}

impl From<&pb::Hold> for HoldView {
    fn from(h: &pb::Hold) -> Self {
        Self {
            hold_id: h.hold_id,
            account_id: h.account_id,
            amount: h.amount,
            currency: h.currency.clone(),
            state: short(h.state().as_str_name(), "HOLD_STATE_"),
            captured_amount: h.captured_amount,
            description: h.description.clone(),
            key_href: key_href(&h.idempotency_key),
            idempotency_key: h.idempotency_key.clone(),
            created_at: time(h.created_at.as_ref()),
            expires_at: time(h.expires_at.as_ref()),
            metadata: pairs(&h.metadata, "/entries"),
            client: h.client.clone(),
        }
    }
}

/// A balance at a point (GetBalance).
#[derive(Debug, Clone)]
pub(super) struct BalanceView {
    pub(super) account_id: u64,
    pub(super) currency: String,
    pub(super) balance: i64,
    pub(super) floor: String,
    pub(super) ceiling: String,
    /// The sequence and time of the entry it stood after; 0 and empty before
    /// the account's first.
    pub(super) sequence: u64,
    pub(super) created_at: String,
}

impl From<&pb::Balance> for BalanceView {
    fn from(b: &pb::Balance) -> Self {
        Self {
            account_id: b.account_id,
            currency: b.currency.clone(),
            balance: b.balance,
            floor: floor(b.limits.as_ref()),
            ceiling: ceiling(b.limits.as_ref()),
            sequence: b.sequence,
            created_at: time(b.created_at.as_ref()),
        }
    }
}

/// An enum value's name without its type's prefix.
fn short(name: &'static str, prefix: &str) -> &'static str {
    name.strip_prefix(prefix).unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_with_microseconds() {
        let at = prost_types::Timestamp {
            seconds: 1_796_000_000,
            nanos: 123_456_000,
        };
        assert_eq!(time(Some(&at)), "2026-11-30T00:53:20.123456Z");
        assert_eq!(time(None), "");
    }

    #[test]
    fn keys_are_linked_with_their_characters_escaped() {
        assert_eq!(key_href("req-42"), "/keys?key=req-42");
        assert_eq!(key_href("a&b=c/d%"), "/keys?key=a%26b%3Dc%2Fd%25");
    }

    #[test]
    fn a_pair_links_to_its_search_with_its_characters_escaped() {
        assert_eq!(
            search_href("/entries", &[("order_id", "A-1")]),
            "/entries?metadata=order_id%3AA-1"
        );
        assert_eq!(
            search_href("/accounts", &[("note", "a&b c:d/é")]),
            "/accounts?metadata=note%3Aa%26b+c%3Ad%2F%C3%A9"
        );
    }

    #[test]
    fn limits_read_as_numbers_or_none() {
        let line = pb::AccountLimits {
            min_balance: -5000,
            no_min_balance: false,
            max_balance: Some(250_000),
        };
        assert_eq!(
            (floor(Some(&line)), ceiling(Some(&line))),
            ("-5000".into(), "250000".into())
        );
        let open = pb::AccountLimits {
            no_min_balance: true,
            ..pb::AccountLimits::default()
        };
        assert_eq!(
            (floor(Some(&open)), ceiling(Some(&open))),
            ("none".into(), "none".into())
        );
    }
}
