//! DeleteSubscription: ends a subscription's deliveries for good; the row is
//! kept, DELETED, so its id and cursor can still be read.

use super::subscription::{StateChange, Target};
use crate::ledger::SubscriptionState;

pub type DeleteSubscription = StateChange<ToDeleted>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToDeleted;

impl Target for ToDeleted {
    const STATE: SubscriptionState = SubscriptionState::Deleted;
}
