DROP TABLE ledger_stream;
ALTER TABLE entries
    DROP KEY entries_by_account_sequence,
    DROP KEY entries_sequence,
    DROP COLUMN sequence;
