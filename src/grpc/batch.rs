//! Batch (SPEC 3.13): many keyed calls in one request. Each item is parsed as
//! its own RPC parses it and runs as that call, through the same executor,
//! under its own key and a call of its own (the batch's deadline): its stored
//! reply, metadata, limits and stream entries are the call's, so a later call
//! with the item's key replays it and the other way round. Items that share an
//! account, an entry, a hold or a key form a chain, run in item order, each
//! after the one before it has its outcome; chains run side by side, through
//! group commit as calls do, so one account's stall holds back only its own
//! chain. At most [`CHAINS_AT_ONCE`] chains of a batch are in flight.

use std::collections::HashMap;

use futures::StreamExt as _;
use prost::Message as _;
use tokio::time::Instant;
use tonic::{Code, Request, Response, Status};
use tracing::Instrument as _;

use super::deadline::{self, answer};
use super::service::{LedgerService, finish, rpc_span};
use super::status::report;
use crate::call::Call;
use crate::error::Error;
use crate::ledger::{FieldViolation, IdempotencyKey, KeyedOutcome, ScopedKey};
use crate::ops::{self, Operation, Registered};
use crate::proto::pb::{self, batch_item, batch_result};
use crate::telemetry::metrics;

/// The method's name, as grants and metrics name it.
pub(super) const BATCH: &str = "Batch";
/// The most items one batch may hold.
pub(super) const MAX_ITEMS: usize = 1_000;
/// The least an item takes on the wire (a call with a one-character key and
/// two small numbers): a batch is weighed as the calls its length could hold,
/// up to the chains it runs at once.
pub(super) const LEAST_ITEM_BYTES: usize = 8;
/// The most chains of one batch run at once: enough to fill the writers'
/// group commits (a batch of spread items runs faster than calls at
/// concurrency 256), few enough that a batch's items in flight hold a fraction
/// of what 1,000 would.
pub(super) const CHAINS_AT_ONCE: usize = 256;

/// An operation whose reply a batch result carries.
trait Batched: Operation + Registered {
    fn wrap(reply: Self::Reply) -> batch_result::Result;
}

/// An item parsed: the call it wraps, or why it is invalid.
enum Item {
    Call {
        method: &'static str,
        key: IdempotencyKey,
        command: ops::Command,
        /// Its stored reply as the result's variant.
        success: fn(&[u8]) -> Result<batch_result::Result, prost::DecodeError>,
    },
    Invalid(Error),
}

fn success<O: Batched>(body: &[u8]) -> Result<batch_result::Result, prost::DecodeError> {
    O::Reply::decode(body).map(O::wrap)
}

impl Item {
    fn of<O: Batched>(request: O::Request) -> Self {
        match O::parse(request) {
            Ok((key, operation)) => Self::Call {
                method: O::METHOD.name(),
                key,
                command: Box::new(operation),
                success: success::<O>,
            },
            Err(violations) => Self::Invalid(Error::InvalidRequest(violations)),
        }
    }
}

/// The items' variants, one per operation of the registry: a new operation
/// that has no `BatchItem` field does not compile.
macro_rules! items {
    ($($code:literal => $op:ident $rpc:ident,)*) => {
        $(
            impl Batched for ops::$op {
                fn wrap(reply: Self::Reply) -> batch_result::Result {
                    batch_result::Result::$op(reply)
                }
            }
        )*

        fn parse(call: batch_item::Call) -> Item {
            match call {
                $(batch_item::Call::$op(request) => Item::of::<ops::$op>(request),)*
            }
        }
    };
}
ops::operations!(items);

/// What ties items together: they run in item order when they share one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Link {
    Account(u64),
    Entry(u64),
    Hold(u64),
    Subscription(u64),
    Key(String),
}

fn links(key: &IdempotencyKey, command: &ops::Command) -> Vec<Link> {
    let needs = command.needs();
    let mut links = vec![Link::Key(key.as_str().to_owned())];
    links.extend(needs.accounts.iter().map(|a| Link::Account(a.get())));
    links.extend(needs.entries.iter().map(|e| Link::Entry(e.get())));
    links.extend(needs.holds.iter().map(|h| Link::Hold(h.get())));
    links.extend(
        needs
            .subscriptions
            .iter()
            .map(|s| Link::Subscription(s.get())),
    );
    links.extend(
        needs
            .originals
            .iter()
            .map(|k| Link::Key(k.as_str().to_owned())),
    );
    links
}

