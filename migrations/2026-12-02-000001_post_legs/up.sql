-- Posts: a key may write up to 256 legs of two entries each, so an entry's place
-- among its call's entries (`leg`, unique per key) needs more than a byte, and each
-- entry records the post leg that wrote it (`post_leg`, Entry.leg on the wire; 0
-- for every other call). For every entry, post_leg = leg DIV 2.
ALTER TABLE entries
    MODIFY COLUMN leg SMALLINT UNSIGNED NOT NULL DEFAULT 0,
    ADD COLUMN post_leg SMALLINT UNSIGNED NOT NULL DEFAULT 0 AFTER leg;
