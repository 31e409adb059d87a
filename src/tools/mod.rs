//! Tools around the service, not part of serving: `ledger bench`, the load
//! generator, and the private MySQL-compatible server run for development and
//! tests.

pub mod bench;
pub mod managed;
