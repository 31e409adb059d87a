//! Balances at a point in the past (SPEC 3.10), from the journal as it is: an
//! entry keeps the balance it left (`balance_after`) and `account_limits` the
//! limits in force from each place on, so the answer is the account's last entry
//! up to the point, found by a binary search over its places (`account_seq`,
//! dense from 1): about 20 look-ups of `entries_account_seq` for a million
//! entries, in one statement, whatever the journal's length.
//!
//! The search needs the tested value to be monotonic along the journal. Sequences
//! are: the assigner numbers commits in order, and an account's transactions
//! commit one after the other under its lock. Times are made so: every
//! transaction stamps an account's entries at `GREATEST(SYSDATE(6), stamped_at)`
//! under its lock and moves `stamped_at` there (`accounts::lock_sql`).
//!
//! An answer for a point must never change. By sequence that holds once the point
//! is assigned: every entry numbered up to it has committed, and no later commit
//! gets a lower number. By time it is made to hold: the answer is read under the
//! account's lock, which every transaction that stamps the account's entries
//! holds until it commits, and before that lock is let go `stamped_at` is moved
//! past the point, so no entry stamped at or before it can commit afterwards. On
//! a multi-primary cluster the move is a write of the account's row, so a
//! transaction of another node that stamped the account before it conflicts with
//! it, and one of the two is retried ([`Reads::get_balance`]).

use chrono::NaiveDateTime;
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Datetime, Nullable, Text, Unsigned};

use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, Sql};
use crate::db::conn::tx::Tx;
use crate::error::Error;
use crate::ledger::{AccountId, Balance, Currency, Limits};

/// What the binary search tests at a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upto {
    /// The entry is numbered, with a sequence up to this one.
    Sequence(u64),
    /// The entry was stamped at or before this many microseconds since the epoch.
    Micros(u64),
}

/// Which entry of the account a balance stands after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Its last.
    Last,
    /// The one at this place of its journal (0: none, before the first).
    At(u64),
    /// The last that passes the test, found by a binary search.
    Search(Upto),
}

/// The value the search compares at place `mid` of account `a` (SQL
/// expressions): the entry's time in microseconds since the epoch, or its
/// sequence; one look-up of `entries_account_seq` (and, by sequence, of its
/// commit). An entry not numbered yet, or none, counts as past every point.
fn value(upto: Upto, a: &str, mid: &str) -> String {
    let found = match upto {
        Upto::Micros(_) => format!(
            "(SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', e.created_at) \
             FROM entries e FORCE INDEX (entries_account_seq) \
             WHERE e.account_id = {a} AND e.account_seq = {mid})"
        ),
        Upto::Sequence(_) => format!(
            "(SELECT c.first_sequence + e.commit_pos \
             FROM entries e FORCE INDEX (entries_account_seq) \
             STRAIGHT_JOIN stream_commits c ON c.commit_id = e.commit_id \
             WHERE e.account_id = {a} AND e.account_seq = {mid})"
        ),
    };
    format!("CAST(COALESCE({found}, {PAST}) AS SIGNED)")
}

/// Past every time and sequence the ledger holds.
const PAST: i64 = 1 << 62;

/// The next place to look at between `lo` and `hi` (SQL expressions), the
/// values at `lo` (at or before the point `t`) and at `hi + 1` (after it)
/// known: where the point falls between them if the values run evenly
/// (interpolation), on every other step the middle, so the search ends within
/// twice a binary search's steps however the values run, and in a few on an
/// even journal. Always within `lo + 1 ..= hi`.
fn next(lo: &str, hi: &str, vlo: &str, vhi: &str, k: &str, t: &str) -> String {
    format!(
        "CAST(IF(({k}) % 2 = 1 OR ({vhi}) <= ({vlo}), ({lo} + {hi} + 1) DIV 2, \
         GREATEST({lo} + 1, LEAST({hi}, {lo} + 1 + FLOOR((({t}) - ({vlo})) * 1.0e0 \
         / (({vhi}) - ({vlo})) * ({hi} - {lo}))))) AS UNSIGNED)"
    )
}

