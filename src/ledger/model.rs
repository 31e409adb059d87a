//! The ledger's nouns: accounts, journal entries, holds, and the effects calls
//! leave.
//!
//! Every code that is stored (an entry kind, a hold state; a method is
//! `ops::Method`) is the discriminant of its enum, and reaches SQL only through
//! these enums.

use chrono::{DateTime, Utc};

use super::limits::Limits;
use super::metadata::Metadata;
use super::values::{
    AccountId, Amount, Currency, Description, EntryId, HoldId, IdempotencyKey, Namespace,
};

/// Something a successful call leaves behind, carrying the call's key under a
/// unique index (SPEC 3.5): how a key whose row retention purged is still known
/// to have taken effect. Operations declare theirs (`ops::Operation::EFFECTS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// A journal entry of this kind.
    Entry(EntryKind),
    /// A hold it placed.
    PlacedHold,
    /// A hold it resolved, into this state.
    ResolvedHold(HoldState),
    /// An account it opened.
    OpenedAccount,
    /// A subscription it created.
    CreatedSubscription,
}

impl Effect {
    /// Whether this effect carried its key from the ledger's first schema on. The
    /// others gained theirs with the `effect-keys` migration, and the key rows of
    /// calls whose effects were all made before it are their only record.
    pub fn always_keyed(self) -> bool {
        matches!(
            self,
            Self::Entry(_) | Self::PlacedHold | Self::CreatedSubscription
        )
    }
}

/// The kind of a journal entry, and the direction it moves money.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::FromRepr, strum::EnumIter)]
#[repr(u8)]
pub enum EntryKind {
    Charge = 1,
    Credit = 2,
    TransferOut = 3,
    TransferIn = 4,
    Refund = 5,
    Capture = 6,
    /// A change of the account's limits: moves no money (amount 0).
    Limits = 7,
}

impl EntryKind {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Self> {
        Self::from_repr(code)
    }

    /// Whether the entry takes money from its account (else it adds).
    pub fn takes(self) -> bool {
        matches!(self, Self::Charge | Self::TransferOut | Self::Capture)
    }

    /// The entry's effect on its account's balance.
    pub fn signed(self, amount: i64) -> i64 {
        if self.takes() { -amount } else { amount }
    }

    /// Whether money leaves or enters the ledger as a whole (transfers move it
    /// between accounts).
    pub fn crosses_the_ledger(self) -> bool {
        !matches!(self, Self::TransferOut | Self::TransferIn)
    }

    /// Whether the entry moves money (a LIMITS entry records a change of
    /// limits, of amount 0).
    pub fn moves_money(self) -> bool {
        self != Self::Limits
    }

    /// Entries a Refund may refer to.
    pub fn refundable(self) -> bool {
        matches!(self, Self::Charge | Self::Capture)
    }
}

/// Where a hold is in its life. `Expired` is never the state of a row that could
/// still be captured: a hold whose `expires_at` has passed is expired from that
/// instant, whatever its stored state says (see [`Hold::state_at`]).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::FromRepr, strum::EnumIter, strum::IntoStaticStr,
)]
#[repr(u8)]
pub enum HoldState {
    #[strum(serialize = "HOLD_STATE_HELD")]
    Held = 1,
    #[strum(serialize = "HOLD_STATE_CAPTURED")]
    Captured = 2,
    #[strum(serialize = "HOLD_STATE_VOIDED")]
    Voided = 3,
    #[strum(serialize = "HOLD_STATE_EXPIRED")]
    Expired = 4,
}

impl HoldState {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Self> {
        Self::from_repr(code)
    }

    /// The wire name, e.g. `HOLD_STATE_CAPTURED`.
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// Where a balance is asked for (SPEC 3.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BalancePoint {
    /// The account as it is, after its last entry.
    Now,
    /// After the account's last entry with a sequence up to this one.
    Sequence(u64),
    /// After the account's last entry created at or before this time.
    Time(DateTime<Utc>),
}

