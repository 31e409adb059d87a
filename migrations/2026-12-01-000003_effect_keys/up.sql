-- Every effect carries the key that caused it, unique per namespace, so that a key
-- row purged by retention can never let its operation run again (SPEC 3.5): an
-- entry has its key (and leg) since the journal began, a placed hold since holds
-- began; an opened account and a hold's capture or void carry theirs from here.
ALTER TABLE accounts
    ADD COLUMN namespace VARBINARY(64) NULL,
    ADD COLUMN idempotency_key VARBINARY(255) NULL,
    ADD UNIQUE KEY accounts_key (namespace, idempotency_key);

ALTER TABLE holds
    ADD COLUMN resolved_namespace VARBINARY(64) NULL,
    ADD COLUMN resolved_key VARBINARY(255) NULL,
    ADD UNIQUE KEY holds_resolved_key (resolved_namespace, resolved_key);

-- A captured hold's capture key is its capture entry's (kind 6, CAPTURE).
UPDATE holds h
JOIN entries e ON e.hold_id = h.hold_id AND e.kind = 6
SET h.resolved_namespace = e.namespace, h.resolved_key = e.idempotency_key
WHERE h.resolved_key IS NULL;

-- Retention walks key rows oldest first.
ALTER TABLE idempotency_keys ADD KEY idempotency_keys_by_age (created_at);

-- Instants retention needs: `effect-keys`, from when every effect carries its key
-- (the key rows of accounts opened and holds voided before it are the only record
-- of those keys, and retention keeps them); `keys-purged-before`, the cutoff of the
-- last purge, below which an effect may have lost its key row.
CREATE TABLE ledger_marks (
    name  VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    at    DATETIME(6) NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;

INSERT INTO ledger_marks (name, at) VALUES ('effect-keys', UTC_TIMESTAMP(6));
