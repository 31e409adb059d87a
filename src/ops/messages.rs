//! The domain's nouns as the wire's messages: the one place an account, an entry
//! or a hold becomes protobuf, for replies and reads alike.

use chrono::{DateTime, Utc};

use crate::ledger::{
    Account, AccountId, Entry, EntryId, EntryKind, Hold, HoldId, HoldState, Limits, Metadata,
};
use crate::proto::pb;

pub fn account_message(account: &Account) -> pb::Account {
    pb::Account {
        account_id: account.id.get(),
        currency: account.currency.to_string(),
        balance: account.balance,
        created_at: Some(timestamp(account.created_at)),
        held: account.held,
        available: account.available(),
        limits: Some(limits_message(account.limits)),
        metadata: metadata_message(&account.metadata),
    }
}

fn metadata_message(metadata: &Metadata) -> std::collections::BTreeMap<String, String> {
    metadata
        .pairs()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

pub fn limits_message(limits: Limits) -> pb::AccountLimits {
    let (min_balance, no_min_balance, max_balance) = limits.raw();
    pb::AccountLimits {
        min_balance,
        no_min_balance,
        max_balance,
    }
}

pub fn entry_message(entry: &Entry) -> pb::Entry {
    pb::Entry {
        entry_id: entry.id.get(),
        account_id: entry.account_id.get(),
        kind: entry_kind(entry.kind).into(),
        amount: entry.amount,
        currency: entry.currency.to_string(),
        balance_after: entry.balance_after,
        idempotency_key: entry.idempotency_key.as_str().to_owned(),
        description: entry.description.as_str().to_owned(),
        created_at: Some(timestamp(entry.created_at)),
        counterparty_account_id: entry.counterparty.map_or(0, AccountId::get),
        refunded_entry_id: entry.refunded_entry.map_or(0, EntryId::get),
        hold_id: entry.hold.map_or(0, HoldId::get),
        leg: u32::from(entry.leg),
        sequence: entry.sequence.unwrap_or(0),
        limits: entry.limits.map(limits_message),
        metadata: metadata_message(&entry.metadata),
        client: entry.client.as_str().to_owned(),
        reverses_entry_id: entry.reverses.map_or(0, EntryId::get),
    }
}

fn entry_kind(kind: EntryKind) -> pb::EntryKind {
    match kind {
        EntryKind::Charge => pb::EntryKind::Charge,
        EntryKind::Credit => pb::EntryKind::Credit,
        EntryKind::TransferOut => pb::EntryKind::TransferOut,
        EntryKind::TransferIn => pb::EntryKind::TransferIn,
        EntryKind::Refund => pb::EntryKind::Refund,
        EntryKind::Capture => pb::EntryKind::Capture,
        EntryKind::Limits => pb::EntryKind::Limits,
    }
}

/// A hold as the wire shows it in `state` (its state at the instant it is shown).
pub fn hold_message(hold: &Hold, state: HoldState) -> pb::Hold {
    pb::Hold {
        hold_id: hold.id.get(),
        account_id: hold.account_id.get(),
        amount: hold.amount.get(),
        currency: hold.currency.to_string(),
        state: hold_state(state).into(),
        captured_amount: hold.captured_amount,
        description: hold.description.as_str().to_owned(),
        idempotency_key: hold.idempotency_key.as_str().to_owned(),
        created_at: Some(timestamp(hold.created_at)),
        expires_at: Some(timestamp(hold.expires_at)),
        metadata: metadata_message(&hold.metadata),
        client: hold.client.as_str().to_owned(),
    }
}

fn hold_state(state: HoldState) -> pb::HoldState {
    match state {
        HoldState::Held => pb::HoldState::Held,
        HoldState::Captured => pb::HoldState::Captured,
        HoldState::Voided => pb::HoldState::Voided,
        HoldState::Expired => pb::HoldState::Expired,
    }
}

pub fn timestamp(at: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.timestamp(),
        // Always below 10^9, so it fits.
        nanos: i32::try_from(at.timestamp_subsec_nanos()).unwrap_or(0),
    }
}
