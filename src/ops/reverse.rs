//! Reverse: undoes a Transfer, a Post or a Credit, named by the key it committed
//! under in the caller's namespace (SPEC 3.12). One mirror leg per original leg,
//! from its destination back to its source, last leg first, as one post: all or
//! nothing, each leg under the limits (`force` lifts the floor, never the
//! ceiling), a declined leg named by its original index. The mirror of a credit
//! is a CHARGE. Each entry names the original entry on its account.
//!
//! At most once per operation: the executor locks the original's key row with
//! the call's own (waiting out a call still in flight under it, never deciding
//! the reversal in the batch that decides the original: `db::exec::writer`),
//! and the book
//! says whether a reversal committed or was decided before this one; what makes
//! it impossible for two to commit is the primary key of the `reversals` row the
//! transaction writes (`db::tables::reversals`), on one server and on a cluster.

use super::messages::entry_message;
use super::method::Method;
use super::operation::{Named, Operation, Reversal};
use super::parse::Violations;
use crate::ledger::book::{Book, Original, Posting, Record};
use crate::ledger::decline::{Decline, Refusal};
use crate::ledger::fingerprint::Fields;
use crate::ledger::model::{Effect, Entry, EntryKind};
use crate::ledger::values::{Amount, Description};
use crate::ledger::{FieldViolation, IdempotencyKey, Metadata, Needs};
use crate::proto::pb;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reverse {
    /// Never the call's own key, checked when the request is parsed.
    pub original_key: IdempotencyKey,
    /// Ignore the floors, held money included.
    pub force: bool,
    /// On every reversal entry.
    pub description: Description,
    pub metadata: Metadata,
}

/// One leg of the original, as its entries show it.
#[derive(Debug)]
enum Leg<'a> {
    Credit(&'a Entry),
    Transfer { out: &'a Entry, into: &'a Entry },
}

impl Operation for Reverse {
    type Request = pb::ReverseRequest;
    type Reply = pb::ReverseReply;
    type Output = Vec<Entry>;

    const EFFECTS: &'static [Effect] = &[
        Effect::Entry(EntryKind::TransferOut),
        Effect::Entry(EntryKind::TransferIn),
        Effect::Entry(EntryKind::Charge),
    ];
    const PER_LEG: bool = true;
    const REVERSAL: Reversal = Reversal::Refused("a reversal");

    fn parse(r: pb::ReverseRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let mut check = Violations::default();
        let key = check.key(r.idempotency_key);
        let original_key = check.field(IdempotencyKey::parse("original_key", r.original_key));
        if let (Some(key), Some(original)) = (&key, &original_key)
            && key == original
        {
            check.push(FieldViolation::new(
                "original_key",
                "must differ from idempotency_key: a call cannot reverse itself",
            ));
        }
        let description = check.field(Description::parse("description", r.description));
        let metadata = check.metadata(r.metadata);
        match (key, original_key, description, metadata) {
            (Some(key), Some(original_key), Some(description), Some(metadata))
                if check.is_empty() =>
            {
                let reverse = Self {
                    original_key,
                    force: r.force,
                    description,
                    metadata,
                };
                Ok((key, reverse))
            }
            _ => Err(check.into_violations()),
        }
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.str(self.original_key.as_str());
        fields.u64(u64::from(self.force));
        fields.str(self.description.as_str());
        self.metadata.fingerprint(fields);
    }

    fn needs(&self) -> Needs {
        Needs {
            originals: vec![self.original_key.clone()],
            ..Needs::default()
        }
    }

    fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn decide(&self, book: &mut Book) -> Result<Vec<Entry>, Refusal> {
        let original = book.original(&self.original_key)?.clone();
        let legs = legs(&original)?;
        if let Some(reversal_key) = original.reversed_by {
            return Err(already_reversed(&reversal_key).into());
        }
        let mut applied = Vec::with_capacity(2 * legs.len());
        for leg in legs.iter().rev() {
            let index = match leg {
                Leg::Credit(entry) | Leg::Transfer { out: entry, .. } => entry.leg,
            };
            self.mirror(book, leg, &mut applied)
                .map_err(|refusal| refusal.in_leg(index))?;
        }
        book.reverse(&self.original_key)?;
        Ok(applied)
    }

    /// The entries, without the call's metadata, as a post's reply (a post of
    /// 256 legs is reversed by 512 entries; reads show it on each).
    fn reply(entries: &Vec<Entry>) -> pb::ReverseReply {
        pb::ReverseReply {
            entries: entries
                .iter()
                .map(|entry| pb::Entry {
                    metadata: std::collections::BTreeMap::new(),
                    ..entry_message(entry)
                })
                .collect(),
        }
    }

    fn named(reply: pb::ReverseReply) -> Result<Named, String> {
        if reply.entries.is_empty() {
            return Err(super::operation::lacks_a_field());
        }
        Ok(Named {
            entries: reply.entries,
            hold: None,
        })
    }

    /// A credit's mirror, or one or more legs' of transfers (`ledger audit`).
    fn entries_pattern() -> String {
        let [charge, out, into] = [
            EntryKind::Charge,
            EntryKind::TransferOut,
            EntryKind::TransferIn,
        ]
        .map(EntryKind::code);
        format!("^({charge}|{out},{into}(,{out},{into})*)$")
    }
}

