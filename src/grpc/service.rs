//! The `ledger.v1.Ledger` service. The keyed RPCs are generated from the
//! operations' registry (`ops::operations!`), one generic handler for all; each
//! read is one line naming how its answer is made.

use tokio::time::Instant;
use tonic::{Code, Request, Response, Status};
use tracing::Instrument as _;

use super::deadline::{self, answer};
use super::outcome;
use super::reads::{self, Read, Reader};
use super::status::report;
use crate::call::Call;
use crate::db::Persistence;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::ledger::ScopedKey;
use crate::ops::{self, Operation, Registered, entry_message};
use crate::proto::pb;
use crate::proto::pb::ledger_server::Ledger;
use crate::telemetry::metrics;

/// The one streaming RPC, served apart from the registries.
pub(super) const WATCH_ENTRIES: &str = "WatchEntries";

#[derive(Debug, Clone)]
pub struct LedgerService {
    /// The keyed path.
    db: Persistence,
    /// The reads, and the admission of every call.
    reader: Reader,
}

/// One call being served: the caller, and its deadline and place under the
/// concurrency limit (the call holds it).
struct Serving {
    client: Client,
    call: Call,
}

impl LedgerService {
    /// Serves keyed calls on `db`, and reads (and admits every call) through
    /// `reader`.
    pub fn new(db: Persistence, reader: Reader) -> Self {
        Self { db, reader }
    }

    pub fn into_server(self) -> pb::ledger_server::LedgerServer<Self> {
        pb::ledger_server::LedgerServer::new(self)
    }

    /// The keyed path.
    pub(super) fn db(&self) -> &Persistence {
        &self.db
    }

    /// The admission of every call.
    pub(super) fn admission(&self) -> &super::Admission {
        self.reader.admission()
    }

    /// The caller, as the authenticator found it.
    pub(super) fn client<T>(request: &Request<T>) -> Result<Client, Error> {
        request
            .extensions()
            .get::<Client>()
            .cloned()
            .ok_or_else(|| Error::internal("no client: the authenticator did not run"))
    }

    /// Admits a call: the client may call `method`, and the server is under its
    /// limit of concurrent calls.
    async fn admit<T>(&self, method: &'static str, request: &Request<T>) -> Result<Serving, Error> {
        let client = Self::client(request)?;
        let call = deadline::call_for(request);
        self.reader
            .admission()
            .admit(&client, &[method], &call)
            .await?;
        Ok(Serving { client, call })
    }

    /// Parses, runs and renders one keyed call of operation `O`.
    async fn keyed<O: Operation + Registered>(
        &self,
        request: Request<O::Request>,
    ) -> Result<Response<O::Reply>, Status> {
        let name = O::METHOD.name();
        let span = rpc_span(name);
        let work = async {
            let started = Instant::now();
            let answer = async {
                let serving = self.admit(name, &request).await?;
                let (key, operation) =
                    O::parse(request.into_inner()).map_err(Error::InvalidRequest)?;
                tracing::Span::current().record("key", key.redacted());
                let key = ScopedKey {
                    namespace: serving.client.namespace.clone(),
                    key,
                };
                let command: ops::Command = Box::new(operation);
                answer(&serving.call, self.db.execute(&serving.call, key, command)).await
            }
            .await;
            let replayed = answer.as_ref().is_ok_and(|keyed| keyed.replayed);
            let rendered = match answer {
                Ok(keyed) => {
                    if keyed.replayed {
                        metrics::replay(name);
                    }
                    outcome::render(keyed)
                }
                Err(e) => {
                    if matches!(e, Error::KeyReused) {
                        metrics::key_reuse(name);
                    }
                    Err(fail(&e))
                }
            };
            finish(name, started, rendered.as_ref().map(drop), replayed);
            rendered
        };
        work.instrument(span).await
    }

    /// Runs and renders one call of read `R`.
    async fn read<R: Read>(
        &self,
        request: Request<R::Request>,
    ) -> Result<Response<R::Reply>, Status> {
        let span = rpc_span(R::NAME);
        let work = async {
            let started = Instant::now();
            let answer = async {
                let client = Self::client(&request)?;
                let call = deadline::call_for(&request);
                let request = request.into_inner();
                let reader = &self.reader;
                let caller = &client;
                reader
                    .serve(&client, &[R::NAME], call, |call| async move {
                        reader.read::<R>(request, caller, &call).await
                    })
                    .await
            }
            .await;
            let rendered = answer.map(Response::new).map_err(|e| fail(&e));
            finish(R::NAME, started, rendered.as_ref().map(drop), false);
            rendered
        };
        work.instrument(span).await
    }

