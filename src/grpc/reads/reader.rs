//! What every read shares: the database's reads, the page tokens, and the
//! admission of calls, for the two front doors that serve the reads (the gRPC
//! service and the console); and [`Read`], what a read RPC is.

use super::super::admission::Admission;
use super::super::auth::Client;
use super::super::deadline::answer;
use super::super::pages::PageTokens;
use crate::call::Call;
use crate::db::{Entries, Reads};
use crate::error::Error;
use crate::ledger::{AccountId, EntryId, HoldId};
use crate::proto::pb;

/// A read RPC, one module each (`grpc::reads`): its messages, and its answer
/// made from its request through the [`Reader`]. Its name comes from the
/// registry.
pub trait Read: Named + Send + Sync + 'static {
    type Request: prost::Message + Default + Send + 'static;
    type Reply: prost::Message + Send + 'static;

    /// The reply to `request` of `client`, within `call`'s deadline.
    fn answer(
        reader: &Reader,
        request: Self::Request,
        client: &Client,
        call: &Call,
    ) -> impl Future<Output = Result<Self::Reply, Error>> + Send;
}

/// A read's RPC name, from the registry (`reads!`).
pub trait Named {
    const NAME: &'static str;
}

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

    /// The database's reads.
    pub(super) fn db(&self) -> &Reads {
        &self.db
    }

    /// The page tokens the paged reads issue and read.
    pub(super) fn pages(&self) -> &PageTokens {
        &self.pages
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

    /// The reply of read `R` to `request` of `client`.
    pub async fn read<R: Read>(
        &self,
        request: R::Request,
        client: &Client,
        call: &Call,
    ) -> Result<R::Reply, Error> {
        crate::db::within(call.deadline(), R::answer(self, request, client, call)).await
    }

    /// Opens a watcher (WatchEntries). It lasts as long as its reader keeps it, so
    /// it holds no place under the limit of concurrent calls: watchers have a
    /// limit of their own (`db::watch`).
    pub async fn watch(&self, request: &pb::WatchEntriesRequest) -> Result<Entries, Error> {
        // Every account when `account_id` is 0.
        let account = AccountId::parse("account_id", request.account_id).ok();
        self.db.watch(account, request.after_sequence).await
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
