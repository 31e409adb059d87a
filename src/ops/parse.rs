//! Request validation: every invalid field of a request is reported at once.

use crate::ledger::{FieldViolation, IdempotencyKey, Limits, Metadata};
use crate::proto::pb;

/// The violations found so far in one request.
#[derive(Debug, Default)]
pub struct Violations(Vec<FieldViolation>);

impl Violations {
    /// The parsed value, or `None` with its violation recorded.
    pub fn field<T>(&mut self, parsed: Result<T, FieldViolation>) -> Option<T> {
        parsed.map_err(|v| self.0.push(v)).ok()
    }

    pub fn key(&mut self, raw: String) -> Option<IdempotencyKey> {
        self.field(IdempotencyKey::parse("idempotency_key", raw))
    }

    /// An `AccountLimits` (field `limits`), each of its violations named
    /// `limits.*`.
    pub fn limits(&mut self, raw: pb::AccountLimits) -> Option<Limits> {
        let raw = (raw.min_balance, raw.no_min_balance, raw.max_balance);
        Limits::parse("limits", raw)
            .map_err(|violations| self.0.extend(violations))
            .ok()
    }

    /// A call's `metadata`, each violation naming the field and the key at fault.
    pub fn metadata(
        &mut self,
        raw: impl IntoIterator<Item = (String, String)>,
    ) -> Option<Metadata> {
        Metadata::parse("metadata", raw)
            .map_err(|violations| self.0.extend(violations))
            .ok()
    }

    /// Records a violation found by a check across fields.
    pub fn push(&mut self, violation: FieldViolation) {
        self.0.push(violation);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_violations(self) -> Vec<FieldViolation> {
        self.0
    }
}

/// A request of one field.
pub fn single<T>(parsed: Result<T, FieldViolation>) -> Result<T, Vec<FieldViolation>> {
    parsed.map_err(|v| vec![v])
}
