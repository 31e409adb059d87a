//! SQL as text with bound values, and the literals of a multi-statement batch.
//!
//! [`Sql`] is a prepared statement that diesel caches per connection by its text,
//! so a statement costs one round trip after its first use (diesel's `sql_query`
//! opts out of the cache, and would prepare on every call). Its text uses `?` for
//! each bound value, and must contain no other question mark.
//!
//! A batch of several statements (the final writes and COMMIT) is sent as text,
//! so its values cannot be bound: every value in it is an integer this code
//! formats, a date-time it formats, bytes written as a hexadecimal literal
//! (`x'...'`), or text quoted only when it holds no character a quoted literal
//! treats specially ([`text`]): no input can escape any of them.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use diesel::QueryResult;
use diesel::mysql::Mysql;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Unsigned, Varbinary};

/// A value bound to a `?` of an [`Sql`] statement.
#[derive(Debug, Clone)]
pub(crate) enum Bind<'a> {
    U64(u64),
    Bytes(&'a [u8]),
}

/// One statement: its text, with a `?` for each of `binds`, in order.
#[derive(Debug, Clone)]
pub(crate) struct Sql<'a> {
    text: String,
    binds: Vec<Bind<'a>>,
}

impl<'a> Sql<'a> {
    pub(crate) fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            binds: Vec::new(),
        }
    }

    /// The statement with its values written in, for `EXPLAIN`.
    pub(crate) fn literal(&self) -> String {
        let mut pieces = self.text.split('?');
        let mut text = pieces.next().unwrap_or_default().to_owned();
        for (piece, bind) in pieces.zip(&self.binds) {
            match bind {
                Bind::U64(v) => text.push_str(&v.to_string()),
                Bind::Bytes(v) => text.push_str(&hex(v)),
            }
            text.push_str(piece);
        }
        text
    }

    /// The statement's text, with a `?` for each value: what it is prepared
    /// and cached by.
    #[cfg(test)]
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The statement stopped by the server after `millis` milliseconds, on
    /// either engine: MariaDB runs what its executable comment holds (`SET
    /// STATEMENT max_statement_time`) and takes `/*+ ... */` for a comment;
    /// MySQL takes the first for a comment and the second for its hint. Only a
    /// `SELECT` takes them: other statements are left as they are.
    pub(crate) fn bounded(self, millis: u64) -> Self {
        let set = format!(
            "/*M!100301 SET STATEMENT max_statement_time={}.{:03} FOR */ ",
            millis / 1000,
            millis % 1000
        );
        self.hinted(&set, millis)
    }

    /// The statement stopped by MySQL after `millis` milliseconds (its
    /// `MAX_EXECUTION_TIME` hint; a comment to MariaDB, whose read sessions
    /// carry the same bound, `pool::Role::Reads`). No variable is set and
    /// restored around each run, as `SET STATEMENT` would.
    pub(crate) fn hinted_only(self, millis: u64) -> Self {
        self.hinted("", millis)
    }

    fn hinted(mut self, before: &str, millis: u64) -> Self {
        if let Some(rest) = self.text.strip_prefix("SELECT ") {
            self.text = format!("{before}SELECT /*+ MAX_EXECUTION_TIME({millis}) */ {rest}");
        }
        self
    }

    pub(crate) fn bind(mut self, value: Bind<'a>) -> Self {
        self.binds.push(value);
        self
    }

    /// This statement followed by `more`, its text and its values.
    pub(crate) fn append(mut self, more: Self) -> Self {
        self.text.push_str(&more.text);
        self.binds.extend(more.binds);
        self
    }

    /// `text` followed by ` IN (?, ?, ...)` binding each of `ids`, then `rest`.
    /// The list is [`padded`], so the statement has one of a few texts.
    pub(crate) fn with_ids(text: &str, ids: &[u64], rest: &str) -> Self {
        let ids = padded(ids);
        let marks = vec!["?"; ids.len()].join(", ");
        let mut sql = Self::new(format!("{text} IN ({marks}){rest}"));
        sql.binds.extend(ids.iter().map(|id| Bind::U64(*id)));
        sql
    }
}

/// `items` with its last repeated up to the next power of two. A statement over a
/// list is prepared and cached per connection for each length of list (on the
/// server too, where `max_prepared_stmt_count` bounds them all): padded, a batch
/// of up to 64 calls needs 7 texts of each statement, not 64. Repeating an item
/// in an `IN` list, or a key in a probe's rows, changes nothing.
pub(crate) fn padded<T: Clone>(items: &[T]) -> Vec<T> {
    let mut padded = items.to_vec();
    if let Some(last) = items.last() {
        padded.resize(items.len().next_power_of_two(), last.clone());
    }
    padded
}

