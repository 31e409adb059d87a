//! The API's messages as the pages show them. An amount is shown in its
//! currency's units (`10.00 USD`, `money::format`), with the API's own number,
//! its minor units, beside it for machines (the `value` of the `<data>` element
//! it is drawn as); times are UTC, in RFC 3339 with microseconds, as the ledger
//! records them; enums by their names without the type's prefix (`CHARGE`,
//! `HELD`); every field, when it is 0 too; and each id comes with the address of
//! its page.
//!
//! A key is linked to its page only where the call under it was the viewer's
//! (SPEC 6): the key page looks a key up in the viewer's namespace (as
//! LookupKey does), so another client's key would open the viewer's own call
//! under the same key, a different operation. Another client's row shows its
//! client instead.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::ledger::Namespace;
use crate::proto::{money, pb};

/// An amount as a page shows it: in its currency's units for people, and its
/// minor units, exactly the API's number, for machines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Amount {
    pub(super) minor: i64,
    /// `10.00 USD`; `1000 ABC (minor units)` in a currency without decimals.
    pub(super) shown: String,
}

impl Amount {
    pub(super) fn new(minor: i64, currency: &str) -> Self {
        Self {
            minor,
            shown: money::format(minor, currency),
        }
    }
}

/// A time as the pages show it: `2026-12-03T10:48:00.123456Z`; empty if unset.
pub(super) fn time(at: Option<&prost_types::Timestamp>) -> String {
    at.and_then(|t| DateTime::<Utc>::from_timestamp(t.seconds, u32::try_from(t.nanos).ok()?))
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Micros, true))
        .unwrap_or_default()
}

/// The address of the page at `path` with `query`, its parameters
/// form-urlencoded, those with an empty value left out: the one writer of the
/// console's query strings, which the pages read back with axum's `Query`.
pub(super) fn address(path: &str, query: &[(&str, &str)]) -> String {
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(query.iter().filter(|(_, value)| !value.is_empty()))
        .finish();
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    }
}

/// The address of a key's page.
pub(super) fn key_href(key: &str) -> String {
    address("/keys", &[("key", key)])
}

