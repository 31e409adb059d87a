//! The console over plain HTTP: its pages show what the RPCs answer; an unknown
//! id is 404, any method but GET and HEAD 405, and nothing changes; with tokens,
//! no token gets the form, a token without the grants is refused, and a key page
//! shows only its client's keys; the tail streams entries as events numbered by
//! sequence and resumes after `Last-Event-ID`, each under the watchers' count.

use std::time::Duration;

use ledger::grpc::auth::Tokens;
use ledger::proto::pb;
use mysql_async::prelude::Queryable as _;

use crate::support::http::{self, Events};
use crate::support::metadata::{pairs, search, tagged};
use crate::support::stream::until_sequenced;
use crate::support::wire::token_line;
use crate::support::{
    Config, TestApp, TestDb, charge, credit, leg, open_account, place_hold, post, with_token,
};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

const HOUR: Duration = Duration::from_secs(3600);

async fn console(db: &TestDb, auth: Option<Tokens>) -> TestApp {
    TestApp::spawn_with(
        db,
        Config {
            console: true,
            auth,
            ..Config::default()
        },
    )
    .await
}

/// Every row a table of the ledger holds, to show that nothing changed.
async fn rows(db: &TestDb) -> Vec<u64> {
    let mut conn = db.sql().await;
    let mut counts = Vec::new();
    for table in ["accounts", "entries", "holds", "idempotency_keys"] {
        let n: u64 = conn
            .query_first(format!("SELECT COUNT(*) FROM {table}"))
            .await
            .unwrap()
            .unwrap();
        counts.push(n);
    }
    let balances: Option<i64> = conn
        .query_first("SELECT CAST(SUM(balance) AS SIGNED) FROM accounts")
        .await
        .unwrap()
        .unwrap();
    counts.push(u64::try_from(balances.unwrap_or(0)).unwrap());
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_page_shows_what_the_reads_answer() {
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let mut client = app.client().await;
    let account = app.funded_account("USD", 100).await;
    client.charge(charge("coffee", account, 30)).await.unwrap();
    let hold = client
        .place_hold(place_hold("ride", account, 25, HOUR))
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap();

    let page = http::get(site, &format!("/accounts/{account}"), &[]).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let read = client
        .get_account(pb::GetAccountRequest {
            account_id: account,
        })
        .await
        .unwrap()
        .into_inner();
    for (field, value) in [
        ("balance", read.balance),
        ("held", read.held),
        ("available", read.available),
    ] {
        assert_eq!(page.field(field), Some(value.to_string()), "{field}");
    }
    assert_eq!(page.field("floor").as_deref(), Some("0"));
    assert_eq!(page.field("ceiling").as_deref(), Some("none"));
    assert!(
        page.body
            .contains(&format!("data-hold=\"{}\"", hold.hold_id))
    );
    assert!(
        page.body.contains("href=\"/keys?key=coffee\""),
        "keys are links"
    );
    assert!(page.body.contains("<meta name=\"viewport\""));

    let hold_page = http::get(site, &format!("/holds/{}", hold.hold_id), &[]).await;
    assert_eq!(hold_page.field("amount").as_deref(), Some("25"));
    assert_eq!(hold_page.field("state").as_deref(), Some("HELD"));
    let key = http::get(site, "/keys?key=coffee", &[]).await;
    assert_eq!(
        key.field("method").as_deref(),
        Some("/ledger.v1.Ledger/Charge")
    );
    assert!(key.body.contains("ENTRY_KIND_CHARGE"), "{}", key.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_ids_are_404_and_other_methods_405_and_nothing_changes() {
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let account = app.funded_account("USD", 100).await;
    let before = rows(&db).await;

    for (path, status) in [
        ("/accounts/999999".to_owned(), 404),
        ("/entries/999999".to_owned(), 404),
        ("/holds/999999".to_owned(), 404),
        ("/keys?key=never-used".to_owned(), 404),
        ("/tail?account_id=999999".to_owned(), 404),
        ("/no-such-page".to_owned(), 404),
        ("/accounts/abc".to_owned(), 400),
        ("/accounts/0".to_owned(), 400),
        (format!("/accounts/{account}?page_token=forged"), 400),
        ("/keys?key=has%20space".to_owned(), 400),
    ] {
        let answer = http::get(site, &path, &[]).await;
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
        assert!(answer.body.contains("<h1>"), "{path}: a readable page");
    }

    let routes = [
        "/".to_owned(),
        format!("/accounts/{account}"),
        "/entries/1".to_owned(),
        "/holds/1".to_owned(),
        "/keys?key=k".to_owned(),
        "/tail".to_owned(),
        "/tail/events".to_owned(),
        "/health".to_owned(),
        "/find?account_id=1".to_owned(),
        "/accounts".to_owned(),
        "/accounts?metadata=k%3Av".to_owned(),
        format!("/accounts/{account}/balance"),
        format!("/accounts/{account}/balance?as_of_sequence=1"),
        "/entries".to_owned(),
        "/entries?metadata=k%3Av".to_owned(),
        "/assets/console.css".to_owned(),
        "/no-such-page".to_owned(),
    ];
    for path in &routes {
        for method in ["POST", "PUT", "PATCH", "DELETE"] {
            let answer = http::send(site, method, path, &[], "amount=1").await;
            assert_eq!(answer.status, 405, "{method} {path}");
            assert_eq!(answer.header("allow"), Some("GET, HEAD"), "{method} {path}");
            assert!(answer.body.contains("changes nothing"), "{method} {path}");
        }
        let head = http::send(site, "HEAD", path, &[], "").await;
        assert_ne!(head.status, 405, "HEAD {path}");
        assert!(head.body.is_empty(), "HEAD {path}");
    }
    for method in ["PUT", "DELETE"] {
        assert_eq!(
            http::send(site, method, "/login", &[], "").await.status,
            405
        );
    }
    assert_eq!(http::get(site, "/logout", &[]).await.status, 405);
    assert_eq!(rows(&db).await, before, "the console changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_a_reader_logs_in_and_reads_only_what_it_is_granted() {
    let db = TestDb::new();
    let tokens = token_line("shop", "shop-secret")
        + &token_line("billing", "billing-secret")
        + &granted("reports", "GetAccount,GetEntry")
        + &granted("finance", "GetBalance,ListAccounts,SearchEntries");
    let app = console(&db, Some(Tokens::parse(&tokens).unwrap())).await;
    let site = app.console.unwrap();
    let channel = app.channel().await;
    let mut shop = with_token(channel.clone(), "shop-secret");
    let account = shop
        .open_account(pb::OpenAccountRequest {
            idempotency_key: "open".into(),
            currency: "USD".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .account
        .unwrap()
        .account_id;
    let credited = shop
        .credit(credit("shop-key", account, 10))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    let page = format!("/accounts/{account}");

    let anonymous = http::get(site, &page, &[]).await;
    assert_eq!(anonymous.status, 401);
    assert!(anonymous.body.contains("action=\"/login\""), "the form");
    assert!(
        anonymous.body.contains(&format!("value=\"{page}\"")),
        "comes back here"
    );
    assert_eq!(
        http::get(site, "/health", &[]).await.status,
        200,
        "health is open"
    );

    let wrong = http::send(site, "POST", "/login", &[], "token=guess&next=/").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    let foreign = http::send(
        site,
        "POST",
        "/login",
        &[("Origin", "http://elsewhere.example")],
        "token=shop-secret&next=/",
    )
    .await;
    assert_eq!(foreign.status, 403, "a post from another site");
    assert!(foreign.header("set-cookie").is_none());

    let login = |token: &'static str| async move {
        let body = format!("token={token}&next=/accounts/{account}");
        let answer = http::send(site, "POST", "/login", &[], &body).await;
        assert_eq!(answer.status, 303);
        assert_eq!(
            answer.header("location"),
            Some(format!("/accounts/{account}").as_str())
        );
        let cookie = answer.header("set-cookie").unwrap().to_owned();
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
            "{cookie}"
        );
        cookie.split(';').next().unwrap().to_owned()
    };
    let shop_cookie = login("shop-secret").await;
    let reports_cookie = login("reports-secret").await;
    let billing_cookie = login("billing-secret").await;
    let finance_cookie = login("finance-secret").await;

    let as_shop = http::get(site, &page, &[("Cookie", &shop_cookie)]).await;
    assert_eq!(as_shop.status, 200, "{}", as_shop.body);
    assert_eq!(as_shop.field("balance").as_deref(), Some("10"));
    assert!(as_shop.body.contains(">shop<"), "who is reading");
    let as_reports = http::get(site, &page, &[("Cookie", &reports_cookie)]).await;
    assert_eq!(
        as_reports.status, 403,
        "GetAccount alone is not the account page"
    );
    assert_eq!(
        as_reports.field("reason").as_deref(),
        Some("METHOD_NOT_ALLOWED")
    );
    let tail = http::get(site, "/tail", &[("Cookie", &reports_cookie)]).await;
    assert_eq!(tail.status, 403, "nor the tail");
    assert_reads_need_their_grants(site, account, &reports_cookie, &finance_cookie).await;
    let entry = format!("/entries/{}", credited.entry_id);
    let entry = http::get(site, &entry, &[("Cookie", &shop_cookie)]).await;
    assert_eq!(
        entry.field("client").as_deref(),
        Some("shop"),
        "who wrote it"
    );

    assert_keys_are_namespaced(site, &shop_cookie, &billing_cookie).await;

    let logout = http::send(site, "POST", "/logout", &[("Cookie", &shop_cookie)], "").await;
    assert_eq!(logout.status, 303);
    assert!(logout.header("set-cookie").unwrap().contains("Max-Age=0"));
}

/// A key page shows the key of its reader's client (`shop`'s, who wrote
/// `shop-key`), and another client's not at all.
async fn assert_keys_are_namespaced(
    site: std::net::SocketAddr,
    shop_cookie: &str,
    billing_cookie: &str,
) {
    let key = "/keys?key=shop-key";
    let own = http::get(site, key, &[("Cookie", shop_cookie)]).await;
    assert_eq!(own.status, 200);
    assert_eq!(
        own.field("method").as_deref(),
        Some("/ledger.v1.Ledger/Credit")
    );
    let others = http::get(site, key, &[("Cookie", billing_cookie)]).await;
    assert_eq!(others.status, 404, "another client's key is not found");
    assert_eq!(others.field("reason").as_deref(), Some("KEY_NOT_FOUND"));
}

/// A tokens file's line for `client` (its token `{client}-secret`) granted
/// `grants` alone.
fn granted(client: &str, grants: &str) -> String {
    let line = token_line(client, &format!("{client}-secret"));
    format!("{} {grants}\n", line.trim_end())
}

/// The searches and a balance at a point each need their RPC's grant: refused
/// (403) to `without`, shown to `with`, who holds those grants alone and so is
/// refused the account page.
async fn assert_reads_need_their_grants(
    site: std::net::SocketAddr,
    account: u64,
    without: &str,
    with: &str,
) {
    for (path, grant) in [
        ("/accounts".to_owned(), "ListAccounts"),
        ("/accounts?metadata=k%3Av".to_owned(), "ListAccounts"),
        ("/entries?metadata=k%3Av".to_owned(), "SearchEntries"),
        (format!("/accounts/{account}/balance"), "GetBalance"),
    ] {
        let refused = http::get(site, &path, &[("Cookie", without)]).await;
        assert_eq!(refused.status, 403, "{path} without {grant}");
        assert_eq!(
            refused.field("reason").as_deref(),
            Some("METHOD_NOT_ALLOWED")
        );
        let shown = http::get(site, &path, &[("Cookie", with)]).await;
        assert_eq!(shown.status, 200, "{path} with {grant}: {}", shown.body);
    }
    let home = http::get(site, "/", &[("Cookie", without)]).await;
    assert_eq!(home.status, 200, "the home page, without its accounts");
    assert!(home.body.contains("id=\"no-grant\"") && home.rows("account", &[]).is_empty());
    let home = http::get(site, "/", &[("Cookie", with)]).await;
    assert_eq!(home.rows("account", &[]).len(), 1, "and with them");
    let balance = format!("/accounts/{account}/balance");
    let balance = http::get(site, &balance, &[("Cookie", with)]).await;
    assert_eq!(balance.field("balance").as_deref(), Some("10"));
    let page = format!("/accounts/{account}");
    let page = http::get(site, &page, &[("Cookie", with)]).await;
    assert_eq!(page.status, 403, "the account page needs GetAccount too");
}

/// The tail's events carry each entry's sequence as their id; a stream opened
/// again with `Last-Event-ID` resumes after it, with nothing repeated; an open
/// stream is a watcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tail_streams_entries_and_resumes_after_the_last_event() {
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let mut client = app.client().await;
    let account = app.funded_account("USD", 100).await;
    let watchers = app.persistence.watch_stats().watchers;

    let path = format!("/tail/events?after=0&account_id={account}");
    let mut events = Events::open(site, &path, &[]).await;
    assert_eq!(events.status, 200);
    let first = events
        .next(Duration::from_secs(10))
        .await
        .expect("the credit");
    assert_eq!(first.name.as_deref(), Some("entry"));
    assert_eq!(app.persistence.watch_stats().watchers, watchers + 1);
    client.charge(charge("one", account, 1)).await.unwrap();
    client.charge(charge("two", account, 2)).await.unwrap();
    let one = events
        .next(Duration::from_secs(10))
        .await
        .expect("a charge");
    assert!(one.data.contains("href=\"/keys?key=one\""), "{}", one.data);
    let last_seen = one.id.clone().unwrap();
    drop(events);

    client.charge(charge("three", account, 3)).await.unwrap();
    let mut resumed = Events::open(site, &path, &[("Last-Event-ID", &last_seen)]).await;
    let mut keys = Vec::new();
    let mut ids = Vec::new();
    while let Some(event) = resumed.next(Duration::from_secs(10)).await {
        ids.push(event.id.unwrap().parse::<u64>().unwrap());
        keys.extend(
            ["one", "two", "three"]
                .into_iter()
                .filter(|k| event.data.contains(&format!("key={k}\""))),
        );
        if keys.len() == 2 {
            break;
        }
    }
    assert_eq!(
        keys,
        ["two", "three"],
        "after the last event, nothing twice"
    );
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(ids[0] > last_seen.parse::<u64>().unwrap());
}

/// An entry as a search page's row shows it: its id, account, amount and
/// running balance.
fn shown(entries: &[pb::Entry]) -> Vec<(u64, Vec<String>)> {
    entries
        .iter()
        .map(|e| {
            let fields = [
                e.account_id.to_string(),
                e.amount.to_string(),
                e.balance_after.to_string(),
            ];
            (e.entry_id, fields.to_vec())
        })
        .collect()
}

async fn search_page(
    client: &mut Client,
    list: &[(&str, &str)],
    account: u64,
    token: &str,
) -> Vec<(u64, Vec<String>)> {
    let reply = client
        .search_entries(search(list, account, 0, token))
        .await
        .unwrap()
        .into_inner();
    shown(&reply.entries)
}

/// A search page's rows equal SearchEntries' across a page boundary, followed
/// by the page's own next-page link, and for one account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_page_shows_what_search_entries_answers() {
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let mut client = app.client().await;
    let (funding, account) = (
        app.funded_account("USD", 2000).await,
        app.funded_account("USD", 0).await,
    );
    let legs = (1..=51).map(|i| leg(funding, account, i)).collect();
    let sale = pb::PostRequest {
        metadata: pairs(&[("batch", "b/1")]),
        ..post("batch", legs)
    };
    client.post(sale).await.unwrap();
    let batch = [("batch", "b/1")];

    let first = http::get(site, "/entries?metadata=batch%3Ab%2F1", &[]).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let names = ["account_id", "amount", "balance_after"];
    let api = client
        .search_entries(search(&batch, 0, 0, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(api.entries.len(), 100, "more than a page: 102 entries");
    assert_eq!(first.rows("entry", &names), shown(&api.entries));
    let next = first.link("next-page").expect("a next page");
    assert!(next.contains("&page_token="), "{next}");
    let second = http::get(site, &next, &[]).await;
    assert_eq!(second.status, 200, "{next}: {}", second.body);
    let api_next = search_page(&mut client, &batch, 0, &api.next_page_token).await;
    assert_eq!(api_next.len(), 2);
    assert_eq!(second.rows("entry", &names), api_next);
    assert!(second.link("next-page").is_none(), "the last page");

    let one = format!("/entries?metadata=batch%3Ab%2F1&account_id={funding}");
    let scoped = http::get(site, &one, &[]).await;
    let api_one = search_page(&mut client, &batch, funding, "").await;
    assert_eq!(api_one.len(), 51);
    assert_eq!(scoped.rows("entry", &names), api_one);

    let sent = "/entries?metadata=batch%3Ab%2F1&metadata=&metadata=&account_id=";
    let tidy = http::get(site, sent, &[]).await;
    assert_eq!(tidy.status, 303, "a form's blank fields");
    assert_eq!(
        tidy.header("location"),
        Some("/entries?metadata=batch%3Ab%2F1")
    );
    let empty = http::get(site, "/entries", &[]).await;
    assert_eq!(empty.status, 200, "the form, before a search");
    assert!(empty.rows("entry", &[]).is_empty());
    let home = http::get(site, "/", &[]).await;
    assert!(
        home.body.contains("action=\"/entries\""),
        "the home page's form"
    );
}

/// The accounts page equals ListAccounts' with a filter and without; pairs are
/// shown, sorted, on the account, entry and hold pages, each a link to its
/// search.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accounts_page_shows_what_list_accounts_answers() {
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let mut client = app.client().await;
    let open = |key: &'static str, list: &'static [(&'static str, &'static str)]| {
        let request = pb::OpenAccountRequest {
            metadata: pairs(list),
            ..open_account(key, None)
        };
        let mut client = client.clone();
        async move {
            client
                .open_account(request)
                .await
                .unwrap()
                .into_inner()
                .account
                .unwrap()
                .account_id
        }
    };
    let account = open("tagged", &[("customer", "c 1&2"), ("region", "eu")]).await;
    open("other", &[("region", "eu")]).await;
    open("untagged", &[]).await;

    let listed = http::get(site, "/accounts?metadata=region%3Aeu", &[]).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let api = client
        .list_accounts(pb::ListAccountsRequest {
            metadata: pairs(&[("region", "eu")]),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let figures = ["balance", "held", "available"];
    let expected: Vec<(u64, Vec<String>)> = api
        .accounts
        .iter()
        .map(|a| {
            let shown = [a.balance, a.held, a.available].map(|n| n.to_string());
            (a.account_id, shown.to_vec())
        })
        .collect();
    assert_eq!(expected.len(), 2);
    assert_eq!(listed.rows("account", &figures), expected);
    let every = http::get(site, "/accounts", &[]).await;
    assert_eq!(every.rows("account", &figures).len(), 3, "no filter: all");
    let home = http::get(site, "/", &[]).await;
    assert_eq!(
        home.rows("account", &figures),
        every.rows("account", &figures),
        "the home page shows the accounts' first page"
    );

    let page = http::get(site, &format!("/accounts/{account}"), &[]).await;
    let customer = "href=\"/accounts?metadata=customer%3Ac+1%262\"";
    let (before, after) = page.body.split_once(customer).expect(customer);
    assert!(after.contains("region%3Aeu"), "sorted by key");
    assert!(before.contains("id=\"metadata\""));

    client.credit(credit("fund", account, 100)).await.unwrap();
    let charged = client
        .charge(tagged("order", account, 7, &[("order_id", "A-1")]))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    let entry = http::get(site, &format!("/entries/{}", charged.entry_id), &[]).await;
    assert!(
        entry
            .body
            .contains("href=\"/entries?metadata=order_id%3AA-1\""),
        "{}",
        entry.body
    );
    let request = pb::PlaceHoldRequest {
        metadata: pairs(&[("trip", "t-9")]),
        ..place_hold("ride", account, 5, HOUR)
    };
    let placed = client
        .place_hold(request)
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap();
    let hold = http::get(site, &format!("/holds/{}", placed.hold_id), &[]).await;
    assert!(hold.body.contains("href=\"/entries?metadata=trip%3At-9\""));
    assert!(hold.field("client").is_none(), "no client without tokens");
}

/// A reversal's entry links to the entry it mirrors, as GetEntry names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reversal_entry_links_to_the_entry_it_reverses() {
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let account = app.funded_account("USD", 10).await;
    let mut client = app.client().await;
    let credited = client
        .credit(credit("top-up", account, 25))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    let reversal = client
        .reverse(pb::ReverseRequest {
            idempotency_key: "undo-top-up".into(),
            original_key: "top-up".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .entries
        .remove(0);
    assert_eq!(reversal.reverses_entry_id, credited.entry_id);
    let page = http::get(site, &format!("/entries/{}", reversal.entry_id), &[]).await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.field("reverses_entry_id").as_deref(),
        Some(credited.entry_id.to_string().as_str()),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(&format!("href=\"/entries/{}\"", credited.entry_id))
    );
}

/// A balance at a sequence, at a time and now equals GetBalance's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balance_at_a_point_shows_what_get_balance_answers() {
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let mut client = app.client().await;
    let account = app.funded_account("USD", 100).await;
    for (i, amount) in [10, 20, 30].into_iter().enumerate() {
        client
            .charge(charge(&format!("c-{i}"), account, amount))
            .await
            .unwrap();
    }
    until_sequenced(&db, Duration::from_secs(20)).await;
    let journal = client
        .list_entries(pb::ListEntriesRequest {
            account_id: account,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    let middle = &journal[2];
    assert!(middle.sequence > 0, "numbered: 0 would ask for now");
    let at = middle.created_at.unwrap();
    let base = format!("/accounts/{account}/balance");
    let asked = |as_of_sequence, as_of_time| pb::GetBalanceRequest {
        account_id: account,
        as_of_sequence,
        as_of_time,
    };
    for (query, request) in [
        (
            format!("?as_of_sequence={}", middle.sequence),
            asked(middle.sequence, None),
        ),
        (format!("?as_of_time={}", rfc3339(at)), asked(0, Some(at))),
        (String::new(), asked(0, None)),
    ] {
        let page = http::get(site, &format!("{base}{query}"), &[]).await;
        assert_eq!(page.status, 200, "{query}: {}", page.body);
        let api = client.get_balance(request).await.unwrap().into_inner();
        assert_eq!(
            page.field("balance"),
            Some(api.balance.to_string()),
            "{query}"
        );
        assert_eq!(
            page.field("sequence"),
            Some(api.sequence.to_string()),
            "{query}"
        );
        assert_eq!(page.field("floor").as_deref(), Some("0"));
    }
    let at_middle = format!("{base}?as_of_sequence={}", middle.sequence);
    let at_middle = http::get(site, &at_middle, &[]).await;
    assert_eq!(
        at_middle.field("balance"),
        Some(middle.balance_after.to_string()),
        "at an entry's sequence, its running balance"
    );
    let account_page = http::get(site, &format!("/accounts/{account}"), &[]).await;
    assert!(
        account_page.body.contains(&format!("action=\"{base}\"")),
        "the form"
    );
}

/// A time as a query string carries it: RFC 3339, its `+` escaped.
fn rfc3339(at: prost_types::Timestamp) -> String {
    chrono::DateTime::from_timestamp(at.seconds, u32::try_from(at.nanos).unwrap())
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        .replace('+', "%2B")
}

/// Bad input to the new pages is a 400 page, a point not reached 409
/// (POINT_NOT_REACHED), an unknown account 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_searches_and_points_are_readable_refusals() {
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let account = app.funded_account("USD", 100).await;
    let base = format!("/accounts/{account}/balance");
    let five = "metadata=a%3A1&metadata=b%3A2&metadata=c%3A3&metadata=d%3A4&metadata=e%3A5";
    for (path, status, reason) in [
        (
            format!("{base}?as_of_sequence=999999999"),
            409,
            "POINT_NOT_REACHED",
        ),
        (
            format!("{base}?as_of_time=2999-01-01T00:00:00Z"),
            409,
            "POINT_NOT_REACHED",
        ),
        (
            format!("{base}?as_of_sequence=1&as_of_time=2026-01-01T00:00:00Z"),
            400,
            "INVALID_REQUEST",
        ),
        (
            format!("{base}?as_of_time=yesterday"),
            400,
            "INVALID_REQUEST",
        ),
        (
            format!("{base}?as_of_time=2026-12-31+23%3A59"),
            400,
            "INVALID_REQUEST",
        ),
        (format!("{base}?as_of_sequence=-1"), 400, "INVALID_REQUEST"),
        (
            "/accounts/999999/balance".to_owned(),
            404,
            "ACCOUNT_NOT_FOUND",
        ),
        ("/accounts/abc/balance".to_owned(), 400, "INVALID_REQUEST"),
        (
            "/entries?metadata=no-colon".to_owned(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "/entries?metadata=bad%20key%3A1".to_owned(),
            400,
            "INVALID_REQUEST",
        ),
        (format!("/entries?{five}"), 400, "INVALID_REQUEST"),
        (
            "/entries?metadata=k%3A1&metadata=k%3A2".to_owned(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "/entries?metadata=k%3A1&account_id=x".to_owned(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "/entries?metadata=k%3A1&page_token=forged".to_owned(),
            400,
            "INVALID_PAGE_TOKEN",
        ),
        (
            "/accounts?metadata=no-colon".to_owned(),
            400,
            "INVALID_REQUEST",
        ),
        (format!("/accounts?{five}"), 400, "INVALID_REQUEST"),
        (
            "/accounts?page_token=forged".to_owned(),
            400,
            "INVALID_PAGE_TOKEN",
        ),
    ] {
        let page = http::get(site, &path, &[]).await;
        assert_eq!(page.status, status, "{path}: {}", page.body);
        assert_eq!(page.field("reason").as_deref(), Some(reason), "{path}");
        assert!(page.body.contains("<h1>"), "{path}: a readable page");
    }
}
