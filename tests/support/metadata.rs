//! Metadata's requests, and the read-after-write check (SPEC 3.11) that the
//! single-server suite runs across instances and the cluster suite across nodes.

use std::collections::BTreeMap;

use ledger::proto::pb;
use tonic::transport::Channel;

use super::wire::charge;

type Client = pb::ledger_client::LedgerClient<Channel>;

pub fn pairs(list: &[(&str, &str)]) -> BTreeMap<String, String> {
    list.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A charge tagged with `list`.
pub fn tagged(key: &str, account: u64, amount: i64, list: &[(&str, &str)]) -> pb::ChargeRequest {
    pb::ChargeRequest {
        metadata: pairs(list),
        ..charge(key, account, amount)
    }
}

pub fn search(
    list: &[(&str, &str)],
    account: u64,
    size: i32,
    token: &str,
) -> pb::SearchEntriesRequest {
    pb::SearchEntriesRequest {
        metadata: pairs(list),
        account_id: account,
        page_size: size,
        page_token: token.to_owned(),
    }
}

/// `calls` charges of 1 on `account` in parallel through `write`, each tagged
/// with an order id of its own and followed, as soon as it is answered, by a
/// search for that pair through `read`: each search finds exactly its charge's
/// entry, numbered.
pub async fn assert_searches_read_their_writes(
    write: Channel,
    read: Channel,
    account: u64,
    calls: usize,
) {
    let mut running = Vec::new();
    for i in 0..calls {
        let (mut write, mut read) = (Client::new(write.clone()), Client::new(read.clone()));
        running.push(tokio::spawn(async move {
            let order = format!("o-{i}");
            let list = [("order_id", order.as_str())];
            let entry = write
                .charge(tagged(&format!("c-{i}"), account, 1, &list))
                .await
                .unwrap()
                .into_inner()
                .entry
                .unwrap();
            let hits = read
                .search_entries(search(&list, 0, 0, ""))
                .await
                .unwrap()
                .into_inner()
                .entries;
            (entry.entry_id, hits)
        }));
    }
    for call in running {
        let (entry_id, hits) = call.await.unwrap();
        assert_eq!(hits.len(), 1, "entry {entry_id} found at once");
        assert_eq!(hits[0].entry_id, entry_id);
        assert!(hits[0].sequence > 0, "entry {entry_id} found numbered");
    }
}
