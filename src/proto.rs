//! The generated gRPC code, from the `ledger-proto` crate, which a client shares.

pub use ledger_proto::{ERROR_DOMAIN, ledger, pb};
