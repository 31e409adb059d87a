-- The index is derived from the journal and the pairs: nothing is lost.
DROP TABLE search_index;

DROP TABLE search_entries;
