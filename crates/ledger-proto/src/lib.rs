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

pub mod codec;

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
