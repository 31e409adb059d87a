-- Accounts: one balance per account, in one currency, never below zero.
CREATE TABLE accounts (
    account_id  BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    currency    CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    balance     BIGINT NOT NULL,
    created_at  DATETIME(6) NOT NULL,
    PRIMARY KEY (account_id),
    CONSTRAINT accounts_balance_not_negative CHECK (balance >= 0)
) ENGINE = InnoDB;

-- The append-only journal: one row per successful Credit or Charge.
CREATE TABLE entries (
    entry_id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    account_id       BIGINT UNSIGNED NOT NULL,
    kind             TINYINT UNSIGNED NOT NULL,
    amount           BIGINT NOT NULL,
    currency         CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    balance_after    BIGINT NOT NULL,
    namespace        VARBINARY(64) NOT NULL,
    idempotency_key  VARBINARY(255) NOT NULL,
    description      VARCHAR(500) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    created_at       DATETIME(6) NOT NULL,
    PRIMARY KEY (entry_id),
    UNIQUE KEY entries_one_per_key (namespace, idempotency_key),
    KEY entries_by_account (account_id, entry_id),
    CONSTRAINT entries_account FOREIGN KEY (account_id) REFERENCES accounts (account_id),
    CONSTRAINT entries_kind_known CHECK (kind IN (1, 2)),
    CONSTRAINT entries_amount_positive CHECK (amount > 0),
    CONSTRAINT entries_balance_after_not_negative CHECK (balance_after >= 0)
) ENGINE = InnoDB;

-- One row per idempotency key. The key columns are binary so keys compare byte for
-- byte: a case-folding, space-padding collation would merge `req-42` and `REQ-42`.
-- The row is inserted by the probe and gets its outcome in the same transaction, so
-- a committed row always has one.
CREATE TABLE idempotency_keys (
    namespace        VARBINARY(64) NOT NULL,
    idempotency_key  VARBINARY(255) NOT NULL,
    method           TINYINT UNSIGNED NOT NULL,
    fingerprint      BINARY(32) NOT NULL,
    outcome_code     INT NULL,
    outcome          BLOB NULL,
    created_at       DATETIME(6) NOT NULL,
    PRIMARY KEY (namespace, idempotency_key)
) ENGINE = InnoDB;
