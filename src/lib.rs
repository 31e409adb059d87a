//! **ledger**: a gRPC service that keeps account balances and charges them exactly
//! once, although its callers retry.
//!
//! Every mutating call carries an idempotency key. In the same MySQL transaction as
//! the balance change, the server claims the key with a duplicate-key upsert probe
//! and stores the encoded answer under it, so a retry, even one racing the original
//! on another server instance, gets the original answer and never a second charge.
//! `ARCHITECTURE.md` walks through the request path and the invariants.
//!
//! Layout, one concern per module:
//!
//! - [`ledger`]: the domain: validated values, one module per operation
//!   (`ledger::ops`) deciding against the locked rows of a `Book`, request
//!   fingerprints, stored outcomes. Knows nothing of tonic or diesel.
//! - [`db`]: all SQL: the pools, migrations, the exactly-once transaction (one
//!   executor for every operation), the reads.
//! - [`grpc`]: the tonic service: protobuf in, domain, protobuf out; the one error
//!   mapping; bearer tokens, the key namespace per client, and the methods each
//!   client may call (`grpc::auth`).
//! - [`call`]: a call's deadline and cancellation, shared by the RPC handler and
//!   the database task.
//! - [`error`]: the one error type.
//! - [`audit`]: the invariants, checked on a live database (`ledger audit`).
//! - [`health`]: the gRPC health status, following the database.
//! - [`tools`]: not the service: `ledger bench`, the load generator, and a
//!   private MySQL-compatible server for development and tests.
//! - [`config`], [`telemetry`], [`app`], [`commands`]: flags, logs and metrics,
//!   building and serving, and the `ledger` subcommands.

pub mod app;
pub mod audit;
pub mod call;
pub mod commands;
pub mod config;
pub mod db;
pub mod error;
pub mod grpc;
pub mod health;
pub mod ledger;
pub mod proto;
pub mod telemetry;
pub mod tools;
