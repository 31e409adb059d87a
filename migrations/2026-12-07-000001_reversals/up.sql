-- Reversal (SPEC 3.12). `reversals` holds one row per operation reversed, keyed
-- by the operation's identity (its namespace and the key it committed under),
-- inserted in the transaction that writes the reversal's entries: an operation is
-- reversed at most once because the engine refuses a second row, on every node
-- of a cluster (a write set with the same primary key fails certification), not
-- because a read found none. `reversal_key` is the winner's key, which a loser's
-- ALREADY_REVERSED names. Rows are never purged: retention purges key rows only,
-- and the entries keep their key, so a purged original is still reversed once.
CREATE TABLE reversals (
    namespace        VARBINARY(64) NOT NULL,
    original_key     VARBINARY(255) NOT NULL,
    reversal_key     VARBINARY(255) NOT NULL,
    created_at       DATETIME(6) NOT NULL,
    PRIMARY KEY (namespace, original_key)
) ENGINE = InnoDB;

-- A reversal entry names the original entry on the same account that it mirrors.
ALTER TABLE entries ADD COLUMN reverses_entry_id BIGINT UNSIGNED NULL;
