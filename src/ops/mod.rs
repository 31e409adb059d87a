//! The keyed operations, one module each, and the registry that wires them in.
//!
//! An operation's module holds everything the service knows about it: its
//! request parsing and validation, the fields its key is bound to
//! (`fingerprint`), the rows it locks (`needs`), its decision against those rows
//! (`decide`, through the [`Book`], with no SQL), its reply message, the entries
//! and hold that reply names (for `ledger audit`), and the effects it leaves
//! (for retention). Its declines are [`Decline`](crate::ledger::Decline)s, which
//! carry their own reason and details.
//!
//! [`operations!`] lists them, one line each, and everything else is generated
//! from that list: the modules, the [`Method`] enum with its stored codes, the
//! tonic handlers (`grpc::service`) and the look-ups by method below. The
//! executor (`db`) sees a call only as a [`Command`] and names no operation.
//!
//! Adding an operation: its messages and RPC in the proto, a module here whose
//! type implements [`Operation`], and its line in [`operations!`].

mod messages;
mod parse;

use prost::Message;

pub use messages::{account_message, entry_message, hold_message, limits_message, timestamp};
pub use parse::{Violations, single};

use crate::ledger::book::Posting;
use crate::ledger::{
    Book, Effect, Entry, EntryKind, FieldViolation, Fingerprint, IdempotencyKey, Metadata, Needs,
    Refusal, fingerprint::Fields,
};
use crate::proto::pb;

/// Every keyed operation: its stored method code (kept with each key row: never
/// renumber or reuse one), its type, and its RPC, which names its module.
/// Expands to `$callback! { code => Type rpc, ... }`.
macro_rules! operations {
    ($callback:ident) => {
        $callback! {
            1 => OpenAccount open_account,
            2 => Credit credit,
            3 => Charge charge,
            4 => Transfer transfer,
            5 => Refund refund,
            6 => PlaceHold place_hold,
            7 => CaptureHold capture_hold,
            8 => VoidHold void_hold,
            9 => Post post,
            10 => SetLimits set_limits,
            11 => Reverse reverse,
        }
    };
}
pub(crate) use operations;

/// The modules, the `Method` enum, and the look-ups by method.
macro_rules! registry {
    ($($code:literal => $op:ident $rpc:ident,)*) => {
        $(
            mod $rpc;
            pub use $rpc::$op;

            impl Registered for $op {
                const METHOD: Method = Method::$op;
            }
        )*

        /// The keyed RPCs. The discriminant is stored with each key row, so a key
        /// used for one method can never replay as another.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash,
            strum::FromRepr, strum::EnumIter, strum::IntoStaticStr,
        )]
        #[repr(u8)]
        pub enum Method {
            $($op = $code,)*
        }

        impl Method {
            /// What a successful call leaves behind.
            pub fn effects(self) -> &'static [Effect] {
                match self {
                    $(Self::$op => <$op as Operation>::EFFECTS,)*
                }
            }

            /// The kinds of the entries a successful call writes, in order, as a
            /// regular expression over their codes joined by commas.
            pub fn entries_pattern(self) -> String {
                match self {
                    $(Self::$op => <$op as Operation>::entries_pattern(),)*
                }
            }

            /// What a stored reply of this method names, or why it is unsound.
            pub fn named(self, reply: &[u8]) -> Result<Named, String> {
                match self {
                    $(Self::$op => named::<$op>(reply),)*
                }
            }
        }
    };
}

operations!(registry);

impl Method {
    /// The RPC's name in the `ledger.v1.Ledger` service.
    pub fn name(self) -> &'static str {
        self.into()
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Self> {
        Self::from_repr(code)
    }

    /// The entries a successful call writes to the journal, in order.
    pub fn entry_kinds(self) -> impl Iterator<Item = EntryKind> {
        self.effects().iter().filter_map(|effect| match effect {
            Effect::Entry(kind) => Some(*kind),
            _ => None,
        })
    }

    /// The method whose calls leave `effect`, unless several do.
    pub fn leaving(effect: Effect) -> Option<Self> {
        Self::leaving_other_than(effect, None)
    }

    /// [`Method::leaving`], of the methods other than `except` (an effect known
    /// not to be its).
    pub fn leaving_other_than(effect: Effect, except: impl Into<Option<Self>>) -> Option<Self> {
        use strum::IntoEnumIterator as _;
        let except = except.into();
        let mut leaving = Self::iter()
            .filter(|method| Some(*method) != except && method.effects().contains(&effect));
        match (leaving.next(), leaving.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    }
}

/// Ties an operation to its [`Method`]; generated by the registry.
pub trait Registered {
    const METHOD: Method;
}

/// A keyed operation: one validated request, and everything it means.
pub trait Operation: Registered + std::fmt::Debug + Send + Sync + Sized + 'static {
    /// Its RPC's request and reply messages.
    type Request: Message + Default;
    type Reply: Message + Default;
    /// What a success decides, before it becomes the reply.
    type Output;

