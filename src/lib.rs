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
//! - [`ledger`]: the domain: validated values, the nouns, the `Book` of locked
//!   rows every decision is made against, declines with their reasons, request
//!   fingerprints, stored outcomes. Knows nothing of tonic, protobuf or diesel.
//! - [`ops`]: one module per keyed operation, each a whole slice: its request
//!   parsing, the fields its key is bound to, what it locks, its decision, its
//!   reply, and the effects it leaves; and the registry, one line per
//!   operation, that generates the `Method` enum and the wiring.
//! - [`db`]: all SQL, in layers: `db::conn` (connections, pools, bounded
//!   transactions), `db::tables` (one file per table, and the reads), `db::exec`
//!   (the exactly-once transaction, one for every operation and for a lone call
//!   or a batch), `db::stream` (the change stream's assigner: a leased task
//!   that numbers committed entries), `db::watch` (WatchEntries: each stream's
//!   watcher and the one tail they share) and `db::admin` (migrations,
//!   retention, the audit's queries).
//! - [`grpc`]: the tonic service: protobuf in, domain, protobuf out; the one error
//!   mapping; bearer tokens, the key namespace per client, and the methods each
//!   client may call (`grpc::auth`).
//! - [`console`]: the web console: read-only pages for people, and a live
//!   tail, from the same reads as the gRPC API (`grpc::Reader`), served beside
//!   it by the same process.
//! - [`proto`]: the generated code: the server trait this package's `build.rs`
//!   generates, on the messages and client of the `ledger-proto` crate.
//! - [`call`]: a call's deadline and cancellation, shared by the RPC handler and
//!   the database task.
//! - [`error`]: the one error type.
//! - [`audit`]: the invariants, checked on a live database (`ledger audit`).
//! - [`health`]: the gRPC health status, following the database.
//! - [`config`], [`telemetry`], [`app`]: flags and the settings they make, logs
//!   and metrics, building and serving.
//! - [`memory`]: the memory an instance can come to hold, from its limits.
//!
//! Outside this library, in the same workspace:
//!
//! - `src/main.rs` and `src/commands.rs`: the `ledger` binary, its command line
//!   and its subcommands.
//! - `build.rs`: the `Ledger` server trait and the descriptor set reflection
//!   serves, generated from `proto/` against `ledger-proto`'s messages.
//! - `crates/ledger-proto`: the wire contract (`proto/ledger/v1/ledger.proto`) as
//!   messages and a client, with its codec; the service and clients share it.
//! - `crates/ledger-devtools`: not the service: `ledger bench`, the load
//!   generator, and a private MySQL-compatible server for development and tests.
//!   Only the binary and the tests use it.

pub mod app;
pub mod audit;
pub mod call;
pub mod config;
pub mod console;
pub mod db;
pub mod deliver;
pub mod error;
pub mod grpc;
pub mod health;
pub mod ledger;
pub mod memory;
pub mod ops;
pub mod proto;
pub mod telemetry;
