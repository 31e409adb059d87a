//! `ledger audit`: the ledger's invariants checked on a live database.
//!
//! - every account's balance equals what its entries added less what they took,
//!   and no balance is negative; each entry's `balance_after` follows from the one
//!   before; per currency, the balances equal the money that came in less what
//!   went out, and transfers net to zero;
//! - every entry has its key (unless retention purged it); every key has an
//!   outcome; a successful call has exactly the entries of its method, and no
//!   other key has any;
//! - each transfer's two entries match; the refunds of an entry never exceed it;
//! - an account's `held` equals its held holds; a captured hold has one capture
//!   entry, of what it took and at most its amount;
//! - every stored outcome decodes, and a stored reply names exactly what its key
//!   wrote.

use std::fmt;

use anyhow::Context as _;

use crate::db::admin::audit::{self, Sizes, Violation};
use crate::db::conn::connection;

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
            holds,
            keys,
        } = self.sizes;
        let verdict = if self.passed() { "passed" } else { "FAILED" };
        write!(
            f,
            "audit {verdict}: {} violation(s); {accounts} accounts, {entries} entries, {holds} holds, \
             {keys} keys",
            self.violations.len()
        )
    }
}

pub async fn audit(database_url: &str) -> anyhow::Result<Report> {
    let mut conn = connection::connect(database_url)
        .await
        .context("cannot connect to the database")?;
    let (sizes, violations) = audit::run(&mut conn, crate::grpc::audit::judge)
        .await
        .context("the audit queries failed")?;
    Ok(Report { sizes, violations })
}
