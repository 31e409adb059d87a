//! GetAccount: an account's balance, what its active holds reserve, its limits
//! and metadata, now.

use super::parse::single;
use super::reader::{Read, Reader};
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::proto::pb;
use crate::ledger::AccountId;
use crate::ops::account_message;

#[derive(Debug)]
pub struct GetAccount;

impl Read for GetAccount {
    type Request = pb::GetAccountRequest;
    type Reply = pb::Account;

    async fn answer(
        reader: &Reader,
        request: pb::GetAccountRequest,
        _: &Client,
        call: &Call,
    ) -> Result<pb::Account, Error> {
        let id = single(AccountId::parse("account_id", request.account_id))?;
        Ok(account_message(&reader.db().get_account(call, id).await?))
    }
}
