-- A search (SPEC 3.11) reads a page of what a pair matches, not every match:
-- `search_entries` holds one row per numbered entry and pair of its call, keyed
-- by the pair, then the entry's sequence, so a page is a range of the primary
-- key, in sequence order (and of the second key for one account's). A search
-- is not scoped by namespace: the pair alone leads. The widest key is 40 + 2,000
-- + 8 + 8 bytes, within InnoDB's 3,072.
--
-- The change stream's assigner writes the rows of the commits it numbers,
-- right after the round that numbers them (db::stream::index), and a search
-- waits for them as for the numbers; writers never touch this table. Neither
-- rows nor pairs ever change, and retention purges key rows only.
CREATE TABLE search_entries (
    name        VARBINARY(40) NOT NULL,
    value       VARBINARY(2000) NOT NULL,
    sequence    BIGINT UNSIGNED NOT NULL,
    account_id  BIGINT UNSIGNED NOT NULL,
    entry_id    BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (name, value, sequence),
    KEY search_entries_account (name, value, account_id, sequence)
) ENGINE = InnoDB;

-- One row: the next sequence whose entries the index lacks. Rounds of an
-- instance of an older version (a rolling upgrade) number commits without
-- indexing them; the next round of this version indexes them, from here,
-- and a search reads only as far as the index holds.
CREATE TABLE search_index (
    id             TINYINT UNSIGNED NOT NULL,
    next_sequence  BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT search_index_one_row CHECK (id = 1)
) ENGINE = InnoDB;

-- The migrations hold the stream's lease while they run (db::admin::fence):
-- no round numbers anything between this copy and the index's row.
INSERT INTO search_entries (name, value, sequence, account_id, entry_id)
SELECT p.name, p.value, c.first_sequence + e.commit_pos, e.account_id, e.entry_id
FROM metadata_pairs p
STRAIGHT_JOIN entries e FORCE INDEX (entries_key)
    ON e.namespace = p.namespace AND e.idempotency_key = p.idempotency_key
STRAIGHT_JOIN stream_commits c ON c.commit_id = e.commit_id
WHERE c.first_sequence IS NOT NULL;

INSERT INTO search_index (id, next_sequence)
SELECT 1, next_sequence FROM ledger_stream WHERE id = 1;
