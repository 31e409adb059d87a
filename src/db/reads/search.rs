//! SPEC 3.11: entries by metadata, in sequence order, reading their own writes.

use super::handle::{Found, Reads};
use super::numbering::{NUMBERED_POLL, Numbering};
use crate::call::Call;
use crate::db::tables::metadata::Filter;
use crate::db::tables::{accounts, entries};
use crate::error::Error;
use crate::ledger::{AccountId, Entry, Metadata};

impl Reads {
    /// SPEC 3.11: up to `size` entries whose calls hold every pair (one to
    /// four), of `account` if given, numbered after `after`, in sequence order.
    /// Reads its own writes: it first waits until every commit it can see is
    /// numbered ([`Reads::until_numbered`]) and indexed ([`Reads::indexed`]),
    /// and every entry whose call was answered, by any instance, before it
    /// began is among them.
    pub async fn search_entries(
        &self,
        call: &Call,
        pairs: &Metadata,
        account: Option<AccountId>,
        after: u64,
        size: u32,
    ) -> Result<Found<Entry>, Error> {
        if let Some(id) = account
            && accounts::find(&mut *self.read_conn(call).await?, id)
                .await?
                .is_none()
        {
            return Err(Error::AccountNotFound(id.get()));
        }
        self.until_numbered(call).await?;
        let through = self.indexed(call).await?;
        let mut conn = self.read_conn(call).await?;
        let Some(filter) = Filter::choose(&mut conn, pairs).await? else {
            return Err(Error::internal("a search without a pair"));
        };
        let mut items = entries::search(
            &mut conn,
            &filter,
            account,
            after,
            through,
            size.saturating_add(1),
        )
        .await?;
        let more = items.len() > usize::try_from(size).unwrap_or(usize::MAX);
        items.truncate(usize::try_from(size).unwrap_or(usize::MAX));
        Ok(Found { items, more })
    }

    /// The highest sequence the search index holds with every lower one, once
    /// it holds every sequence assigned when this began: the round that numbers
    /// a commit indexes it, but after rounds of an older version the index
    /// catches up a round or a few later ([`Numbering`] bounds the wait).
    async fn indexed(&self, call: &Call) -> Result<u64, Error> {
        let highest = entries::highest_sequence(&mut *self.read_conn(call).await?).await?;
        let mut numbering = Numbering::new(call);
        let mut seen = 0;
        loop {
            let mut conn = self.read_conn(call).await?;
            let indexed = entries::indexed_sequence(&mut conn).await?;
            if indexed >= highest {
                return Ok(indexed);
            }
            if indexed > seen {
                seen = indexed;
                numbering.closer();
            }
            numbering.still_waiting(&mut conn).await?;
            drop(conn);
            tokio::time::sleep(NUMBERED_POLL).await;
        }
    }
}
