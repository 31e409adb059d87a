//! `ledger audit`: the ledger's invariants checked on a live database.
//!
//! - every account's balance equals what its entries added less what they took;
//!   each entry's `balance_after` follows from the one before; per currency, the
//!   balances equal the money that came in less what went out, and transfers net
//!   to zero;
//! - each debit other than a capture left its account at or above the floor in
//!   force before it, and each credit at or below the ceiling; every account has
//!   its opening limits, each change of limits is a LIMITS entry, and an
//!   account's limits are those of its last change;
//! - only calls that took effect carry metadata, and every pair is valid;
//! - every entry has its key (unless retention purged it); every key has an
//!   outcome; a successful call has exactly the entries of its method, and no
//!   other key has any;
//! - each transfer's two entries match; the refunds of an entry never exceed it;
//! - an account's `held` equals its held holds; a captured hold has one capture
//!   entry, of what it took and at most its amount;
//! - every stored outcome decodes, and a stored reply names exactly what its key
//!   wrote;
//! - the change stream's sequences run 1, 2, 3, ... without a hole, give each
//!   account's entries in the order they were applied and each operation's
//!   together, in leg order, and no entry older than the lag bound lacks one.

use std::fmt;

use anyhow::Context as _;
use prost::Message as _;

use crate::db::admin::audit::{self, EntryFacts, Sizes, StoredKey, Violation};
use crate::db::conn::connection;
use crate::ledger::Effect;
use crate::ops::Method;

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
    let (sizes, violations) = audit::run(&mut conn, judge)
        .await
        .context("the audit queries failed")?;
    Ok(Report { sizes, violations })
}

/// Judges one stored outcome: a success must decode as its method's reply and
/// name exactly the entries (and the hold) its key wrote; a decline must decode
/// as a `google.rpc.Status` with the stored code and an `ErrorInfo` of this
/// domain. `None` when it is sound.
pub fn judge(key: &StoredKey) -> Option<String> {
    let (Some(code), Some(body)) = (key.outcome_code, key.outcome.as_deref()) else {
        return None; // reported by the set check "every key has an outcome"
    };
    let problem = match Method::from_code(key.method) {
        None => Some(format!("unknown method {}", key.method)),
        Some(method) if code == 0 => judge_reply(method, key, body).err(),
        Some(_) => judge_decline(code, body),
    };
    problem.map(|p| {
        format!(
            "key {:?} (namespace {:?}): {p}",
            String::from_utf8_lossy(&key.idempotency_key),
            String::from_utf8_lossy(&key.namespace)
        )
    })
}

fn judge_reply(method: Method, key: &StoredKey, body: &[u8]) -> Result<(), String> {
    let named = method.named(body)?;
    if named.entries.iter().any(|e| e.entry_id == 0) {
        return Err(crate::ops::lacks_a_field());
    }
    let replied: Vec<EntryFacts> = named
        .entries
        .iter()
        .map(|e| EntryFacts {
            entry_id: e.entry_id,
            account_id: e.account_id,
            kind: u8::try_from(e.kind).unwrap_or(0),
            amount: e.amount,
            balance_after: e.balance_after,
        })
        .collect();
    if replied != key.entries {
        return Err(format!(
            "the stored reply names entries {replied:?}, its key wrote {:?}",
            key.entries
        ));
    }
    if named
        .entries
        .iter()
        .any(|e| e.idempotency_key.as_bytes() != key.idempotency_key)
    {
        return Err("an entry of the stored reply names another key".into());
    }
    if method.effects().contains(&Effect::PlacedHold) {
        let hold = named.hold.ok_or_else(crate::ops::lacks_a_field)?;
        if Some((hold.hold_id, hold.amount)) != key.hold {
            return Err(format!(
                "the stored reply places hold {}, its key placed {:?}",
                hold.hold_id, key.hold
            ));
        }
    }
    Ok(())
}

fn judge_decline(code: i32, body: &[u8]) -> Option<String> {
    use tonic_types::RpcStatusExt as _;
    let status = match tonic_types::pb::Status::decode(body) {
        Ok(status) => status,
        Err(e) => return Some(format!("the stored status does not decode: {e}")),
    };
    if status.code != code {
        return Some(format!(
            "the stored status has code {}, its row {code}",
            status.code
        ));
    }
    match status.get_error_details().error_info() {
        Some(info) if info.domain == crate::proto::ERROR_DOMAIN => None,
        _ => Some("the stored status has no ErrorInfo of the ledger.v1 domain".into()),
    }
}
