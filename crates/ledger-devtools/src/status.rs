//! The database server's statement and row counters over a window: `SHOW GLOBAL
//! STATUS` before and after the measured calls, for `ledger bench --status`. What a
//! call costs the database in statements (`Com_*`), handler calls (`Handler_*`),
//! rows (`Innodb_rows_*`) and page reads, independent of how busy the machine is.

use std::collections::BTreeMap;

use anyhow::Context as _;
use mysql_async::prelude::Queryable as _;
use tokio::time::Instant;

/// The counters sampled: statements by kind, handler calls, InnoDB rows, buffer-pool
/// page reads, redo writes and fsyncs.
const COUNTERS: &str = "SHOW GLOBAL STATUS WHERE Variable_name RLIKE \
    '^(Com_(select|insert|update|delete|commit|rollback|begin|set_option|call_procedure|stmt_execute)|\
Handler_.*|Innodb_rows_.*|Innodb_buffer_pool_read_requests|Innodb_log_write_requests|Innodb_data_fsyncs|Questions)$'";

/// Each counter's increase between `from` and `to`, those that moved, by name.
pub async fn over(
    url: String,
    from: Instant,
    to: Instant,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut conn = mysql_async::Conn::from_url(url.as_str())
        .await
        .context("cannot connect to sample the database's counters")?;
    tokio::time::sleep_until(from).await;
    let before = sample(&mut conn).await?;
    tokio::time::sleep_until(to).await;
    let after = sample(&mut conn).await?;
    let _ = conn.disconnect().await;
    Ok(delta(&before, &after))
}

async fn sample(conn: &mut mysql_async::Conn) -> anyhow::Result<BTreeMap<String, u64>> {
    let rows: Vec<(String, String)> = conn.query(COUNTERS).await?;
    Ok(rows
        .into_iter()
        .filter_map(|(name, value)| value.parse().ok().map(|v| (name, v)))
        .collect())
}

/// The counters that increased (the sampling connection's own two statements
/// included: a constant, negligible over thousands of calls).
fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(name, a)| {
            let moved = a.saturating_sub(before.get(name).copied().unwrap_or(0));
            (moved > 0).then(|| (name.clone(), moved))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_counters_that_moved_are_kept() {
        let before = BTreeMap::from([("Com_insert".to_owned(), 10), ("Com_update".to_owned(), 5)]);
        let after = BTreeMap::from([
            ("Com_insert".to_owned(), 25),
            ("Com_update".to_owned(), 5),
            ("Handler_write".to_owned(), 7),
        ]);
        assert_eq!(
            delta(&before, &after),
            BTreeMap::from([
                ("Com_insert".to_owned(), 15),
                ("Handler_write".to_owned(), 7)
            ])
        );
    }
}