/// The statement of a balance: the account (its currency, when it was opened,
/// its time), the place its balance stands at, the limits in force after it
/// (the history row with the highest place up to it, one descent of the primary
/// key) and the entry there, with its sequence if it has one. No row: no such
/// account.
///
/// [`Place::Search`] searches the places 0 to the account's entry count for
/// the last whose entry is at or before the point; the values must not
/// decrease along the journal. Each step is a row of `s`: its bounds and the
/// values known there, the place it looks at ([`next`]) and the value found
/// (one look-up per step).
pub(crate) fn balance_sql(account: AccountId, place: Place) -> Sql<'static> {
    let id = account.get();
    let (with, from, at) = match place {
        Place::Last => (Sql::new(""), Sql::new("accounts a"), "a.entry_count"),
        Place::At(n) => (
            Sql::new(""),
            Sql::new("(SELECT CAST(? AS UNSIGNED) AS place) p STRAIGHT_JOIN accounts a")
                .bind(Bind::U64(n)),
            "p.place",
        ),
        Place::Search(upto) => {
            let (point, below, above) = match upto {
                Upto::Micros(t) => (
                    t,
                    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', a.created_at) - 1",
                    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', a.stamped_at) + 1",
                ),
                Upto::Sequence(n) => (
                    n,
                    "0",
                    "(SELECT next_sequence FROM ledger_stream WHERE id = 1)",
                ),
            };
            // The first step, from the account's bounds.
            let first = next("b.lo", "b.hi", "b.vlo", "b.vhi", "0", "b.t");
            let anchor = format!(
                "SELECT b.lo, b.hi, b.vlo, b.vhi, CAST(0 AS SIGNED), {first}, {}, b.t, b.a \
                 FROM (SELECT CAST(0 AS UNSIGNED) AS lo, a.entry_count AS hi, \
                 CAST({below} AS SIGNED) AS vlo, CAST({above} AS SIGNED) AS vhi, \
                 CAST(? AS SIGNED) AS t, a.account_id AS a \
                 FROM accounts a WHERE a.account_id = ?) b",
                value(upto, "b.a", &first)
            );
            // Each later step: the bounds the last one's look-up left, and its own.
            let passed = "(s.v <= s.t)";
            let lo = format!("IF({passed}, s.mid, s.lo)");
            let hi = format!("IF({passed}, s.hi, s.mid - 1)");
            let vlo = format!("IF({passed}, s.v, s.vlo)");
            let vhi = format!("IF({passed}, s.vhi, s.v)");
            let mid = next(&lo, &hi, &vlo, &vhi, "s.k + 1", "s.t");
            let step = format!(
                "SELECT {lo}, {hi}, {vlo}, {vhi}, s.k + 1, {mid}, {}, s.t, s.a \
                 FROM s WHERE s.lo < s.hi",
                value(upto, "s.a", &mid)
            );
            let with = Sql::new(format!(
                "WITH RECURSIVE s (lo, hi, vlo, vhi, k, mid, v, t, a) AS ({anchor} UNION ALL {step}) "
            ))
            .bind(Bind::U64(point))
            .bind(Bind::U64(id));
            let from = Sql::new(
                "(SELECT CAST(MAX(s.lo) AS UNSIGNED) AS place FROM s) p STRAIGHT_JOIN accounts a",
            );
            (with, from, "p.place")
        }
    };
    with.append(Sql::new(format!(
        "SELECT CAST({at} AS UNSIGNED) AS place, a.currency, \
         TIMESTAMPDIFF(MICROSECOND, '1970-01-01', a.created_at) AS opened, \
         TIMESTAMPDIFF(MICROSECOND, '1970-01-01', a.stamped_at) AS stamped, \
         l.min_balance, l.max_balance, e.balance_after, e.created_at, \
         c.first_sequence + e.commit_pos AS sequence FROM "
    )))
    .append(from)
    .append(Sql::new(format!(
        " STRAIGHT_JOIN account_limits l ON l.account_id = a.account_id AND l.account_seq = \
           (SELECT MAX(x.account_seq) FROM account_limits x \
            WHERE x.account_id = a.account_id AND x.account_seq <= {at}) \
         LEFT JOIN entries e FORCE INDEX (entries_account_seq) \
           ON e.account_id = a.account_id AND e.account_seq = {at} \
         LEFT JOIN stream_commits c ON c.commit_id = e.commit_id \
         WHERE a.account_id = ?"
    )))
    .bind(Bind::U64(id))
}

#[derive(Debug, QueryableByName)]
struct Row {
    #[diesel(sql_type = Unsigned<BigInt>)]
    place: u64,
    #[diesel(sql_type = Text)]
    currency: String,
    #[diesel(sql_type = BigInt)]
    opened: i64,
    #[diesel(sql_type = BigInt)]
    stamped: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    min_balance: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    max_balance: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    balance_after: Option<i64>,
    #[diesel(sql_type = Nullable<Datetime>)]
    created_at: Option<NaiveDateTime>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    sequence: Option<u64>,
}

