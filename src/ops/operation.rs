//! What a keyed operation is ([`Operation`]): one slice's whole contract, with
//! whether it may be reversed and what its stored reply names.

use prost::Message;

use crate::ledger::{
    Book, Effect, FieldViolation, IdempotencyKey, Metadata, Needs, Refusal, fingerprint::Fields,
};
use crate::proto::pb;

/// Whether `Reverse` may undo an operation's success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reversal {
    /// Its entries are reversed leg by leg.
    Allowed,
    /// Declined `NOT_REVERSIBLE`, naming what it was ("a charge").
    Refused(&'static str),
}

/// A keyed operation: one validated request, and everything it means.
pub trait Operation: std::fmt::Debug + Send + Sync + Sized + 'static {
    /// Its RPC's request and reply messages.
    type Request: Message + Default;
    type Reply: Message + Default;
    /// What a success decides, before it becomes the reply.
    type Output;

    /// What a success leaves behind, each carrying the call's key: the journal
    /// entries it writes, in order, and the rows it creates or resolves.
    const EFFECTS: &'static [Effect];

    /// Whether its entries repeat, in the order of `EFFECTS`, once per leg of the
    /// request (a post's legs), rather than once.
    const PER_LEG: bool = false;

    /// Whether `Reverse` may undo a success of it (SPEC 3.12).
    const REVERSAL: Reversal;

    /// The key and the validated operation, or every invalid field (SPEC 3.2
    /// step 1: nothing touches the database before this).
    fn parse(request: Self::Request) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>>;

    /// Feeds the request's fields other than the key to the fingerprint, in a
    /// fixed order (stored fingerprints outlive releases: never reorder).
    fn fingerprint(&self, fields: &mut Fields);

    /// The rows the decision reads; the executor locks them first.
    fn needs(&self) -> Needs;

    /// The outcome, decided against the locked rows. Every change goes through the
    /// book, which undoes a refused call's changes.
    fn decide(&self, book: &mut Book) -> Result<Self::Output, Refusal>;

    /// The call's metadata, stored on what it writes (none by default).
    fn metadata(&self) -> &Metadata {
        Metadata::none()
    }

    /// The reply message of a success.
    fn reply(output: &Self::Output) -> Self::Reply;

    /// The entries and the hold a stored reply names, for `ledger audit`; an
    /// error where the reply lacks what every reply of this method has.
    fn named(reply: Self::Reply) -> Result<Named, String>;

    /// The kinds of the entries a success writes, in order, as a regular
    /// expression over their codes joined by commas (`ledger audit`): the
    /// entries of `EFFECTS` once, or once for each of one or more legs.
    fn entries_pattern() -> String {
        let once = Self::EFFECTS
            .iter()
            .filter_map(|effect| match effect {
                Effect::Entry(kind) => Some(kind.code().to_string()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(",");
        if Self::PER_LEG {
            format!("^{once}(,{once})*$")
        } else {
            format!("^{once}$")
        }
    }
}

/// What a stored reply names.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Named {
    /// Its entries, in the order the method writes them.
    pub entries: Vec<pb::Entry>,
    pub hold: Option<pb::Hold>,
}

impl Named {
    /// The entries of a reply; a missing one is reported as a mismatch with what
    /// its key wrote.
    pub fn entries<const N: usize>(entries: [Option<pb::Entry>; N]) -> Self {
        Self {
            entries: entries.into_iter().map(Option::unwrap_or_default).collect(),
            hold: None,
        }
    }

    /// A hold every reply of the method has.
    pub fn hold(hold: Option<pb::Hold>) -> Result<Self, String> {
        Ok(Self {
            hold: Some(hold.ok_or_else(lacks_a_field)?),
            ..Self::default()
        })
    }
}

pub(crate) fn lacks_a_field() -> String {
    "the stored reply lacks a field".to_owned()
}

pub(super) fn named<O: Operation>(body: &[u8]) -> Result<Named, String> {
    let reply =
        O::Reply::decode(body).map_err(|e| format!("the stored reply does not decode: {e}"))?;
    O::named(reply)
}
