//! The tonic service: decode a request into domain values, run it, encode the
//! answer.
//!
//! - `service`: the `ledger.v1.Ledger` implementation.
//! - `request`: protobuf request -> validated domain command.
//! - `outcome`: domain outcome <-> the bytes stored under a key and replayed.
//! - `status`: the one mapping from [`crate::error::Error`] to `tonic::Status`.
//! - `codec`: prost's codec, with malformed requests as INVALID_ARGUMENT.
//! - `deadline`: the caller's deadline from the `grpc-timeout` header.
//! - `limits`: RESOURCE_EXHAUSTED for oversized requests.

pub mod codec;
mod deadline;
mod limits;
mod outcome;
mod request;
mod service;
mod status;

pub use limits::ResourceExhausted;
pub use outcome::{ProtoEncoder, audit_stored};
pub use service::LedgerService;
pub use status::{DOMAIN, REPLAYED_HEADER, unauthenticated};
