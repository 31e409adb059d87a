//! One transaction on a keyed connection, and one plain read.
//!
//! Every round trip is bounded: a statement that gets no answer within the bound
//! (the transaction's lock wait plus [`ANSWER_MARGIN`]) means the database went
//! silent (a vanished host, a partition), and the connection is given up rather
//! than waited on until the kernel notices, minutes later. And the connection goes
//! back to the pool only after its transaction ended with a COMMIT or ROLLBACK the
//! server confirmed: a [`Tx`] dropped before that (a failed round trip, a
//! panic) marks it for the pool to drop.

use std::time::Duration;

use diesel::QueryableByName;
use diesel::mysql::Mysql;
use diesel::query_builder::{QueryFragment, QueryId};
use diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};

use super::connection::{self, ANSWER_MARGIN, Conn, READ_BOUND};
use super::failure::{AttemptError, Failure, Step, StepError, classify};
use super::pool::Pool;
use super::sql::Sql;
use crate::error::{Error, Recorded};
use crate::telemetry::metrics;

/// A final batch longer than this leaves its connection to be closed rather than
/// pooled. A connection keeps buffers as large as the largest statement it sent
/// (its packet codec's) and the statements it prepared for the rows it locked (a
/// 256-leg post's lists of 512 ids): kept, a pool that once served such posts
/// would hold some megabytes per connection for good. Closed, the next call opens
/// a fresh one; a batch this long writes hundreds of rows, so the reconnect is a
/// small share of its cost. Group commit's batches of charges stay below it.
pub(crate) const LARGE_BATCH: usize = 128 * 1024;

/// How the final batch ended.
#[derive(Debug)]
pub(crate) enum Committed {
    Yes,
    /// It did not commit (the server said why, and the transaction was rolled back).
    No(AttemptError),
    /// Whether it committed is not known: the connection was lost or the database
    /// fell silent after the COMMIT was sent, or a statement after a COMMIT failed.
    Unknown(AttemptError),
}

pub(crate) struct Tx<'c> {
    conn: &'c mut Conn,
    pool: &'c Pool,
    /// The session's lock wait, offered as the delay before a retry.
    lock_wait: Duration,
    /// No round trip may take longer.
    bound: Duration,
    /// A statement was sent since the last COMMIT or ROLLBACK the server confirmed.
    open: bool,
}

impl std::fmt::Debug for Tx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx")
            .field("bound", &self.bound)
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}

impl<'c> Tx<'c> {
    pub(crate) fn new(conn: &'c mut Conn, pool: &'c Pool, lock_wait: Duration) -> Self {
        Self {
            conn,
            pool,
            lock_wait,
            bound: lock_wait + ANSWER_MARGIN,
            open: false,
        }
    }

    /// Runs a statement that changes rows; returns the affected rows.
    pub(crate) async fn execute<Q>(&mut self, step: Step, query: Q) -> Result<usize, Failure>
    where
        Q: QueryFragment<Mysql> + QueryId + Send,
    {
        self.open = true;
        let answer = tokio::time::timeout(self.bound, query.execute(self.conn)).await;
        self.answered(step, answer)
    }

