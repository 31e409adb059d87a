//! GetSubscription: one of the caller's subscriptions, with its state, cursor
//! and last error (never its secret).

use super::parse::single;
use super::reader::{Read, Reader};
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::ledger::SubscriptionId;
use crate::ops::subscription::subscription_message;
use crate::proto::pb;

#[derive(Debug)]
pub struct GetSubscription;

impl Read for GetSubscription {
    type Request = pb::GetSubscriptionRequest;
    type Reply = pb::Subscription;

    async fn answer(
        reader: &Reader,
        request: pb::GetSubscriptionRequest,
        client: &Client,
        call: &Call,
    ) -> Result<pb::Subscription, Error> {
        let id = single(SubscriptionId::parse(
            "subscription_id",
            request.subscription_id,
        ))?;
        let row = reader
            .db()
            .get_subscription(call, &client.namespace, id)
            .await?;
        Ok(subscription_message(&row))
    }
}
