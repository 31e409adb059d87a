//! ListHolds: an account's holds still held, oldest first, paged like the
//! journal: none skipped or repeated while holds are placed, captured, voided
//! or expire between pages; its tokens are its own.

use std::collections::HashSet;
use std::time::Duration;

use ledger::proto::pb;
use tonic::Code;

use crate::support::{Config, Gate, TestApp, TestDb, capture, credit, place_hold, reason, void};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

const HOUR: Duration = Duration::from_secs(3600);

fn list(account_id: u64, page_size: i32, page_token: &str) -> pb::ListHoldsRequest {
    pb::ListHoldsRequest {
        account_id,
        page_size,
        page_token: page_token.into(),
    }
}

async fn place(client: &mut Client, key: &str, account: u64, ttl: Duration) -> pb::Hold {
    client
        .place_hold(place_hold(key, account, 1, ttl))
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap()
}

/// Every page of the account's open holds from `token` on, as ids.
async fn rest(client: &mut Client, account: u64, size: i32, mut token: String) -> Vec<u64> {
    let mut ids = Vec::new();
    loop {
        let page = client
            .list_holds(list(account, size, &token))
            .await
            .unwrap()
            .into_inner();
        assert!(page.holds.len() <= usize::try_from(size).unwrap());
        for hold in &page.holds {
            assert_eq!(hold.state(), pb::HoldState::Held, "{hold:?}");
            assert_eq!(hold.account_id, account);
        }
        ids.extend(page.holds.iter().map(|h| h.hold_id));
        if page.next_page_token.is_empty() {
            return ids;
        }
        token = page.next_page_token;
    }
}

/// Holds placed between pages, and one whose placement is held open (its
/// transaction past its work, before its COMMIT) while a page is read, appear
/// on later pages; holds resolved between pages drop out; nothing is listed
/// twice, and the order is the order of placement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_placed_while_paging_are_neither_skipped_nor_repeated() {
    let db = TestDb::new();
    let gate = Gate::new("in-flight");
    let app = TestApp::spawn_with(
        &db,
        Config {
            gate: Some(gate.clone()),
            ..Config::default()
        },
    )
    .await;
    let mut client = app.client().await;
    let account = app.funded_account("USD", 1_000).await;
    let mut placed = Vec::new();
    for i in 0..5 {
        placed.push(
            place(&mut client, &format!("before-{i}"), account, HOUR)
                .await
                .hold_id,
        );
    }

    let first = client
        .list_holds(list(account, 2, ""))
        .await
        .unwrap()
        .into_inner();
    let mut seen: Vec<u64> = first.holds.iter().map(|h| h.hold_id).collect();
    assert_eq!(seen, placed[..2]);
    for i in 0..3 {
        placed.push(
            place(&mut client, &format!("between-{i}"), account, HOUR)
                .await
                .hold_id,
        );
    }
    // One not yet listed is captured and one voided: they drop out.
    let mut c2 = client.clone();
    c2.capture_hold(capture("take", placed[2], 1))
        .await
        .unwrap();
    c2.void_hold(void("drop", placed[3])).await.unwrap();

    // A placement held open before its COMMIT while the next page is read.
    let mut c3 = client.clone();
    let in_flight = tokio::spawn(async move {
        c3.place_hold(place_hold("in-flight", account, 1, HOUR))
            .await
            .unwrap()
            .into_inner()
            .hold
            .unwrap()
            .hold_id
    });
    gate.reached().await;
    let second = client
        .list_holds(list(account, 2, &first.next_page_token))
        .await
        .unwrap()
        .into_inner();
    seen.extend(second.holds.iter().map(|h| h.hold_id));
    gate.release();
    placed.push(in_flight.await.unwrap());
    placed.push(place(&mut client, "after", account, HOUR).await.hold_id);

    seen.extend(rest(&mut client, account, 2, second.next_page_token).await);
    let expected: Vec<u64> = placed
        .iter()
        .copied()
        .filter(|id| *id != placed[2] && *id != placed[3])
        .collect();
    assert_eq!(seen, expected, "every open hold once, oldest first");
    let unique: HashSet<u64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len());
    // A fresh listing agrees.
    assert_eq!(
        rest(&mut client, account, 100, String::new()).await,
        expected
    );
}

