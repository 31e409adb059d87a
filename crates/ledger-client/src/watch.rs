//! Following the change stream (`WatchEntries`, SPEC 3.8) across disconnects:
//! a [`Watcher`] reopens the stream after the last sequence it yielded, on the
//! next endpoint when the endpoint failed, so its caller sees every entry once
//! and in order, however often the stream breaks.

use bytes::Bytes;
use ledger_proto::pb;
use prost::Message as _;
use tonic::Status;
use tonic::codec::Streaming;
use tonic::codegen::http::uri::PathAndQuery;

use crate::Client;
use crate::client::KEEP_ALIVE_BOUND;
use crate::error::{Decline, Error};
use crate::retry::{Verdict, verdict};
use crate::rpc::PreEncoded;

/// Follows the ledger's entries, every account's or one account's, from a
/// sequence on; see [`Client::watch`].
///
/// After any disconnect (a failed connection, `UNAVAILABLE` such as a server's
/// `SHUTTING_DOWN`, `ABORTED`, `DEADLINE_EXCEEDED`, `TOO_MANY_CALLS`, or the
/// stream simply ending) it opens the stream again with `after_sequence` = the
/// last sequence it yielded, after a jittered backoff (the client's
/// [`Backoff`](crate::Backoff)). It opens it on the next endpoint when the
/// endpoint failed: its connection failed (a ping unanswered for 5 s counts),
/// no response headers came within the open timeout (the client's attempt
/// timeout, at most 15 s: an endpoint whose HTTP/2 layer answers pings but
/// whose calls hang), it answered `UNAVAILABLE`, or `TOO_MANY_CALLS` (it is at
/// its limit of watchers). It never yields a sequence at or below one it
/// yielded. Following every account, it also checks that the sequences are
/// contiguous: a hole would be the server breaking SPEC 3.8, and ends the
/// watch with [`Error::Gap`] rather than skip an entry.
///
/// Once open, a stream stays quiet for as long as the ledger is: the server
/// sends its response headers as soon as it has taken the stream, and entries
/// as they commit, so silence after the headers is a quiet ledger, not a
/// failed server. The connection's pings (every 10 s) tell a dead connection
/// from it.
///
/// It retries for as long as it is polled (a follower outlives outages); a
/// final answer (`NOT_FOUND` for an unknown account, `PERMISSION_DENIED`) ends
/// it with [`Error::Declined`]. Store [`Watcher::last_sequence`] with your own
/// effects, in one transaction, and restart from it: each entry is then
/// processed exactly once.
///
/// ```no_run
/// use ledger_client::{Client, Error};
///
/// # async fn run() -> Result<(), Error> {
/// let client = Client::builder()
///     .endpoint("http://ledger-a:50051")
///     .endpoint("http://ledger-b:50051")
///     .build()?;
/// let stored: u64 = 0; // the last sequence your own store has processed
/// let mut watcher = client.watch(stored, 0);
/// loop {
///     let entry = watcher.next().await?;
///     // Apply `entry` and store `entry.sequence` with it, in one transaction.
///     println!("{} {} {}", entry.sequence, entry.account_id, entry.amount);
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Watcher {
    client: Client,
    /// 0: every account, and the sequences must be contiguous.
    account_id: u64,
    /// The last sequence yielded (or the one it started after): where a resumed
    /// stream starts.
    last: u64,
    /// The open stream, and the endpoint it was opened on (the one to move
    /// away from when it breaks).
    stream: Option<(usize, Streaming<pb::Entry>)>,
    /// Failed opens and broken streams since the last entry: the backoff's step.
    retries: u32,
    /// Times the stream was opened.
    opened: u64,
}

impl Client {
    /// A [`Watcher`] of the entries after `after_sequence` (0: from the
    /// ledger's first), of `account_id` only, or of every account with 0. It
    /// connects at the first [`Watcher::next`].
    pub fn watch(&self, after_sequence: u64, account_id: u64) -> Watcher {
        Watcher {
            client: self.clone(),
            account_id,
            last: after_sequence,
            stream: None,
            retries: 0,
            opened: 0,
        }
    }
}

impl Watcher {
    /// The full gRPC method name of the stream it follows: the one streaming
    /// RPC a caller that reads the descriptor (ledgerctl) follows through it.
    pub const PATH: &'static str = "/ledger.v1.Ledger/WatchEntries";

