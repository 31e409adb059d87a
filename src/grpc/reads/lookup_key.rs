//! LookupKey (SPEC 3.7): whether an operation took effect under a key in the
//! caller's namespace, and its stored answer; executes nothing, and waits for
//! an operation still in flight under the key.

use prost::Message as _;
use tonic::Code;

use super::parse::single;
use super::reader::{Read, Reader};
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::ledger::{IdempotencyKey, ScopedKey};
use crate::ops::{Method, timestamp};
use crate::proto::pb;

#[derive(Debug)]
pub struct LookupKey;

impl Read for LookupKey {
    type Request = pb::LookupKeyRequest;
    type Reply = pb::KeyRecord;

    async fn answer(
        reader: &Reader,
        request: pb::LookupKeyRequest,
        client: &Client,
        call: &Call,
    ) -> Result<pb::KeyRecord, Error> {
        let scoped = ScopedKey {
            namespace: client.namespace.clone(),
            key: single(IdempotencyKey::parse(
                "idempotency_key",
                request.idempotency_key,
            ))?,
        };
        let row = reader
            .db()
            .look_up_key(call, &scoped)
            .await?
            .ok_or(Error::KeyNotFound)?;
        let method = Method::from_code(row.method)
            .ok_or_else(|| Error::internal(format!("unknown method {}", row.method)))?;
        let stored = row
            .outcome()
            .ok_or_else(|| Error::internal("a committed key row has no outcome"))?;
        let outcome = if stored.code == Code::Ok as i32 {
            pb::key_record::Outcome::Reply(stored.body)
        } else {
            let status = tonic_types::pb::Status::decode(stored.body.as_slice())
                .map_err(|e| Error::internal(format!("stored status does not decode: {e}")))?;
            pb::key_record::Outcome::Error(status)
        };
        Ok(pb::KeyRecord {
            idempotency_key: scoped.key.as_str().to_owned(),
            method: format!("/ledger.v1.Ledger/{}", method.name()),
            created_at: Some(timestamp(row.created_at.and_utc())),
            outcome: Some(outcome),
        })
    }
}
