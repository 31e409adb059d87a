//! ListAccounts (SPEC 3.11): the accounts whose metadata holds every given pair
//! (none: every account), by id, paged.

use super::parse::{ByMetadata, filter, size_of_page};
use super::reader::{Read, Reader};
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::ops::{Violations, account_message};
use crate::proto::pb;

#[derive(Debug)]
pub struct ListAccounts;

impl Read for ListAccounts {
    type Request = pb::ListAccountsRequest;
    type Reply = pb::ListAccountsReply;

    async fn answer(
        reader: &Reader,
        request: pb::ListAccountsRequest,
        _: &Client,
        call: &Call,
    ) -> Result<pb::ListAccountsReply, Error> {
        let token = request.page_token.clone();
        let query = parse(request)?;
        let scope = query.scope("ListAccounts");
        let pages = reader.pages();
        let after = pages.read_query(&scope, &token)?;
        let found = reader
            .db()
            .list_accounts(call, &query.pairs, after, query.size)
            .await?;
        let next_page_token = match found.items.last() {
            Some(last) if found.more => pages.issue_query(&scope, last.id.get()),
            _ => String::new(),
        };
        Ok(pb::ListAccountsReply {
            accounts: found.items.iter().map(account_message).collect(),
            next_page_token,
        })
    }
}

/// The request: 0 to 4 pairs, a page size.
fn parse(r: pb::ListAccountsRequest) -> Result<ByMetadata, Error> {
    let mut check = Violations::default();
    let pairs = filter(&mut check, r.metadata, 0);
    let size = size_of_page(&mut check, r.page_size);
    match (pairs, size) {
        (Some(pairs), Some(size)) => Ok(ByMetadata {
            pairs,
            account: None,
            size,
        }),
        _ => Err(Error::InvalidRequest(check.into_violations())),
    }
}
