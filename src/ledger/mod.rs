//! The domain: what a ledger is, independent of how it is reached or stored.
//!
//! Requests are parsed at the boundary into the validated values of [`values`];
//! [`rules`] decides every balance change; [`fingerprint`] binds an idempotency key
//! to one request; [`outcome`] is what a key remembers. Nothing here knows about
//! tonic or diesel.

pub mod fingerprint;
pub mod model;
pub mod outcome;
pub mod rules;
pub mod values;

pub use fingerprint::Fingerprint;
pub use model::{Account, Command, Decline, Entry, EntryKind, Method, Posting};
pub use outcome::{KeyedOutcome, OutcomeEncoder, StoredOutcome};
pub use values::{
    AccountId, Amount, Currency, Description, FieldViolation, IdempotencyKey, Namespace, ScopedKey,
};
