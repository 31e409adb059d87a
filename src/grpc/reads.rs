//! The read RPCs, once, for the two front doors that serve them: the gRPC service
//! (`service`) and the console (`crate::console`). Each read takes its request
//! message and answers its reply message, through the same parsing, the same
//! page tokens and the same [`Reads`] of the database, so a page and an RPC
//! cannot differ; [`Admission`] applies the same grants, limit of concurrent
//! calls and memory budget to both.

use prost::Message as _;
use tonic::Code;

use super::admission::Admission;
use super::auth::Client;
use super::deadline::answer;
use super::pages::{Listing, PageTokens};
use super::request;
use crate::call::Call;
use crate::db::{Entries, OpenAfter, Reads};
use crate::error::Error;
use crate::ledger::{EntryId, HoldId, HoldState, ScopedKey};
use crate::ops::{Method, account_message, entry_message, hold_message, limits_message, timestamp};
use crate::proto::pb;

/// The reads, with what they share: the database's reads, the page tokens, and
/// the admission of calls.
#[derive(Debug, Clone)]
pub struct Reader {
    db: Reads,
    pages: PageTokens,
    admission: Admission,
}

impl Reader {
    pub fn new(db: Reads, pages: PageTokens, admission: Admission) -> Self {
        Self {
            db,
            pages,
            admission,
        }
    }

    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Runs `work` as one call of `client` to `methods`: admitted, and answered
    /// by the call's deadline (DEADLINE_EXCEEDED when it passes first).
    pub async fn serve<T, F>(
        &self,
        client: &Client,
        methods: &[&'static str],
        call: Call,
        work: impl FnOnce(Call) -> F,
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        self.admission.admit(client, methods, &call).await?;
        answer(&call, work(call.clone())).await
    }

    pub async fn get_account(
        &self,
        request: pb::GetAccountRequest,
        call: &Call,
    ) -> Result<pb::Account, Error> {
        let id = request::account_id(request)?;
        Ok(account_message(&self.db.get_account(call, id).await?))
    }

    pub async fn get_entry(
        &self,
        request: pb::GetEntryRequest,
        call: &Call,
    ) -> Result<pb::Entry, Error> {
        let id = request::entry_id(request)?;
        Ok(entry_message(&self.db.get_entry(call, id).await?))
    }

    pub async fn get_hold(
        &self,
        request: pb::GetHoldRequest,
        call: &Call,
    ) -> Result<pb::Hold, Error> {
        let id = request::hold_id(request)?;
        let (hold, now) = self.db.get_hold(call, id).await?;
        Ok(hold_message(&hold, hold.state_at(now)))
    }

    pub async fn list_entries(
        &self,
        request: pb::ListEntriesRequest,
        call: &Call,
    ) -> Result<pb::ListEntriesReply, Error> {
        let (account, size) = request::page(request.account_id, request.page_size)?;
        let [after] = self
            .pages
            .read(Listing::Entries, account, &request.page_token)?
            .unwrap_or_default();
        let page = self.db.list_entries(call, account, after, size).await?;
        let next_page_token = match page.entries.last() {
            Some((last, _)) if page.more => self.pages.issue(Listing::Entries, account, [*last]),
            _ => String::new(),
        };
        Ok(pb::ListEntriesReply {
            entries: page.entries.iter().map(|(_, e)| entry_message(e)).collect(),
            next_page_token,
        })
    }

    pub async fn list_holds(
        &self,
        request: pb::ListHoldsRequest,
        call: &Call,
    ) -> Result<pb::ListHoldsReply, Error> {
        let (account, size) = request::page(request.account_id, request.page_size)?;
        let after = self
            .pages
            .read(Listing::Holds, account, &request.page_token)?
            .map(|[created_micros, hold_id]| OpenAfter {
                created_micros,
                hold_id,
            })
            .unwrap_or_default();
        let page = self.db.list_holds(call, account, after, size).await?;
        let next_page_token = match page.holds.last() {
            Some(last) if page.more => {
                let created_micros = u64::try_from(last.created_at.timestamp_micros())
                    .map_err(|_| Error::internal("a hold placed before 1970"))?;
                let cursor = [created_micros, last.id.get()];
                self.pages.issue(Listing::Holds, account, cursor)
            }
            _ => String::new(),
        };
        Ok(pb::ListHoldsReply {
            holds: page
                .holds
                .iter()
                .map(|h| hold_message(h, HoldState::Held))
                .collect(),
            next_page_token,
        })
    }

    /// SPEC 3.11: entries by metadata, in sequence order, reading its own writes.
    pub async fn search_entries(
        &self,
        request: pb::SearchEntriesRequest,
        call: &Call,
    ) -> Result<pb::SearchEntriesReply, Error> {
        let token = request.page_token.clone();
        let query = request::search_entries(request)?;
        let scope = query.scope("SearchEntries");
        let after = self.pages.read_query(&scope, &token)?;
        let found = self
            .db
            .search_entries(call, &query.pairs, query.account, after, query.size)
            .await?;
        let next_page_token = match found.items.last().and_then(|e| e.sequence) {
            Some(last) if found.more => self.pages.issue_query(&scope, last),
            _ => String::new(),
        };
        Ok(pb::SearchEntriesReply {
            entries: found.items.iter().map(entry_message).collect(),
            next_page_token,
        })
    }

    /// SPEC 3.10: an account's balance and limits at a point.
    pub async fn get_balance(
        &self,
        request: pb::GetBalanceRequest,
        call: &Call,
    ) -> Result<pb::Balance, Error> {
        let (account, point) = request::get_balance(&request)?;
        let balance = self.db.get_balance(call, account, point).await?;
        Ok(pb::Balance {
            account_id: balance.account_id.get(),
            currency: balance.currency.as_str().to_owned(),
            balance: balance.balance,
            limits: Some(limits_message(balance.limits)),
            sequence: balance.after.map_or(0, |(sequence, _)| sequence),
            created_at: balance.after.map(|(_, at)| timestamp(at)),
        })
    }

    /// SPEC 3.11: accounts by metadata (all without a pair), by id.
    pub async fn list_accounts(
        &self,
        request: pb::ListAccountsRequest,
        call: &Call,
    ) -> Result<pb::ListAccountsReply, Error> {
        let token = request.page_token.clone();
        let query = request::list_accounts(request)?;
        let scope = query.scope("ListAccounts");
        let after = self.pages.read_query(&scope, &token)?;
        let found = self
            .db
            .list_accounts(call, &query.pairs, after, query.size)
            .await?;
        let next_page_token = match found.items.last() {
            Some(last) if found.more => self.pages.issue_query(&scope, last.id.get()),
            _ => String::new(),
        };
        Ok(pb::ListAccountsReply {
            accounts: found.items.iter().map(account_message).collect(),
            next_page_token,
        })
    }

    /// The stored outcome under a key in `client`'s namespace (SPEC 3.7).
    pub async fn lookup_key(
        &self,
        request: pb::LookupKeyRequest,
        client: &Client,
        call: &Call,
    ) -> Result<pb::KeyRecord, Error> {
        let scoped = ScopedKey {
            namespace: client.namespace.clone(),
            key: request::lookup_key(request)?,
        };
        let row = self
            .db
            .look_up_key(call, &scoped)
            .await?
            .ok_or(Error::KeyNotFound)?;
        let method = Method::from_code(row.method)
            .ok_or_else(|| Error::internal(format!("unknown method {}", row.method)))?;
        let stored = row
            .outcome()
            .ok_or_else(|| Error::internal("a committed key row has no outcome"))?;
        let outcome = if stored.code == Code::Ok as i32 {
            pb::key_record::Outcome::Reply(stored.body)
        } else {
            let status = tonic_types::pb::Status::decode(stored.body.as_slice())
                .map_err(|e| Error::internal(format!("stored status does not decode: {e}")))?;
            pb::key_record::Outcome::Error(status)
        };
        Ok(pb::KeyRecord {
            idempotency_key: scoped.key.as_str().to_owned(),
            method: format!("/ledger.v1.Ledger/{}", method.name()),
            created_at: Some(timestamp(row.created_at.and_utc())),
            outcome: Some(outcome),
        })
    }

    /// Opens a watcher (WatchEntries). It lasts as long as its reader keeps it, so
    /// it holds no place under the limit of concurrent calls: watchers have a
    /// limit of their own (`db::watch`).
    pub async fn watch_entries(&self, request: &pb::WatchEntriesRequest) -> Result<Entries, Error> {
        let (account, after) = request::watch_entries(request);
        self.db.watch_entries(account, after).await
    }

    /// The id of the entry that captured a hold, if it was captured: what a
    /// hold's page links to, which GetHold does not answer.
    pub async fn capture_of(&self, hold_id: u64, call: &Call) -> Result<Option<u64>, Error> {
        let id = HoldId::parse("hold_id", hold_id).map_err(|v| Error::InvalidRequest(vec![v]))?;
        Ok(self.db.capture_of(call, id).await?.map(EntryId::get))
    }

    /// The highest change-stream sequence assigned, as this instance knows it.
    pub fn assigned(&self) -> u64 {
        *self.db.assigned().borrow()
    }
}
