//! The tonic service: decode a request into domain values, run it, encode the
//! answer.
//!
//! - `service`: the `ledger.v1.Ledger` implementation, its handlers generated
//!   from the operations' registry (`ops`) and the reads' (`reads`).
//! - `contract`: the service's methods as the proto declares them.
//! - `auth`: optional bearer tokens, the key namespace per client, and the
//!   methods each client may call: a transport concern, read from the request's
//!   metadata before any RPC runs.
//! - `reads`: the read RPCs, one module each with its parsing and its reply,
//!   and their registry; shared with the console.
//! - `admission`: what every call goes through at either front door: the
//!   grants, the limit of calls served at once, the memory budget.
//! - `outcome`: the bytes stored under a key -> the answer, and the encoding of
//!   declines.
//! - `status`: the one mapping from [`crate::error::Error`] to `tonic::Status`.
//! - `pages`: the page tokens of ListEntries and ListHolds.
//! - `deadline`: the caller's deadline from the `grpc-timeout` header.
//! - `limits`: RESOURCE_EXHAUSTED for oversized requests.
//! - `connections`: at most `--max-connections` client connections, and the
//!   HTTP/2 windows that bound what each holds unread.
//! - `weigh`: each call's place (under the limit of calls, and its share of the
//!   memory budget by its request's size) taken before its request is read.

mod admission;
pub mod auth;
mod batch;
pub mod connections;
mod contract;
mod deadline;
mod limits;
mod outcome;
mod pages;
pub mod reads;
mod service;
mod status;
mod weigh;

pub use admission::Admission;
pub use limits::ResourceExhausted;
pub use outcome::ProtoEncoder;
pub use pages::PageTokens;
pub use reads::{Read, ReadRpc, Reader};
pub use service::LedgerService;
pub use status::{DOMAIN, REPLAYED_HEADER, report, unauthenticated};
pub use weigh::Weighed;
