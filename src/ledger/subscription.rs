//! A subscription (SPEC 3.15): an endpoint told of the entries that match its
//! filter, as its keyed calls see it under its row's lock.
//!
//! What the caller asked for (the url and the filter) is opaque here: the
//! operation encodes it, the book keeps it, the deliverer reads it. The book
//! decides only what changes: the state, and who may see the row.

use super::values::{Namespace, SubscriptionId};

/// Where a subscription is; stored as its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::FromRepr, strum::EnumIter)]
#[repr(u8)]
pub enum SubscriptionState {
    /// Delivered as entries come.
    Active = 1,
    /// Not delivered until resumed; the cursor keeps its place.
    Paused = 2,
    /// Every delivery failed for a day; still retried, hourly.
    Failing = 3,
    /// Never delivered again.
    Deleted = 4,
}

impl SubscriptionState {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Self> {
        Self::from_repr(code)
    }

    /// Its name in the API (`SubscriptionState`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Active => "SUBSCRIPTION_STATE_ACTIVE",
            Self::Paused => "SUBSCRIPTION_STATE_PAUSED",
            Self::Failing => "SUBSCRIPTION_STATE_FAILING",
            Self::Deleted => "SUBSCRIPTION_STATE_DELETED",
        }
    }

    /// Whether an instance delivers it.
    pub fn delivers(self) -> bool {
        matches!(self, Self::Active | Self::Failing)
    }
}

/// A subscription's row, as locked or created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionRow {
    pub id: SubscriptionId,
    /// The namespace of the client that created it; only its calls see it.
    pub namespace: Namespace,
    /// What was asked for, encoded by the operation that created it.
    pub definition: Vec<u8>,
    /// The key its deliveries are signed with.
    pub secret: String,
    pub state: SubscriptionState,
    /// The last sequence acknowledged.
    pub cursor: u64,
    /// Why the last delivery failed; empty once one succeeds.
    pub last_error: String,
}
