//! Outcomes as bytes: the encoding of a decline stored under a key (a success is
//! encoded by its operation), and the rendering of stored bytes back into a reply
//! or a status. The original answer and every replay are
//! rendered from the same stored bytes, so they cannot differ.

use bytes::Bytes;
use prost::Message;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Response, Status};

use super::status::{REPLAYED_HEADER, from_decline, report};
use crate::error::Error;
use crate::ledger::{Decline, DeclineEncoder, KeyedOutcome, StoredOutcome};

/// Encodes declines as the `google.rpc.Status` the wire carries.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProtoEncoder;

impl DeclineEncoder for ProtoEncoder {
    fn declined(&self, decline: &Decline) -> StoredOutcome {
        let status = from_decline(decline);
        StoredOutcome {
            code: status.code() as i32,
            // tonic's details are the encoded google.rpc.Status: code, message, details.
            body: status.details().to_vec(),
        }
    }
}

/// Renders a stored outcome as the RPC's answer. prost encodes a message
/// deterministically, so the reply's wire bytes are the stored bytes.
pub(super) fn render<M: Message + Default>(keyed: KeyedOutcome) -> Result<Response<M>, Status> {
    let KeyedOutcome { outcome, replayed } = keyed;
    let mut metadata = MetadataMap::new();
    if replayed {
        metadata.insert(REPLAYED_HEADER, MetadataValue::from_static("true"));
    }
    if outcome.code == Code::Ok as i32 {
        let reply = M::decode(outcome.body.as_slice()).map_err(|e| {
            report(&Error::internal(format!(
                "stored reply does not decode: {e}"
            )))
        })?;
        let mut response = Response::new(reply);
        *response.metadata_mut() = metadata;
        return Ok(response);
    }
    let status = tonic_types::pb::Status::decode(outcome.body.as_slice()).map_err(|e| {
        report(&Error::internal(format!(
            "stored status does not decode: {e}"
        )))
    })?;
    Err(Status::with_details_and_metadata(
        Code::from_i32(outcome.code),
        status.message,
        Bytes::from(outcome.body),
        metadata,
    ))
}