impl QueryFragment<Mysql> for Sql<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
        let mut pieces = self.text.split('?');
        if let Some(first) = pieces.next() {
            out.push_sql(first);
        }
        for (piece, bind) in pieces.zip(&self.binds) {
            match bind {
                Bind::U64(v) => out.push_bind_param::<Unsigned<BigInt>, _>(v)?,
                Bind::Bytes(v) => out.push_bind_param::<Varbinary, _>(v)?,
            }
            out.push_sql(piece);
        }
        Ok(())
    }
}

/// Cached by its text (no static query id).
impl QueryId for Sql<'_> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for Sql<'_> {
    type SqlType = diesel::sql_types::Untyped;
}

/// A hexadecimal literal: `x'0aff'`. The batch's stored replies go through
/// here, a few hundred bytes per call, so each byte is two digits pushed
/// rather than a formatting call.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2 + 3);
    push_hex(&mut out, bytes);
    out
}

/// [`hex`], written onto the end of `out`.
pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    let digit = |n: u8| char::from_digit(u32::from(n), 16).unwrap_or('0');
    out.reserve(bytes.len() * 2 + 3);
    out.push_str("x'");
    for &b in bytes {
        out.push(digit(b >> 4));
        out.push(digit(b & 0x0f));
    }
    out.push('\'');
}

/// A UTF-8 string as a literal of the given character set: quoted when every
/// character is one a quoted literal takes as it is (ASCII letters, digits,
/// spaces and `-_.,:/`), as a currency code and most descriptions are; otherwise
/// its bytes as a hexadecimal literal with the character set's introducer
/// (`_utf8mb4 x'...'`). Either way no input can escape it, and the server parses
/// it as one literal rather than a function over one (`CONVERT(... USING ...)`
/// is five tokens more, and a batch writes one or two such strings per row).
pub(crate) fn text(value: &str, charset: &str) -> String {
    let mut out = String::new();
    push_text(&mut out, value, charset);
    out
}

/// [`text`], written onto the end of `out`.
pub(crate) fn push_text(out: &mut String, value: &str, charset: &str) {
    let plain =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, ' ' | '-' | '_' | '.' | ',' | ':' | '/');
    if value.chars().all(plain) {
        out.push('\'');
        out.push_str(value);
        out.push('\'');
    } else {
        out.push('_');
        out.push_str(charset);
        out.push(' ');
        push_hex(out, value.as_bytes());
    }
}

/// chrono's pattern of a `DATETIME(6)` literal's text.
const DATETIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S%.6f";

/// A `DATETIME(6)` literal of a UTC instant: `'2026-12-02 13:41:50.695311'`.
pub(crate) fn datetime(at: DateTime<Utc>) -> String {
    let mut out = String::with_capacity(28);
    push_datetime(&mut out, at);
    out
}

/// [`datetime`], written onto the end of `out`, digit by digit: a batch writes
/// one for each row, and chrono's formatter reads its pattern every time. An
/// instant a four-digit year cannot hold, or a leap second, takes chrono's way.
pub(crate) fn push_datetime(out: &mut String, at: DateTime<Utc>) {
    use chrono::{Datelike as _, Timelike as _};
    let t = at.naive_utc();
    let year = u32::try_from(t.year()).ok().filter(|year| *year <= 9999);
    let nanos = t.nanosecond();
    let Some(year) = year.filter(|_| nanos < 1_000_000_000) else {
        let _ = write!(out, "'{}'", t.format(DATETIME_FORMAT));
        return;
    };
    let digits = |out: &mut String, n: u32, width: u32| {
        for place in (0..width).rev() {
            let d = n / 10u32.pow(place) % 10;
            out.push(char::from_digit(d, 10).unwrap_or('0'));
        }
    };
    let fields = [
        (year, 4, '-'),
        (t.month(), 2, '-'),
        (t.day(), 2, ' '),
        (t.hour(), 2, ':'),
        (t.minute(), 2, ':'),
        (t.second(), 2, '.'),
    ];
    out.push('\'');
    for (value, width, then) in fields {
        digits(out, value, width);
        out.push(then);
    }
    digits(out, nanos / 1000, 6);
    out.push('\'');
}

/// An optional id as a literal: the id, or `NULL`.
pub(crate) struct OrNull(pub(crate) Option<u64>);

impl std::fmt::Display for OrNull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(id) => write!(f, "{id}"),
            None => f.write_str("NULL"),
        }
    }
}

