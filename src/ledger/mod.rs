//! The domain: what a ledger is, independent of how it is reached or stored.
//!
//! Requests are parsed at the boundary into the validated values of [`values`] and
//! the operations of [`ops`], one module per keyed RPC, each deciding its outcome
//! against the locked rows of a [`book::Book`]; [`fingerprint`] binds an
//! idempotency key to one request; [`outcome`] is what a key remembers. Nothing
//! here knows about tonic or diesel.

pub mod book;
pub mod decline;
pub mod fingerprint;
pub mod model;
pub mod ops;
pub mod outcome;
pub mod values;

pub use book::Book;
pub use decline::{Decline, Refusal};
pub use fingerprint::Fingerprint;
pub use model::{Account, Entry, EntryKind, Hold, HoldState, Method};
pub use ops::{Command, Needs, Operation};
pub use outcome::{KeyedOutcome, OutcomeEncoder, Reply, StoredOutcome};
pub use values::{
    AccountId, Amount, Currency, Description, EntryId, FieldViolation, HoldId, IdempotencyKey,
    Namespace, ScopedKey, Ttl,
};
