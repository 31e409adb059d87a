//! ListSubscriptions: the caller's subscriptions, deleted ones included, oldest
//! first, a page at a time.

use super::parse::size_of_page;
use super::reader::{Read, Reader};
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::ops::Violations;
use crate::ops::subscription::subscription_message;
use crate::proto::pb;

#[derive(Debug)]
pub struct ListSubscriptions;

impl Read for ListSubscriptions {
    type Request = pb::ListSubscriptionsRequest;
    type Reply = pb::ListSubscriptionsReply;

    async fn answer(
        reader: &Reader,
        request: pb::ListSubscriptionsRequest,
        client: &Client,
        call: &Call,
    ) -> Result<pb::ListSubscriptionsReply, Error> {
        let mut check = Violations::default();
        let size = size_of_page(&mut check, i32::try_from(request.page_size).unwrap_or(i32::MAX));
        let Some(size) = size else {
            return Err(Error::InvalidRequest(check.into_violations()));
        };
        // A token is bound to the namespace it was issued to.
        let scope = [b"ListSubscriptions\0".as_slice(), client.namespace.as_str().as_bytes()].concat();
        let pages = reader.pages();
        let after = pages.read_query(&scope, &request.page_token)?;
        let (rows, more) = reader
            .db()
            .list_subscriptions(call, &client.namespace, after, size)
            .await?;
        let next_page_token = match rows.last() {
            Some(last) if more => pages.issue_query(&scope, last.id.get()),
            _ => String::new(),
        };
        Ok(pb::ListSubscriptionsReply {
            subscriptions: rows.iter().map(subscription_message).collect(),
            next_page_token,
        })
    }
}
