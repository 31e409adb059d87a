DROP TABLE idempotency_keys;
DROP TABLE entries;
DROP TABLE accounts;
