//! The generated gRPC code as the service sees it, in one module, [`pb`]: the
//! messages and the client from the `ledger-proto` crate, which every client shares,
//! and what this package's `build.rs` generates from `proto/ledger/v1/ledger.proto`
//! against those messages: the `Ledger` server trait (`pb::ledger_server`) and the
//! descriptor set the server's reflection serves.

pub use ledger_proto::{ERROR_DOMAIN, code_name, money};

#[allow(
    clippy::all,
    clippy::pedantic,
    missing_debug_implementations,
    unreachable_pub
)]
pub mod pb {
    pub use ledger_proto::pb::*;

    tonic::include_proto!("ledger.v1");

    /// The encoded descriptor set the server was generated from, for reflection.
    /// It names this item in place of `ledger-proto`'s (the same bytes, compiled
    /// from the same file), so the service serves what its own build read.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/ledger_descriptor.bin"));
}
