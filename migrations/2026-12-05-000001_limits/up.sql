-- Limits (SPEC 3.9): each account has a floor (the lowest `available` a debit may
-- leave; NULL: none at all) and a ceiling (the highest balance a credit may leave;
-- NULL: none). The defaults are those every account had before: a floor at zero
-- and no ceiling. Balances may now go below zero where the floor allows, so the
-- checks that assumed otherwise go; held money stays non-negative.
ALTER TABLE accounts
    DROP CONSTRAINT accounts_balance_not_negative;

ALTER TABLE accounts
    ADD COLUMN min_balance BIGINT NULL DEFAULT 0,
    ADD COLUMN max_balance BIGINT NULL,
    ADD CONSTRAINT accounts_limits_ordered
        CHECK (min_balance IS NULL OR max_balance IS NULL OR min_balance <= max_balance);

-- A change of limits is a journal entry of its own, kind 7 (LIMITS in the
-- service's EntryKind), of amount 0; every other entry moves a positive amount.
ALTER TABLE entries
    DROP CONSTRAINT entries_balance_after_not_negative;

ALTER TABLE entries
    DROP CONSTRAINT entries_amount_positive;

ALTER TABLE entries
    ADD CONSTRAINT entries_amount_positive CHECK (amount > 0 OR (kind = 7 AND amount = 0));

-- Every account's limits over its history: its opening limits at place 0, then
-- the limits each LIMITS entry set, at that entry's place in its journal
-- (`account_seq`). The limits in force after place p are the row with the
-- highest place at or below p: one descent of the primary key, whatever the
-- journal's length. Written only by OpenAccount and SetLimits, so the money
-- paths pay nothing for it.
CREATE TABLE account_limits (
    account_id   BIGINT UNSIGNED NOT NULL,
    account_seq  BIGINT UNSIGNED NOT NULL,
    min_balance  BIGINT NULL,
    max_balance  BIGINT NULL,
    PRIMARY KEY (account_id, account_seq),
    CONSTRAINT account_limits_account FOREIGN KEY (account_id) REFERENCES accounts (account_id),
    CONSTRAINT account_limits_ordered
        CHECK (min_balance IS NULL OR max_balance IS NULL OR min_balance <= max_balance)
) ENGINE = InnoDB;

INSERT INTO account_limits (account_id, account_seq, min_balance, max_balance)
SELECT account_id, 0, 0, NULL FROM accounts;
