//! GetHold: one hold, its state as of the database's clock (an expired hold
//! shows as expired at once).

use super::parse::single;
use super::reader::{Read, Reader};
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::proto::pb;
use crate::ledger::HoldId;
use crate::ops::hold_message;

#[derive(Debug)]
pub struct GetHold;

impl Read for GetHold {
    type Request = pb::GetHoldRequest;
    type Reply = pb::Hold;

    async fn answer(
        reader: &Reader,
        request: pb::GetHoldRequest,
        _: &Client,
        call: &Call,
    ) -> Result<pb::Hold, Error> {
        let id = single(HoldId::parse("hold_id", request.hold_id))?;
        let (hold, now) = reader.db().get_hold(call, id).await?;
        Ok(hold_message(&hold, hold.state_at(now)))
    }
}
