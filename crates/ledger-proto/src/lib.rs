//! The `ledger.v1` wire contract as Rust: the messages, the client and the server
//! trait that `build.rs` generates from `proto/ledger/v1/ledger.proto`, and the
//! codec they are generated with. The service and every client share this one
//! crate, so the contract is compiled once and never copied.
//!
//! - [`pb`]: the generated code, with [`pb::FILE_DESCRIPTOR_SET`] for reflection.
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

        /// The encoded descriptor set, for server reflection.
        pub const FILE_DESCRIPTOR_SET: &[u8] =
            include_bytes!(concat!(env!("OUT_DIR"), "/ledger_descriptor.bin"));
    }
}

pub use ledger::v1 as pb;

/// The `ErrorInfo` domain of every status of the contract: its package.
pub const ERROR_DOMAIN: &str = "ledger.v1";
