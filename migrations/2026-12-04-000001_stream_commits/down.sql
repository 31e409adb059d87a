ALTER TABLE entries
    ADD COLUMN sequence BIGINT UNSIGNED NULL,
    ADD UNIQUE KEY entries_sequence (sequence),
    ADD KEY entries_by_account_sequence (account_id, sequence);
UPDATE entries e JOIN stream_commits c ON c.commit_id = e.commit_id
SET e.sequence = c.first_sequence + e.commit_pos;
ALTER TABLE entries
    DROP KEY entries_commit,
    DROP COLUMN commit_pos,
    DROP COLUMN commit_id;
DROP TABLE stream_commits;
