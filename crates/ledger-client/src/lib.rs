//! A client of the ledger (`ledger.v1.Ledger`) that keeps SPEC 5's side of the
//! exactly-once promise: a keyed call takes effect once however often the network
//! makes it retry.
//!
//! - One key per logical operation: the caller's, or a UUIDv7 made before the
//!   first attempt ([`Answer::key`], [`Error::Unknown`] carry it).
//! - Retries of `UNAVAILABLE`, `ABORTED`, `DEADLINE_EXCEEDED` (and `CANCELLED`)
//!   of one attempt, `RESOURCE_EXHAUSTED` / `TOO_MANY_CALLS`, connection
//!   failures and attempts that got no response resend the identical request
//!   bytes, with jittered exponential backoff that honours the server's
//!   `RetryInfo`, every attempt inside one overall [`Budget`]; a final code is
//!   never retried.
//! - When the budget ends with the outcome unknown, `LookupKey` (in a slice
//!   reserved from the budget) tells whether the key has a record; if it does,
//!   the request is sent once more (again on a retryable failure, within the
//!   budget) and its answer (a replay, or `IDEMPOTENCY_KEY_REUSED` when the key
//!   was another request's) returned;
//!   otherwise the call ends with [`Error::Unknown`]: retry with that key.
//! - Every answer says whether it was a replay ([`Answer::replayed`],
//!   [`Decline::replayed`]); declines are typed ([`Reason`], [`Decline`]).
//! - Several endpoints fail over when the failure was the endpoint's (a failed
//!   connection, no response, `UNAVAILABLE`, `TOO_MANY_CALLS`); TLS with a CA
//!   certificate; a bearer token.
//!
//! ```no_run
//! use ledger_client::{Client, Error, Reason, pb};
//!
//! # async fn run() -> Result<(), Error> {
//! let client = Client::builder()
//!     .endpoint("http://127.0.0.1:50051")
//!     .endpoint("http://127.0.0.1:50052")
//!     .build()?;
//! let charge = pb::ChargeRequest {
//!     account_id: 1,
//!     amount: 30,
//!     currency: "USD".into(),
//!     ..Default::default()
//! };
//! match client.charge(charge).await {
//!     Ok(answer) => println!("entry {:?}, replay: {}", answer.reply.entry, answer.replayed),
//!     Err(Error::Declined(d)) if d.reason == Reason::InsufficientFunds => println!("declined"),
//!     Err(Error::Unknown { key }) => println!("unknown: retry with key {key}"),
//!     Err(other) => return Err(other),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! - [`Watcher`] follows the change stream (`WatchEntries`), resuming after the
//!   last sequence it yielded, on the next endpoint, after any disconnect.
//! - [`Client::batch_settled`] sends many keyed calls as one `Batch` and
//!   settles each item: one whose answer may be retried is sent again with its
//!   key until it has its outcome, or is reported [`Settled::Unknown`].
//! - [`Client::call_encoded`] calls a unary RPC named at run time with a request
//!   the caller encoded (ledgerctl builds its requests from the descriptor):
//!   the same loop as the typed methods.
//! - [`verify_signature`] checks a webhook delivery (SPEC 3.15) on the
//!   receiver's side: its [`SIGNATURE_HEADER`] against the raw body and the
//!   subscription's secret, refusing a mismatch and a replay outside the
//!   tolerance ([`SignatureError`]); [`DELIVERY_ID_HEADER`] names the delivery.
//!   A receiver verifies each delivery before it trusts the body:
//!
//! ```
//! use std::time::Duration;
//!
//! use ledger_client::{SignatureError, verify_signature};
//!
//! /// One delivery's `Ledger-Signature` header and raw body, checked.
//! fn accept(secret: &str, signature: &str, body: &[u8]) -> Result<(), SignatureError> {
//!     verify_signature(secret, signature, body, Duration::from_secs(300))
//! }
//! # assert!(matches!(accept("whsec_test", "t=1,v1=00", b"{}"), Err(SignatureError::Malformed(_))));
//! ```
//!
//! Layout: `rpc` makes the typed methods and [`METHODS`] from the proto's list
//! of unary RPCs (`ledger_proto::unary_rpcs!`, generated from the descriptor:
//! an RPC added to the proto is a method with no edit here), `client` holds the
//! retry loop, `retry` what is retried and the backoff, `error` the declines,
//! `watch` the watcher of the stream (it shares the endpoints, the token and the
//! backoff, not the unary retry loop).

mod batch;
mod client;
mod error;
mod retry;
mod rpc;
mod watch;

pub use batch::Settled;
pub use client::{Answer, Budget, Builder, Client};
pub use error::{Decline, Error, Reason, Violation};
pub use ledger_proto::webhook::{
    DELIVERY_ID_HEADER, SIGNATURE_HEADER, SignatureError, verify_signature,
};
pub use ledger_proto::{code_name, money, pb};
pub use retry::Backoff;
pub use rpc::{METHODS, Method};
pub use watch::Watcher;
