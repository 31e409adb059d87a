//! Classifies a failed statement by its MySQL error code.
//!
//! diesel-async keeps only the server's message of an error, not its code, so the
//! code is asked of the server itself (`GET DIAGNOSTICS`) right after the failure
//! and before the rollback clears it. It is asked as a plain-text statement: on
//! MySQL, preparing a statement (as `SHOW ERRORS` through diesel would be) resets
//! the diagnostics first. The answer is trusted only when its message is the one
//! diesel reported; when the server cannot answer, the connection is gone.

use std::time::Duration;

use diesel::dsl::sql;
use diesel::result::Error as DieselError;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection as _};

use super::connection::{self, Conn};
use crate::error::{Error, Recorded};
use crate::telemetry::metrics;

/// The MySQL / MariaDB error codes the service acts on.
mod code {
    /// `innodb_lock_wait_timeout` passed; InnoDB undid only the statement.
    pub(super) const LOCK_WAIT_TIMEOUT: u32 = 1205;
    /// Deadlock, or a Galera certification conflict; the transaction was rolled
    /// back. On Group Replication also the next statement of a transaction that
    /// another member's write set killed.
    pub(super) const DEADLOCK: u32 = 1213;
    /// Group Replication's certification failure at COMMIT: of two members
    /// claiming the same rows at once, the loser's; rolled back.
    pub(super) const PLUGIN_ROLLBACK: u32 = 3101;
    /// "Got error 149 - 'Lock deadlock; Retry transaction' during COMMIT": on
    /// Group Replication, a transaction that another member's write of the same
    /// rows killed while it committed; rolled back.
    pub(super) const ERROR_DURING_COMMIT: u32 = 1180;
    /// A unique key already holds the value: here, an effect (an entry, a hold, an
    /// account) already carries the key being written (SPEC 3.5).
    pub(super) const DUPLICATE_ENTRY: u32 = 1062;
    /// Group Replication refused the transaction in a commit hook (the member
    /// is not ONLINE); rolled back.
    pub(super) const RUN_HOOK_ERROR: u32 = 3100;
    /// The server is read-only (`super_read_only`): a Group Replication member
    /// that left its group, or a replica.
    pub(super) const READ_ONLY: u32 = 1290;
    /// Group Replication: causal reads cannot be had on the member now (not
    /// ONLINE), or waiting for the group's earlier transactions failed.
    pub(super) const CONSISTENCY_NOT_ALLOWED: u32 = 3796;
    pub(super) const CONSISTENCY_BEFORE_FAILED: u32 = 3797;
    /// The server is shutting down.
    pub(super) const SERVER_SHUTDOWN: u32 = 1053;
    /// A Galera node that is not synced refuses statements.
    pub(super) const WSREP_NOT_READY: u32 = 1047;
    /// `KILL QUERY` from an administrator.
    pub(super) const QUERY_INTERRUPTED: u32 = 1317;
    /// MariaDB: `KILL` of the connection from an administrator.
    pub(super) const CONNECTION_KILLED: u32 = 1927;
    /// MariaDB: `max_statement_time` stopped the statement.
    pub(super) const STATEMENT_TIMEOUT: u32 = 1969;
    /// MySQL: `MAX_EXECUTION_TIME` stopped the statement.
    pub(super) const QUERY_TIMEOUT: u32 = 3024;
    /// MySQL: the server closed an idle connection.
    pub(super) const CLIENT_INTERACTION_TIMEOUT: u32 = 4031;
}

/// The statement of a transaction that failed; a lock-wait timeout means different
/// things on the key's row and on the account's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    SetLockWait,
    Probe,
    ReadKey,
    /// Finding the accounts of the entries and holds a request names.
    Locate,
    LockAccounts,
    /// Reading the held holds of the locked accounts (a plain read).
    ReadHolds,
    LockHolds,
    LockEntries,
    Commit,
    /// Asking the server for the code of the error it reported.
    Classify,
    Read,
    /// A statement of the change stream's assigner (`db::stream`).
    Stream,
}

#[derive(Debug)]
pub(crate) struct StepError {
    pub(crate) step: Step,
    pub(crate) source: DieselError,
}