/// A balance as read: where it stands, and the answer once its entry has a
/// sequence.
#[derive(Debug)]
pub(crate) struct Read {
    pub(crate) place: u64,
    pub(crate) opened: u64,
    pub(crate) stamped: u64,
    pub(crate) answer: Option<Balance>,
}

impl Row {
    fn into_read(self, account: AccountId) -> Result<Read, Error> {
        let currency =
            Currency::parse("currency", &self.currency).map_err(|v| Error::internal_row(&v))?;
        let limits = Limits::new(self.min_balance, self.max_balance).ok_or_else(|| {
            Error::internal(format!("account {account} has a floor above its ceiling"))
        })?;
        let after = match (
            self.place,
            self.balance_after,
            self.created_at,
            self.sequence,
        ) {
            (0, ..) => Some(None),
            (_, Some(_), Some(_), None) => None,
            (_, Some(_), Some(at), Some(sequence)) => Some(Some((sequence, at.and_utc()))),
            (place, ..) => {
                return Err(Error::internal(format!(
                    "account {account} has no entry at place {place}"
                )));
            }
        };
        let micros = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(Read {
            place: self.place,
            opened: micros(self.opened),
            stamped: micros(self.stamped),
            answer: after.map(|after| Balance {
                account_id: account,
                currency,
                balance: self.balance_after.filter(|_| self.place > 0).unwrap_or(0),
                limits,
                after,
            }),
        })
    }
}

/// The balance of `account` at `place`, as a plain read sees it.
pub(crate) async fn read(
    conn: &mut crate::db::conn::connection::Conn,
    account: AccountId,
    place: Place,
) -> Result<Read, Error> {
    let rows: Vec<Row> = crate::db::conn::tx::load(conn, balance_sql(account, place)).await?;
    rows.into_iter()
        .next()
        .ok_or(Error::AccountNotFound(account.get()))?
        .into_read(account)
}

/// The statement that locks the account for a balance at a time: the
/// transaction's time as a writer would stamp it (`accounts::lock_sql`), its
/// own time and when it was opened, in microseconds since the epoch.
pub(crate) fn lock_sql(account: AccountId) -> Sql<'static> {
    Sql::new(
        "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at) AS opened, \
         TIMESTAMPDIFF(MICROSECOND, '1970-01-01', stamped_at) AS stamped, \
         TIMESTAMPDIFF(MICROSECOND, '1970-01-01', GREATEST(SYSDATE(6), stamped_at)) AS now \
         FROM accounts WHERE account_id = ? FOR UPDATE",
    )
    .bind(Bind::U64(account.get()))
}

#[derive(Debug, QueryableByName)]
struct Locked {
    #[diesel(sql_type = BigInt)]
    opened: i64,
    #[diesel(sql_type = BigInt)]
    stamped: i64,
    #[diesel(sql_type = BigInt)]
    now: i64,
}

/// Moves the account's `stamped_at` just past `micros`: no entry of it is
/// stamped at or before that time from now on.
pub(crate) fn stamp_past_sql(account: AccountId, micros: u64) -> Sql<'static> {
    Sql::new(
        "UPDATE accounts SET stamped_at = TIMESTAMPADD(MICROSECOND, ? + 1, '1970-01-01') \
         WHERE account_id = ?",
    )
    .bind(Bind::U64(micros))
    .bind(Bind::U64(account.get()))
}

/// Under the account's lock: the balance at the time `micros`, and whether
/// `stamped_at` had to be moved past it (then the transaction must commit
/// before the answer is given). The search runs after the lock is granted, so
/// its snapshot holds every transaction that stamped the account before.
pub(crate) async fn fenced(
    tx: &mut Tx<'_>,
    account: AccountId,
    micros: u64,
) -> Result<(Read, bool), Failure> {
    let rows: Vec<Locked> = tx.load(Step::LockAccounts, lock_sql(account)).await?;
    let locked = rows
        .into_iter()
        .next()
        .ok_or(Error::AccountNotFound(account.get()))?;
    let at = |v: i64| u64::try_from(v).unwrap_or(0);
    if micros > at(locked.now) {
        return Err(Error::PointNotReached.into());
    }
    if micros < at(locked.opened) {
        return Err(Error::AccountNotFound(account.get()).into());
    }
    let moved = at(locked.stamped) <= micros;
    if moved {
        tx.execute(Step::LockAccounts, stamp_past_sql(account, micros))
            .await?;
    }
    let sql = balance_sql(account, Place::Search(Upto::Micros(micros)));
    let rows: Vec<Row> = tx.load(Step::LockAccounts, sql).await?;
    let read = rows
        .into_iter()
        .next()
        .ok_or(Error::AccountNotFound(account.get()))?
        .into_read(account)?;
    Ok((read, moved))
}