/// An account's balance and limits after one of its entries (none: before its
/// first, at zero with its opening limits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balance {
    pub account_id: AccountId,
    pub currency: Currency,
    pub balance: i64,
    pub limits: Limits,
    /// The entry's sequence and time.
    pub after: Option<(u64, DateTime<Utc>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub id: AccountId,
    pub currency: Currency,
    /// Below zero only where its floor allows.
    pub balance: i64,
    /// The sum of the account's active holds.
    pub held: i64,
    pub limits: Limits,
    /// Its OpenAccount's metadata, where the read shows it.
    pub metadata: Metadata,
    pub created_at: DateTime<Utc>,
}

impl Account {
    /// The balance less what active holds have reserved: what a debit may take,
    /// down to the floor. Every change the book makes keeps it within `i64`
    /// (`Book`), and what expired holds release only raises it.
    pub fn available(&self) -> i64 {
        self.balance.saturating_sub(self.held)
    }
}

/// One row of the append-only journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: EntryId,
    pub account_id: AccountId,
    pub kind: EntryKind,
    /// Positive; 0 on a LIMITS entry.
    pub amount: i64,
    pub currency: Currency,
    pub balance_after: i64,
    pub idempotency_key: IdempotencyKey,
    /// The client that made the call: its key's namespace.
    pub client: Namespace,
    /// The call's metadata.
    pub metadata: Metadata,
    pub description: Description,
    pub created_at: DateTime<Utc>,
    /// Transfers: the other account.
    pub counterparty: Option<AccountId>,
    /// Refunds: the entry refunded.
    pub refunded_entry: Option<EntryId>,
    /// Captures: the hold captured.
    pub hold: Option<HoldId>,
    /// Posts: the index of the leg that wrote it; 0 otherwise.
    pub leg: u16,
    /// LIMITS entries: the limits set.
    pub limits: Option<Limits>,
    /// Reversal entries: the original entry on the same account it mirrors.
    pub reverses: Option<EntryId>,
    /// Its place in the ledger-wide change stream (SPEC 3.8), once assigned: an
    /// entry gets one after it commits, so a keyed call's own reply has none.
    pub sequence: Option<u64>,
}

/// Money reserved on an account until it is captured, voided, or expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub id: HoldId,
    pub account_id: AccountId,
    pub amount: Amount,
    pub currency: Currency,
    /// As stored; [`Hold::state_at`] is the state at a given instant.
    pub state: HoldState,
    /// What a capture took; 0 unless captured.
    pub captured_amount: i64,
    pub description: Description,
    pub idempotency_key: IdempotencyKey,
    /// The client that placed it: its key's namespace.
    pub client: Namespace,
    /// Its PlaceHold's metadata, where the read shows it.
    pub metadata: Metadata,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

impl Hold {
    /// The state at `now`: a held hold is expired from the instant `expires_at`
    /// passes, before anything has marked it so.
    pub fn state_at(&self, now: DateTime<Utc>) -> HoldState {
        match self.state {
            HoldState::Held if now >= self.expires_at => HoldState::Expired,
            state => state,
        }
    }

    /// Whether the hold reserves its amount at `now`.
    pub fn reserves_at(&self, now: DateTime<Utc>) -> bool {
        self.state_at(now) == HoldState::Held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator as _;

    #[test]
    fn stored_codes_round_trip() {
        for k in EntryKind::iter() {
            assert_eq!(EntryKind::from_code(k.code()), Some(k));
        }
        for s in HoldState::iter() {
            assert_eq!(HoldState::from_code(s.code()), Some(s));
        }
        assert_eq!(HoldState::Captured.name(), "HOLD_STATE_CAPTURED");
    }

    #[test]
    fn transfers_net_to_zero_and_only_charges_and_captures_are_refundable() {
        assert_eq!(
            EntryKind::TransferOut.signed(5) + EntryKind::TransferIn.signed(5),
            0
        );
        let refundable: Vec<_> = EntryKind::iter().filter(|k| k.refundable()).collect();
        assert_eq!(refundable, [EntryKind::Charge, EntryKind::Capture]);
    }
}
