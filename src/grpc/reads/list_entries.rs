//! ListEntries: an account's journal, oldest first, a page at a time; entries
//! appended while a client pages appear on later pages, none skipped or
//! repeated.

use super::parse::page;
use super::reader::{Read, Reader};
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::grpc::pages::Listing;
use crate::ops::entry_message;
use crate::proto::pb;

#[derive(Debug)]
pub struct ListEntries;

impl Read for ListEntries {
    type Request = pb::ListEntriesRequest;
    type Reply = pb::ListEntriesReply;

    async fn answer(
        reader: &Reader,
        request: pb::ListEntriesRequest,
        _: &Client,
        call: &Call,
    ) -> Result<pb::ListEntriesReply, Error> {
        let (account, size) = page(request.account_id, request.page_size)?;
        let pages = reader.pages();
        let [after] = pages
            .read(Listing::Entries, account, &request.page_token)?
            .unwrap_or_default();
        let page = reader.db().list_entries(call, account, after, size).await?;
        let next_page_token = match page.entries.last() {
            Some((last, _)) if page.more => pages.issue(Listing::Entries, account, [*last]),
            _ => String::new(),
        };
        Ok(pb::ListEntriesReply {
            entries: page.entries.iter().map(|(_, e)| entry_message(e)).collect(),
            next_page_token,
        })
    }
}
