-- The change stream (SPEC 3.8): every committed entry gets a ledger-wide sequence,
-- 1, 2, 3, ... with no hole, after its commit, from one assigner for the fleet.
-- Writers never touch it: an entry is inserted without one (NULL), and the
-- assigner numbers committed, unnumbered entries in rounds (db::stream). Entries
-- that exist when this runs are numbered by the assigner's first rounds, in the
-- same order as new ones: each account's in its journal order (account_seq), an
-- operation's entries together.
ALTER TABLE entries
    ADD COLUMN sequence BIGINT UNSIGNED NULL,
    ADD UNIQUE KEY entries_sequence (sequence),
    ADD KEY entries_by_account_sequence (account_id, sequence);

-- One row: the assigner's lease (who numbers, until when, by the database's
-- clock) and the next sequence to give. Only assigners write it, one at a time,
-- under its row lock; a lease row rather than GET_LOCK, which is per node on a
-- Galera cluster.
CREATE TABLE ledger_stream (
    id             TINYINT UNSIGNED NOT NULL,
    owner          VARBINARY(64) NOT NULL DEFAULT '',
    lease_until    DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00',
    next_sequence  BIGINT UNSIGNED NOT NULL DEFAULT 1,
    PRIMARY KEY (id),
    CONSTRAINT ledger_stream_one_row CHECK (id = 1),
    CONSTRAINT ledger_stream_starts_at_one CHECK (next_sequence >= 1)
) ENGINE = InnoDB;

INSERT INTO ledger_stream (id) VALUES (1);