/// Why the body of a transaction stopped: a statement failed (to be classified
/// while the connection still holds the error), the database did not answer in
/// time, another transaction committed the key this one had claimed, or the
/// outcome is already final.
#[derive(Debug)]
pub(crate) enum Failure {
    Db(StepError),
    TimedOut {
        step: Step,
        after: Duration,
    },
    /// The key's row holds another transaction's committed outcome, or none at
    /// all, although this transaction's probe claimed it: its claim was taken
    /// from under it (on a cluster, a write set applied over it), and whatever
    /// it read since is not its own. Rolled back and retried whole; the probe
    /// then replays the winner's outcome.
    Overtaken,
    Final(Error),
}

impl From<StepError> for Failure {
    fn from(e: StepError) -> Self {
        Self::Db(e)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Self::Final(e)
    }
}

/// How an attempt at a transaction ended, when it did not succeed.
#[derive(Debug)]
pub(crate) enum AttemptError {
    /// Deadlock or certification conflict: the server rolled the transaction back,
    /// so the whole transaction is retried.
    Conflict,
    /// The connection failed. Whatever it was doing did not commit, or committed
    /// with its key, so retrying is safe: the probe decides.
    ConnectionLost(String),
    /// The database did not answer in time. Not retried: another connection to a
    /// silent database would wait as long.
    Silent(String),
    /// A COMMIT was sent and whether it took effect is not known (a statement
    /// after it failed, whatever the code): retried, so the probe settles it.
    Unsettled(String),
    /// No pooled connection became free in time. Not retried: the caller's time
    /// is up.
    NoConnection(String),
    /// A write met an effect that already carries the call's key, though the probe
    /// found the key free: retention purged its row. Rolled back; the next attempt
    /// looks for the effect and answers that the key expired.
    KeyOnEffect(String),
    /// Final for this call.
    Final(Error),
}

impl AttemptError {
    pub(crate) fn silent(step: Step, after: Duration) -> Self {
        Self::Silent(format!(
            "{step:?}: the database did not answer within {after:?}"
        ))
    }

    /// The caller's view of this failure, after `attempts` attempts; `recorded`
    /// says what the service knows of what committed under the key.
    pub(crate) fn into_error(self, attempts: u32, recorded: Recorded) -> Error {
        match self {
            Self::Final(e) => e,
            Self::KeyOnEffect(reason) => Error::internal(reason),
            Self::Conflict => Error::Conflict { attempts, recorded },
            Self::ConnectionLost(reason)
            | Self::Silent(reason)
            | Self::Unsettled(reason)
            | Self::NoConnection(reason) => Error::Unavailable { reason, recorded },
        }
    }
}

impl From<Error> for AttemptError {
    fn from(e: Error) -> Self {
        Self::Final(e)
    }
}

/// Classifies `err`; `lock_wait` is the bound the statement ran under, offered to
/// the caller as the delay before a retry. A connection found lost is marked so
/// the pool drops it.
pub(crate) async fn classify(conn: &mut Conn, err: StepError, lock_wait: Duration) -> AttemptError {
    let StepError { step, source } = err;
    let DieselError::DatabaseError(_, info) = &source else {
        return AttemptError::Final(Error::internal(format!("{step:?}: {source}")));
    };
    let reported = info.message().to_owned();
    let code = server_code(conn, &reported).await;
    tracing::debug!(?step, ?code, error = %reported, "statement failed");
    let failure = match code {
        None => AttemptError::ConnectionLost(format!("{step:?}: {reported}")),
        Some(code) => by_code(code, step, lock_wait, &reported),
    };
    if let AttemptError::ConnectionLost(_) = failure {
        connection::discard(conn);
    }
    failure
}

