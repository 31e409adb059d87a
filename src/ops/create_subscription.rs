//! CreateSubscription: subscribes an endpoint to the entries that match a
//! filter (SPEC 3.15). The subscription starts after `after_sequence`, or, when
//! absent, after the highest sequence assigned when it is created; the secret
//! that signs its deliveries is made here and shown in this reply only (a retry
//! replays the stored reply, secret included).

use std::fmt::Write as _;

use super::operation::{Named, Operation, Reversal};
use super::parse::Violations;
use super::subscription::{Definition, subscription_message};
use crate::ledger::book::{Book, RowCounts};
use crate::ledger::decline::Refusal;
use crate::ledger::fingerprint::Fields;
use crate::ledger::{Effect, FieldViolation, IdempotencyKey, Needs, SubscriptionRow};
use crate::proto::pb;

/// Random bytes in a secret.
const SECRET_BYTES: usize = 24;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSubscription {
    pub definition: Definition,
    /// Deliver what is numbered after this; `None`: from now.
    pub after_sequence: Option<u64>,
}

impl Operation for CreateSubscription {
    type Request = pb::CreateSubscriptionRequest;
    type Reply = pb::CreateSubscriptionReply;
    type Output = SubscriptionRow;

    const EFFECTS: &'static [Effect] = &[Effect::CreatedSubscription];
    const REVERSAL: Reversal = Reversal::Refused("a subscription's change");

    fn parse(
        r: pb::CreateSubscriptionRequest,
    ) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let mut check = Violations::default();
        let key = check.key(r.idempotency_key);
        let definition = Definition::parse(&mut check, r.url, r.account_ids, r.kinds, r.metadata);
        let (Some(key), Some(definition)) = (key, definition) else {
            return Err(check.into_violations());
        };
        if !check.is_empty() {
            return Err(check.into_violations());
        }
        Ok((
            key,
            Self {
                definition,
                after_sequence: r.after_sequence,
            },
        ))
    }

    fn fingerprint(&self, fields: &mut Fields) {
        self.definition.fingerprint(fields);
        match self.after_sequence {
            Some(after) => {
                fields.u64(1);
                fields.u64(after);
            }
            None => fields.u64(0),
        }
    }

    fn needs(&self) -> Needs {
        Needs {
            creates: RowCounts {
                subscriptions: 1,
                ..RowCounts::default()
            },
            stream_head: self.after_sequence.is_none(),
            ..Needs::default()
        }
    }

    fn decide(&self, book: &mut Book) -> Result<SubscriptionRow, Refusal> {
        let cursor = match self.after_sequence {
            Some(after) => after,
            None => book.stream_head()?,
        };
        book.create_subscription(self.definition.encode(), new_secret(), cursor)
    }

    fn reply(row: &SubscriptionRow) -> pb::CreateSubscriptionReply {
        pb::CreateSubscriptionReply {
            subscription: Some(subscription_message(row)),
            secret: row.secret.clone(),
        }
    }

    fn named(reply: pb::CreateSubscriptionReply) -> Result<Named, String> {
        if reply.subscription.is_none() || reply.secret.is_empty() {
            return Err(super::operation::lacks_a_field());
        }
        Ok(Named::default())
    }
}

/// A new signing secret: `whsec_` and 24 random bytes in hex.
fn new_secret() -> String {
    let bytes: [u8; SECRET_BYTES] = rand::random();
    let mut secret = String::with_capacity(6 + 2 * SECRET_BYTES);
    secret.push_str("whsec_");
    for b in bytes {
        let _ = write!(secret, "{b:02x}");
    }
    secret
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(url: &str) -> pb::CreateSubscriptionRequest {
        pb::CreateSubscriptionRequest {
            idempotency_key: "k".into(),
            url: url.into(),
            ..Default::default()
        }
    }

    fn fields(r: pb::CreateSubscriptionRequest) -> Vec<String> {
        match CreateSubscription::parse(r) {
            Err(v) => v.into_iter().map(|v| v.field.into_owned()).collect(),
            Ok(_) => vec![],
        }
    }

    #[test]
    fn the_url_must_be_http_with_a_host() {
        assert_eq!(fields(request("")), ["url"]);
        assert_eq!(fields(request("ftp://example.com/")), ["url"]);
        assert_eq!(fields(request("not a url")), ["url"]);
        assert_eq!(fields(request(&format!("https://e.com/{}", "a".repeat(2048)))), ["url"]);
        assert!(fields(request("https://hooks.example.com/ledger")).is_empty());
        assert!(fields(request("http://127.0.0.1:8080/")).is_empty());
    }

    #[test]
    fn accounts_and_kinds_are_checked_sorted_and_once_each() {
        let mut r = request("https://e.com/");
        r.account_ids = vec![3, 1, 3];
        r.kinds = vec![2, 1, 2];
        let (_, op) = CreateSubscription::parse(r).unwrap();
        assert_eq!(
            op.definition.account_ids.iter().map(|a| a.get()).collect::<Vec<_>>(),
            [1, 3]
        );
        assert_eq!(
            op.definition.kinds.iter().map(|k| k.code()).collect::<Vec<_>>(),
            [1, 2]
        );
        let mut bad = request("https://e.com/");
        bad.account_ids = vec![0];
        bad.kinds = vec![0, 99];
        assert_eq!(fields(bad), ["account_ids", "kinds", "kinds"]);
    }

    #[test]
    fn the_same_definition_is_the_same_fingerprint_whatever_the_order() {
        let mut a = request("https://e.com/");
        a.account_ids = vec![1, 2];
        let mut b = request("https://e.com/");
        b.account_ids = vec![2, 1];
        let fingerprint =
            |r| crate::ops::Keyed::fingerprint(&CreateSubscription::parse(r).unwrap().1);
        assert_eq!(fingerprint(a.clone()), fingerprint(b));
        let mut from_start = a.clone();
        from_start.after_sequence = Some(0);
        assert_ne!(fingerprint(a), fingerprint(from_start));
    }

    #[test]
    fn secrets_differ() {
        assert_ne!(new_secret(), new_secret());
        assert_eq!(new_secret().len(), 6 + 48);
    }
}
