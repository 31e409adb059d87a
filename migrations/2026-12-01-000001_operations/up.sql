-- Transfers, refunds and captures: an entry may be one leg of a transfer, a refund
-- of another entry, or the capture of a hold. Entry kinds are the codes of the
-- service's EntryKind; `ledger audit` checks that every stored kind is known.
ALTER TABLE entries DROP CONSTRAINT entries_kind_known;

ALTER TABLE entries
    ADD COLUMN leg TINYINT UNSIGNED NOT NULL DEFAULT 0 AFTER account_seq,
    ADD COLUMN counterparty_account_id BIGINT UNSIGNED NULL,
    ADD COLUMN refunded_entry_id BIGINT UNSIGNED NULL,
    ADD COLUMN hold_id BIGINT UNSIGNED NULL,
    -- What refunds of this entry have returned so far (charges and captures).
    ADD COLUMN refunded BIGINT NOT NULL DEFAULT 0,
    ADD CONSTRAINT entries_refunded_within_amount CHECK (refunded BETWEEN 0 AND amount);

-- One key may write several entries (a transfer's two legs); each is unique.
ALTER TABLE entries
    ADD UNIQUE KEY entries_key (namespace, idempotency_key, leg),
    DROP INDEX entries_one_per_key;

-- Account ids, like entry ids, are handed out in blocks, so an opened account's id
-- is known before it is written.
INSERT INTO id_blocks (name, next_id)
SELECT 'accounts', COALESCE(MAX(account_id), 0) + 1 FROM accounts;

-- Secrets every instance shares: the key of ListEntries' page tokens, so a token
-- issued by one instance is accepted by all, and no client can forge one.
CREATE TABLE ledger_secrets (
    name   VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    value  VARBINARY(64) NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;

INSERT INTO ledger_secrets (name, value) VALUES ('page-tokens', RANDOM_BYTES(32));
