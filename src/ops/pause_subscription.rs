//! PauseSubscription: stops delivering a subscription until it is resumed; its
//! cursor keeps its place, so nothing is skipped.

use super::subscription::{StateChange, Target};
use crate::ledger::SubscriptionState;

pub type PauseSubscription = StateChange<ToPaused>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToPaused;

impl Target for ToPaused {
    const STATE: SubscriptionState = SubscriptionState::Paused;
}