/// A hold that expired, or was captured or voided, is not listed; the account's
/// `held` is what the listed holds add up to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_and_resolved_holds_are_not_listed() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let account = app.funded_account("USD", 100).await;
    let other = app.funded_account("USD", 100).await;
    let short = place(&mut client, "short", account, Duration::from_secs(1)).await;
    let captured = place(&mut client, "captured", account, HOUR).await;
    let voided = place(&mut client, "voided", account, HOUR).await;
    let open = place(&mut client, "open", account, HOUR).await;
    place(&mut client, "elsewhere", other, HOUR).await;
    client
        .capture_hold(capture("take", captured.hold_id, 1))
        .await
        .unwrap();
    client
        .void_hold(void("drop", voided.hold_id))
        .await
        .unwrap();

    // The short hold expires by the database's clock; nothing resolves it.
    db.until_hold_expired(short.hold_id).await;
    let page = client
        .list_holds(list(account, 0, ""))
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<u64> = page.holds.iter().map(|h| h.hold_id).collect();
    assert_eq!(
        ids,
        [open.hold_id],
        "only the open hold (short: {})",
        short.hold_id
    );
    assert_eq!(page.holds[0], open, "as PlaceHold answered it");
    assert!(page.next_page_token.is_empty());
    let held = client
        .get_account(pb::GetAccountRequest {
            account_id: account,
        })
        .await
        .unwrap()
        .into_inner()
        .held;
    assert_eq!(held, page.holds.iter().map(|h| h.amount).sum::<i64>());

    // An account that never held anything lists nothing, on one last page.
    let quiet = app.funded_account("USD", 1).await;
    let empty = client
        .list_holds(list(quiet, 0, ""))
        .await
        .unwrap()
        .into_inner();
    assert!(empty.holds.is_empty() && empty.next_page_token.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_accounts_bad_sizes_and_foreign_tokens_are_refused() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let a = app.funded_account("USD", 100).await;
    let b = app.funded_account("USD", 100).await;
    for i in 0..3 {
        place(&mut client, &format!("a{i}"), a, HOUR).await;
        place(&mut client, &format!("b{i}"), b, HOUR).await;
        client.credit(credit(&format!("c{i}"), a, 1)).await.unwrap();
    }

    let missing = client.list_holds(list(999_999, 0, "")).await.unwrap_err();
    assert_eq!(
        (missing.code(), reason(&missing).as_str()),
        (Code::NotFound, "ACCOUNT_NOT_FOUND")
    );
    for bad in [list(0, 0, ""), list(a, -1, "")] {
        let status = client.list_holds(bad).await.unwrap_err();
        assert_eq!(
            (status.code(), reason(&status).as_str()),
            (Code::InvalidArgument, "INVALID_REQUEST")
        );
    }

    let holds_of_b = client
        .list_holds(list(b, 1, ""))
        .await
        .unwrap()
        .into_inner()
        .next_page_token;
    let entries_of_a = client
        .list_entries(pb::ListEntriesRequest {
            account_id: a,
            page_size: 1,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .next_page_token;
    assert!(!holds_of_b.is_empty() && !entries_of_a.is_empty());
    for token in [holds_of_b.as_str(), entries_of_a.as_str(), "garbage"] {
        let status = client.list_holds(list(a, 1, token)).await.unwrap_err();
        assert_eq!(
            (status.code(), reason(&status).as_str()),
            (Code::InvalidArgument, "INVALID_PAGE_TOKEN"),
            "{token}"
        );
    }
    // Nor does a ListHolds token page the journal.
    let holds_of_a = client
        .list_holds(list(a, 1, ""))
        .await
        .unwrap()
        .into_inner()
        .next_page_token;
    let status = client
        .list_entries(pb::ListEntriesRequest {
            account_id: a,
            page_size: 1,
            page_token: holds_of_a,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&status), "INVALID_PAGE_TOKEN");
}