    /// What a success leaves behind, each carrying the call's key: the journal
    /// entries it writes, in order, and the rows it creates or resolves.
    const EFFECTS: &'static [Effect];

    /// Whether its entries repeat, in the order of `EFFECTS`, once per leg of the
    /// request (a post's legs), rather than once.
    const PER_LEG: bool = false;

    /// The key and the validated operation, or every invalid field (SPEC 3.2
    /// step 1: nothing touches the database before this).
    fn parse(request: Self::Request) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>>;

    /// Feeds the request's fields other than the key to the fingerprint, in a
    /// fixed order (stored fingerprints outlive releases: never reorder).
    fn fingerprint(&self, fields: &mut Fields);

    /// The rows the decision reads; the executor locks them first.
    fn needs(&self) -> Needs;

    /// The outcome, decided against the locked rows. Every change goes through the
    /// book, which undoes a refused call's changes.
    fn decide(&self, book: &mut Book) -> Result<Self::Output, Refusal>;

    /// The call's metadata, stored on what it writes (none by default).
    fn metadata(&self) -> &Metadata {
        Metadata::none()
    }

    /// The reply message of a success.
    fn reply(output: &Self::Output) -> Self::Reply;

    /// The entries and the hold a stored reply names, for `ledger audit`; an
    /// error where the reply lacks what every reply of this method has.
    fn named(reply: Self::Reply) -> Result<Named, String>;

    /// The kinds of the entries a success writes, in order, as a regular
    /// expression over their codes joined by commas (`ledger audit`): the
    /// entries of `EFFECTS` once, or once for each of one or more legs.
    fn entries_pattern() -> String {
        let once = Self::EFFECTS
            .iter()
            .filter_map(|effect| match effect {
                Effect::Entry(kind) => Some(kind.code().to_string()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(",");
        if Self::PER_LEG {
            format!("^{once}(,{once})*$")
        } else {
            format!("^{once}$")
        }
    }
}

/// A validated keyed request as the executor sees it, whatever its operation.
pub trait Keyed: std::fmt::Debug + Send + Sync {
    fn method(&self) -> Method;

    /// The fingerprint its key is bound to (SPEC 3.1).
    fn fingerprint(&self) -> Fingerprint;

    /// The rows its decision reads.
    fn needs(&self) -> Needs;

    /// The metadata stored on what a success writes.
    fn metadata(&self) -> &Metadata;

    /// Decides against the book; a success comes back as its encoded reply.
    fn decide(&self, book: &mut Book) -> Result<Vec<u8>, Refusal>;
}

impl<O: Operation> Keyed for O {
    fn method(&self) -> Method {
        O::METHOD
    }

    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::new(O::METHOD.name(), |fields| {
            Operation::fingerprint(self, fields);
        })
    }

    fn needs(&self) -> Needs {
        Operation::needs(self)
    }

    fn metadata(&self) -> &Metadata {
        Operation::metadata(self)
    }

    fn decide(&self, book: &mut Book) -> Result<Vec<u8>, Refusal> {
        Operation::decide(self, book).map(|output| O::reply(&output).encode_to_vec())
    }
}

/// A keyed call's operation.
pub type Command = Box<dyn Keyed>;

/// What a stored reply names.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Named {
    /// Its entries, in the order the method writes them.
    pub entries: Vec<pb::Entry>,
    pub hold: Option<pb::Hold>,
}

impl Named {
    /// The entries of a reply; a missing one is reported as a mismatch with what
    /// its key wrote.
    pub fn entries<const N: usize>(entries: [Option<pb::Entry>; N]) -> Self {
        Self {
            entries: entries.into_iter().map(Option::unwrap_or_default).collect(),
            hold: None,
        }
    }

    /// A hold every reply of the method has.
    pub fn hold(hold: Option<pb::Hold>) -> Result<Self, String> {
        Ok(Self {
            hold: Some(hold.ok_or_else(lacks_a_field)?),
            ..Self::default()
        })
    }
}

pub(crate) fn lacks_a_field() -> String {
    "the stored reply lacks a field".to_owned()
}

fn named<O: Operation>(body: &[u8]) -> Result<Named, String> {
    let reply =
        O::Reply::decode(body).map_err(|e| format!("the stored reply does not decode: {e}"))?;
    O::named(reply)
}

/// The fields of a request that moves an amount on one account (Credit, Charge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountAmount {
    pub account_id: crate::ledger::AccountId,
    pub amount: crate::ledger::Amount,
    pub currency: crate::ledger::Currency,
    pub description: crate::ledger::Description,
    pub metadata: Metadata,
}

