//! The connection layer: how a statement reaches a server and what comes back.
//! Nothing here knows a table or an operation; everything above builds on it.
//!
//! - `connection`: one connection, opened without `CLIENT_FOUND_ROWS`.
//! - `pool`: the bb8 pools of connections set up and self-checked for their role.
//! - `self_check`: the check, at start and on every new connection, that the probe
//!   reports 1 then 0 and the session is as its pool needs; and whether the server
//!   is a multi-primary node.
//! - `cluster`: which engine a connection reached, and the causal reads a
//!   multi-primary node needs for keyed transactions and migrations.
//! - `route`: which node of a cluster a keyed transaction goes to.
//! - `membership`: whether each node is in its cluster's primary component, asked
//!   by the health check; the routing passes over a node that is not.
//! - `lease`: a connection for one call, within its deadline and lock wait.
//! - `limits`: the bounds on waiting and retrying, set at start.
//! - `backoff`: the waits between the attempts of a transaction retried whole.
//! - `tx`: one transaction, every round trip of it bounded; one plain read.
//! - `failure`: classification of failed statements by MySQL error code.
//! - `sql`: statements as text, and their bound values.

pub(crate) mod backoff;
pub mod cluster;
pub mod connection;
pub(crate) mod failure;
pub(crate) mod lease;
pub mod limits;
pub mod membership;
pub mod pool;
pub mod route;
pub mod self_check;
pub(crate) mod sql;
pub(crate) mod tx;
