//! How the executor sees a keyed call whatever its operation ([`Keyed`],
//! [`Command`]): an [`Operation`] tied to its [`Method`] by the registry.

use prost::Message as _;

use super::method::{Method, Registered};
use super::operation::Operation;
use crate::ledger::{Book, Fingerprint, Metadata, Needs, Refusal};

/// A validated keyed request as the executor sees it, whatever its operation.
pub trait Keyed: std::fmt::Debug + Send + Sync {
    fn method(&self) -> Method;

    /// The fingerprint its key is bound to (SPEC 3.1).
    fn fingerprint(&self) -> Fingerprint;

    /// The rows its decision reads.
    fn needs(&self) -> Needs;

    /// The metadata stored on what a success writes.
    fn metadata(&self) -> &Metadata;

    /// Decides against the book; a success comes back as its encoded reply.
    fn decide(&self, book: &mut Book) -> Result<Vec<u8>, Refusal>;
}

impl<O: Operation + Registered> Keyed for O {
    fn method(&self) -> Method {
        O::METHOD
    }

    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::new(O::METHOD.name(), |fields| {
            Operation::fingerprint(self, fields);
        })
    }

    fn needs(&self) -> Needs {
        Operation::needs(self)
    }

    fn metadata(&self) -> &Metadata {
        Operation::metadata(self)
    }

    fn decide(&self, book: &mut Book) -> Result<Vec<u8>, Refusal> {
        Operation::decide(self, book).map(|output| O::reply(&output).encode_to_vec())
    }
}

/// A keyed call's operation.
pub type Command = Box<dyn Keyed>;