impl AccountAmount {
    fn parse(
        key: String,
        account_id: u64,
        amount: i64,
        currency: &str,
        description: String,
        metadata: std::collections::BTreeMap<String, String>,
    ) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        use crate::ledger::{AccountId, Amount, Currency, Description};
        let mut check = Violations::default();
        let key = check.key(key);
        let account_id = check.field(AccountId::parse("account_id", account_id));
        let amount = check.field(Amount::parse("amount", amount));
        let currency = check.field(Currency::parse("currency", currency));
        let description = check.field(Description::parse("description", description));
        let metadata = check.metadata(metadata);
        let (
            Some(key),
            Some(account_id),
            Some(amount),
            Some(currency),
            Some(description),
            Some(metadata),
        ) = (key, account_id, amount, currency, description, metadata)
        else {
            return Err(check.into_violations());
        };
        let fields = Self {
            account_id,
            amount,
            currency,
            description,
            metadata,
        };
        Ok((key, fields))
    }

    /// Its account, and the one entry it writes.
    fn needs(&self) -> Needs {
        Needs {
            accounts: vec![self.account_id],
            creates: crate::ledger::book::RowCounts {
                entries: 1,
                ..Default::default()
            },
            ..Needs::default()
        }
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.account_id.get());
        fields.i64(self.amount.get());
        fields.str(self.currency.as_str());
        fields.str(self.description.as_str());
        self.metadata.fingerprint(fields);
    }

    /// The one entry of `kind` on its account, in the account's currency and
    /// within its limits.
    fn post(&self, book: &mut Book, kind: EntryKind) -> Result<Entry, Refusal> {
        book.account_in(self.account_id, self.currency)?;
        let posting = Posting::new(self.account_id, kind, self.amount, self.description.clone());
        book.post(posting)
    }
}

#[cfg(test)]
mod registry_tests {
    use strum::IntoEnumIterator as _;

    use super::*;

    #[test]
    fn stored_codes_round_trip_and_every_entry_kind_has_its_writer() {
        for m in Method::iter() {
            assert_eq!(Method::from_code(m.code()), Some(m));
        }
        assert_eq!(Method::from_code(0), None);
        assert_eq!(Method::CaptureHold.name(), "CaptureHold");
        for kind in EntryKind::iter() {
            assert!(
                Method::iter().any(|m| m.entry_kinds().any(|k| k == kind)),
                "{kind:?}"
            );
        }
        assert_eq!(
            Method::leaving(Effect::Entry(EntryKind::Credit)),
            Some(Method::Credit)
        );
        // Charges and reversals both write charges, transfers, posts and
        // reversals transfer entries: none is named.
        assert_eq!(Method::leaving(Effect::Entry(EntryKind::Charge)), None);
        assert_eq!(Method::leaving(Effect::Entry(EntryKind::TransferOut)), None);
        assert_eq!(
            Method::leaving(Effect::ResolvedHold(crate::ledger::HoldState::Voided)),
            Some(Method::VoidHold)
        );
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A book over accounts and rows made up for a test.

    use chrono::{DateTime, TimeZone as _, Utc};

    use crate::ledger::book::{AccountRow, Book, EntryRow, NewIds};
    use crate::ledger::model::{Account, Hold};
    use crate::ledger::values::{
        AccountId, Amount, Currency, Description, EntryId, HoldId, IdempotencyKey,
    };

    pub(crate) fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0)
            .single()
            .unwrap_or_default()
    }

    pub(crate) fn account(id: u64, balance: i64, held: i64) -> AccountRow {
        AccountRow {
            account: Account {
                id: AccountId::parse("a", id).unwrap(),
                currency: usd(),
                balance,
                held,
                limits: crate::ledger::Limits::default(),
                metadata: crate::ledger::Metadata::NONE,
                created_at: now(),
            },
            entry_count: 0,
            held_total: held,
        }
    }

    pub(crate) fn usd() -> Currency {
        Currency::parse("c", "USD").unwrap()
    }

    pub(crate) fn amount(n: i64) -> Amount {
        Amount::parse("a", n).unwrap()
    }

    pub(crate) fn id(n: u64) -> AccountId {
        AccountId::parse("a", n).unwrap()
    }

    pub(crate) fn key(k: &str) -> IdempotencyKey {
        IdempotencyKey::parse("k", k.into()).unwrap()
    }

    pub(crate) fn ids() -> NewIds {
        NewIds {
            accounts: (900..910)
                .map(|n| AccountId::parse("a", n).unwrap())
                .collect(),
            entries: (100..110)
                .map(|n| EntryId::parse("e", n).unwrap())
                .collect(),
            holds: (500..510).map(|n| HoldId::parse("h", n).unwrap()).collect(),
        }
    }

    pub(crate) fn book(
        accounts: Vec<AccountRow>,
        entries: Vec<EntryRow>,
        holds: Vec<Hold>,
    ) -> Book {
        Book::new(now(), accounts, entries, holds, ids())
    }

    pub(crate) fn description() -> Description {
        Description::default()
    }
}
