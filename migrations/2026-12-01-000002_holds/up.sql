-- Holds: money reserved on an account until captured, voided or expired. A hold's
-- state is HELD until a capture or void resolves it; a held hold whose expires_at
-- has passed is expired from that instant, whatever the row says (the service
-- compares expires_at with the database's clock wherever it reads a hold).
CREATE TABLE holds (
    hold_id          BIGINT UNSIGNED NOT NULL,
    account_id       BIGINT UNSIGNED NOT NULL,
    amount           BIGINT NOT NULL,
    currency         CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state            TINYINT UNSIGNED NOT NULL,
    captured_amount  BIGINT NOT NULL DEFAULT 0,
    description      VARCHAR(500) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    namespace        VARBINARY(64) NOT NULL,
    idempotency_key  VARBINARY(255) NOT NULL,
    created_at       DATETIME(6) NOT NULL,
    expires_at       DATETIME(6) NOT NULL,
    resolved_at      DATETIME(6) NULL,
    PRIMARY KEY (hold_id),
    UNIQUE KEY holds_key (namespace, idempotency_key),
    KEY holds_by_account (account_id, state, expires_at),
    CONSTRAINT holds_account FOREIGN KEY (account_id) REFERENCES accounts (account_id),
    CONSTRAINT holds_amount_positive CHECK (amount > 0),
    CONSTRAINT holds_captured_within_amount CHECK (captured_amount BETWEEN 0 AND amount)
) ENGINE = InnoDB;

-- The sum of an account's holds in state HELD, expired or not; what they reserve
-- now is computed from the holds themselves.
ALTER TABLE accounts
    ADD COLUMN held BIGINT NOT NULL DEFAULT 0,
    ADD CONSTRAINT accounts_held_not_negative CHECK (held >= 0);

INSERT INTO id_blocks (name, next_id) VALUES ('holds', 1);
