DROP TABLE ledger_marks;
ALTER TABLE idempotency_keys DROP INDEX idempotency_keys_by_age;
ALTER TABLE holds
    DROP INDEX holds_resolved_key,
    DROP COLUMN resolved_namespace,
    DROP COLUMN resolved_key;
ALTER TABLE accounts
    DROP INDEX accounts_key,
    DROP COLUMN namespace,
    DROP COLUMN idempotency_key;
