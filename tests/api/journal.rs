//! Reading the journal: one entry, and an account's entries page by page in the
//! order they were applied, stable while other calls append.

use std::collections::BTreeSet;

use ledger::proto::pb;
use tonic::Code;

use crate::support::{TestApp, TestDb, charge, credit, reason, transfer, until_sequenced};

fn list(account_id: u64, page_size: i32, page_token: &str) -> pb::ListEntriesRequest {
    pb::ListEntriesRequest {
        account_id,
        page_size,
        page_token: page_token.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_reads_back_as_its_reply_named_it() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let a = app.funded_account("USD", 100).await;
    let b = app.funded_account("USD", 0).await;
    let reply = client
        .transfer(pb::TransferRequest {
            description: "rent".into(),
            ..transfer("rent-1", a, b, 40)
        })
        .await
        .unwrap()
        .into_inner();
    // The reply's sequence is 0 (encoded before the assignment); the read shows
    // the assigned one.
    until_sequenced(&db, std::time::Duration::from_secs(20)).await;
    for entry in [reply.debit.unwrap(), reply.credit.unwrap()] {
        let read = client
            .get_entry(pb::GetEntryRequest {
                entry_id: entry.entry_id,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(entry.sequence, 0);
        assert!(read.sequence > 0);
        assert_eq!(
            pb::Entry {
                sequence: 0,
                ..read.clone()
            },
            entry
        );
        assert_eq!(read.description, "rent");
    }
    let missing = client
        .get_entry(pb::GetEntryRequest { entry_id: 999_999 })
        .await
        .unwrap_err();
    assert_eq!(
        (missing.code(), reason(&missing).as_str()),
        (Code::NotFound, "ENTRY_NOT_FOUND")
    );
    let zero = client
        .get_entry(pb::GetEntryRequest { entry_id: 0 })
        .await
        .unwrap_err();
    assert_eq!(zero.code(), Code::InvalidArgument);
}

/// Paging with a page size of 17 while calls append to the account between the
/// pages (20 after each page, faster than the pages read, 60 in all): every entry
/// appears exactly once, in the order it was applied, and the last page says it
/// is the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_while_others_append_skips_and_repeats_nothing() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let mut writer = app.client().await;
    let account = app.funded_account("USD", 1_000_000).await;
    for i in 0..40 {
        client
            .charge(charge(&format!("pre-{i}"), account, 1))
            .await
            .unwrap();
    }

    let mut seen = Vec::new();
    let mut token = String::new();
    let mut appended = 0;
    loop {
        let page = client
            .list_entries(list(account, 17, &token))
            .await
            .unwrap()
            .into_inner();
        assert!(page.entries.len() <= 17);
        seen.extend(page.entries);
        for _ in 0..20 {
            if appended < 60 {
                let key = format!("live-{appended}");
                writer.charge(charge(&key, account, 1)).await.unwrap();
                appended += 1;
            }
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(appended, 60, "the pages outlasted the appends");
    let ids: Vec<u64> = seen.iter().map(|e| e.entry_id).collect();
    let unique: BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "no entry twice");
    assert_eq!(ids.len(), 1 + 40 + 60, "every entry once");
    let balances: Vec<i64> = seen.iter().map(|e| e.balance_after).collect();
    let expected: Vec<i64> = std::iter::once(1_000_000)
        .chain((1..=100).map(|n| 1_000_000 - n))
        .collect();
    assert_eq!(balances, expected, "in the order they were applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_garbage_tokens_are_refused() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let a = app.funded_account("USD", 10).await;
    let b = app.funded_account("USD", 10).await;
    for i in 0..3 {
        client.credit(credit(&format!("a{i}"), a, 1)).await.unwrap();
    }
    let page = client
        .list_entries(list(a, 2, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.entries.len(), 2);
    assert!(!page.next_page_token.is_empty());

    let foreign = client
        .list_entries(list(b, 2, &page.next_page_token))
        .await
        .unwrap_err();
    let mut altered = page.next_page_token.clone().into_bytes();
    altered[5] = if altered[5] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for status in [
        foreign,
        client
            .list_entries(list(a, 2, "garbage"))
            .await
            .unwrap_err(),
        client.list_entries(list(a, 2, &altered)).await.unwrap_err(),
    ] {
        assert_eq!(
            (status.code(), reason(&status).as_str()),
            (Code::InvalidArgument, "INVALID_PAGE_TOKEN")
        );
    }
    // The genuine token reads on, and the last page says so.
    let next = client
        .list_entries(list(a, 2, &page.next_page_token))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.entries.len(), 2);
    assert!(next.next_page_token.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_sizes_and_unknown_accounts() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let account = app.funded_account("USD", 0).await;
    for i in 0..105 {
        client
            .credit(credit(&format!("c{i}"), account, 1))
            .await
            .unwrap();
    }
    let default = client
        .list_entries(list(account, 0, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(default.entries.len(), 100, "0 means 100");
    let capped = client
        .list_entries(list(account, 5000, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(capped.entries.len(), 105);
    assert!(capped.next_page_token.is_empty());
    let negative = client
        .list_entries(list(account, -1, ""))
        .await
        .unwrap_err();
    assert_eq!(negative.code(), Code::InvalidArgument);
    let unknown = client
        .list_entries(list(999_999, 10, ""))
        .await
        .unwrap_err();
    assert_eq!(
        (unknown.code(), reason(&unknown).as_str()),
        (Code::NotFound, "ACCOUNT_NOT_FOUND")
    );
    let empty_account = app.funded_account("USD", 0).await;
    let empty = client
        .list_entries(list(empty_account, 10, ""))
        .await
        .unwrap()
        .into_inner();
    assert!(empty.entries.is_empty() && empty.next_page_token.is_empty());
}
