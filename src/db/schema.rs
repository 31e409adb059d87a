//! Diesel's view of the tables in `migrations/` (the shape `diesel print-schema`
//! produces); `tests/api/schema.rs` checks it against a migrated database.

diesel::table! {
    accounts (account_id) {
        account_id -> Unsigned<BigInt>,
        currency -> Char,
        balance -> BigInt,
        created_at -> Datetime,
        entry_count -> Unsigned<BigInt>,
    }
}

diesel::table! {
    entries (entry_id) {
        entry_id -> Unsigned<BigInt>,
        account_id -> Unsigned<BigInt>,
        account_seq -> Unsigned<BigInt>,
        kind -> Unsigned<TinyInt>,
        amount -> BigInt,
        currency -> Char,
        balance_after -> BigInt,
        namespace -> Varbinary,
        idempotency_key -> Varbinary,
        description -> Varchar,
        created_at -> Datetime,
    }
}

diesel::table! {
    idempotency_keys (namespace, idempotency_key) {
        namespace -> Varbinary,
        idempotency_key -> Varbinary,
        method -> Unsigned<TinyInt>,
        fingerprint -> Binary,
        outcome_code -> Nullable<Integer>,
        outcome -> Nullable<Blob>,
        created_at -> Datetime,
    }
}

diesel::table! {
    id_blocks (name) {
        name -> Varchar,
        next_id -> Unsigned<BigInt>,
    }
}

diesel::joinable!(entries -> accounts (account_id));
diesel::allow_tables_to_appear_in_same_query!(accounts, entries, id_blocks, idempotency_keys);
