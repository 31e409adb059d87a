//! What the deliverer of subscriptions (`crate::deliver`) asks of the database:
//! the leases of the subscriptions it delivers, the entries after a cursor, and
//! each cursor's move or failure, on the read pool (autocommit statements).

use crate::db::conn::pool::Pool;
use crate::db::tables::{entries, subscriptions};
use crate::error::Error;
use crate::ledger::{Entry, SubscriptionId};

pub use crate::db::tables::subscriptions::Leased;

/// The deliverer's statements, over one pool.
#[derive(Debug, Clone)]
pub struct Deliveries {
    pool: Pool,
}

impl Deliveries {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }

    async fn conn(&self) -> Result<crate::db::conn::pool::Pooled<'_>, Error> {
        self.pool
            .get()
            .await
            .map_err(|e| Error::unavailable(format!("no connection for deliveries: {e}")))
    }

    /// The highest sequence assigned: every entry up to it is numbered.
    pub async fn head(&self) -> Result<u64, Error> {
        entries::highest_sequence(&mut *self.conn().await?).await
    }

    /// Takes or renews `owner`'s leases for `for_ms`; every subscription it holds.
    pub async fn take_leases(&self, owner: &str, for_ms: u64) -> Result<Vec<Leased>, Error> {
        subscriptions::take_leases(&mut *self.conn().await?, owner, for_ms).await
    }

    /// Gives `owner`'s leases back.
    pub async fn release_leases(&self, owner: &str) -> Result<(), Error> {
        subscriptions::release_leases(&mut *self.conn().await?, owner).await
    }

    /// Up to `limit` numbered entries after `after`, through `through`, in
    /// sequence order, with their calls' metadata.
    pub async fn entries(&self, after: u64, through: u64, limit: u32) -> Result<Vec<Entry>, Error> {
        entries::numbered(&mut *self.conn().await?, after, through, limit).await
    }

    /// Moves the cursor while `owner` holds the lease; false if it does not.
    pub async fn advance(
        &self,
        id: SubscriptionId,
        owner: &str,
        through: u64,
    ) -> Result<bool, Error> {
        subscriptions::advance(&mut *self.conn().await?, id, owner, through).await
    }

    /// Whether `owner` may deliver the subscription now (see
    /// `subscriptions::may_deliver`).
    pub async fn may_deliver(&self, id: SubscriptionId, owner: &str) -> Result<bool, Error> {
        subscriptions::may_deliver(&mut *self.conn().await?, id, owner).await
    }

    /// Records a failed delivery (see `subscriptions::record_failure`).
    pub async fn record_failure(
        &self,
        id: SubscriptionId,
        owner: &str,
        error: &str,
        retry_in_ms: u64,
        failing_after_s: u64,
    ) -> Result<(), Error> {
        subscriptions::record_failure(
            &mut *self.conn().await?,
            id,
            owner,
            error,
            retry_in_ms,
            failing_after_s,
        )
        .await
    }
}
