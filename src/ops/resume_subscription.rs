//! ResumeSubscription: delivers a paused or failing subscription again, from its
//! cursor, at once (a failing one's backoff is forgotten).

use super::subscription::{StateChange, Target};
use crate::ledger::SubscriptionState;

pub type ResumeSubscription = StateChange<ToActive>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToActive;

impl Target for ToActive {
    const STATE: SubscriptionState = SubscriptionState::Active;
}
