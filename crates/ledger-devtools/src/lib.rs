//! Around the ledger service, not part of it: `ledger bench`, the load generator,
//! and the private MySQL-compatible server run for development and tests. It speaks
//! to the service only as a client does, through `ledger-proto`, and the service
//! library never imports it; only the `ledger` binary (for `ledger bench`) and the
//! tests do.

pub mod bench;
pub mod cpu;
mod follow;
pub mod managed;
pub mod seed;
pub mod status;
mod subscriber;