/// The address of a search by metadata at `path` (`/entries`: SearchEntries;
/// `/accounts`: ListAccounts): each pair as `metadata=KEY:VALUE`, then `more`
/// (an account, a page token).
pub(super) fn search_href<K: AsRef<str>, V: AsRef<str>>(
    path: &str,
    pairs: impl IntoIterator<Item = (K, V)>,
    more: &[(&str, &str)],
) -> String {
    let pairs: Vec<String> = pairs
        .into_iter()
        .map(|(key, value)| format!("{}:{}", key.as_ref(), value.as_ref()))
        .collect();
    let query: Vec<(&str, &str)> = pairs
        .iter()
        .map(|pair| ("metadata", pair.as_str()))
        .chain(more.iter().copied())
        .collect();
    address(path, &query)
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
            href: search_href(path, [(key, value)], &[]),
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// A floor: an amount (0 unless set), or none at all.
pub(super) fn floor(limits: Option<&pb::AccountLimits>) -> Option<i64> {
    match limits {
        Some(l) if l.no_min_balance => None,
        Some(l) => Some(l.min_balance),
        None => Some(0),
    }
}

/// A ceiling: an amount, or none.
pub(super) fn ceiling(limits: Option<&pb::AccountLimits>) -> Option<i64> {
    limits.and_then(|l| l.max_balance)
}

/// An account's limits as a page shows them, each `None` where there is none.
#[derive(Debug, Clone)]
pub(super) struct LimitsView {
    pub(super) floor: Option<Amount>,
    pub(super) ceiling: Option<Amount>,
}

impl LimitsView {
    fn of(limits: Option<&pb::AccountLimits>, currency: &str) -> Self {
        Self {
            floor: floor(limits).map(|f| Amount::new(f, currency)),
            ceiling: ceiling(limits).map(|c| Amount::new(c, currency)),
        }
    }
}

/// An account's figures.
#[derive(Debug, Clone)]
pub(super) struct AccountView {
    pub(super) account_id: u64,
    pub(super) currency: String,
    pub(super) balance: Amount,
    pub(super) held: Amount,
    pub(super) available: Amount,
    pub(super) limits: LimitsView,
    pub(super) created_at: String,
    /// Its OpenAccount's pairs, each linked to the accounts that hold it.
    pub(super) metadata: Vec<PairView>,
}

impl From<&pb::Account> for AccountView {
    fn from(a: &pb::Account) -> Self {
        Self {
            account_id: a.account_id,
            currency: a.currency.clone(),
            balance: Amount::new(a.balance, &a.currency),
            held: Amount::new(a.held, &a.currency),
            available: Amount::new(a.available, &a.currency),
            limits: LimitsView::of(a.limits.as_ref(), &a.currency),
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
    pub(super) amount: Amount,
    pub(super) balance_after: Amount,
    pub(super) idempotency_key: String,
    /// The key's page, when the call was the viewer's.
    pub(super) key_href: Option<String>,
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
    pub(super) limits: Option<LimitsView>,
    /// Its call's pairs, each linked to the entries that hold it.
    pub(super) metadata: Vec<PairView>,
    /// The client that made the call; empty without authentication.
    pub(super) client: String,
}

/// The address of the page of `key`, written by `client`, for `viewer`: none
/// when the call was another client's.
fn own_key_href(key: &str, client: &str, viewer: &Namespace) -> Option<String> {
    (client == viewer.as_str()).then(|| key_href(key))
}

impl EntryView {
    /// An entry as `viewer` sees it.
    pub(super) fn seen_by(e: &pb::Entry, viewer: &Namespace) -> Self {
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
            amount: Amount::new(e.amount, &e.currency),
            balance_after: Amount::new(e.balance_after, &e.currency),
            key_href: own_key_href(&e.idempotency_key, &e.client, viewer),
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
                .map(|l| LimitsView::of(Some(l), &e.currency)),
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
    pub(super) amount: Amount,
    pub(super) state: &'static str,
    pub(super) captured_amount: Amount,
    pub(super) description: String,
    pub(super) idempotency_key: String,
    /// The key's page, when the call was the viewer's.
    pub(super) key_href: Option<String>,
    pub(super) created_at: String,
    pub(super) expires_at: String,
    /// Its PlaceHold's pairs, each linked to the entries that hold it.
    pub(super) metadata: Vec<PairView>,
    /// The client that placed it; empty without authentication.
    pub(super) client: String,
}

impl HoldView {
    /// A hold as `viewer` sees it.
    pub(super) fn seen_by(h: &pb::Hold, viewer: &Namespace) -> Self {
        Self {
            hold_id: h.hold_id,
            account_id: h.account_id,
            amount: Amount::new(h.amount, &h.currency),
            state: short(h.state().as_str_name(), "HOLD_STATE_"),
            captured_amount: Amount::new(h.captured_amount, &h.currency),
            description: h.description.clone(),
            key_href: own_key_href(&h.idempotency_key, &h.client, viewer),
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
    pub(super) balance: Amount,
    pub(super) limits: LimitsView,
    /// The sequence and time of the entry it stood after; 0 and empty before
    /// the account's first.
    pub(super) sequence: u64,
    pub(super) created_at: String,
}

impl From<&pb::Balance> for BalanceView {
    fn from(b: &pb::Balance) -> Self {
        Self {
            account_id: b.account_id,
            balance: Amount::new(b.balance, &b.currency),
            limits: LimitsView::of(b.limits.as_ref(), &b.currency),
            sequence: b.sequence,
            created_at: time(b.created_at.as_ref()),
        }
    }
}

/// An enum value's name without its type's prefix.
pub(super) fn short(name: &'static str, prefix: &str) -> &'static str {
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
            search_href("/entries", [("order_id", "A-1")], &[]),
            "/entries?metadata=order_id%3AA-1"
        );
        assert_eq!(
            search_href("/accounts", [("note", "a&b c:d/é")], &[]),
            "/accounts?metadata=note%3Aa%26b+c%3Ad%2F%C3%A9"
        );
        assert_eq!(
            search_href(
                "/entries",
                [("k", "v")],
                &[("account_id", ""), ("page_token", "t")]
            ),
            "/entries?metadata=k%3Av&page_token=t",
            "empty parameters are left out"
        );
        assert_eq!(search_href("/accounts", [("", ""); 0], &[]), "/accounts");
    }

    #[test]
    fn a_key_is_linked_only_from_the_viewers_own_calls() {
        let entry = |client: &str| pb::Entry {
            idempotency_key: "k".into(),
            client: client.into(),
            ..pb::Entry::default()
        };
        let alice = Namespace::client("alice").unwrap();
        let own = EntryView::seen_by(&entry("alice"), &alice);
        assert_eq!(own.key_href.as_deref(), Some("/keys?key=k"));
        let others = EntryView::seen_by(&entry("bob"), &alice);
        assert_eq!((others.key_href, others.client.as_str()), (None, "bob"));
        let anonymous = Namespace::anonymous();
        assert!(
            EntryView::seen_by(&entry(""), &anonymous)
                .key_href
                .is_some()
        );
        assert!(
            EntryView::seen_by(&entry("bob"), &anonymous)
                .key_href
                .is_none()
        );
        let hold = pb::Hold {
            idempotency_key: "k".into(),
            client: "bob".into(),
            ..pb::Hold::default()
        };
        assert!(HoldView::seen_by(&hold, &alice).key_href.is_none());
    }

    #[test]
    fn limits_read_as_amounts_or_none() {
        let line = pb::AccountLimits {
            min_balance: -5000,
            no_min_balance: false,
            max_balance: Some(250_000),
        };
        let shown = LimitsView::of(Some(&line), "USD");
        assert_eq!(shown.floor, Some(Amount::new(-5000, "USD")));
        assert_eq!(shown.floor.unwrap().shown, "-50.00 USD");
        assert_eq!(shown.ceiling.unwrap().shown, "2500.00 USD");
        let open = pb::AccountLimits {
            no_min_balance: true,
            ..pb::AccountLimits::default()
        };
        let shown = LimitsView::of(Some(&open), "JPY");
        assert_eq!((shown.floor, shown.ceiling), (None, None));
        let opening = LimitsView::of(None, "JPY");
        assert_eq!(opening.floor.map(|f| f.shown).as_deref(), Some("0 JPY"));
    }

    #[test]
    fn an_entrys_amounts_read_in_its_currency_with_its_kind_as_a_word() {
        let entry = pb::Entry {
            kind: pb::EntryKind::TransferOut.into(),
            amount: 1_005,
            currency: "KWD".into(),
            balance_after: 0,
            ..pb::Entry::default()
        };
        let shown = EntryView::seen_by(&entry, &Namespace::anonymous());
        assert_eq!((shown.kind, shown.debit), ("TRANSFER_OUT", true));
        assert_eq!(shown.amount.shown, "1.005 KWD");
        assert_eq!(shown.amount.minor, 1_005);
        assert_eq!(shown.balance_after.shown, "0.000 KWD");
        let hold = pb::Hold {
            state: pb::HoldState::Held.into(),
            amount: 250,
            currency: "ABC".into(),
            ..pb::Hold::default()
        };
        let shown = HoldView::seen_by(&hold, &Namespace::anonymous());
        assert_eq!(shown.state, "HELD");
        assert_eq!(shown.amount.shown, "250 ABC (minor units)");
        assert_eq!(shown.captured_amount.shown, "0 ABC (minor units)");
    }
}
