//! Entry ids, handed out in blocks so a transaction knows its entry's id before it
//! writes anything.
//!
//! An instance takes a block of [`BLOCK`] ids from `id_blocks` in one autocommit
//! statement (outside any ledger transaction, so the row is never held across
//! one), and hands them out from memory. Ids are unique across instances; a
//! restarted instance leaves the rest of its block unused.

use std::ops::Range;

use diesel::dsl::sql;
use diesel::sql_types::Unsigned;
use diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};
use tokio::sync::Mutex;

use super::failure::{AtStep, Failure, Step};
use super::pool::Conn;
use crate::error::Error;

/// Ids per block: one allocation (an fsync) per this many entries.
pub(crate) const BLOCK: u64 = 1000;

#[derive(Debug, Default)]
pub(crate) struct EntryIds {
    free: Mutex<Range<u64>>,
}

impl EntryIds {
    /// The next id, taking a new block through `conn` (with no transaction under
    /// way) when the current one is used up.
    pub(crate) async fn next(&self, conn: &mut Conn) -> Result<u64, Failure> {
        let mut free = self.free.lock().await;
        if free.is_empty() {
            *free = take_block(conn).await?;
        }
        let id = free.start;
        free.start += 1;
        Ok(id)
    }
}

/// Moves `next_id` on by a block, committed at once (the session runs without
/// autocommit), and returns the block.
async fn take_block(conn: &mut Conn) -> Result<Range<u64>, Failure> {
    conn.batch_execute(&format!(
        "UPDATE id_blocks SET next_id = LAST_INSERT_ID(next_id + {BLOCK}) WHERE name = 'entries'; \
         COMMIT"
    ))
    .await
    .at(Step::Write)?;
    let end: u64 = diesel::select(sql::<Unsigned<diesel::sql_types::BigInt>>(
        "LAST_INSERT_ID()",
    ))
    .get_result(conn)
    .await
    .at(Step::Write)?;
    if end <= BLOCK {
        return Err(Error::internal("id_blocks has no row for entries").into());
    }
    Ok(end - BLOCK..end)
}
