//! What the subscription operations share (SPEC 3.15): the definition a
//! subscription is created with, its message, and the change of state that
//! pause, resume and delete each make.

use std::marker::PhantomData;

use prost::Message as _;

use super::operation::{Named, Operation, Reversal};
use super::parse::Violations;
use crate::ledger::book::Book;
use crate::ledger::decline::{Decline, Refusal};
use crate::ledger::fingerprint::Fields;
use crate::ledger::{
    AccountId, Effect, EntryKind, FieldViolation, IdempotencyKey, Metadata, Needs, SubscriptionId,
    SubscriptionRow, SubscriptionState,
};
use crate::proto::pb;

/// The longest receiver url, in bytes.
pub(crate) const MAX_URL_LEN: usize = 2048;
/// The most accounts a filter names.
pub(crate) const MAX_ACCOUNTS: usize = 1000;

/// What a subscription is created with: where to deliver, and which entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    pub url: String,
    /// Sorted, once each; none: every account.
    pub account_ids: Vec<AccountId>,
    /// Sorted, once each; none: every kind.
    pub kinds: Vec<EntryKind>,
    pub metadata: Metadata,
}

impl Definition {
    /// The url, the accounts, the kinds and the pairs of a request.
    pub fn parse(
        check: &mut Violations,
        url: String,
        account_ids: Vec<u64>,
        kinds: Vec<i32>,
        metadata: impl IntoIterator<Item = (String, String)>,
    ) -> Option<Self> {
        let url = check.field(parse_url(url));
        let mut accounts = Vec::with_capacity(account_ids.len());
        if account_ids.len() > MAX_ACCOUNTS {
            check.push(FieldViolation::new(
                "account_ids",
                format!("must name at most {MAX_ACCOUNTS} accounts"),
            ));
        }
        for raw in account_ids {
            if let Some(id) = check.field(AccountId::parse("account_ids", raw)) {
                accounts.push(id);
            }
        }
        accounts.sort_unstable();
        accounts.dedup();
        let mut entry_kinds = Vec::with_capacity(kinds.len());
        for raw in kinds {
            let kind = u8::try_from(raw)
                .ok()
                .filter(|_| raw != 0)
                .and_then(EntryKind::from_code);
            match kind {
                Some(kind) => entry_kinds.push(kind),
                None => check.push(FieldViolation::new(
                    "kinds",
                    format!("{raw} is not an entry kind"),
                )),
            }
        }
        entry_kinds.sort_unstable_by_key(|k| k.code());
        entry_kinds.dedup();
        let metadata = check.metadata(metadata);
        let (Some(url), Some(metadata)) = (url, metadata) else {
            return None;
        };
        Some(Self {
            url,
            account_ids: accounts,
            kinds: entry_kinds,
            metadata,
        })
    }

    pub fn fingerprint(&self, fields: &mut Fields) {
        fields.str(&self.url);
        fields.u64(self.account_ids.len() as u64);
        for id in &self.account_ids {
            fields.u64(id.get());
        }
        fields.u64(self.kinds.len() as u64);
        for kind in &self.kinds {
            fields.u64(u64::from(kind.code()));
        }
        self.metadata.fingerprint(fields);
    }

    /// As stored: the subscription message with the definition's fields only.
    pub fn encode(&self) -> Vec<u8> {
        pb::Subscription {
            url: self.url.clone(),
            account_ids: self.account_ids.iter().map(|id| id.get()).collect(),
            kinds: self.kinds.iter().map(|k| i32::from(k.code())).collect(),
            metadata: self
                .metadata
                .pairs()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ..pb::Subscription::default()
        }
        .encode_to_vec()
    }
}

/// An http or https url with a host.
fn parse_url(url: String) -> Result<String, FieldViolation> {
    let bad = |why: &str| Err(FieldViolation::new("url", why.to_owned()));
    if url.is_empty() {
        return bad("is required");
    }
    if url.len() > MAX_URL_LEN {
        return bad("must be at most 2048 bytes");
    }
    let Ok(uri) = url.parse::<http::Uri>() else {
        return bad("is not a url");
    };
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return bad("must be an http:// or https:// url");
    }
    if uri.host().is_none_or(str::is_empty) {
        return bad("must name a host");
    }
    Ok(url)
}

/// A subscription row as its message: the stored definition, and the state,
/// cursor and last error as they are.
pub(crate) fn subscription_message(row: &SubscriptionRow) -> pb::Subscription {
    let definition = pb::Subscription::decode(row.definition.as_slice()).unwrap_or_default();
    pb::Subscription {
        subscription_id: row.id.get(),
        state: state_message(row.state).into(),
        cursor: row.cursor,
        last_error: row.last_error.clone(),
        ..definition
    }
}

fn state_message(state: SubscriptionState) -> pb::SubscriptionState {
    match state {
        SubscriptionState::Active => pb::SubscriptionState::Active,
        SubscriptionState::Paused => pb::SubscriptionState::Paused,
        SubscriptionState::Failing => pb::SubscriptionState::Failing,
        SubscriptionState::Deleted => pb::SubscriptionState::Deleted,
    }
}

/// The state a [`StateChange`] moves its subscription to: what tells pause,
/// resume and delete apart.
pub trait Target: std::fmt::Debug + Send + Sync + 'static {
    const STATE: SubscriptionState;
}

/// A change of one subscription's state, by id: PauseSubscription,
/// ResumeSubscription and DeleteSubscription, each a `Target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange<T> {
    pub subscription_id: SubscriptionId,
    target: PhantomData<T>,
}

impl<T: Target> Operation for StateChange<T> {
    type Request = pb::SubscriptionRequest;
    type Reply = pb::Subscription;
    type Output = SubscriptionRow;

    const EFFECTS: &'static [Effect] = &[];
    const REVERSAL: Reversal = Reversal::Refused("a subscription's change");

    fn parse(r: pb::SubscriptionRequest) -> Result<(IdempotencyKey, Self), Vec<FieldViolation>> {
        let mut check = Violations::default();
        let key = check.key(r.idempotency_key);
        let id = check.field(SubscriptionId::parse("subscription_id", r.subscription_id));
        let (Some(key), Some(subscription_id)) = (key, id) else {
            return Err(check.into_violations());
        };
        let change = Self {
            subscription_id,
            target: PhantomData,
        };
        Ok((key, change))
    }

    fn fingerprint(&self, fields: &mut Fields) {
        fields.u64(self.subscription_id.get());
    }

    fn needs(&self) -> Needs {
        Needs {
            subscriptions: vec![self.subscription_id],
            ..Needs::default()
        }
    }

    /// Moves the subscription to `T::STATE`: a deleted one stays deleted
    /// (deleting it again changes nothing; anything else is declined), and one
    /// already there is left as it is.
    fn decide(&self, book: &mut Book) -> Result<SubscriptionRow, Refusal> {
        let row = book.subscription(self.subscription_id)?;
        match (row.state, T::STATE) {
            (SubscriptionState::Deleted, SubscriptionState::Deleted) => Ok(row.clone()),
            (SubscriptionState::Deleted, _) => {
                Err(Decline::subscription_deleted(self.subscription_id).into())
            }
            (from, to) if from == to => Ok(row.clone()),
            // Pausing a failing subscription keeps it paused; resuming it is a
            // retry at once.
            (_, to) => book.set_subscription_state(self.subscription_id, to),
        }
    }

    fn reply(row: &SubscriptionRow) -> pb::Subscription {
        subscription_message(row)
    }

    fn named(_: pb::Subscription) -> Result<Named, String> {
        Ok(Named::default())
    }
}
