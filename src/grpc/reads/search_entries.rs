//! SearchEntries (SPEC 3.11): the entries whose metadata holds every given
//! pair, in sequence order, paged; it reads its own writes.

use super::parse::{ByMetadata, filter, size_of_page};
use super::reader::{Read, Reader};
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::ledger::AccountId;
use crate::ops::{Violations, entry_message};
use crate::proto::pb;

#[derive(Debug)]
pub struct SearchEntries;

impl Read for SearchEntries {
    type Request = pb::SearchEntriesRequest;
    type Reply = pb::SearchEntriesReply;

    async fn answer(
        reader: &Reader,
        request: pb::SearchEntriesRequest,
        _: &Client,
        call: &Call,
    ) -> Result<pb::SearchEntriesReply, Error> {
        let token = request.page_token.clone();
        let query = parse(request)?;
        let scope = query.scope("SearchEntries");
        let pages = reader.pages();
        let after = pages.read_query(&scope, &token)?;
        let found = reader
            .db()
            .search_entries(call, &query.pairs, query.account, after, query.size)
            .await?;
        let next_page_token = match found.items.last().and_then(|e| e.sequence) {
            Some(last) if found.more => pages.issue_query(&scope, last),
            _ => String::new(),
        };
        Ok(pb::SearchEntriesReply {
            entries: found.items.iter().map(entry_message).collect(),
            next_page_token,
        })
    }
}

/// The request: 1 to 4 pairs, an account or 0 (every account), a page size.
fn parse(r: pb::SearchEntriesRequest) -> Result<ByMetadata, Error> {
    let mut check = Violations::default();
    let account = match r.account_id {
        0 => Some(None),
        id => check.field(AccountId::parse("account_id", id)).map(Some),
    };
    let pairs = filter(&mut check, r.metadata, 1);
    let size = size_of_page(&mut check, r.page_size);
    match (pairs, account, size) {
        (Some(pairs), Some(account), Some(size)) => Ok(ByMetadata {
            pairs,
            account,
            size,
        }),
        _ => Err(Error::InvalidRequest(check.into_violations())),
    }
}
