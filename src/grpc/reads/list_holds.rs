//! ListHolds: an account's holds still held (not captured, voided or expired),
//! oldest first, a page at a time.

use super::parse::page;
use super::reader::{Read, Reader};
use crate::call::Call;
use crate::db::OpenAfter;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::grpc::pages::Listing;
use crate::ledger::HoldState;
use crate::ops::hold_message;
use crate::proto::pb;

#[derive(Debug)]
pub struct ListHolds;

impl Read for ListHolds {
    type Request = pb::ListHoldsRequest;
    type Reply = pb::ListHoldsReply;

    async fn answer(
        reader: &Reader,
        request: pb::ListHoldsRequest,
        _: &Client,
        call: &Call,
    ) -> Result<pb::ListHoldsReply, Error> {
        let (account, size) = page(request.account_id, request.page_size)?;
        let pages = reader.pages();
        let after = pages
            .read(Listing::Holds, account, &request.page_token)?
            .map(|[created_micros, hold_id]| OpenAfter {
                created_micros,
                hold_id,
            })
            .unwrap_or_default();
        let page = reader.db().list_holds(call, account, after, size).await?;
        let next_page_token = match page.holds.last() {
            Some(last) if page.more => {
                let created_micros = u64::try_from(last.created_at.timestamp_micros())
                    .map_err(|_| Error::internal("a hold placed before 1970"))?;
                let cursor = [created_micros, last.id.get()];
                pages.issue(Listing::Holds, account, cursor)
            }
            _ => String::new(),
        };
        Ok(pb::ListHoldsReply {
            holds: page
                .holds
                .iter()
                .map(|h| hold_message(h, HoldState::Held))
                .collect(),
            next_page_token,
        })
    }
}
