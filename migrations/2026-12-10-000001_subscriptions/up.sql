-- Delivery to other systems (SPEC 3.15). One row per subscription, written by
-- its keyed calls (create, pause, resume, delete) under the row's lock, and by
-- the instance that holds its lease as deliveries succeed or fail.
--
-- `definition` is the encoded ledger.v1.Subscription of what the caller asked
-- for (url, account_ids, kinds, metadata); the rest are columns because they
-- change. `acked_sequence` is the cursor: every matching entry numbered up to
-- it was acknowledged by the receiver. The key of the call that created it is
-- unique in its namespace: how a retry is known to have taken effect once
-- retention purged its key row (SPEC 3.5). `lease_owner` and `lease_until` say which
-- instance delivers it (any other takes it over once `lease_until` passes), and
-- every move of the cursor is conditioned on the lease, so an instance that lost
-- it moves nothing. `failing_since` is when the current run of failures began.
CREATE TABLE subscriptions (
    subscription_id  BIGINT UNSIGNED NOT NULL,
    namespace        VARBINARY(64) NOT NULL,
    definition       BLOB NOT NULL,
    secret           VARBINARY(64) NOT NULL,
    state            TINYINT UNSIGNED NOT NULL,
    acked_sequence   BIGINT UNSIGNED NOT NULL,
    last_error       VARBINARY(1024) NOT NULL DEFAULT '',
    failing_since    DATETIME(6) NULL,
    next_attempt_at  DATETIME(6) NULL,
    lease_owner      VARBINARY(64) NULL,
    lease_until      DATETIME(6) NULL,
    idempotency_key  VARBINARY(255) NOT NULL,
    created_at       DATETIME(6) NOT NULL,
    PRIMARY KEY (subscription_id),
    KEY subscriptions_namespace (namespace, subscription_id),
    UNIQUE KEY subscriptions_key (namespace, idempotency_key)
) ENGINE = InnoDB;

INSERT INTO id_blocks (name, next_id) VALUES ('subscriptions', 1);
