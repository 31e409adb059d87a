//! Subscriptions as GetSubscription and ListSubscriptions read them: only the
//! caller's namespace's.

use super::handle::Reads;
use crate::call::Call;
use crate::db::tables::subscriptions;
use crate::error::Error;
use crate::ledger::{Namespace, SubscriptionId, SubscriptionRow};

impl Reads {
    /// A subscription of `namespace`; another's, or none, is not found.
    pub async fn get_subscription(
        &self,
        call: &Call,
        namespace: &Namespace,
        id: SubscriptionId,
    ) -> Result<SubscriptionRow, Error> {
        let mut conn = self.read_conn(call).await?;
        subscriptions::find(&mut conn, namespace, id)
            .await?
            .ok_or(Error::SubscriptionNotFound(id.get()))
    }

    /// Up to `size` subscriptions of `namespace` with ids above `after`, in id
    /// order, and whether more follow.
    pub async fn list_subscriptions(
        &self,
        call: &Call,
        namespace: &Namespace,
        after: u64,
        size: u32,
    ) -> Result<(Vec<SubscriptionRow>, bool), Error> {
        let mut conn = self.read_conn(call).await?;
        let mut rows =
            subscriptions::page(&mut conn, namespace, after, size.saturating_add(1)).await?;
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        let more = rows.len() > size;
        rows.truncate(size);
        Ok((rows, more))
    }
}
