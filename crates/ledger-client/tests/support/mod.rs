//! What the client's tests (and ledgerctl's, which include this folder) need: the
//! suite's database server (`server`, the service's own `tests/support/server.rs`),
//! the service in the test process (`app`), one at its limit of calls (`busy`),
//! a TCP proxy that breaks calls between client and server (`faults`), and a
//! gRPC server that takes calls and never answers them (`wedged`).

#![allow(
    unreachable_pub,
    dead_code,
    unused_imports,
    missing_debug_implementations
)]

pub mod app;
pub mod busy;
pub mod faults;
#[path = "../../../../tests/support/server.rs"]
pub mod server;
pub mod wedged;

pub use app::{Instance, TestApp};
pub use busy::Busy;
pub use faults::{Fault, FaultProxy};
pub use server::{TestDb, assert_each_key_charged_once};
pub use wedged::WedgedServer;