    /// Opens a WatchEntries stream. A stream lasts as long as its client keeps it,
    /// so it does not hold a place under the limit of concurrent calls; watchers
    /// have a limit of their own (`db::watch`). The RPC's metrics and span cover
    /// the opening; an error that ends the stream later is logged where it ends.
    async fn watch(
        &self,
        request: Request<pb::WatchEntriesRequest>,
    ) -> Result<Response<EntryStream>, Status> {
        let span = rpc_span(WATCH_ENTRIES);
        let work = async {
            let started = Instant::now();
            let opened = async {
                let client = Self::client(&request)?;
                if !client.may_call(WATCH_ENTRIES) {
                    return Err(Error::PermissionDenied(WATCH_ENTRIES));
                }
                self.reader.watch(request.get_ref()).await
            }
            .await;
            let rendered = opened
                .map(|entries| Response::new(entry_stream(entries)))
                .map_err(|e| fail(&e));
            finish(WATCH_ENTRIES, started, rendered.as_ref().map(drop), false);
            rendered
        };
        work.instrument(span).await
    }
}

/// A WatchEntries stream as tonic sends it.
type EntryStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::Entry, Status>> + Send + 'static>>;

/// The watcher's entries as messages; the error that ends a stream as its status.
fn entry_stream(entries: crate::db::Entries) -> EntryStream {
    Box::pin(futures::stream::unfold(entries, |mut entries| async move {
        let item = entries.recv().await?.map(|e| entry_message(&e));
        let item = item.map_err(|error| {
            tracing::info!(
                method = WATCH_ENTRIES,
                error = error.label(),
                "stream ended"
            );
            report(&error)
        });
        Some((item, entries))
    }))
}

pub(super) fn rpc_span(method: &'static str) -> tracing::Span {
    tracing::info_span!(
        "rpc",
        method,
        key = tracing::field::Empty,
        error = tracing::field::Empty
    )
}

/// Records the outcome code and latency of a finished RPC. The outcome goes on
/// the closing event rather than the span: recording a field on a span makes a
/// formatting subscriber format all of them again, on every call, and no event
/// follows it.
pub(super) fn finish(
    method: &'static str,
    started: Instant,
    answer: Result<(), &Status>,
    replayed: bool,
) {
    let code = answer.err().map_or(Code::Ok, Status::code);
    metrics::rpc(method, code, started.elapsed());
    tracing::debug!(outcome = ?code, replayed, "rpc done");
}

fn fail(error: &Error) -> Status {
    tracing::Span::current().record("error", error.label());
    report(error)
}

/// The `Ledger` trait: a handler per keyed operation from the operations'
/// registry (`ops::operations!`), one per read from the reads' (`reads!`),
/// Batch (`batch`: the operations' calls as items) and WatchEntries.
macro_rules! ledger_service {
    ($($code:literal => $op:ident $rpc:ident,)* ; $($read:ident $read_rpc:ident,)*) => {
        #[tonic::async_trait]
        impl Ledger for LedgerService {
            $(
                async fn $rpc(
                    &self,
                    request: Request<<ops::$op as Operation>::Request>,
                ) -> Result<Response<<ops::$op as Operation>::Reply>, Status> {
                    self.keyed::<ops::$op>(request).await
                }
            )*

            $(
                async fn $read_rpc(
                    &self,
                    request: Request<<reads::$read as Read>::Request>,
                ) -> Result<Response<<reads::$read as Read>::Reply>, Status> {
                    self.read::<reads::$read>(request).await
                }
            )*

            async fn batch(
                &self,
                request: Request<pb::BatchRequest>,
            ) -> Result<Response<pb::BatchReply>, Status> {
                self.serve_batch(request).await
            }

            type WatchEntriesStream = EntryStream;

            async fn watch_entries(
                &self,
                request: Request<pb::WatchEntriesRequest>,
            ) -> Result<Response<EntryStream>, Status> {
                self.watch(request).await
            }
        }
    };
}

/// The keyed operations' list, handed on with the reads' to `ledger_service!`.
macro_rules! with_reads {
    ($($keyed:tt)*) => {
        reads::reads!(ledger_service { $($keyed)* });
    };
}

ops::operations!(with_reads);
