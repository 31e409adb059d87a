-- The change stream numbers whole transactions, not entries: a writing
-- transaction adds one row here for all of its entries, and the assigner gives
-- that row the first of as many consecutive numbers as it has entries, one
-- UPDATE of one small row for a whole batch of calls. An entry's sequence is its
-- commit's first_sequence plus its place in the commit (`commit_pos`), in the
-- order the transaction applied them; NULL until its commit is numbered.
--
-- `commit_id` is the id of the commit's first entry, so it is unique without an
-- id of its own. `accounts` lists, for each account the commit wrote to, the
-- first and last of its entries' places in that account's journal
-- (`account_id:first:last`, comma-separated): what the assigner orders commits
-- by, without reading their entries.
CREATE TABLE stream_commits (
    commit_id       BIGINT UNSIGNED NOT NULL,
    first_sequence  BIGINT UNSIGNED NULL,
    entry_count     INT UNSIGNED NOT NULL,
    accounts        MEDIUMTEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at      DATETIME(6) NOT NULL,
    PRIMARY KEY (commit_id),
    -- One index for both reads: its NULLs, by instant, are the commits to number;
    -- the rest, by number, are the stream. Not UNIQUE: only the assigner writes
    -- numbers, each round guarded by the next_sequence it read, and a unique
    -- index would cost every commit a second index entry to write and move;
    -- `ledger audit` checks that the numbers run without a hole or an overlap.
    KEY stream_commits_sequence (first_sequence, created_at),
    CONSTRAINT stream_commits_not_empty CHECK (entry_count > 0)
) ENGINE = InnoDB;

ALTER TABLE entries
    ADD COLUMN commit_id BIGINT UNSIGNED NULL,
    ADD COLUMN commit_pos INT UNSIGNED NOT NULL DEFAULT 0;

-- Existing entries: one commit per operation (key), its entries in leg order,
-- numbered where they were (an operation's entries are numbered all or none,
-- consecutively in leg order, so its first number and their places give them
-- back).
UPDATE entries e
JOIN (SELECT entry_id,
             MIN(entry_id) OVER (PARTITION BY namespace, idempotency_key) AS commit_id,
             ROW_NUMBER() OVER (PARTITION BY namespace, idempotency_key
                                ORDER BY leg, entry_id) - 1 AS commit_pos
      FROM entries) placed ON placed.entry_id = e.entry_id
SET e.commit_id = placed.commit_id, e.commit_pos = placed.commit_pos;

SET SESSION group_concat_max_len = 16777216;

INSERT INTO stream_commits (commit_id, first_sequence, entry_count, accounts, created_at)
SELECT commit_id, MIN(first_sequence), SUM(n),
       GROUP_CONCAT(CONCAT(account_id, ':', lo, ':', hi) ORDER BY pos SEPARATOR ','),
       MIN(created_at)
FROM (SELECT commit_id, account_id, MIN(account_seq) AS lo, MAX(account_seq) AS hi,
             MIN(commit_pos) AS pos, COUNT(*) AS n, MIN(sequence) AS first_sequence,
             MIN(created_at) AS created_at
      FROM entries GROUP BY commit_id, account_id) spans
GROUP BY commit_id;

ALTER TABLE entries
    MODIFY COLUMN commit_id BIGINT UNSIGNED NOT NULL,
    ADD UNIQUE KEY entries_commit (commit_id, commit_pos),
    DROP KEY entries_by_account_sequence,
    DROP KEY entries_sequence,
    DROP COLUMN sequence;