/// The items' chains: each a list of item indexes in item order; two items
/// that share a link are in one chain. The chains are in the order of their
/// first items.
fn chains(links: &[Vec<Link>]) -> Vec<Vec<usize>> {
    // Each chain by the index of its first item, and its links.
    let mut chains: HashMap<usize, (Vec<usize>, Vec<&Link>)> = HashMap::new();
    let mut chain_of: HashMap<&Link, usize> = HashMap::new();
    for (i, item) in links.iter().enumerate() {
        let mut joined: Vec<usize> = item
            .iter()
            .filter_map(|link| chain_of.get(link).copied())
            .collect();
        joined.sort_unstable();
        joined.dedup();
        // The earliest chain takes this item and every other chain it joins.
        let head = joined.first().copied().unwrap_or(i);
        let (mut members, mut tied) = chains.remove(&head).unwrap_or_default();
        for other in joined.iter().skip(1) {
            if let Some((more, their)) = chains.remove(other) {
                members.extend(more);
                tied.extend(their);
            }
        }
        members.push(i);
        members.sort_unstable();
        tied.extend(item);
        for link in &tied {
            chain_of.insert(*link, head);
        }
        chains.insert(head, (members, tied));
    }
    let mut chains: Vec<Vec<usize>> = chains.into_values().map(|(members, _)| members).collect();
    chains.sort_unstable_by_key(|chain| chain.first().copied());
    chains
}

/// An error as a result: the status its call would fail with.
fn failed(error: &Error) -> pb::BatchResult {
    let status = report(error);
    pb::BatchResult {
        result: Some(batch_result::Result::Error(as_rpc_status(&status))),
        replayed: false,
    }
}

/// tonic's status as the `google.rpc.Status` it carries: its details are that
/// message encoded, when it has any.
fn as_rpc_status(status: &Status) -> tonic_types::pb::Status {
    tonic_types::pb::Status::decode(status.details())
        .ok()
        .filter(|decoded| decoded.code == status.code() as i32)
        .unwrap_or_else(|| tonic_types::pb::Status {
            code: status.code() as i32,
            message: status.message().to_owned(),
            details: Vec::new(),
        })
}

/// A stored outcome as the item's result.
fn outcome_result(
    keyed: KeyedOutcome,
    success: fn(&[u8]) -> Result<batch_result::Result, prost::DecodeError>,
) -> pb::BatchResult {
    let KeyedOutcome { outcome, replayed } = keyed;
    let result = if outcome.code == Code::Ok as i32 {
        success(&outcome.body)
            .map_err(|e| Error::internal(format!("stored reply does not decode: {e}")))
    } else {
        tonic_types::pb::Status::decode(outcome.body.as_slice())
            .map(batch_result::Result::Error)
            .map_err(|e| Error::internal(format!("stored status does not decode: {e}")))
    };
    match result {
        Ok(result) => pb::BatchResult {
            result: Some(result),
            replayed,
        },
        Err(e) => failed(&e),
    }
}

impl LedgerService {
    /// Serves a Batch: admits it once (the caller may call Batch and every
    /// method its items name), then runs its chains side by side.
    pub(super) async fn serve_batch(
        &self,
        request: Request<pb::BatchRequest>,
    ) -> Result<Response<pb::BatchReply>, Status> {
        let span = rpc_span(BATCH);
        let work = async {
            let started = Instant::now();
            let answer = self.run_batch(request).await;
            let rendered = answer.map(Response::new).map_err(|e| report(&e));
            finish(BATCH, started, rendered.as_ref().map(drop), false);
            rendered
        };
        work.instrument(span).await
    }

