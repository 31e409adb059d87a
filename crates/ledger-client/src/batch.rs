//! Batches whose every item ends settled (SPEC 3.13): each item is a keyed
//! call, so sending an item again with its key replays its outcome if it had
//! one and performs it if not.

use bytes::Bytes;
use ledger_proto::pb::{self, batch_result};
use prost::Message as _;
use tokio::time::Instant;
use tonic::{Code, Status};

use crate::client::{Budget, Client};
use crate::error::Error;
use crate::retry::{Verdict, verdict};

/// How one item of a batch ended.
#[derive(Debug, Clone)]
pub enum Settled {
    /// Its outcome: its call's reply, or the final status its call answers
    /// (a decline, `INVALID_ARGUMENT`, `IDEMPOTENCY_KEY_REUSED`, ...), and
    /// whether it was a replay.
    Done(Box<pb::BatchResult>),
    /// Its outcome is not known: the budget ended while the item's last answer
    /// said only that it may be retried (its status here). Send it again with
    /// the same key.
    Unknown(Status),
}

impl Settled {
    /// Whether the item has its outcome.
    pub fn is_done(&self) -> bool {
        matches!(self, Self::Done(_))
    }
}

/// An item's result as the status a call would have answered, when it failed.
fn item_status(result: &pb::BatchResult) -> Option<Status> {
    match &result.result {
        Some(batch_result::Result::Error(status)) => Some(Status::with_details(
            Code::from_i32(status.code),
            status.message.clone(),
            Bytes::from(status.encode_to_vec()),
        )),
        _ => None,
    }
}

impl Client {
    /// Sends `items` as one `Batch` (each item must carry its idempotency
    /// key) and settles every item: the batch is retried whole as any call
    /// is, and an item answered with a status a retry may fix (`UNAVAILABLE`,
    /// `ABORTED`, `DEADLINE_EXCEEDED`, `TOO_MANY_CALLS`) is sent again, with
    /// the others so answered, in a batch of its own, until each has its
    /// outcome or the budget is spent. One result per item, in item order:
    /// [`Settled::Done`] only with an outcome the ledger sent for it.
    ///
    /// When not even the first batch got an answer, no item has an outcome:
    /// the error says why, and the same items sent again settle them.
    pub async fn batch_settled(&self, items: Vec<pb::BatchItem>) -> Result<Vec<Settled>, Error> {
        let budget = self.budget();
        let deadline = Instant::now() + budget.timeout;
        let mut settled: Vec<Option<Settled>> = vec![None; items.len()];
        // The items still to send, by their index.
        let mut pending: Vec<(usize, pb::BatchItem)> = items.into_iter().enumerate().collect();
        let mut round = 0u32;
        while !pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let request = pb::BatchRequest {
                items: pending.iter().map(|(_, item)| item.clone()).collect(),
            };
            let answered = if left.is_zero() {
                Err(Error::Unavailable {
                    code: Code::DeadlineExceeded,
                    message: "the budget ended".into(),
                })
            } else {
                let budget = Budget {
                    timeout: left,
                    ..budget
                };
                self.with_budget(budget).batch(request).await
            };
            let results = match answered {
                Ok(answer) if answer.reply.results.len() == pending.len() => answer.reply.results,
                Ok(answer) => {
                    return Err(Error::Unavailable {
                        code: Code::Internal,
                        message: format!(
                            "{} results for {} items",
                            answer.reply.results.len(),
                            pending.len()
                        ),
                    });
                }
                Err(e) if round == 0 => return Err(e),
                Err(e) => {
                    let status = Status::new(Code::Unavailable, e.to_string());
                    for (i, _) in pending.drain(..) {
                        if let Some(slot) = settled.get_mut(i) {
                            *slot = Some(Settled::Unknown(status.clone()));
                        }
                    }
                    break;
                }
            };
            let mut again = Vec::new();
            let mut last = None;
            for ((i, item), result) in pending.drain(..).zip(results) {
                let retry = item_status(&result)
                    .filter(|status| matches!(verdict(status), Verdict::Retry { .. }));
                let slot = settled.get_mut(i);
                match (retry, slot) {
                    (Some(status), Some(slot)) => {
                        *slot = Some(Settled::Unknown(status.clone()));
                        last = Some(status);
                        again.push((i, item));
                    }
                    (None, Some(slot)) => *slot = Some(Settled::Done(Box::new(result))),
                    (_, None) => {}
                }
            }
            pending = again;
            if let Some(status) = last {
                let wait = budget.backoff.wait(round, &status);
                if Instant::now() + wait >= deadline {
                    break;
                }
                tokio::time::sleep(wait).await;
            }
            round += 1;
        }
        Ok(settled
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Settled::Unknown(Status::unknown("not sent"))))
            .collect())
    }
}
