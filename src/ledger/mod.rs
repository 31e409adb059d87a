//! The domain: what a ledger is, independent of how it is reached or stored.
//!
//! Requests are parsed at the boundary into the validated values of [`values`];
//! each operation (`crate::ops`) decides its outcome against the locked rows of a
//! [`book::Book`], whose methods hold the rules every operation shares;
//! [`fingerprint`] binds an idempotency key to one request; [`decline`] is a
//! refusal with its reason and details; [`outcome`] is what a key remembers.
//! Nothing here knows about tonic, protobuf or diesel.

pub mod book;
pub mod decline;
pub mod fingerprint;
pub mod limits;
pub mod metadata;
pub mod model;
pub mod outcome;
pub mod subscription;
pub mod values;

pub use book::{Book, Needs};
pub use decline::{Decline, Refusal};
pub use fingerprint::Fingerprint;
pub use limits::Limits;
pub use metadata::Metadata;
pub use model::{Account, Balance, BalancePoint, Effect, Entry, EntryKind, Hold, HoldState};
pub use outcome::{DeclineEncoder, KeyedOutcome, StoredOutcome};
pub use subscription::{SubscriptionRow, SubscriptionState};
pub use values::{
    AccountId, Amount, Currency, Description, EntryId, FieldViolation, HoldId, IdempotencyKey,
    Namespace, ScopedKey, SubscriptionId, Ttl,
};
