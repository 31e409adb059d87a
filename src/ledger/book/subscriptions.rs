//! Subscriptions as the calls see them: created, and their states changed, only
//! within the caller's namespace.

use super::calls::{Book, Undo, take};
use crate::ledger::decline::{Decline, Refusal};
use crate::ledger::subscription::{SubscriptionRow, SubscriptionState};
use crate::ledger::values::SubscriptionId;

impl Book {
    /// The book with the subscriptions the calls name, as locked, and the highest
    /// sequence assigned when one of them needs it.
    #[must_use]
    pub fn with_subscriptions(
        mut self,
        rows: impl IntoIterator<Item = SubscriptionRow>,
        stream_head: Option<u64>,
    ) -> Self {
        self.subscriptions = rows.into_iter().map(|row| (row.id, row)).collect();
        self.locked_subscriptions = self.subscriptions.clone();
        self.stream_head = stream_head;
        self
    }

    /// The subscription, if it is the caller's: another namespace's is not
    /// found, as an unknown one is.
    pub fn subscription(&self, id: SubscriptionId) -> Result<&SubscriptionRow, Refusal> {
        let namespace = self.caller()?.key.namespace;
        self.subscriptions
            .get(&id)
            .filter(|row| row.namespace == namespace)
            .ok_or_else(|| Decline::subscription_not_found(id).into())
    }

    /// The highest sequence the change stream had assigned when the rows were
    /// locked (the call declared `Needs::stream_head`).
    pub fn stream_head(&self) -> Result<u64, Refusal> {
        self.stream_head
            .ok_or_else(|| Refusal::Internal("the stream's head was not read".into()))
    }

    /// Creates a subscription in the caller's namespace with the next reserved
    /// id, active, its cursor at `cursor`.
    pub fn create_subscription(
        &mut self,
        definition: Vec<u8>,
        secret: String,
        cursor: u64,
    ) -> Result<SubscriptionRow, Refusal> {
        let call = self.current()?;
        let namespace = self.caller()?.key.namespace;
        let id = take(&mut self.ids.subscriptions, "subscription")?;
        let row = SubscriptionRow {
            id,
            namespace,
            definition,
            secret,
            state: SubscriptionState::Active,
            cursor,
            last_error: String::new(),
        };
        self.subscriptions.insert(id, row.clone());
        self.new_subscriptions.push((call, id));
        self.log(Undo::NewSubscription);
        Ok(row)
    }

    /// Moves the caller's subscription to `state`; a resumed one's last error
    /// is cleared, so it is retried at once.
    pub fn set_subscription_state(
        &mut self,
        id: SubscriptionId,
        state: SubscriptionState,
    ) -> Result<SubscriptionRow, Refusal> {
        let before = self.subscription(id)?.clone();
        let mut after = before.clone();
        after.state = state;
        if state == SubscriptionState::Active {
            after.last_error.clear();
        }
        self.subscriptions.insert(id, after.clone());
        self.log(Undo::Subscription(id, before));
        Ok(after)
    }
}
