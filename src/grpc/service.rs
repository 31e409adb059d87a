//! `ledger.v1.Ledger`: each RPC parses its request, runs it through
//! [`Persistence`], and renders the answer. One span per RPC carries the method,
//! the account, a redacted key, the outcome code and the replay flag.

use std::future::Future;

use prost::Message;
use tonic::{Request, Response, Status};
use tracing::field::Empty;

use super::status::report;
use super::{deadline, outcome, request};
use crate::call::Call;
use crate::db::Persistence;
use crate::error::Error;
use crate::ledger::{Command, EntryKind, IdempotencyKey, Namespace, ScopedKey};
use crate::proto::pb;
use crate::proto::pb::ledger_server::Ledger;

#[derive(Debug, Clone)]
pub struct LedgerService {
    db: Persistence,
}

impl LedgerService {
    pub fn new(db: Persistence) -> Self {
        Self { db }
    }

    pub fn into_server(self) -> pb::ledger_server::LedgerServer<Self> {
        pb::ledger_server::LedgerServer::new(self)
    }

    /// Runs a keyed command and renders its stored outcome.
    async fn keyed<M: Message + Default>(
        &self,
        call: Call,
        key: IdempotencyKey,
        command: Command,
    ) -> Result<Response<M>, Status> {
        let span = tracing::Span::current();
        span.record("key", key.redacted());
        let key = ScopedKey {
            namespace: Namespace::anonymous(),
            key,
        };
        let keyed = answer(&call, self.db.execute(&call, key, command))
            .await
            .map_err(|e| finish_with(&span, &e))?;
        span.record("replayed", keyed.replayed);
        span.record(
            "outcome",
            tracing::field::debug(tonic::Code::from_i32(keyed.outcome.code)),
        );
        tracing::debug!("rpc done");
        outcome::render(keyed)
    }
}

fn finish_with(span: &tracing::Span, error: &Error) -> Status {
    span.record("outcome", error.label());
    report(error)
}

/// Waits for the call's work, or answers DEADLINE_EXCEEDED when the deadline comes
/// first and no COMMIT is under way. If this future is dropped (the caller went
/// away), the call is abandoned, so the work rolls back instead of committing.
async fn answer<T>(call: &Call, work: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
    struct AbandonOnDrop<'a>(&'a Call);
    impl Drop for AbandonOnDrop<'_> {
        fn drop(&mut self) {
            self.0.abandon();
        }
    }
    let _guard = AbandonOnDrop(call);
    let mut work = std::pin::pin!(work);
    tokio::select! {
        done = &mut work => done,
        () = call.expired() => {
            if call.abandon() {
                Err(Error::DeadlineExceeded)
            } else {
                work.await
            }
        }
    }
}

#[tonic::async_trait]
impl Ledger for LedgerService {
    #[tracing::instrument(name = "rpc", skip_all,
        fields(method = "OpenAccount", key = Empty, outcome = Empty, replayed = Empty))]
    async fn open_account(
        &self,
        request: Request<pb::OpenAccountRequest>,
    ) -> Result<Response<pb::OpenAccountReply>, Status> {
        let call = deadline::call_for(&request);
        let (key, command) = request::open_account(request.into_inner())
            .map_err(|e| finish_with(&tracing::Span::current(), &e))?;
        self.keyed(call, key, command).await
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(method = "Credit",
        account_id = request.get_ref().account_id, key = Empty, outcome = Empty, replayed = Empty))]
    async fn credit(
        &self,
        request: Request<pb::CreditRequest>,
    ) -> Result<Response<pb::CreditReply>, Status> {
        let call = deadline::call_for(&request);
        let (key, command) = request::posting(EntryKind::Credit, request.into_inner().into())
            .map_err(|e| finish_with(&tracing::Span::current(), &e))?;
        self.keyed(call, key, command).await
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(method = "Charge",
        account_id = request.get_ref().account_id, key = Empty, outcome = Empty, replayed = Empty))]
    async fn charge(
        &self,
        request: Request<pb::ChargeRequest>,
    ) -> Result<Response<pb::ChargeReply>, Status> {
        let call = deadline::call_for(&request);
        let (key, command) = request::posting(EntryKind::Charge, request.into_inner().into())
            .map_err(|e| finish_with(&tracing::Span::current(), &e))?;
        self.keyed(call, key, command).await
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(method = "GetAccount",
        account_id = request.get_ref().account_id, outcome = Empty))]
    async fn get_account(
        &self,
        request: Request<pb::GetAccountRequest>,
    ) -> Result<Response<pb::Account>, Status> {
        let span = tracing::Span::current();
        let call = deadline::call_for(&request);
        let id = request::account_id(*request.get_ref()).map_err(|e| finish_with(&span, &e))?;
        let account = answer(&call, self.db.get_account(&call, id))
            .await
            .map_err(|e| finish_with(&span, &e))?;
        span.record("outcome", tracing::field::debug(tonic::Code::Ok));
        Ok(Response::new(outcome::account_message(&account)))
    }
}
