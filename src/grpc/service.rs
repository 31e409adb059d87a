//! `ledger.v1.Ledger`: each RPC parses its request, runs it through
//! [`Persistence`], and renders the answer. One span per RPC carries the method,
//! the account, a redacted key, the outcome code and the replay flag; one metric
//! sample per RPC its method, code and latency.

use std::future::Future;

use prost::Message;
use tokio::time::Instant;
use tonic::{Code, Request, Response, Status};
use tracing::field::Empty;

use super::status::report;
use super::{deadline, outcome, request};
use crate::call::Call;
use crate::db::Persistence;
use crate::error::Error;
use crate::ledger::{Command, EntryKind, IdempotencyKey, Namespace, ScopedKey};
use crate::proto::pb;
use crate::proto::pb::ledger_server::Ledger;
use crate::telemetry::metrics;

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

    /// Parses, runs and renders one keyed call.
    async fn keyed<Req, M: Message + Default>(
        &self,
        method: &'static str,
        request: Request<Req>,
        parse: fn(Req) -> Result<(IdempotencyKey, Command), Error>,
    ) -> Result<Response<M>, Status> {
        let started = Instant::now();
        let span = tracing::Span::current();
        let call = deadline::call_for(&request);
        let answer = async {
            let namespace = namespace(&request)?;
            let (key, command) = parse(request.into_inner())?;
            span.record("key", key.redacted());
            let key = ScopedKey { namespace, key };
            answer(&call, self.db.execute(&call, key, command)).await
        }
        .await;
        let rendered = match answer {
            Ok(keyed) => {
                span.record("replayed", keyed.replayed);
                if keyed.replayed {
                    metrics::replay(method);
                }
                outcome::render(keyed)
            }
            Err(e) => {
                if matches!(e, Error::KeyReused) {
                    metrics::key_reuse(method);
                }
                Err(fail(&span, &e))
            }
        };
        finish(&span, method, started, rendered.as_ref().map(drop));
        rendered
    }
}

/// Records the outcome code and latency of a finished RPC.
fn finish(
    span: &tracing::Span,
    method: &'static str,
    started: Instant,
    answer: Result<(), &Status>,
) {
    let code = answer.err().map_or(Code::Ok, Status::code);
    span.record("outcome", tracing::field::debug(code));
    metrics::rpc(method, code, started.elapsed());
    tracing::debug!("rpc done");
}

/// The caller's key namespace, put there by `auth::Authenticator`.
fn namespace<T>(request: &Request<T>) -> Result<Namespace, Error> {
    request
        .extensions()
        .get::<Namespace>()
        .cloned()
        .ok_or_else(|| Error::internal("no key namespace: the authenticator did not run"))
}

fn fail(span: &tracing::Span, error: &Error) -> Status {
    span.record("error", error.label());
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
    #[tracing::instrument(name = "rpc", skip_all, fields(method = "OpenAccount",
        key = Empty, outcome = Empty, error = Empty, replayed = Empty))]
    async fn open_account(
        &self,
        request: Request<pb::OpenAccountRequest>,
    ) -> Result<Response<pb::OpenAccountReply>, Status> {
        self.keyed("OpenAccount", request, request::open_account)
            .await
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(method = "Credit",
        account_id = request.get_ref().account_id, key = Empty, outcome = Empty, error = Empty,
        replayed = Empty))]
    async fn credit(
        &self,
        request: Request<pb::CreditRequest>,
    ) -> Result<Response<pb::CreditReply>, Status> {
        self.keyed("Credit", request, |r| {
            request::posting(EntryKind::Credit, r.into())
        })
        .await
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(method = "Charge",
        account_id = request.get_ref().account_id, key = Empty, outcome = Empty, error = Empty,
        replayed = Empty))]
    async fn charge(
        &self,
        request: Request<pb::ChargeRequest>,
    ) -> Result<Response<pb::ChargeReply>, Status> {
        self.keyed("Charge", request, |r| {
            request::posting(EntryKind::Charge, r.into())
        })
        .await
    }

    #[tracing::instrument(name = "rpc", skip_all, fields(method = "GetAccount",
        account_id = request.get_ref().account_id, outcome = Empty, error = Empty))]
    async fn get_account(
        &self,
        request: Request<pb::GetAccountRequest>,
    ) -> Result<Response<pb::Account>, Status> {
        let started = Instant::now();
        let span = tracing::Span::current();
        let call = deadline::call_for(&request);
        let read = async {
            let id = request::account_id(*request.get_ref())?;
            answer(&call, self.db.get_account(&call, id)).await
        }
        .await;
        let rendered = read
            .map(|account| Response::new(outcome::account_message(&account)))
            .map_err(|e| fail(&span, &e));
        finish(&span, "GetAccount", started, rendered.as_ref().map(drop));
        rendered
    }
}
