DELETE FROM id_blocks WHERE name = 'holds';
ALTER TABLE accounts DROP CONSTRAINT accounts_held_not_negative, DROP COLUMN held;
DROP TABLE holds;
