//! What an idempotency key remembers: the final outcome of its request, encoded
//! once and replayed byte for byte.

use super::decline::Decline;

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

impl StoredOutcome {
    /// A success: its encoded reply message.
    pub fn reply(body: Vec<u8>) -> Self {
        Self { code: 0, body }
    }
}

/// Encodes declines for storage as the wire's `google.rpc.Status`. The wire layer
/// provides it, so storage never depends on the wire format, and the original
/// answer and every replay are rendered from the same stored bytes. (A success is
/// encoded by its operation, `ops`.)
pub trait DeclineEncoder: Send + Sync + std::fmt::Debug {
    fn declined(&self, decline: &Decline) -> StoredOutcome;
}