impl Reverse {
    /// Applies the mirror of one leg: a credit's CHARGE, or a transfer's debit
    /// on its destination and credit on its source.
    fn mirror(&self, book: &mut Book, leg: &Leg<'_>, applied: &mut Vec<Entry>) -> Result<(), Refusal> {
        let posting = |entry: &Entry, kind| -> Result<Posting, Refusal> {
            book.account_in(entry.account_id, entry.currency)?;
            let amount = Amount::parse("amount", entry.amount)
                .map_err(|_| Refusal::Internal(format!("entry {} moved no money", entry.id)))?;
            Ok(Posting {
                reverses: Some(entry.id),
                leg: entry.leg,
                ignores_floor: self.force,
                ..Posting::new(entry.account_id, kind, amount, self.description.clone())
            })
        };
        match leg {
            Leg::Credit(credit) => {
                let charge = posting(credit, EntryKind::Charge)?;
                applied.push(book.enter(charge)?);
            }
            Leg::Transfer { out, into } => {
                let debit = Posting {
                    counterparty: Some(out.account_id),
                    ..posting(into, EntryKind::TransferOut)?
                };
                let credit = Posting {
                    counterparty: Some(into.account_id),
                    ..posting(out, EntryKind::TransferIn)?
                };
                applied.push(book.enter(debit)?);
                applied.push(book.enter(credit)?);
            }
        }
        Ok(())
    }
}

/// A reversal of an operation another key has reversed.
fn already_reversed(reversal_key: &IdempotencyKey) -> Decline {
    Decline::precondition(
        "ALREADY_REVERSED",
        "the operation was already reversed, under reversal_key".into(),
        vec![("reversal_key", reversal_key.as_str().to_owned())],
    )
}

/// A reversal of `what`: not a Transfer, a Post or a Credit that took effect.
fn not_reversible(what: &str) -> Decline {
    Decline::precondition(
        "NOT_REVERSIBLE",
        format!("{what} cannot be reversed; only a Transfer, a Post or a Credit that took effect"),
        Vec::new(),
    )
}

/// A reversal of a key under which nothing had committed.
fn key_not_found() -> Decline {
    Decline::not_found(
        "KEY_NOT_FOUND",
        "nothing has taken effect under original_key".into(),
        Vec::new(),
    )
}

/// The original's legs, or why it cannot be reversed.
fn legs(original: &Original) -> Result<Vec<Leg<'_>>, Refusal> {
    let not_reversible = |what: &'static str| Refusal::from(not_reversible(what));
    match original.record {
        Record::Absent { effects: false } if original.entries.is_empty() => {
            return Err(key_not_found().into());
        }
        Record::Committed {
            succeeded: false, ..
        } => return Err(not_reversible("a declined call")),
        Record::Committed { method, .. } => match Method::from_code(method).map(Method::reversal) {
            Some(Reversal::Allowed) => {}
            Some(Reversal::Refused(what)) => return Err(not_reversible(what)),
            None => return Err(Refusal::Internal(format!("a key row of method {method}"))),
        },
        // Its key row purged: the entries it left say what it was.
        Record::Absent { .. } => {}
    }
    let mut legs = Vec::new();
    let mut entries = original.entries.iter();
    while let Some(entry) = entries.next() {
        if entry.reverses.is_some() {
            return Err(not_reversible("a reversal"));
        }
        let leg = match entry.kind {
            EntryKind::Credit => Leg::Credit(entry),
            EntryKind::TransferOut => match entries.next() {
                Some(into) if into.kind == EntryKind::TransferIn && into.leg == entry.leg => {
                    Leg::Transfer { out: entry, into }
                }
                _ => {
                    return Err(Refusal::Internal(format!(
                        "entry {} is a transfer's debit without its credit",
                        entry.id
                    )));
                }
            },
            EntryKind::Charge => return Err(not_reversible("a charge")),
            EntryKind::Capture => return Err(not_reversible("a capture")),
            EntryKind::Refund => return Err(not_reversible("a refund")),
            EntryKind::Limits => return Err(not_reversible("a SetLimits")),
            EntryKind::TransferIn => {
                return Err(Refusal::Internal(format!(
                    "entry {} is a transfer's credit without its debit",
                    entry.id
                )));
            }
        };
        legs.push(leg);
    }
    if legs.is_empty() {
        // A hold's placement or void, or an OpenAccount, whose key row was purged.
        return Err(not_reversible("an operation that wrote no entry"));
    }
    Ok(legs)
}
