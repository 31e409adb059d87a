//! What an idempotency key remembers: the final outcome of its request, encoded
//! once and replayed byte for byte.

use super::decline::Decline;
use super::model::{Account, Entry, Hold};

/// A successful operation's answer, before it is encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    OpenAccount(Account),
    Credit(Entry),
    Charge(Entry),
    Transfer { debit: Entry, credit: Entry },
    Refund(Entry),
    PlaceHold(Hold),
    CaptureHold { hold: Hold, entry: Entry },
    VoidHold(Hold),
}

/// An encoded final outcome as stored in the key's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOutcome {
    /// The gRPC status code: 0 for a success, else the code of a stored decline.
    pub code: i32,
    /// The encoded reply message, or the encoded `google.rpc.Status` of a decline.
    pub body: Vec<u8>,
}

/// A keyed call's answer, and whether it was replayed from an earlier attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedOutcome {
    pub outcome: StoredOutcome,
    pub replayed: bool,
}

/// Encodes outcomes for storage. The wire layer provides it, so storage never
/// depends on the wire format, and the original answer and every replay are
/// rendered from the same stored bytes.
pub trait OutcomeEncoder: Send + Sync + std::fmt::Debug {
    fn reply(&self, reply: &Reply) -> StoredOutcome;
    fn declined(&self, decline: &Decline) -> StoredOutcome;
}
