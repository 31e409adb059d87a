//! Rows by id and pages of a journal, of an account's open holds and of
//! accounts: one plain read each, with the metadata of what they show.

use super::handle::{Found, HoldPage, Page, Reads};
use crate::call::Call;
use crate::db::tables::holds::OpenAfter;
use crate::db::tables::metadata::{self, Filter};
use crate::db::tables::{accounts, entries, holds};
use crate::error::Error;
use crate::ledger::{Account, AccountId, Entry, EntryId, Hold, HoldId, Metadata};

impl Reads {
    /// Reads an account, with the sum of its active holds.
    pub async fn get_account(&self, call: &Call, id: AccountId) -> Result<Account, Error> {
        let mut conn = self.read_conn(call).await?;
        let mut account = accounts::find(&mut conn, id)
            .await?
            .ok_or(Error::AccountNotFound(id.get()))?;
        if let Some(pairs) = metadata::of_accounts(&mut conn, &[id.get()])
            .await?
            .remove(&id.get())
        {
            account.metadata = pairs;
        }
        Ok(account)
    }

    pub async fn get_entry(&self, call: &Call, id: EntryId) -> Result<Entry, Error> {
        let mut conn = self.read_conn(call).await?;
        entries::find(&mut conn, id)
            .await?
            .ok_or(Error::EntryNotFound(id.get()))
    }

    /// A hold, with the database's clock at the read (its state at that instant is
    /// `Hold::state_at`).
    pub async fn get_hold(
        &self,
        call: &Call,
        id: HoldId,
    ) -> Result<(Hold, chrono::DateTime<chrono::Utc>), Error> {
        let mut conn = self.read_conn(call).await?;
        let (mut hold, now) = holds::find(&mut conn, id)
            .await?
            .ok_or(Error::HoldNotFound(id.get()))?;
        let keys = metadata::distinct_keys(std::iter::once((
            hold.client.as_str(),
            hold.idempotency_key.as_str(),
        )));
        if let Some(pairs) = metadata::of_keys(&mut conn, &keys)
            .await?
            .into_values()
            .next()
        {
            hold.metadata = pairs;
        }
        Ok((hold, now))
    }

    /// Up to `size` entries of the account after its entry numbered `after`. An
    /// unknown account is `AccountNotFound`.
    pub async fn list_entries(
        &self,
        call: &Call,
        account: AccountId,
        after: u64,
        size: u32,
    ) -> Result<Page, Error> {
        let mut conn = self.read_conn(call).await?;
        let mut entries = entries::page(&mut conn, account, after, size.saturating_add(1)).await?;
        if entries.is_empty() && accounts::find(&mut conn, account).await?.is_none() {
            return Err(Error::AccountNotFound(account.get()));
        }
        let more = entries.len() > usize::try_from(size).unwrap_or(usize::MAX);
        entries.truncate(usize::try_from(size).unwrap_or(usize::MAX));
        Ok(Page { entries, more })
    }

    /// Up to `size` of the account's open holds (state HELD, not expired by the
    /// database's clock) after `after`, oldest first. An unknown account is
    /// `AccountNotFound`.
    pub async fn list_holds(
        &self,
        call: &Call,
        account: AccountId,
        after: OpenAfter,
        size: u32,
    ) -> Result<HoldPage, Error> {
        let mut conn = self.read_conn(call).await?;
        let mut holds = holds::open_page(&mut conn, account, after, size.saturating_add(1)).await?;
        if holds.is_empty() && accounts::find(&mut conn, account).await?.is_none() {
            return Err(Error::AccountNotFound(account.get()));
        }
        let more = holds.len() > usize::try_from(size).unwrap_or(usize::MAX);
        holds.truncate(usize::try_from(size).unwrap_or(usize::MAX));
        Ok(HoldPage { holds, more })
    }

    /// The entry that captured a hold; `None` unless it was captured.
    pub async fn capture_of(&self, call: &Call, hold: HoldId) -> Result<Option<EntryId>, Error> {
        let mut conn = self.read_conn(call).await?;
        holds::capture_of(&mut conn, hold).await
    }

    /// SPEC 3.11: up to `size` accounts after `after`, ascending, whose
    /// OpenAccount held every pair (none: every account).
    pub async fn list_accounts(
        &self,
        call: &Call,
        pairs: &Metadata,
        after: u64,
        size: u32,
    ) -> Result<Found<Account>, Error> {
        let mut conn = self.read_conn(call).await?;
        let filter = Filter::choose(&mut conn, pairs).await?;
        let mut items =
            accounts::list(&mut conn, filter.as_ref(), after, size.saturating_add(1)).await?;
        let more = items.len() > usize::try_from(size).unwrap_or(usize::MAX);
        items.truncate(usize::try_from(size).unwrap_or(usize::MAX));
        let ids: Vec<u64> = items.iter().map(|a| a.id.get()).collect();
        let mut found = metadata::of_accounts(&mut conn, &ids).await?;
        for account in &mut items {
            if let Some(pairs) = found.remove(&account.id.get()) {
                account.metadata = pairs;
            }
        }
        Ok(Found { items, more })
    }
}
