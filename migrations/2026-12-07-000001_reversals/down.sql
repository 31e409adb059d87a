-- Refuses while any operation was reversed: its entries would lose what they
-- mirror, and the operation could be reversed again.
DROP PROCEDURE IF EXISTS ledger_refuse_reversals_down;

CREATE PROCEDURE ledger_refuse_reversals_down()
    SQL SECURITY INVOKER
BEGIN
    IF EXISTS (SELECT 1 FROM reversals)
        OR EXISTS (SELECT 1 FROM entries WHERE reverses_entry_id IS NOT NULL) THEN
        SIGNAL SQLSTATE '45000'
            SET MESSAGE_TEXT = 'cannot revert reversals: an operation was reversed';
    END IF;
END;

CALL ledger_refuse_reversals_down();

DROP PROCEDURE ledger_refuse_reversals_down;

ALTER TABLE entries DROP COLUMN reverses_entry_id;

DROP TABLE reversals;
