-- Ends a transaction's final batch: raises a deadlock error (SQLSTATE 40001, 1213)
-- unless the caller's argument, a check of the committed state, holds. On a Galera
-- cluster a transaction aborted by another node's write set can leave the rest of
-- a multi-statement batch running in a new transaction, and its COMMIT succeed
-- with nothing in it; the check after COMMIT makes that visible to the client,
-- which retries and replays the committed outcome. It reads no table, so calling
-- it needs only EXECUTE.
CREATE PROCEDURE ledger_require_committed(IN committed BOOLEAN)
    SQL SECURITY INVOKER
    NO SQL
BEGIN
    IF committed IS NOT TRUE THEN
        SIGNAL SQLSTATE '40001'
            SET MYSQL_ERRNO = 1213,
                MESSAGE_TEXT = 'The transaction was rolled back by a conflicting write; its writes did not commit';
    END IF;
END
