-- Entry ids are handed out in blocks, so a transaction knows its entry's id before
-- it inserts the entry, and can write the entry, the balance and the stored reply
-- in one round trip. Blocks go to whichever instance asks, so ids no longer follow
-- commit order; an account's own entries are ordered by account_seq, taken from
-- the account row under its lock.
CREATE TABLE id_blocks (
    name     VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    next_id  BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;

INSERT INTO id_blocks (name, next_id)
SELECT 'entries', COALESCE(MAX(entry_id), 0) + 1 FROM entries;

ALTER TABLE entries MODIFY entry_id BIGINT UNSIGNED NOT NULL;

ALTER TABLE accounts ADD COLUMN entry_count BIGINT UNSIGNED NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN account_seq BIGINT UNSIGNED NULL AFTER account_id;

UPDATE entries e
JOIN (SELECT entry_id, ROW_NUMBER() OVER (PARTITION BY account_id ORDER BY entry_id) AS n
      FROM entries) numbered ON numbered.entry_id = e.entry_id
SET e.account_seq = numbered.n;

UPDATE accounts a
SET a.entry_count = (SELECT COUNT(*) FROM entries e WHERE e.account_id = a.account_id);

ALTER TABLE entries
    MODIFY account_seq BIGINT UNSIGNED NOT NULL,
    ADD UNIQUE KEY entries_account_seq (account_id, account_seq);
ALTER TABLE entries DROP INDEX entries_by_account;
