-- Nothing but the order of future stamps depends on `stamped_at`.
ALTER TABLE accounts DROP COLUMN stamped_at;
