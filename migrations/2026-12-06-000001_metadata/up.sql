-- Metadata (SPEC 3.11): a call's business tags, stored once for the call, under
-- its key, in the transaction that records its success. What the call wrote (its
-- entries, its hold, its account) carries the same key, and so shows them. Binary
-- columns: keys and values compare byte for byte, with no case folding or space
-- padding. Never changed, and never purged (retention purges key rows only).
--
-- `metadata` holds a call's pairs as one value, by its key: what reads show.
-- `metadata_pairs` holds one row per pair, keyed by the pair first: the calls
-- that hold a pair are a range of its primary key (where a search starts), and
-- whether a call holds another pair is one look-up. Neither needs a secondary
-- index, so a call with three pairs writes four rows and four index entries.
CREATE TABLE metadata (
    namespace        VARBINARY(64) NOT NULL,
    idempotency_key  VARBINARY(255) NOT NULL,
    -- Each key, then its value, as a 4-byte big-endian length and its UTF-8, in
    -- key order: up to 50 pairs of 40 and 2,000 bytes.
    pairs            MEDIUMBLOB NOT NULL,
    PRIMARY KEY (namespace, idempotency_key)
) ENGINE = InnoDB;

CREATE TABLE metadata_pairs (
    name             VARBINARY(40) NOT NULL,
    -- At most 500 characters of UTF-8.
    value            VARBINARY(2000) NOT NULL,
    namespace        VARBINARY(64) NOT NULL,
    idempotency_key  VARBINARY(255) NOT NULL,
    PRIMARY KEY (name, value, namespace, idempotency_key)
) ENGINE = InnoDB;

-- A reply now carries its call's pairs: 50 values of up to 2,000 bytes outgrow a
-- BLOB's 65,535 bytes. A MEDIUMBLOB holds 16 MiB, beyond the largest reply.
ALTER TABLE idempotency_keys MODIFY outcome MEDIUMBLOB NULL;