/// `INSERT INTO table (columns)` of `rows` (each the values of one row). Guarded,
/// the rows are selected only while `guard` holds.
pub(crate) fn insert(
    table: &str,
    columns: &str,
    rows: &[String],
    guard: Option<&str>,
) -> Option<String> {
    if rows.is_empty() {
        return None;
    }
    let mut sql = format!("INSERT INTO {table} ({columns}) ");
    match guard {
        None => {
            sql.push_str("VALUES ");
            for (i, row) in rows.iter().enumerate() {
                let _ = write!(sql, "{}({row})", if i == 0 { "" } else { ", " });
            }
        }
        Some(guard) => {
            // One SELECT per row, each kept only while the claim holds.
            for (i, row) in rows.iter().enumerate() {
                let _ = write!(
                    sql,
                    "{}SELECT {row} FROM DUAL WHERE {guard}",
                    if i == 0 { "" } else { " UNION ALL " }
                );
            }
        }
    }
    Some(sql)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_become_hex_literals_that_nothing_escapes() {
        assert_eq!(hex(b""), "x''");
        assert_eq!(
            hex(b"'; DROP TABLE accounts; --"),
            "x'273b2044524f50205441424c45206163636f756e74733b202d2d'"
        );
    }

    #[test]
    fn text_is_quoted_only_when_nothing_in_it_is_special() {
        assert_eq!(text("USD", "ascii"), "'USD'");
        assert_eq!(text("", "utf8mb4"), "''");
        assert_eq!(
            text("order 42: 3.50/EUR, re-sent", "utf8mb4"),
            "'order 42: 3.50/EUR, re-sent'"
        );
        for special in [
            "it's",
            "back\\slash",
            "caf\u{e9}",
            "a\nb",
            "x'00'",
            "\"q\"",
            "%_",
        ] {
            assert_eq!(
                text(special, "utf8mb4"),
                format!("_utf8mb4 {}", hex(special.as_bytes())),
                "{special:?}"
            );
        }
    }

    #[test]
    fn date_times_are_written_as_chrono_writes_them() {
        use chrono::TimeZone as _;
        let chrono = |at: DateTime<Utc>| format!("'{}'", at.naive_utc().format(DATETIME_FORMAT));
        let mut instants = vec![
            Utc.with_ymd_and_hms(2026, 12, 2, 13, 41, 50).unwrap(),
            Utc.with_ymd_and_hms(1000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(-1, 1, 1, 0, 0, 0).unwrap(),
        ];
        for micros in [0, 1, 999_999, 123_456, 500_000] {
            instants.push(instants[0] + chrono::Duration::microseconds(micros));
        }
        instants.push(instants[0] + chrono::Duration::nanoseconds(999));
        let leap_second = chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
            .and_then(|d| d.and_hms_micro_opt(23, 59, 59, 1_500_000))
            .unwrap();
        instants.push(leap_second.and_utc());
        for n in 0..1000_i64 {
            instants.push(instants[0] + chrono::Duration::microseconds(n * 7_919_737_213));
        }
        for at in instants {
            assert_eq!(datetime(at), chrono(at), "{at:?}");
        }
        assert_eq!(
            datetime(Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap()),
            "'2026-01-02 03:04:05.000000'"
        );
        assert_eq!(
            datetime(leap_second.and_utc()),
            "'2016-12-31 23:59:60.500000'"
        );
    }

    #[test]
    fn id_lists_bind_each_id_padded_to_a_power_of_two() {
        let sql = Sql::with_ids("SELECT 1 FROM t WHERE id", &[3, 1], " FOR UPDATE");
        assert_eq!(sql.text, "SELECT 1 FROM t WHERE id IN (?, ?) FOR UPDATE");
        assert_eq!(sql.binds.len(), 2);
        let sql = Sql::with_ids("SELECT 1 FROM t WHERE id", &[3, 1, 2], " FOR UPDATE");
        assert_eq!(
            sql.text,
            "SELECT 1 FROM t WHERE id IN (?, ?, ?, ?) FOR UPDATE"
        );
        assert!(matches!(
            sql.binds.as_slice(),
            [.., Bind::U64(2), Bind::U64(2)]
        ));
        assert_eq!(padded::<u8>(&[]), Vec::<u8>::new());
    }

    #[test]
    fn guarded_inserts_select_each_row_while_the_claim_holds() {
        let rows = vec!["1, 2".to_owned(), "3, 4".to_owned()];
        assert_eq!(
            insert("t", "a, b", &rows, None).unwrap(),
            "INSERT INTO t (a, b) VALUES (1, 2), (3, 4)"
        );
        assert_eq!(
            insert("t", "a, b", &rows, Some("G")).unwrap(),
            "INSERT INTO t (a, b) SELECT 1, 2 FROM DUAL WHERE G UNION ALL SELECT 3, 4 FROM DUAL WHERE G"
        );
    }
}
