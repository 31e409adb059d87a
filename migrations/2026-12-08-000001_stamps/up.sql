-- Balances at a point in time (SPEC 3.10) need each account's journal stamped in
-- order: `stamped_at` is the latest time the account's journal holds or was
-- promised, and a transaction that locks the account stamps its entries no
-- earlier (GREATEST(SYSDATE(6), stamped_at)). So `created_at` never goes
-- backwards along an account's journal, also through a node whose clock is
-- behind; and a balance asked for time t, once answered, moves `stamped_at`
-- past t under the account's lock, so no entry stamped at or before t can
-- commit after the answer. Accounts start at their last entry's time (their
-- opening time without one).
ALTER TABLE accounts ADD COLUMN stamped_at DATETIME(6) NULL;

UPDATE accounts a
SET a.stamped_at = GREATEST(a.created_at, COALESCE(
    (SELECT e.created_at FROM entries e
     WHERE e.account_id = a.account_id
     ORDER BY e.account_seq DESC LIMIT 1),
    a.created_at));

ALTER TABLE accounts MODIFY COLUMN stamped_at DATETIME(6) NOT NULL;
