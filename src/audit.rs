//! `ledger audit`: the ledger's invariants checked on a live database.
//!
//! - every account's balance equals its credits minus its charges, and no balance
//!   is negative;
//! - each entry's `balance_after` follows from the entry before it;
//! - every entry has its key; every key has an outcome; a successful Credit or
//!   Charge has exactly one entry of its kind, and no other key has any;
//! - every stored outcome decodes, and a stored reply describes its very entry.

use std::fmt;

use anyhow::Context as _;

use crate::db::audit::{self, Sizes, Violation};
use crate::db::pool;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub sizes: Sizes,
    pub violations: Vec<Violation>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for v in &self.violations {
            writeln!(f, "VIOLATION [{}] {}", v.check, v.detail)?;
        }
        let Sizes {
            accounts,
            entries,
            keys,
        } = self.sizes;
        let verdict = if self.passed() { "passed" } else { "FAILED" };
        write!(
            f,
            "audit {verdict}: {} violation(s); {accounts} accounts, {entries} entries, {keys} keys",
            self.violations.len()
        )
    }
}

pub async fn audit(database_url: &str) -> anyhow::Result<Report> {
    let mut conn = pool::connect(database_url)
        .await
        .context("cannot connect to the database")?;
    let (sizes, violations) = audit::run(&mut conn, crate::grpc::audit_stored)
        .await
        .context("the audit queries failed")?;
    Ok(Report { sizes, violations })
}