fn by_code(code: u32, step: Step, lock_wait: Duration, message: &str) -> AttemptError {
    match code {
        code::DEADLOCK | code::PLUGIN_ROLLBACK | code::ERROR_DURING_COMMIT => {
            AttemptError::Conflict
        }
        code::LOCK_WAIT_TIMEOUT => AttemptError::Final(match step {
            Step::Probe | Step::ReadKey => {
                metrics::lock_wait_timeout("key");
                Error::KeyInProgress {
                    retry_after: lock_wait,
                }
            }
            _ => {
                metrics::lock_wait_timeout("account");
                Error::AccountBusy {
                    retry_after: lock_wait,
                }
            }
        }),
        code::DUPLICATE_ENTRY if step == Step::Commit => {
            AttemptError::KeyOnEffect(format!("{step:?}: error {code}: {message}"))
        }
        // Only a read bounded by its call's time left (`tx::within`) is
        // stopped for time: the call's deadline has come, or nearly.
        code::STATEMENT_TIMEOUT | code::QUERY_TIMEOUT => {
            AttemptError::Final(Error::DeadlineExceeded {
                recorded: Recorded::Nothing,
            })
        }
        // The node cannot take this transaction now: another connection (to
        // another node, routed by account) is tried.
        code::SERVER_SHUTDOWN
        | code::WSREP_NOT_READY
        | code::RUN_HOOK_ERROR
        | code::READ_ONLY
        | code::CONSISTENCY_NOT_ALLOWED
        | code::CONSISTENCY_BEFORE_FAILED
        | code::QUERY_INTERRUPTED
        | code::CONNECTION_KILLED
        | code::CLIENT_INTERACTION_TIMEOUT => {
            AttemptError::ConnectionLost(format!("{step:?}: error {code}: {message}"))
        }
        _ => AttemptError::Final(Error::internal(format!(
            "{step:?}: mysql error {code}: {message}"
        ))),
    }
}

/// The code of the error the server last reported with `message`, or `None` when
/// the server cannot be asked (the connection is gone) or reported no such error
/// (the failure happened in the driver).
async fn server_code(conn: &mut Conn, message: &str) -> Option<u32> {
    conn.batch_execute(
        "GET DIAGNOSTICS CONDITION 1 @ledger_errno = MYSQL_ERRNO, @ledger_error = MESSAGE_TEXT",
    )
    .await
    .ok()?;
    let (code, text): (Option<i64>, Option<String>) = diesel::select((
        sql::<Nullable<BigInt>>("@ledger_errno"),
        sql::<Nullable<Text>>("@ledger_error"),
    ))
    .get_result(conn)
    .await
    .ok()?;
    if text.as_deref() != Some(message) {
        return None;
    }
    code.and_then(|c| u32::try_from(c).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_wait_timeouts_name_the_row_that_was_waited_on() {
        let wait = Duration::from_secs(2);
        assert!(matches!(
            by_code(1205, Step::Probe, wait, ""),
            AttemptError::Final(Error::KeyInProgress { .. })
        ));
        assert!(matches!(
            by_code(1205, Step::LockAccounts, wait, ""),
            AttemptError::Final(Error::AccountBusy { .. })
        ));
    }

    #[test]
    fn deadlocks_retry_and_unknown_codes_are_internal() {
        let wait = Duration::from_secs(1);
        assert!(matches!(
            by_code(1213, Step::Commit, wait, ""),
            AttemptError::Conflict
        ));
        assert!(matches!(
            by_code(1927, Step::LockAccounts, wait, ""),
            AttemptError::ConnectionLost(_)
        ));
        for rolled_back in [1213, 1180, 3101] {
            assert!(matches!(
                by_code(rolled_back, Step::Commit, wait, ""),
                AttemptError::Conflict
            ));
        }
        for elsewhere in [3100, 1290, 3796, 3797] {
            assert!(matches!(
                by_code(elsewhere, Step::Probe, wait, ""),
                AttemptError::ConnectionLost(_)
            ));
        }
        assert!(matches!(
            by_code(1146, Step::Commit, wait, ""),
            AttemptError::Final(Error::Internal(_))
        ));
    }

    #[test]
    fn a_final_write_meeting_a_unique_key_is_a_purged_key_to_prove() {
        let wait = Duration::from_secs(1);
        assert!(matches!(
            by_code(1062, Step::Commit, wait, ""),
            AttemptError::KeyOnEffect(_)
        ));
        assert!(matches!(
            by_code(1062, Step::Probe, wait, ""),
            AttemptError::Final(Error::Internal(_))
        ));
    }
}
