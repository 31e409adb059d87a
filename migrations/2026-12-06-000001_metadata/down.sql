-- Refuses while any call carries metadata, or any stored outcome outgrew a BLOB:
-- either would be lost.
DROP PROCEDURE IF EXISTS ledger_refuse_metadata_down;

CREATE PROCEDURE ledger_refuse_metadata_down()
    SQL SECURITY INVOKER
BEGIN
    IF EXISTS (SELECT 1 FROM metadata) THEN
        SIGNAL SQLSTATE '45000'
            SET MESSAGE_TEXT = 'cannot revert metadata: calls carry metadata';
    END IF;
    IF EXISTS (SELECT 1 FROM idempotency_keys WHERE LENGTH(outcome) > 65535) THEN
        SIGNAL SQLSTATE '45000'
            SET MESSAGE_TEXT = 'cannot revert metadata: a stored outcome is longer than a BLOB holds';
    END IF;
END;

CALL ledger_refuse_metadata_down();

DROP PROCEDURE ledger_refuse_metadata_down;

DROP TABLE metadata_pairs;

DROP TABLE metadata;

ALTER TABLE idempotency_keys MODIFY outcome BLOB NULL;
