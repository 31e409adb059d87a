//! The client: its endpoints and settings, and the one retry loop every call
//! goes through.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use ledger_proto::pb;
use prost::Message as _;
use tokio::time::Instant;
use tonic::codec::Streaming;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Response, Status};

use crate::error::{Decline, Error, replayed};
use crate::retry::{Backoff, Verdict, no_response, verdict};
use crate::rpc::{PreEncoded, Raw, ReplyCodec, Rpc, marker};

/// A successful answer.
#[derive(Debug, Clone)]
pub struct Answer<T> {
    pub reply: T,
    /// Whether it is the stored answer of an earlier attempt: the server
    /// marked it a replay (`idempotent-replayed: true`).
    pub replayed: bool,
    /// The call's idempotency key, for a keyed call: the caller's, or the one
    /// made for it.
    pub key: Option<String>,
    /// How many attempts the call made (the look-up not counted).
    pub attempts: u32,
}

/// The budget of one call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// The whole call, retries and the look-up included.
    pub timeout: Duration,
    /// One attempt at most (and never past the whole call's end).
    pub attempt_timeout: Duration,
    /// Kept from the end of a keyed call's budget for `LookupKey`, when the
    /// attempts leave the outcome unknown.
    pub lookup_reserve: Duration,
    pub backoff: Backoff,
}

impl Default for Budget {
    /// 10 s for a call, 3 s an attempt, the last 1 s for the look-up.
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            attempt_timeout: Duration::from_secs(3),
            lookup_reserve: Duration::from_secs(1),
            backoff: Backoff::default(),
        }
    }
}

/// How often an idle connection is pinged, and how long a ping may go
/// unanswered before the connection counts as failed.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a dead connection goes unnoticed: a ping's interval and its
/// timeout. No stream waits longer than this for its response headers.
pub(crate) const KEEP_ALIVE_BOUND: Duration =
    Duration::from_secs(KEEP_ALIVE_INTERVAL.as_secs() + KEEP_ALIVE_TIMEOUT.as_secs());

/// Builds a [`Client`].
#[derive(Debug, Default)]
pub struct Builder {
    endpoints: Vec<String>,
    ca_pem: Option<Vec<u8>>,
    tls_domain: Option<String>,
    token: Option<String>,
    budget: Budget,
}

impl Builder {
    /// Adds an endpoint (`http://host:port`, or `https://` with TLS). With
    /// several, a failure of the endpoint (a failed connection, an attempt
    /// that got no response, `UNAVAILABLE`, `TOO_MANY_CALLS`) moves the next
    /// attempt to the next one.
    #[must_use]
    pub fn endpoint(mut self, uri: impl Into<String>) -> Self {
        self.endpoints.push(uri.into());
        self
    }

    /// Trusts the CA of this PEM certificate for `https://` endpoints.
    #[must_use]
    pub fn ca_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// The name the server's certificate must carry, where it is not the
    /// endpoint's host (an endpoint given by IP address).
    #[must_use]
    pub fn tls_domain(mut self, name: impl Into<String>) -> Self {
        self.tls_domain = Some(name.into());
        self
    }

