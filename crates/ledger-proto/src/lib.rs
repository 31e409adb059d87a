//! The `ledger.v1` wire contract as Rust: the messages and the client that
//! `build.rs` generates from `proto/ledger/v1/ledger.proto`, and the codec they are
//! generated with. The service and every client share this one crate, so there is
//! one set of message types and nothing is copied; the service generates only its
//! server trait itself (the root package's `build.rs`), against these messages and
//! with this codec.
//!
//! - [`pb`]: the generated code, with [`pb::FILE_DESCRIPTOR_SET`] for reading
//!   messages by name (ledgerctl's output).
//! - [`codec`]: prost's codec, with malformed requests as INVALID_ARGUMENT.
//! - [`unary_rpcs!`]: the service's unary RPCs, generated from the descriptor,
//!   for the client to generate its typed methods from.
//! - [`money`]: amounts in their currency's units (`10.00 USD`) and back.
//! - [`webhook`]: the signature of webhook deliveries (SPEC 3.15), made and
//!   checked.

pub mod codec;
pub mod money;
pub mod webhook;

include!(concat!(env!("OUT_DIR"), "/unary_rpcs.rs"));

#[allow(
    clippy::all,
    clippy::pedantic,
    missing_debug_implementations,
    unreachable_pub
)]
pub mod ledger {
    pub mod v1 {
        tonic::include_proto!("ledger.v1");

        /// The encoded descriptor set, for clients that read messages by name.
        pub const FILE_DESCRIPTOR_SET: &[u8] =
            include_bytes!(concat!(env!("OUT_DIR"), "/ledger_descriptor.bin"));
    }
}

pub use ledger::v1 as pb;

/// The `ErrorInfo` domain of every status of the contract: its package.
pub const ERROR_DOMAIN: &str = "ledger.v1";

/// The canonical name of a gRPC status code, as `google.rpc.Code` spells it and
/// as grpcurl, the API's documents, the console and the metrics write it.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
