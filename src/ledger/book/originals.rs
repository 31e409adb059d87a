//! The operations the calls name by key (a reversal's original), and the
//! reversals decided against them.

use super::calls::{Book, Undo};
use super::rows::{NewReversal, Original};
use crate::ledger::decline::Refusal;
use crate::ledger::values::{IdempotencyKey, ScopedKey};

impl Book {
    /// The book with the operations the calls name by key.
    #[must_use]
    pub fn with_originals(mut self, originals: impl IntoIterator<Item = Original>) -> Self {
        self.originals = originals.into_iter().map(|o| (o.key.clone(), o)).collect();
        self
    }

    /// The operation the current call names by `key`, in its caller's
    /// namespace, as the decisions before it left it.
    pub fn original(&self, key: &IdempotencyKey) -> Result<&Original, Refusal> {
        let scoped = ScopedKey {
            namespace: self.caller()?.key.namespace,
            key: key.clone(),
        };
        self.originals
            .get(&scoped)
            .ok_or_else(|| Refusal::Internal("an operation named by key was not loaded".into()))
    }

    /// Records that the current call reverses the operation under `key`: the
    /// calls decided after it see it reversed, and the transaction writes the
    /// row whose primary key lets no other transaction reverse it again.
    pub fn reverse(&mut self, key: &IdempotencyKey) -> Result<(), Refusal> {
        let call = self.current()?;
        let caller = self.caller()?.key;
        let scoped = ScopedKey {
            namespace: caller.namespace,
            key: key.clone(),
        };
        let original = self
            .originals
            .get_mut(&scoped)
            .ok_or_else(|| Refusal::Internal("an operation named by key was not loaded".into()))?;
        if original.reversed_by.is_some() {
            return Err(Refusal::Internal("an operation reversed twice".into()));
        }
        original.reversed_by = Some(caller.key);
        self.reversals.push(NewReversal {
            original: scoped,
            call,
        });
        self.log(Undo::Reversal);
        Ok(())
    }
}
