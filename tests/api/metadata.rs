//! Metadata, search and who made each call (SPEC 3.11): a call's pairs on
//! everything it writes, in its key's fingerprint as a set; SearchEntries, which
//! reads its own writes across instances; ListAccounts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use ledger::grpc::auth::Tokens;
use ledger::proto::pb;
use tonic::Code;

use crate::support::metadata::{assert_searches_read_their_writes, pairs, search, tagged};
use crate::support::{
    Config, TestApp, TestDb, assert_audit_passes, capture, charge, credit, leg, open_account,
    place_hold, post, raw_call, reason, refund, replayed, token_line, transfer, with_token,
};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

async fn found(client: &mut Client, list: &[(&str, &str)], account: u64) -> Vec<pb::Entry> {
    client
        .search_entries(search(list, account, 0, ""))
        .await
        .unwrap()
        .into_inner()
        .entries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_calls_metadata_is_on_everything_it_writes_and_nothing_else() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let account = client
        .open_account(pb::OpenAccountRequest {
            metadata: pairs(&[("customer", "c-1")]),
            ..open_account("open", None)
        })
        .await
        .unwrap()
        .into_inner()
        .account
        .unwrap();
    assert_eq!(account.metadata, pairs(&[("customer", "c-1")]));
    let id = account.account_id;
    let shown = client
        .get_account(pb::GetAccountRequest { account_id: id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(shown.metadata, account.metadata);

    let other = app.funded_account("USD", 0).await;
    let fund = pb::CreditRequest {
        metadata: pairs(&[("source", "bank")]),
        ..credit("fund", id, 1000)
    };
    client.credit(fund).await.unwrap();
    let sale = pb::PostRequest {
        metadata: pairs(&[("order_id", "o-17")]),
        ..post("sale", vec![leg(id, other, 90), leg(id, other, 10)])
    };
    let posted = client.post(sale).await.unwrap().into_inner().entries;
    assert!(
        posted.iter().all(|e| e.metadata.is_empty()),
        "a post's reply leaves them out"
    );
    let moved = pb::TransferRequest {
        metadata: pairs(&[("reason", "rent")]),
        ..transfer("rent", id, other, 5)
    };
    let moved = client.transfer(moved).await.unwrap().into_inner();
    assert_eq!(moved.credit.unwrap().metadata, pairs(&[("reason", "rent")]));

    let charged = client
        .charge(tagged("buy", id, 30, &[("order_id", "o-18")]))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    let back = pb::RefundRequest {
        metadata: pairs(&[("ticket", "t-9")]),
        ..refund("back", charged.entry_id, 5)
    };
    let refunded = client
        .refund(back)
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    assert_eq!(
        refunded.metadata,
        pairs(&[("ticket", "t-9")]),
        "not the charge's"
    );

    // Reads show each entry's own call's pairs, and none where its call had none.
    let journal = client
        .list_entries(pb::ListEntriesRequest {
            account_id: id,
            page_size: 100,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    let by_key: Vec<(String, BTreeMap<String, String>)> = journal
        .iter()
        .map(|e| (e.idempotency_key.clone(), e.metadata.clone()))
        .collect();
    for (key, metadata) in &by_key {
        let expected = match key.as_str() {
            "fund" => pairs(&[("source", "bank")]),
            "sale" => pairs(&[("order_id", "o-17")]),
            "rent" => pairs(&[("reason", "rent")]),
            "buy" => pairs(&[("order_id", "o-18")]),
            "back" => pairs(&[("ticket", "t-9")]),
            other => panic!("unexpected entry of {other}"),
        };
        assert_eq!(*metadata, expected, "{key}");
    }
    assert_audit_passes(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_without_metadata_shows_none_and_no_client_without_tokens() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    let plain_id = client
        .charge(charge("plain", id, 1))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap()
        .entry_id;
    let plain = client
        .get_entry(pb::GetEntryRequest { entry_id: plain_id })
        .await
        .unwrap()
        .into_inner();
    assert!(plain.metadata.is_empty());
    assert!(plain.client.is_empty(), "no authentication, no client");
}

/// A hold shows its placement's pairs; its capture's go on the CAPTURE entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hold_keeps_its_placements_metadata_and_a_capture_has_its_own() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    let hold = pb::PlaceHoldRequest {
        metadata: pairs(&[("ride", "r-7")]),
        ..place_hold("hold", id, 40, Duration::from_secs(600))
    };
    let hold = client
        .place_hold(hold)
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap();
    assert_eq!(hold.metadata, pairs(&[("ride", "r-7")]));
    let end = pb::CaptureHoldRequest {
        metadata: pairs(&[("fare", "final")]),
        ..capture("end", hold.hold_id, 30)
    };
    let captured = client.capture_hold(end).await.unwrap().into_inner();
    assert_eq!(
        captured.entry.unwrap().metadata,
        pairs(&[("fare", "final")])
    );
    assert_eq!(
        captured.hold.unwrap().metadata,
        pairs(&[("ride", "r-7")]),
        "the hold keeps its placement's"
    );
    let read = client
        .get_hold(pb::GetHoldRequest {
            hold_id: hold.hold_id,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.metadata, pairs(&[("ride", "r-7")]));
}

/// A request with its map's entries in the order given, encoded by hand: prost
/// encodes a map in its hash order, so a test of wire order must write its own.
fn in_wire_order(base: &impl prost::Message, field: u32, list: &[(&str, &str)]) -> Bytes {
    let mut bytes = base.encode_to_vec();
    for (key, value) in list {
        let mut entry = Vec::new();
        prost::encoding::string::encode(1, &(*key).to_owned(), &mut entry);
        prost::encoding::string::encode(2, &(*value).to_owned(), &mut entry);
        prost::encoding::encode_key(
            field,
            prost::encoding::WireType::LengthDelimited,
            &mut bytes,
        );
        prost::encoding::encode_varint(entry.len() as u64, &mut bytes);
        bytes.extend_from_slice(&entry);
    }
    Bytes::from(bytes)
}

#[derive(Debug, Clone, Default)]
struct Raw(Bytes);

impl prost::Message for Raw {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        buf.put_slice(&self.0);
    }
    fn merge_field(
        &mut self,
        _: u32,
        _: prost::encoding::WireType,
        _: &mut impl bytes::Buf,
        _: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        Ok(())
    }
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn clear(&mut self) {
        self.0 = Bytes::new();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fingerprint_holds_the_pairs_as_a_set() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", 100).await;
    let base = charge("k", id, 5);
    let ab = in_wire_order(&base, 6, &[("a", "1"), ("b", "2")]);
    let ba = in_wire_order(&base, 6, &[("b", "2"), ("a", "1")]);
    let (headers, first) = raw_call(app.channel().await, "Charge", Raw(ab))
        .await
        .unwrap();
    assert!(!replayed(&headers));
    let (headers, again) = raw_call(app.channel().await, "Charge", Raw(ba))
        .await
        .unwrap();
    assert!(replayed(&headers), "another wire order is the same request");
    assert_eq!(again, first);

    let mut client = app.client().await;
    for other in [
        vec![("a", "1")],
        vec![("a", "1"), ("b", "2 ")],
        vec![("a", "1"), ("B", "2")],
        vec![],
    ] {
        let status = client.charge(tagged("k", id, 5, &other)).await.unwrap_err();
        assert_eq!(reason(&status), "IDEMPOTENCY_KEY_REUSED", "{other:?}");
    }
    // No metadata adds nothing: a charge without any replays as before.
    client.charge(charge("plain", id, 1)).await.unwrap();
    let again = client.charge(tagged("plain", id, 1, &[])).await.unwrap();
    assert!(replayed(again.metadata()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_limit_at_its_edge_and_bad_keys_leave_the_key_free() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    let long_key = "k".repeat(40);
    // Four bytes each: the longest value in bytes, 2,000.
    let long_value = "🦀".repeat(500);
    let mut most: BTreeMap<String, String> = (0..49)
        .map(|i| (format!("key.{i}"), long_value.clone()))
        .collect();
    most.insert(long_key.clone(), long_value.clone());
    let edge = pb::ChargeRequest {
        metadata: most.clone(),
        ..charge("edge", id, 1)
    };
    let entry = client
        .charge(edge)
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    assert_eq!(
        entry.metadata, most,
        "50 pairs, 40-character keys, 500-character values"
    );

    let too_long_key = "k".repeat(41);
    let too_long_value = "é".repeat(501);
    let mut too_many = most.clone();
    too_many.insert("one-more".into(), String::new());
    let bad: Vec<(String, BTreeMap<String, String>)> = vec![
        ("space".into(), pairs(&[("a b", "v")])),
        ("slash".into(), pairs(&[("a/b", "v")])),
        ("empty".into(), pairs(&[("", "v")])),
        ("41".into(), BTreeMap::from([(too_long_key, "v".into())])),
        ("501".into(), BTreeMap::from([("k".into(), too_long_value)])),
        ("51".into(), too_many),
    ];
    for (what, metadata) in bad {
        let key = format!("bad-{what}");
        let status = client
            .charge(pb::ChargeRequest {
                metadata,
                ..charge(&key, id, 1)
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{what}");
        let request = tonic_types::StatusExt::get_details_bad_request(&status).unwrap();
        assert_eq!(request.field_violations[0].field, "metadata", "{what}");
        assert_eq!(db.key_rows(&key).await, 0, "{what}: the key stays free");
    }
}

/// A 256-leg post with 50 long pairs fits in one transaction: its pairs are
/// stored once for the call, not once per entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_post_of_256_legs_with_50_long_pairs_commits() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let from = app.funded_account("USD", 1_000_000).await;
    let to = app.funded_account("USD", 0).await;
    let metadata: BTreeMap<String, String> = (0..50)
        .map(|i| (format!("k{i:02}-{}", "x".repeat(30)), "€".repeat(500)))
        .collect();
    let legs = (0..256).map(|_| leg(from, to, 1)).collect();
    let big = pb::PostRequest {
        metadata: metadata.clone(),
        ..post("big", legs)
    };
    let mut client = app.client().await;
    let entries = client.post(big).await.unwrap().into_inner().entries;
    assert_eq!(entries.len(), 512);
    assert!(
        entries.iter().all(|e| e.metadata.is_empty()),
        "the reply leaves the request's pairs out"
    );
    let read = client
        .get_entry(pb::GetEntryRequest {
            entry_id: entries[511].entry_id,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.metadata, metadata, "reads show them");
    assert_eq!(db.count("SELECT COUNT(*) FROM metadata").await, 1);
    assert_eq!(db.count("SELECT COUNT(*) FROM metadata_pairs").await, 50);
    assert_audit_passes(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_authentication_each_entry_and_hold_names_its_client() {
    let db = TestDb::new();
    let tokens = format!(
        "{}{}",
        token_line("shop", "t-shop"),
        token_line("ops", "t-ops")
    );
    let config = Config {
        auth: Some(Tokens::parse(&tokens).unwrap()),
        ..Config::default()
    };
    let app = TestApp::spawn_with(&db, config).await;
    let mut shop = with_token(app.channel().await, "t-shop");
    let mut ops = with_token(app.channel().await, "t-ops");
    let id = ops
        .open_account(open_account("open", None))
        .await
        .unwrap()
        .into_inner()
        .account
        .unwrap()
        .account_id;
    ops.credit(credit("fund", id, 100)).await.unwrap();
    let charged = shop
        .charge(tagged("order-1", id, 10, &[("order_id", "1")]))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    assert_eq!(charged.client, "shop");
    let hold = shop
        .place_hold(place_hold("h", id, 5, Duration::from_secs(60)))
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap();
    assert_eq!(hold.client, "shop");
    // Another client's search shows what its ListEntries shows, and no more
    // (the search waits for the numbers, so ListEntries after it shows them).
    let seen = ops
        .search_entries(search(&[("order_id", "1")], 0, 0, ""))
        .await
        .unwrap()
        .into_inner()
        .entries;
    let journal = ops
        .list_entries(pb::ListEntriesRequest {
            account_id: id,
            page_size: 10,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    let clients: Vec<&str> = journal.iter().map(|e| e.client.as_str()).collect();
    assert_eq!(clients, ["ops", "shop"]);
    assert_eq!(seen, vec![journal[1].clone()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_search_finds_every_pair_held_in_sequence_order_byte_exact() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let (a, b) = (
        app.funded_account("USD", 1000).await,
        app.funded_account("USD", 1000).await,
    );
    let mut client = app.client().await;
    let sales = [
        ("s1", a, &[("shop", "north"), ("order_id", "1")][..]),
        ("s2", b, &[("shop", "north"), ("order_id", "2")][..]),
        ("s3", a, &[("shop", "south"), ("order_id", "3")][..]),
        ("s4", a, &[("shop", "north ")][..]),
        ("s5", a, &[("shop", "North"), ("order_id", "5")][..]),
    ];
    for (key, account, list) in sales {
        client.charge(tagged(key, account, 1, list)).await.unwrap();
    }
    let keys = |entries: Vec<pb::Entry>| -> Vec<String> {
        entries.into_iter().map(|e| e.idempotency_key).collect()
    };
    assert_eq!(
        keys(found(&mut client, &[("shop", "north")], 0).await),
        ["s1", "s2"]
    );
    assert_eq!(
        keys(found(&mut client, &[("shop", "north")], a).await),
        ["s1"]
    );
    assert_eq!(
        keys(found(&mut client, &[("shop", "north"), ("order_id", "2")], 0).await),
        ["s2"]
    );
    assert!(
        found(&mut client, &[("shop", "north"), ("order_id", "3")], 0)
            .await
            .is_empty()
    );
    assert_eq!(
        keys(found(&mut client, &[("shop", "north ")], 0).await),
        ["s4"]
    );
    let all = found(&mut client, &[("shop", "north")], 0).await;
    assert!(all.windows(2).all(|w| w[0].sequence < w[1].sequence));
    assert!(all.iter().all(|e| e.sequence > 0), "numbered");

    for (list, what) in [
        (vec![], "no pair"),
        (
            vec![("a", "1"), ("b", "1"), ("c", "1"), ("d", "1"), ("e", "1")],
            "five",
        ),
    ] {
        let status = client
            .search_entries(search(&list, 0, 0, ""))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{what}");
    }
    let ghost = client
        .search_entries(search(&[("shop", "north")], b + 1000, 0, ""))
        .await
        .unwrap_err();
    assert_eq!(reason(&ghost), "ACCOUNT_NOT_FOUND");
    let page = client
        .search_entries(search(&[("shop", "north")], 0, 1, ""))
        .await
        .unwrap()
        .into_inner();
    assert!(!page.next_page_token.is_empty());
    let other_query = client
        .search_entries(search(&[("shop", "south")], 0, 1, &page.next_page_token))
        .await
        .unwrap_err();
    assert_eq!(reason(&other_query), "INVALID_PAGE_TOKEN");
}

/// Paging a search (pages of 7) while entries with the same pair keep arriving:
/// no entry twice, every one answered before the search began found, in
/// sequence order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paging_a_search_while_entries_arrive_skips_and_repeats_nothing() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", 1_000_000).await;
    let mut client = app.client().await;
    let tag = [("batch", "b-1")];
    for i in 0..30 {
        client
            .charge(tagged(&format!("before-{i}"), id, 1, &tag))
            .await
            .unwrap();
    }
    let mut writer = app.client().await;
    let mut seen: Vec<pb::Entry> = Vec::new();
    let mut token = String::new();
    let mut later = 0;
    loop {
        let page = client
            .search_entries(search(&tag, 0, 7, &token))
            .await
            .unwrap()
            .into_inner();
        seen.extend(page.entries);
        // Two more arrive between pages, answered before the next page is asked.
        for _ in 0..2 {
            later += 1;
            let key = format!("during-{later}");
            writer.charge(tagged(&key, id, 1, &tag)).await.unwrap();
        }
        if page.next_page_token.is_empty() || later > 40 {
            break;
        }
        token = page.next_page_token;
    }
    let sequences: Vec<u64> = seen.iter().map(|e| e.sequence).collect();
    assert!(
        sequences.windows(2).all(|w| w[0] < w[1]),
        "in order, none twice"
    );
    let keys: BTreeSet<&str> = seen.iter().map(|e| e.idempotency_key.as_str()).collect();
    for i in 0..30 {
        assert!(keys.contains(format!("before-{i}").as_str()), "before-{i}");
    }
    assert!(keys.len() > 30, "pages followed entries that arrived");
}

/// 80 charges in parallel, each followed at once by a search for its own pair
/// through the other instance: each finds its entry, numbered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_search_through_another_instance_reads_its_own_writes() {
    let db = TestDb::new();
    let writer = TestApp::spawn(&db).await;
    let searcher = TestApp::spawn(&db).await;
    let id = writer.funded_account("USD", 1_000_000).await;
    let (write, read) = (writer.channel().await, searcher.channel().await);
    assert_searches_read_their_writes(write, read, id, 80).await;
}

/// With no instance assigning the stream's numbers, a search that must wait for
/// them says so rather than answering without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_search_with_no_assigner_is_stream_behind() {
    let db = TestDb::new();
    let config = Config {
        stream_assigner: Some(false),
        ..Config::default()
    };
    let app = TestApp::spawn_with(&db, config).await;
    let id = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    client
        .charge(tagged("c", id, 1, &[("k", "v")]))
        .await
        .unwrap();
    let status = client
        .search_entries(search(&[("k", "v")], 0, 0, ""))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(reason(&status), "STREAM_BEHIND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn accounts_are_listed_by_metadata_ascending_and_paged() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let mut opened = Vec::new();
    for i in 0..9 {
        let tier = if i % 3 == 0 { "gold" } else { "basic" };
        let open = pb::OpenAccountRequest {
            metadata: pairs(&[("tier", tier), ("region", "eu")]),
            ..open_account(&format!("open-{i}"), None)
        };
        let account = client
            .open_account(open)
            .await
            .unwrap()
            .into_inner()
            .account
            .unwrap();
        opened.push((account.account_id, tier));
    }
    let list = |metadata: &[(&str, &str)], token: &str| pb::ListAccountsRequest {
        metadata: pairs(metadata),
        page_size: 2,
        page_token: token.to_owned(),
    };
    let mut gold = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_accounts(list(&[("tier", "gold"), ("region", "eu")], &token))
            .await
            .unwrap()
            .into_inner();
        gold.extend(page.accounts.iter().map(|a| a.account_id));
        assert!(page.accounts.iter().all(|a| a.metadata["tier"] == "gold"));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let expected: Vec<u64> = opened
        .iter()
        .filter(|(_, t)| *t == "gold")
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(gold, expected);
    let everyone = client
        .list_accounts(pb::ListAccountsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .accounts;
    let ids: Vec<u64> = everyone.iter().map(|a| a.account_id).collect();
    assert_eq!(ids, opened.iter().map(|(id, _)| *id).collect::<Vec<_>>());
    let too_many = list(
        &[("a", "1"), ("b", "1"), ("c", "1"), ("d", "1"), ("e", "1")],
        "",
    );
    let status = client.list_accounts(too_many).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
}

/// Metadata stays after retention purged its key: the entry still shows it and
/// a search still finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metadata_outlives_its_keys_purge() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    client
        .charge(tagged("old", id, 1, &[("invoice", "i-1")]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (code, out) =
        crate::support::run_ledger(&["purge", "--older-than", "1s", "--database-url", &db.url])
            .await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(db.key_rows("old").await, 0, "purged");
    let hits = found(&mut client, &[("invoice", "i-1")], 0).await;
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].metadata, pairs(&[("invoice", "i-1")]));
}