    async fn run_batch(&self, request: Request<pb::BatchRequest>) -> Result<pb::BatchReply, Error> {
        let client = Self::client(&request)?;
        let batch = deadline::call_for(&request);
        let items = request.into_inner().items;
        if items.len() > MAX_ITEMS {
            return Err(Error::InvalidRequest(vec![FieldViolation::new(
                "items",
                format!("{} items; a batch holds at most {MAX_ITEMS}", items.len()),
            )]));
        }
        let items: Vec<Item> = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item.call {
                Some(call) => parse(call),
                None => Item::Invalid(Error::InvalidRequest(vec![FieldViolation::new(
                    "call",
                    format!("item {i} names no call"),
                )])),
            })
            .collect();
        let mut methods = vec![BATCH];
        for item in &items {
            if let Item::Call { method, .. } = item
                && !methods.contains(method)
            {
                methods.push(method);
            }
        }
        self.admission().admit(&client, &methods, &batch).await?;

        let links: Vec<Vec<Link>> = items
            .iter()
            .map(|item| match item {
                Item::Call { key, command, .. } => links(key, command),
                Item::Invalid(_) => Vec::new(),
            })
            .collect();
        let mut items: Vec<Option<Item>> = items.into_iter().map(Some).collect();
        let runs = chains(&links).into_iter().map(|chain| {
            let chain: Vec<(usize, Item)> = chain
                .into_iter()
                .filter_map(|i| items.get_mut(i)?.take().map(|item| (i, item)))
                .collect();
            let (client, batch) = (&client, &batch);
            async move {
                let mut results = Vec::with_capacity(chain.len());
                for (i, item) in chain {
                    results.push((i, self.item(client, batch, item).await));
                }
                results
            }
        });
        let mut results = vec![pb::BatchResult::default(); links.len()];
        let mut runs = futures::stream::iter(runs).buffer_unordered(CHAINS_AT_ONCE);
        while let Some(chain) = runs.next().await {
            for (i, result) in chain {
                if let Some(slot) = results.get_mut(i) {
                    *slot = result;
                }
            }
        }
        Ok(pb::BatchReply { results })
    }

    /// Runs one item as its call would run, under a call of its own that ends
    /// with the batch's deadline and keeps the batch's place while it lives.
    async fn item(
        &self,
        client: &crate::grpc::auth::Client,
        batch: &Call,
        item: Item,
    ) -> pb::BatchResult {
        let (method, key, command, success) = match item {
            Item::Call {
                method,
                key,
                command,
                success,
            } => (method, key, command, success),
            Item::Invalid(e) => return failed(&e),
        };
        let call = Call::with_caller_deadline(batch.deadline(), batch.caller_deadline());
        call.hold_place(batch.clone());
        let key = ScopedKey {
            namespace: client.namespace.clone(),
            key,
        };
        match answer(&call, self.db().execute(&call, key, command)).await {
            Ok(keyed) => {
                if keyed.replayed {
                    metrics::replay(method);
                }
                outcome_result(keyed, success)
            }
            Err(e) => {
                if matches!(e, Error::KeyReused) {
                    metrics::key_reuse(method);
                }
                failed(&e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Link, chains};

    fn account(id: u64) -> Link {
        Link::Account(id)
    }

    /// Items that share a link, directly or through others, are one chain in
    /// item order; the chains are in the order of their first items.
    #[test]
    fn items_sharing_a_link_form_one_chain_in_item_order() {
        let links = vec![
            vec![Link::Key("a".into()), account(1)],
            vec![Link::Key("b".into()), account(2)],
            vec![Link::Key("c".into()), account(3), account(1)],
            vec![Link::Key("d".into()), account(2)],
            vec![Link::Key("a".into())],
            vec![Link::Key("e".into()), account(4)],
            vec![],
            vec![Link::Key("f".into()), account(3), account(2)],
        ];
        assert_eq!(
            chains(&links),
            vec![vec![0, 1, 2, 3, 4, 7], vec![5], vec![6]]
        );
    }

    #[test]
    fn items_with_nothing_shared_run_apart() {
        let links: Vec<Vec<Link>> = (0..4)
            .map(|i| vec![Link::Key(i.to_string()), account(i)])
            .collect();
        assert_eq!(chains(&links), vec![vec![0], vec![1], vec![2], vec![3]]);
    }
}
