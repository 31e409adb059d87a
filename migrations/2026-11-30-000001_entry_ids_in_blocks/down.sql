ALTER TABLE entries ADD KEY entries_by_account (account_id, entry_id);
ALTER TABLE entries DROP INDEX entries_account_seq, DROP COLUMN account_seq;
ALTER TABLE accounts DROP COLUMN entry_count;
ALTER TABLE entries MODIFY entry_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT;
DROP TABLE id_blocks;
