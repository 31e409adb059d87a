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
//! - [`ledger`]: the domain (validated values, balance rules, request fingerprints,
//!   stored outcomes). Knows nothing of tonic or diesel.
//! - [`db`]: all SQL: the pool, migrations, the exactly-once transaction.
//! - [`grpc`]: the tonic service: protobuf in, domain, protobuf out; the one error
//!   mapping.
//! - [`call`]: a call's deadline and cancellation, shared by the RPC handler and
//!   the database task.
//! - [`error`]: the one error type.
//! - [`audit`]: the invariants, checked on a live database (`ledger audit`).
//! - [`bench`]: `ledger bench`, the load generator.
//! - [`auth`]: optional bearer tokens, and the key namespace per client.
//! - [`health`]: the gRPC health status, following the database.
//! - [`managed`]: a private MySQL-compatible server for development and tests.
//! - [`config`], [`telemetry`], [`app`], [`commands`]: flags, logs and metrics,
//!   building and serving, and the `ledger` subcommands.

pub mod app;
pub mod audit;
pub mod auth;
pub mod bench;
pub mod call;
pub mod commands;
pub mod config;
pub mod db;
pub mod error;
pub mod grpc;
pub mod health;
pub mod ledger;
pub mod managed;
pub mod proto;
pub mod telemetry;