    /// Sends `authorization: Bearer <token>` with every call.
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    #[must_use]
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// The client; connects lazily, at the first call.
    pub fn build(self) -> Result<Client, Error> {
        if self.endpoints.is_empty() {
            return Err(Error::Config("no endpoint".into()));
        }
        let domain = self.tls_domain;
        let tls = self.ca_pem.map(|pem| {
            let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
            match domain {
                Some(name) => tls.domain_name(name),
                None => tls,
            }
        });
        let channels = self
            .endpoints
            .iter()
            .map(|uri| {
                let mut endpoint = Endpoint::from_shared(uri.clone())
                    .map_err(|e| Error::Config(format!("endpoint {uri}: {e}")))?
                    .connect_timeout(self.budget.attempt_timeout)
                    // A watcher's stream may be idle for long: pings tell a dead
                    // connection from a quiet ledger, so it resumes elsewhere.
                    .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
                    .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
                    .keep_alive_while_idle(true);
                if let Some(tls) = &tls {
                    endpoint = endpoint
                        .tls_config(tls.clone())
                        .map_err(|e| Error::Config(format!("TLS for {uri}: {e}")))?;
                }
                Ok(endpoint.connect_lazy())
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let token = self
            .token
            .map(|token| {
                AsciiMetadataValue::try_from(format!("Bearer {token}"))
                    .map_err(|_| Error::Config("the token is not visible ASCII".into()))
            })
            .transpose()?;
        Ok(Client {
            channels: channels.into(),
            current: Arc::new(AtomicUsize::new(0)),
            token,
            budget: self.budget,
        })
    }
}

/// A client of `ledger.v1.Ledger` that makes every keyed call take effect
/// exactly once, whatever the network does (SPEC 5). Cheap to clone; clones
/// share the connections.
///
/// An unknown outcome is settled by calling again with the same key (and the
/// same request), never with a new one:
///
/// ```no_run
/// use std::time::Duration;
/// use ledger_client::{Budget, Client, Error, pb};
///
/// # async fn run() -> Result<(), Error> {
/// let client = Client::builder()
///     .endpoint("https://ledger.internal:50051")
///     .ca_certificate(std::fs::read("ca.pem").unwrap_or_default())
///     .token("shop-secret")
///     .budget(Budget { timeout: Duration::from_secs(3), ..Budget::default() })
///     .build()?;
/// let mut transfer = pb::TransferRequest {
///     from_account_id: 1,
///     to_account_id: 2,
///     amount: 97,
///     currency: "USD".into(),
///     ..Default::default()
/// };
/// let answer = loop {
///     match client.transfer(transfer.clone()).await {
///         Err(Error::Unknown { key }) => transfer.idempotency_key = key,
///         other => break other?,
///     }
/// };
/// assert!(answer.key.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    channels: Arc<[Channel]>,
    /// The endpoint the next attempt goes to; moved on by its failures.
    current: Arc<AtomicUsize>,
    token: Option<AsciiMetadataValue>,
    budget: Budget,
}

/// How a run of attempts ended without an answer.
enum Ended {
    Final(Status),
    Spent(Option<Status>),
}

impl Client {
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// This client with another budget (same connections).
    #[must_use]
    pub fn with_budget(&self, budget: Budget) -> Self {
        Self {
            budget,
            ..self.clone()
        }
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// A new idempotency key: a UUIDv7, so keys sort by when they were made.
    pub fn new_key() -> String {
        uuid::Uuid::now_v7().to_string()
    }

    pub(crate) async fn call<R: Rpc>(
        &self,
        mut request: R::Request,
    ) -> Result<Answer<R::Reply>, Error> {
        let started = Instant::now();
        let key = R::key(&mut request).map(|key| {
            if key.is_empty() {
                *key = Self::new_key();
            }
            key.clone()
        });
        let bytes = Bytes::from(request.encode_to_vec());
        let path = PathAndQuery::from_static(R::PATH);
        self.send::<PreEncoded<R::Reply>>(started, &path, key, bytes)
            .await
    }

    /// Calls a unary RPC named at run time by its full gRPC method name
    /// (`/ledger.v1.Ledger/` and the RPC's name, as [`METHODS`](crate::METHODS)
    /// and a `KeyRecord` write it) with a request the caller encoded, and
    /// returns its reply encoded: for a caller that builds messages from the
    /// descriptor ([`pb::FILE_DESCRIPTOR_SET`]), as ledgerctl does. It is the
    /// typed methods' call: the same bytes resent on every attempt, the same
    /// retries, budget and failover, and for a keyed call the same settling of
    /// an unknown outcome.
    ///
    /// `key` says whether the method is keyed: the idempotency key the request
    /// carries, or `None` for a read. A keyed request must carry its key (make
    /// one with [`Client::new_key`] before encoding it): the client cannot write
    /// one into bytes it did not encode, and an empty key is refused here.
    pub async fn call_encoded(
        &self,
        method: &str,
        key: Option<String>,
        request: Bytes,
    ) -> Result<Answer<Bytes>, Error> {
        let started = Instant::now();
        let path = PathAndQuery::try_from(method)
            .map_err(|e| Error::Config(format!("method {method:?}: {e}")))?;
        if key.as_deref() == Some("") {
            return Err(Error::Config(format!(
                "a keyed call of {method} needs the idempotency key its request carries"
            )));
        }
        self.send::<Raw>(started, &path, key, request).await
    }

    /// One call of `path` with `bytes` (encoded once: every attempt sends
    /// them), its reply decoded by `C`; a keyed call's unknown outcome settled.
    async fn send<C: ReplyCodec>(
        &self,
        started: Instant,
        path: &PathAndQuery,
        key: Option<String>,
        bytes: Bytes,
    ) -> Result<Answer<C::Decode>, Error> {
        let deadline = started + self.budget.timeout;
        let reserve = if key.is_some() {
            self.budget.lookup_reserve.min(self.budget.timeout / 2)
        } else {
            Duration::ZERO
        };
        let (ended, attempts) = match self.attempts::<C>(path, &bytes, deadline - reserve).await {
            Ok((reply, metadata, attempts)) => {
                return Ok(Answer {
                    reply,
                    replayed: replayed(&metadata),
                    key,
                    attempts,
                });
            }
            Err(ended) => ended,
        };
        match (ended, key) {
            (Ended::Final(status), key) => Err(Error::Declined(Box::new(Decline::from_status(
                &status, key,
            )))),
            (Ended::Spent(last), None) => Err(Error::Unavailable {
                code: last.as_ref().map_or(Code::DeadlineExceeded, Status::code),
                message: last.map(|s| s.message().to_owned()).unwrap_or_default(),
            }),
            (Ended::Spent(_), Some(key)) => {
                // Half the reserve is the look-up's, the rest the resend's.
                let settling = Settling {
                    key,
                    bytes,
                    lookup_until: deadline - reserve / 2,
                    deadline,
                    attempts,
                };
                self.settle::<C>(path, settling).await
            }
        }
    }

    /// Attempts until an answer, a final error, or `until`.
    async fn attempts<C: ReplyCodec>(
        &self,
        path: &PathAndQuery,
        bytes: &Bytes,
        until: Instant,
    ) -> Result<(C::Decode, MetadataMap, u32), (Ended, u32)> {
        let mut last = None;
        let mut attempts = 0;
        loop {
            let remaining = until.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err((Ended::Spent(last), attempts));
            }
            let endpoint = self.current.load(Ordering::Relaxed);
            attempts += 1;
            let status = match self
                .attempt::<C>(
                    endpoint,
                    path,
                    bytes.clone(),
                    remaining.min(self.budget.attempt_timeout),
                )
                .await
            {
                Ok((reply, metadata)) => return Ok((reply, metadata, attempts)),
                Err(status) => status,
            };
            match verdict(&status) {
                Verdict::Final => return Err((Ended::Final(status), attempts)),
                Verdict::Retry { failover } => {
                    if failover {
                        self.fail_over(endpoint);
                    }
                    let wait = self.budget.backoff.wait(attempts - 1, &status);
                    last = Some(status);
                    if Instant::now() + wait >= until {
                        return Err((Ended::Spent(last), attempts));
                    }
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// The endpoint the next attempt goes to.
    pub(crate) fn current_endpoint(&self) -> usize {
        self.current.load(Ordering::Relaxed)
    }

    /// `endpoint` failed: the next attempts (this call's and the others') go to
    /// the next one. Only the first of the calls that saw it fail moves on.
    pub(crate) fn fail_over(&self, endpoint: usize) {
        let next = (endpoint + 1) % self.channels.len();
        let _ = self
            .current
            .compare_exchange(endpoint, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    pub(crate) fn channel(&self, endpoint: usize) -> Result<Channel, Status> {
        self.channels
            .get(endpoint % self.channels.len())
            .cloned()
            .ok_or_else(|| Status::internal("no endpoint"))
    }

    /// A request with these bytes and the token.
    pub(crate) fn request(&self, bytes: Bytes) -> Request<Bytes> {
        let mut request = Request::new(bytes);
        if let Some(token) = &self.token {
            request
                .metadata_mut()
                .insert("authorization", token.clone());
        }
        request
    }

    /// One attempt on one endpoint, bounded by `timeout` (also sent as the
    /// call's `grpc-timeout`, so the server stops waiting too).
    async fn attempt<C: ReplyCodec>(
        &self,
        endpoint: usize,
        path: &PathAndQuery,
        bytes: Bytes,
        timeout: Duration,
    ) -> Result<(C::Decode, MetadataMap), Status> {
        let started = Instant::now();
        let mut request = self.request(bytes);
        request.set_timeout(timeout);
        let response = self.open::<C>(endpoint, path, request, timeout).await?;
        let left = timeout.saturating_sub(started.elapsed());
        // The server took the call and has begun to answer: a reply that is
        // slow to complete is not the endpoint's failure.
        tokio::time::timeout(left, reply(response))
            .await
            .unwrap_or_else(|_| Err(Status::deadline_exceeded("the reply did not complete")))
    }

    /// Sends `request` to `endpoint` and waits for the response headers (or a
    /// status without a body). None within `timeout` is the endpoint's
    /// failure ([`no_response`]), as a failed connection is: the one rule for
    /// a call and for a stream. (tonic's channel also holds this wait to a
    /// request's `grpc-timeout`, and its `CANCELLED` carries its cause, so it
    /// is the same verdict.)
    pub(crate) async fn open<C: ReplyCodec>(
        &self,
        endpoint: usize,
        path: &PathAndQuery,
        request: Request<Bytes>,
        timeout: Duration,
    ) -> Result<Response<Streaming<C::Decode>>, Status> {
        let mut grpc = tonic::client::Grpc::new(self.channel(endpoint)?);
        let call = async {
            grpc.ready()
                .await
                .map_err(|e| Status::from_error(Box::new(e)))?;
            // A unary call is a stream of one reply on the wire: opened like
            // this, its headers are told apart from its reply.
            grpc.server_streaming(request, path.clone(), C::default())
                .await
        };
        tokio::time::timeout(timeout, call)
            .await
            .unwrap_or_else(|_| Err(no_response(path.as_str(), timeout)))
    }

    /// The attempts left the outcome unknown: asks `LookupKey`, and with a
    /// record of this method sends the original bytes once more.
    ///
    /// A `KeyRecord` has no fingerprint, so its stored reply may be another
    /// request's under a reused key: returned as this call's success it would
    /// report what did not happen. The resend cannot execute anything new for a
    /// key that has a record: the server replays it if it is this request's and
    /// refuses it as `IDEMPOTENCY_KEY_REUSED` if not, and that answer is
    /// returned. A record of another method needs no resend: one key is one
    /// operation across methods (SPEC 3.1). No record, no answer to the
    /// look-up, or none final to the resend: unknown.
    async fn settle<C: ReplyCodec>(
        &self,
        path: &PathAndQuery,
        settling: Settling,
    ) -> Result<Answer<C::Decode>, Error> {
        let lookup = pb::LookupKeyRequest {
            idempotency_key: settling.key.clone(),
        };
        let lookup_path = PathAndQuery::from_static(<marker::LookupKey as Rpc>::PATH);
        let lookup = Bytes::from(lookup.encode_to_vec());
        let Ok((record, _, _)) = self
            .attempts::<PreEncoded<pb::KeyRecord>>(&lookup_path, &lookup, settling.lookup_until)
            .await
        else {
            return Err(Error::Unknown { key: settling.key });
        };
        if record.method != path.as_str() {
            return Err(Error::Declined(Box::new(Decline::used_for(
                record.method,
                settling.key,
            ))));
        }
        self.resend::<C>(path, settling).await
    }

    /// The request sent once more, and again on a retryable failure until the
    /// budget ends: under a key with a record no attempt can execute anything
    /// new, so a resend that meets a closing connection or a busy instance is
    /// tried again like any attempt. Its final answer, or unknown.
    async fn resend<C: ReplyCodec>(
        &self,
        path: &PathAndQuery,
        settling: Settling,
    ) -> Result<Answer<C::Decode>, Error> {
        let Settling {
            key,
            bytes,
            deadline,
            attempts,
            ..
        } = settling;
        match self.attempts::<C>(path, &bytes, deadline).await {
            Ok((reply, metadata, resent)) => Ok(Answer {
                reply,
                replayed: replayed(&metadata),
                key: Some(key),
                attempts: attempts + resent,
            }),
            Err((Ended::Final(status), _)) => Err(Error::Declined(Box::new(Decline::from_status(
                &status,
                Some(key),
            )))),
            Err((Ended::Spent(_), _)) => Err(Error::Unknown { key }),
        }
    }
}

/// What settling a keyed call's unknown outcome works with.
struct Settling {
    key: String,
    /// The request's bytes, as every attempt sent them.
    bytes: Bytes,
    /// The look-up's attempts end here; the resend has the rest.
    lookup_until: Instant,
    deadline: Instant,
    /// Attempts made so far.
    attempts: u32,
}

/// A unary call's reply off its opened response: its one message, then its
/// trailers (a status that ends the call after its headers is there).
async fn reply<U>(response: Response<Streaming<U>>) -> Result<(U, MetadataMap), Status> {
    let (metadata, mut body, _) = response.into_parts();
    let message = body
        .message()
        .await?
        .ok_or_else(|| Status::internal("the response carried no message"))?;
    body.trailers().await?;
    Ok((message, metadata))
}
