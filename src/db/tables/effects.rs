//! What a key changed, found through the effects themselves rather than its key
//! row: every entry, hold, hold resolution and account carries the key that
//! caused it, unique per namespace (SPEC 3.5). After retention purged a key's row,
//! this is how the service knows the key took effect and must not run again.

use chrono::NaiveDateTime;
use diesel::QueryableByName;
use diesel::sql_types::{Datetime, TinyInt, Unsigned};

use super::idempotency;
use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, Sql};
use crate::db::conn::tx::Tx;
use crate::error::Error;
use crate::ledger::{Effect, EntryKind, HoldState, ScopedKey};
use crate::ops::Method;

/// Where a key's effect was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::FromRepr)]
#[repr(u8)]
enum Source {
    Entry = 1,
    PlacedHold = 2,
    ResolvedHold = 3,
    Account = 4,
    /// An entry of a reversal, whose kinds other calls write too.
    ReversalEntry = 5,
    Subscription = 6,
}

#[derive(Debug, QueryableByName)]
struct Row {
    #[diesel(sql_type = Unsigned<TinyInt>)]
    source: u8,
    /// The entry's kind, or the resolved hold's state.
    #[diesel(sql_type = Unsigned<TinyInt>)]
    detail: u8,
    #[diesel(sql_type = Datetime)]
    at: NaiveDateTime,
}

/// The earliest effect of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FirstUse {
    /// What it was, when the row tells.
    pub(crate) effect: Option<Effect>,
    /// It is a reversal's entry.
    pub(crate) reversal: bool,
    pub(crate) at: chrono::DateTime<chrono::Utc>,
}

impl FirstUse {
    /// The answer to a key whose row was purged after this effect, to a call of
    /// `asking` (none for a look-up). It names the method that left the effect:
    /// the only one that leaves it, or else `asking`, if that one does (transfers
    /// and posts leave the same entries).
    pub(crate) fn expired(self, asking: Option<Method>) -> Error {
        let method = if self.reversal {
            Some(Method::Reverse)
        } else {
            self.effect.and_then(|effect| {
                Method::leaving_other_than(effect, Method::Reverse)
                    .or_else(|| asking.filter(|m| m.effects().contains(&effect)))
            })
        };
        Error::KeyExpired {
            method,
            first_used_at: self.at,
        }
    }
}

impl Row {
    fn first_use(self) -> FirstUse {
        let source = Source::from_repr(self.source);
        let effect = match source {
            Some(Source::Entry | Source::ReversalEntry) => {
                EntryKind::from_code(self.detail).map(Effect::Entry)
            }
            Some(Source::PlacedHold) => Some(Effect::PlacedHold),
            Some(Source::ResolvedHold) => {
                HoldState::from_code(self.detail).map(Effect::ResolvedHold)
            }
            Some(Source::Account) => Some(Effect::OpenedAccount),
            Some(Source::Subscription) => Some(Effect::CreatedSubscription),
            None => None,
        };
        FirstUse {
            effect,
            reversal: source == Some(Source::ReversalEntry),
            at: self.at.and_utc(),
        }
    }
}

/// The earliest effect of a key this transaction's probe claimed as new, if it had
/// one: then retention purged the key's row after the effect (SPEC 3.5).
///
/// The effect counts only while the claim still stands, read under lock: the
/// key's row is this transaction's own, with no outcome yet. If it holds another
/// transaction's outcome, or is gone, that transaction committed the key since
/// the probe (on a cluster, a write set applied over this one, which the server
/// may report only later), so the effect is the winner's: the attempt is
/// retried, and its probe replays the winner's answer rather than calling the
/// key expired.
pub(crate) async fn purged_use(
    tx: &mut Tx<'_>,
    key: &ScopedKey,
) -> Result<Option<FirstUse>, Failure> {
    let Some(first) = first_use(tx, key).await? else {
        return Ok(None);
    };
    match idempotency::look_up(tx, key).await? {
        Some(row) if row.outcome().is_none() => Ok(Some(first)),
        _ => {
            tracing::debug!(
                key = %key.key.redacted(),
                "another transaction committed the key since the probe; retrying"
            );
            Err(Failure::Overtaken)
        }
    }
}

/// The key's earliest effect, if it had any. Each branch is a look-up of a unique
/// index.
pub(crate) async fn first_use(
    tx: &mut Tx<'_>,
    key: &ScopedKey,
) -> Result<Option<FirstUse>, Failure> {
    let sql = Sql::new(format!(
        "SELECT source, detail, at FROM ( \
           SELECT IF(reverses_entry_id IS NULL, {entry}, {reversal}) AS source, kind AS detail, \
             created_at AS at FROM entries \
             WHERE namespace = ? AND idempotency_key = ? \
           UNION ALL SELECT {placed}, 0, created_at FROM holds \
             WHERE namespace = ? AND idempotency_key = ? \
           UNION ALL SELECT {resolved}, state, resolved_at FROM holds \
             WHERE resolved_namespace = ? AND resolved_key = ? \
           UNION ALL SELECT {account}, 0, created_at FROM accounts \
             WHERE namespace = ? AND idempotency_key = ? \
           UNION ALL SELECT {subscription}, 0, created_at FROM subscriptions \
             WHERE namespace = ? AND idempotency_key = ? \
         ) effects ORDER BY at LIMIT 1",
        entry = Source::Entry as u8,
        placed = Source::PlacedHold as u8,
        resolved = Source::ResolvedHold as u8,
        account = Source::Account as u8,
        reversal = Source::ReversalEntry as u8,
        subscription = Source::Subscription as u8,
    ));
    let namespace = key.namespace.as_str().as_bytes();
    let name = key.key.as_str().as_bytes();
    let sql = (0..5).fold(sql, |sql, _| {
        sql.bind(Bind::Bytes(namespace)).bind(Bind::Bytes(name))
    });
    let rows: Vec<Row> = tx.load(Step::ReadKey, sql).await?;
    Ok(rows.into_iter().next().map(Row::first_use))
}
