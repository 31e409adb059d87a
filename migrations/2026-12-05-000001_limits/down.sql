-- Refuses while the ledger uses what limits allow: a balance below zero, a
-- change of limits in a journal, or an account whose limits are not the
-- defaults. Each would be lost, or break the checks put back below.
DROP PROCEDURE IF EXISTS ledger_refuse_limits_down;

CREATE PROCEDURE ledger_refuse_limits_down()
    SQL SECURITY INVOKER
BEGIN
    IF EXISTS (SELECT 1 FROM accounts WHERE balance < 0)
        OR EXISTS (SELECT 1 FROM entries WHERE balance_after < 0) THEN
        SIGNAL SQLSTATE '45000'
            SET MESSAGE_TEXT = 'cannot revert limits: an account has a balance below zero';
    END IF;
    IF EXISTS (SELECT 1 FROM entries WHERE kind = 7) THEN
        SIGNAL SQLSTATE '45000'
            SET MESSAGE_TEXT = 'cannot revert limits: a journal holds a change of limits (kind 7)';
    END IF;
    IF EXISTS (SELECT 1 FROM accounts WHERE NOT (min_balance <=> 0) OR max_balance IS NOT NULL) THEN
        SIGNAL SQLSTATE '45000'
            SET MESSAGE_TEXT = 'cannot revert limits: an account has limits other than a floor at zero and no ceiling';
    END IF;
END;

CALL ledger_refuse_limits_down();

DROP PROCEDURE ledger_refuse_limits_down;

DROP TABLE account_limits;

ALTER TABLE entries
    DROP CONSTRAINT entries_amount_positive;

ALTER TABLE entries
    ADD CONSTRAINT entries_amount_positive CHECK (amount > 0),
    ADD CONSTRAINT entries_balance_after_not_negative CHECK (balance_after >= 0);

ALTER TABLE accounts
    DROP CONSTRAINT accounts_limits_ordered,
    DROP COLUMN min_balance,
    DROP COLUMN max_balance,
    ADD CONSTRAINT accounts_balance_not_negative CHECK (balance >= 0);
