//! Logs and metrics.
//!
//! Logs are structured, to stderr, as text or JSON, filtered by `RUST_LOG` (default
//! `info`). Metrics are Prometheus counters, gauges and histograms, served on
//! `--metrics-listen` when it is set; every metric the service records is named in
//! [`metrics`].

mod logs;
pub mod metrics;

pub use logs::{LogFormat, init};
