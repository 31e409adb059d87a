DROP TABLE ledger_secrets;
DELETE FROM id_blocks WHERE name = 'accounts';
ALTER TABLE entries
    ADD UNIQUE KEY entries_one_per_key (namespace, idempotency_key),
    DROP INDEX entries_key;
ALTER TABLE entries
    DROP CONSTRAINT entries_refunded_within_amount,
    DROP COLUMN refunded,
    DROP COLUMN hold_id,
    DROP COLUMN refunded_entry_id,
    DROP COLUMN counterparty_account_id,
    DROP COLUMN leg;
ALTER TABLE entries ADD CONSTRAINT entries_kind_known CHECK (kind IN (1, 2));
