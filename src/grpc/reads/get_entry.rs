//! GetEntry: one journal entry, with its sequence once numbered.

use super::parse::single;
use super::reader::{Read, Reader};
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::proto::pb;
use crate::ledger::EntryId;
use crate::ops::entry_message;

#[derive(Debug)]
pub struct GetEntry;

impl Read for GetEntry {
    type Request = pb::GetEntryRequest;
    type Reply = pb::Entry;

    async fn answer(
        reader: &Reader,
        request: pb::GetEntryRequest,
        _: &Client,
        call: &Call,
    ) -> Result<pb::Entry, Error> {
        let id = single(EntryId::parse("entry_id", request.entry_id))?;
        Ok(entry_message(&reader.db().get_entry(call, id).await?))
    }
}