    /// The next entry, in sequence order, waiting for it to commit if need be.
    pub async fn next(&mut self) -> Result<pb::Entry, Error> {
        loop {
            let (endpoint, status) = match self.stream.as_mut() {
                None => {
                    let endpoint = self.client.current_endpoint();
                    match self.open(endpoint).await {
                        Ok(stream) => {
                            self.stream = Some((endpoint, stream));
                            continue;
                        }
                        Err(status) => (endpoint, status),
                    }
                }
                Some((endpoint, stream)) => (
                    *endpoint,
                    match stream.message().await {
                        Ok(Some(entry)) => {
                            if let Some(entry) = self.accept(entry)? {
                                return Ok(entry);
                            }
                            continue;
                        }
                        Ok(None) => Status::unavailable("the stream ended"),
                        Err(status) => status,
                    },
                ),
            };
            self.stream = None;
            self.pause(endpoint, &status).await?;
        }
    }

    /// The last sequence yielded, or the one it started after.
    pub fn last_sequence(&self) -> u64 {
        self.last
    }

    /// How many times the stream was opened again after a disconnect.
    pub fn resumed(&self) -> u64 {
        self.opened.saturating_sub(1)
    }

    /// An entry off the stream: yielded (`Some`), dropped as a repeat (`None`),
    /// or a hole in the all-accounts stream.
    fn accept(&mut self, entry: pb::Entry) -> Result<Option<pb::Entry>, Error> {
        if entry.sequence <= self.last {
            return Ok(None);
        }
        if self.account_id == 0 && entry.sequence != self.last + 1 {
            return Err(Error::Gap {
                after: self.last,
                got: entry.sequence,
            });
        }
        self.last = entry.sequence;
        self.retries = 0;
        Ok(Some(entry))
    }

    /// Opens the stream after `last` on `endpoint`: its response headers within
    /// the open timeout, or the endpoint failed.
    async fn open(&mut self, endpoint: usize) -> Result<Streaming<pb::Entry>, Status> {
        let request = pb::WatchEntriesRequest {
            after_sequence: self.last,
            account_id: self.account_id,
        };
        let request = self.client.request(Bytes::from(request.encode_to_vec()));
        let timeout = self.client.budget().attempt_timeout.min(KEEP_ALIVE_BOUND);
        let path = PathAndQuery::from_static(Self::PATH);
        let opened = self
            .client
            .open::<PreEncoded<pb::Entry>>(endpoint, &path, request, timeout)
            .await?;
        self.opened += 1;
        Ok(opened.into_inner())
    }

    /// After a failed open or a broken stream: a final answer ends the watch;
    /// otherwise move to the next endpoint when this one failed, and wait.
    async fn pause(&mut self, endpoint: usize, status: &Status) -> Result<(), Error> {
        match verdict(status) {
            Verdict::Final => {
                return Err(Error::Declined(Box::new(Decline::from_status(
                    status, None,
                ))));
            }
            Verdict::Retry { failover } => {
                if failover {
                    self.client.fail_over(endpoint);
                }
            }
        }
        let wait = self.client.budget().backoff.wait(self.retries, status);
        self.retries = self.retries.saturating_add(1);
        tokio::time::sleep(wait).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(sequence: u64) -> pb::Entry {
        pb::Entry {
            sequence,
            ..Default::default()
        }
    }

    fn watcher(after: u64, account_id: u64) -> Watcher {
        let client = Client::builder()
            .endpoint("http://127.0.0.1:1")
            .build()
            .unwrap_or_else(|e| unreachable!("{e}"));
        client.watch(after, account_id)
    }

    #[tokio::test]
    async fn a_repeat_is_dropped_and_a_hole_is_an_error() {
        let mut all = watcher(5, 0);
        assert!(matches!(all.accept(entry(6)), Ok(Some(_))));
        assert!(matches!(all.accept(entry(6)), Ok(None)), "a repeat");
        assert!(matches!(all.accept(entry(3)), Ok(None)), "an old one");
        assert!(matches!(
            all.accept(entry(8)),
            Err(Error::Gap { after: 6, got: 8 })
        ));
        assert_eq!(all.last_sequence(), 6);
    }

    #[tokio::test]
    async fn an_accounts_stream_may_skip_the_others_numbers() {
        let mut one = watcher(0, 7);
        assert!(matches!(one.accept(entry(3)), Ok(Some(_))));
        assert!(matches!(one.accept(entry(10)), Ok(Some(_))));
        assert!(matches!(one.accept(entry(10)), Ok(None)));
        assert_eq!(one.last_sequence(), 10);
    }
}