    /// Runs a query and returns its rows.
    pub(crate) async fn load<U>(&mut self, step: Step, query: Sql<'_>) -> Result<Vec<U>, Failure>
    where
        U: QueryableByName<Mysql> + Send + 'static,
    {
        self.open = true;
        let answer = tokio::time::timeout(self.bound, query.load::<U>(self.conn)).await;
        self.answered(step, answer)
    }

    /// Runs a query whose text changes from one call to the next (so it is not
    /// prepared and cached per text) and returns its rows.
    pub(crate) async fn load_text<U>(&mut self, step: Step, text: String) -> Result<Vec<U>, Failure>
    where
        U: QueryableByName<Mysql> + Send + 'static,
    {
        self.open = true;
        let query = diesel::sql_query(text);
        let answer = tokio::time::timeout(self.bound, query.load::<U>(self.conn)).await;
        self.answered(step, answer)
    }

    fn answered<T>(
        &mut self,
        step: Step,
        answer: Result<diesel::QueryResult<T>, tokio::time::error::Elapsed>,
    ) -> Result<T, Failure> {
        let Ok(result) = answer else {
            self.give_up();
            return Err(Failure::TimedOut {
                step,
                after: self.bound,
            });
        };
        result.map_err(|source| Failure::Db(StepError { step, source }))
    }

    /// The database did not answer in time: the connection is dropped, and the
    /// pool told, so its other connections are checked before use.
    fn give_up(&mut self) {
        connection::discard(self.conn);
        self.pool.report_silence();
    }

    /// Ends a transaction that wrote nothing (a replay, a read).
    pub(crate) async fn finish(mut self) -> Result<(), AttemptError> {
        match self.batch(Step::Commit, "ROLLBACK").await {
            Ok(()) => Ok(()),
            Err(failure) => Err(self.fail(failure).await),
        }
    }

    /// Ends the transaction that the reads so far began, and keeps the connection
    /// for the next: on a session without autocommit a plain read begins a
    /// transaction and fixes its snapshot, and the next statement after this
    /// begins a new one, with no snapshot yet. `step`: the reads'.
    pub(crate) async fn end_reads(&mut self, step: Step) -> Result<(), Failure> {
        self.batch(step, "ROLLBACK").await
    }

    /// Sends the final writes and COMMIT (`sql`, ending in COMMIT). `guarded`
    /// batches carry statements after their COMMIT, so a failure of theirs leaves
    /// it unknown whether the writes committed, unless it is one only a write
    /// before the COMMIT can raise.
    pub(crate) async fn commit(mut self, sql: &str, guarded: bool) -> Committed {
        let failure = match self.batch(Step::Commit, sql).await {
            Ok(()) => {
                if sql.len() > LARGE_BATCH {
                    connection::discard(self.conn);
                    metrics::connection_retired();
                }
                return Committed::Yes;
            }
            Err(failure) => failure,
        };
        let failed_statement = matches!(failure, Failure::Db(_));
        let attempt = self.fail(failure).await;
        // A write meeting a unique key stops the batch before its first COMMIT.
        let known_rolled_back =
            failed_statement && (!guarded || matches!(attempt, AttemptError::KeyOnEffect(_)));
        let lost = matches!(
            attempt,
            AttemptError::ConnectionLost(_) | AttemptError::Silent(_)
        );
        if known_rolled_back && !lost {
            Committed::No(attempt)
        } else {
            Committed::Unknown(attempt)
        }
    }

    async fn batch(&mut self, step: Step, sql: &str) -> Result<(), Failure> {
        self.open = true;
        let answer = tokio::time::timeout(self.bound, self.conn.batch_execute(sql)).await;
        self.answered(step, answer)?;
        self.open = false;
        Ok(())
    }

    /// Classifies a failure while the connection still holds its error, then rolls
    /// back; a connection that cannot is dropped.
    pub(crate) async fn fail(mut self, failure: Failure) -> AttemptError {
        let attempt = match failure {
            Failure::Final(e) => AttemptError::Final(e),
            Failure::Overtaken => AttemptError::Conflict,
            Failure::TimedOut { step, after } => return AttemptError::silent(step, after),
            Failure::Db(e) => {
                let classified =
                    tokio::time::timeout(self.bound, classify(self.conn, e, self.lock_wait)).await;
                let Ok(attempt) = classified else {
                    self.give_up();
                    return AttemptError::silent(Step::Classify, self.bound);
                };
                attempt
            }
        };
        if let AttemptError::ConnectionLost(_) = attempt {
            connection::discard(self.conn);
            return attempt;
        }
        match tokio::time::timeout(self.bound, self.conn.batch_execute("ROLLBACK")).await {
            Ok(Ok(())) => self.open = false,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "rollback failed; discarding the connection");
                connection::discard(self.conn);
            }
            Err(_) => self.give_up(),
        }
        attempt
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.open {
            connection::discard(self.conn);
        }
    }
}

tokio::task_local! {
    /// The deadline of the read call this task answers ([`within`]).
    static READ_DEADLINE: Option<tokio::time::Instant>;
}

/// Runs the read `read` of a call whose deadline is `deadline`: each read
/// statement it sends ([`load`]) is stopped by the server when the time left
/// runs out, so none runs on after its caller has been answered
/// DEADLINE_EXCEEDED.
pub(crate) async fn within<F: Future>(
    deadline: Option<tokio::time::Instant>,
    read: F,
) -> F::Output {
    READ_DEADLINE.scope(deadline, read).await
}

/// The milliseconds a read statement sent now may run on the server, when the
/// call's deadline ([`within`]) comes before [`READ_BOUND`]; `None` without a
/// deadline or with more time left; past the deadline, DEADLINE_EXCEEDED.
fn time_left() -> Result<Option<u64>, Error> {
    let Some(deadline) = READ_DEADLINE.try_with(|d| *d).ok().flatten() else {
        return Ok(None);
    };
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    if left >= READ_BOUND {
        return Ok(None);
    }
    match u64::try_from(left.as_millis()) {
        Ok(0) | Err(_) => Err(Error::DeadlineExceeded {
            recorded: Recorded::Nothing,
        }),
        Ok(millis) => Ok(Some(millis)),
    }
}

/// Runs a read on a read-pool connection, stopped by the server after
/// [`READ_BOUND`] or when its call's deadline comes ([`within`]), whichever is
/// first. Bounded by [`READ_BOUND`], a statement is prepared and kept per
/// connection as ever (one text), and on MariaDB bounded by its session
/// (`pool::Role::Reads`); bounded by the time left, it is sent with its
/// values written in, unprepared: its text changes from call to call, and
/// kept, such texts would pile up on the server against
/// `max_prepared_stmt_count`.
pub(crate) async fn load<U>(conn: &mut Conn, sql: Sql<'_>) -> Result<Vec<U>, Error>
where
    U: QueryableByName<Mysql> + Send + 'static,
{
    let read = match time_left()? {
        None => {
            let whole = u64::try_from(READ_BOUND.as_millis()).unwrap_or(u64::MAX);
            tokio::time::timeout(READ_BOUND, sql.hinted_only(whole).load::<U>(conn)).await
        }
        Some(millis) => {
            let text = diesel::sql_query(sql.bounded(millis).literal());
            tokio::time::timeout(READ_BOUND, text.load::<U>(conn)).await
        }
    };
    match read {
        Ok(Ok(rows)) => Ok(rows),
        Ok(Err(source)) => {
            let failure = StepError {
                step: Step::Read,
                source,
            };
            Err(classify(conn, failure, READ_BOUND)
                .await
                .into_error(1, Recorded::Nothing))
        }
        Err(_) => {
            connection::discard(conn);
            Err(Error::unavailable(format!(
                "the database did not answer a read within {READ_BOUND:?}"
            )))
        }
    }
}
