//! The console over plain HTTP: its pages show what the RPCs answer; an unknown
//! id is 404, any method but GET and HEAD 405, and nothing changes; with tokens,
//! no token gets the form, a token without the grants is refused, and a key page
//! shows only its client's keys; a login opens a session that is no bearer token
//! and ends at logout, idle or old, and sends the browser only to a page of its
//! own; the tail streams entries as events numbered by sequence and resumes
//! after `Last-Event-ID`, each under the watchers' count.

use std::net::SocketAddr;
use std::time::Duration;

use ledger::console::Clock;
use ledger::grpc::auth::Tokens;
use ledger::proto::{money, pb};
use mysql_async::prelude::Queryable as _;

use crate::support::http::{self, Events};
use crate::support::metadata::{pairs, search, tagged};
use crate::support::server::until;
use crate::support::wire::token_line;
use crate::support::{
    Config, TestApp, TestDb, capture, charge, credit, leg, limits, open_account, place_hold, post,
    transfer, void, with_token,
};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

const HOUR: Duration = Duration::from_secs(3600);
/// How long a test waits for the tail's next event: an entry is numbered and
/// published within a second on a quiet machine, and within this on a loaded
/// one; a wait that ends sooner is no failure.
const EVENT_WAIT: Duration = Duration::from_secs(60);

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

/// Waits until the first `count` entries of `account` are numbered, as a
/// reader sending `headers` sees them: the tail streams an entry once it has
/// its sequence.
async fn until_numbered(site: SocketAddr, account: u64, count: usize, headers: &[(&str, &str)]) {
    let path = format!("/tail/events?after=0&account_id={account}");
    let mut numbered = Events::open(site, &path, headers).await;
    for seen in 0..count {
        let event = numbered.next(Duration::from_secs(20)).await;
        assert!(
            event.is_some_and(|e| e.id.parse::<u64>().unwrap() > 0),
            "{seen} of {count} entries numbered"
        );
    }
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

    until_numbered(site, account, 2, &[]).await;
    let page = http::get(site, &format!("/accounts/{account}"), &[]).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let read = client
        .get_account(pb::GetAccountRequest {
            account_id: account,
        })
        .await
        .unwrap()
        .into_inner();
    for (field, value, shown) in [
        ("balance", read.balance, "0.70 USD"),
        ("held", read.held, "0.25 USD"),
        ("available", read.available, "0.45 USD"),
        ("floor", 0, "0.00 USD"),
    ] {
        assert_eq!(page.value(field), Some(value), "{field}: the API's number");
        assert_eq!(page.field(field).as_deref(), Some(shown), "{field}");
    }
    assert_eq!((read.balance, read.held, read.available), (70, 25, 45));
    assert_eq!(page.field("ceiling").as_deref(), Some("none"));
    assert_eq!(page.value("ceiling"), None);
    let journal = page.rows("entry", &["kind", "amount", "balance_after", "leg"]);
    let kinds: Vec<&str> = journal.iter().map(|(_, f)| f[0].as_str()).collect();
    assert_eq!(kinds, ["CREDIT", "CHARGE"], "kinds as words");
    assert_eq!(journal[1].1[1..], ["0.30 USD", "0.70 USD", "0"]);
    let chart = page.attrs("#balance-chart [data-point]", "data-balance");
    assert_eq!(
        chart.last().cloned().flatten(),
        Some(read.balance.to_string()),
        "the chart ends at the balance"
    );
    assert_eq!(
        page.attrs("#balance-chart [data-limit]", "data-limit"),
        [Some("floor".to_owned())],
        "a floor of 0, no ceiling"
    );
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
    assert_eq!(hold_page.value("amount"), Some(25));
    assert_eq!(hold_page.field("amount").as_deref(), Some("0.25 USD"));
    assert_eq!(
        hold_page.field("captured_amount").as_deref(),
        Some("0.00 USD")
    );
    assert_eq!(hold_page.field("state").as_deref(), Some("HELD"));
    let key = http::get(site, "/keys?key=coffee", &[]).await;
    assert_eq!(
        key.field("method").as_deref(),
        Some("/ledger.v1.Ledger/Charge")
    );
    let reply = key.rows("entry", &["account_id", "kind", "amount", "leg"]);
    let account = account.to_string();
    assert_eq!(reply[0].1, [account.as_str(), "CHARGE", "0.30 USD", "0"]);
    assert_eq!(
        key.values("entry", &["amount", "balance_after"])[0].1,
        [30, 70]
    );
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
    assert_eq!(as_shop.value("balance"), Some(10));
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
    assert_eq!(balance.value("balance"), Some(10));
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
        .next(EVENT_WAIT)
        .await
        .expect("the credit, within the wait");
    assert_eq!(first.event, "entry");
    assert_eq!(app.persistence.watch_stats().watchers, watchers + 1);
    client.charge(charge("one", account, 1)).await.unwrap();
    client.charge(charge("two", account, 2)).await.unwrap();
    let one = events.next(EVENT_WAIT).await.expect("a charge");
    assert!(one.data.contains("href=\"/keys?key=one\""), "{}", one.data);
    let last_seen = one.id.clone();
    drop(events);

    client.charge(charge("three", account, 3)).await.unwrap();
    let mut resumed = Events::open(site, &path, &[("Last-Event-ID", &last_seen)]).await;
    let mut keys = Vec::new();
    let mut ids = Vec::new();
    let mut seen = Vec::new();
    while let Some(event) = resumed.next(EVENT_WAIT).await {
        seen.push(format!("{} {}: {}", event.id, event.event, event.data));
        ids.push(event.id.parse::<u64>().unwrap());
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
        "after the last event, nothing twice: {seen:#?}"
    );
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{seen:#?}");
    assert!(
        ids[0] > last_seen.parse::<u64>().unwrap(),
        "after {last_seen}: {seen:#?}"
    );
}

/// An entry as a search page's row shows it: its id, account, amount and
/// running balance, in its currency's units.
fn shown(entries: &[pb::Entry]) -> Vec<(u64, Vec<String>)> {
    entries
        .iter()
        .map(|e| {
            let fields = [
                e.account_id.to_string(),
                money::format(e.amount, &e.currency),
                money::format(e.balance_after, &e.currency),
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
    let numbers: Vec<(u64, Vec<i64>)> = api
        .entries
        .iter()
        .map(|e| (e.entry_id, vec![e.amount, e.balance_after]))
        .collect();
    let amounts = first.values("entry", &["amount", "balance_after"]);
    assert_eq!(amounts, numbers, "beside each, the API's number");
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
            let shown = [a.balance, a.held, a.available].map(|n| money::format(n, &a.currency));
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
    until_numbered(site, account, 4, &[]).await;
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
        assert_eq!(page.value("balance"), Some(api.balance), "{query}");
        assert_eq!(
            page.field("balance"),
            Some(money::format(api.balance, "USD")),
            "{query}"
        );
        assert_eq!(
            page.field("sequence"),
            Some(api.sequence.to_string()),
            "{query}"
        );
        assert_eq!(page.value("floor"), Some(0));
    }
    let at_middle = format!("{base}?as_of_sequence={}", middle.sequence);
    let at_middle = http::get(site, &at_middle, &[]).await;
    assert_eq!(
        at_middle.value("balance"),
        Some(middle.balance_after),
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

/// A login follows `next` only to a path of the console's own, of visible ASCII
/// and starting with a single `/`; anything else (a tab browsers drop, so that
/// `/<TAB>/evil.example/` is read as `//evil.example/`, a control character, a
/// second slash or a backslash) sends the browser to `/`, whether the form was
/// asked for with it or posted with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_sends_a_browser_only_to_a_page_of_its_own() {
    let db = TestDb::new();
    let tokens = Tokens::parse(&token_line("shop", "shop-secret")).unwrap();
    let app = console(&db, Some(tokens)).await;
    let site = app.console.unwrap();

    let asked = http::get(site, "/login?next=/%09/evil.example/", &[]).await;
    assert_eq!(asked.status, 200);
    assert!(
        asked.body.contains("name=\"next\" value=\"/\""),
        "{}",
        asked.body
    );
    let own = http::get(site, "/login?next=/accounts/7%3Fx", &[]).await;
    assert!(own.body.contains("name=\"next\" value=\"/accounts/7?x\""));

    for (next, location) in [
        ("/%09/evil.example/", "/"),
        ("/%0A/evil.example/", "/"),
        ("/%01x", "/"),
        ("//evil.example/", "/"),
        ("/%5Cevil.example/", "/"),
        ("https://evil.example/", "/"),
        ("/accounts/7%3Fpage_token%3Dx", "/accounts/7?page_token=x"),
    ] {
        let body = format!("token=shop-secret&next={next}");
        let answer = http::send(site, "POST", "/login", &[], &body).await;
        assert_eq!(answer.status, 303, "{next}: {}", answer.body);
        assert_eq!(answer.header("location"), Some(location), "{next}");
        assert!(answer.header("set-cookie").is_some(), "{next}: logged in");
    }
}

/// A login with `token` on a console with tokens: the session's cookie, as a
/// browser sends it back (`name=value`), and the `Set-Cookie` it came in.
async fn session(site: SocketAddr, token: &str, sent: &[(&str, &str)]) -> (String, String) {
    let body = format!("token={token}&next=/");
    let answer = http::send(site, "POST", "/login", sent, &body).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let header = answer.header("set-cookie").expect("a cookie").to_owned();
    let cookie = header.split(';').next().unwrap().to_owned();
    (cookie, header)
}

/// The session's cookie holds no token and moves no money: as a gRPC bearer
/// token it is UNAUTHENTICATED. A new login ends the session its browser had,
/// a logout its own; an ended session's cookie reads nothing (the form, 401).
/// Behind a TLS proxy (`--console-secure-cookie`) the cookie is `Secure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_session_is_no_bearer_token_and_ends_at_logout() {
    let db = TestDb::new();
    let config = Config {
        console: true,
        auth: Some(Tokens::parse(&token_line("shop", "shop-secret")).unwrap()),
        console_secure_cookie: true,
        ..Config::default()
    };
    let app = TestApp::spawn_with(&db, config).await;
    let site = app.console.unwrap();
    let (cookie, set) = session(site, "shop-secret", &[]).await;
    assert!(set.contains("Secure") && set.contains("HttpOnly"), "{set}");
    let id = cookie
        .strip_prefix("ledger_console_session=")
        .expect(&cookie);
    assert_eq!(id.len(), 43, "32 random bytes, base64url: {id}");
    assert!(!set.contains("shop-secret") && !set.contains("c2hvcC1zZWNyZXQ"));

    let mut anyone = Client::new(app.channel().await);
    for call in ["GetAccount", "Charge"] {
        let code = bearer_call(&mut anyone, call, id).await;
        assert_eq!(code, tonic::Code::Unauthenticated, "{call} with the cookie");
    }
    let page = http::get(site, "/keys", &[("Cookie", &cookie)]).await;
    assert_eq!(page.status, 200, "the session reads");

    let (again, _) = session(site, "shop-secret", &[("Cookie", &cookie)]).await;
    assert_ne!(again, cookie, "a new session at each login");
    let old = http::get(site, "/keys", &[("Cookie", &cookie)]).await;
    assert_eq!(old.status, 401, "the browser's session before it ended");
    let logout = http::send(site, "POST", "/logout", &[("Cookie", &again)], "").await;
    assert_eq!(logout.status, 303);
    assert!(logout.header("set-cookie").unwrap().contains("Max-Age=0"));
    let after = http::get(site, "/keys", &[("Cookie", &again)]).await;
    assert_eq!(after.status, 401, "an ended session reads nothing");
    assert!(after.body.contains("action=\"/login\""), "the form");
}

/// Calls `method` with `token` as its bearer token: the code it is answered.
async fn bearer_call(client: &mut Client, method: &str, token: &str) -> tonic::Code {
    let bearer: tonic::metadata::MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
    let answer = if method == "Charge" {
        let mut request = tonic::Request::new(charge("with-a-cookie", 1, 1));
        request.metadata_mut().insert("authorization", bearer);
        client.charge(request).await.map(|_| ())
    } else {
        let mut request = tonic::Request::new(pb::GetAccountRequest { account_id: 1 });
        request.metadata_mut().insert("authorization", bearer);
        client.get_account(request).await.map(|_| ())
    };
    answer.map_or_else(|status| status.code(), |()| tonic::Code::Ok)
}

/// A session ends after 30 minutes without a request, counted from its last,
/// and 12 hours after its login however busy; the console's clock is moved on,
/// not waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_session_ends_after_30_idle_minutes_or_12_hours() {
    const MINUTE: Duration = Duration::from_secs(60);
    let db = TestDb::new();
    let clock = Clock::default();
    let config = Config {
        console: true,
        auth: Some(Tokens::parse(&token_line("shop", "shop-secret")).unwrap()),
        console_clock: clock.clone(),
        ..Config::default()
    };
    let app = TestApp::spawn_with(&db, config).await;
    let site = app.console.unwrap();
    let read = |cookie: String| async move {
        http::get(site, "/keys", &[("Cookie", &cookie)])
            .await
            .status
    };

    let (idle, header) = session(site, "shop-secret", &[]).await;
    assert!(!header.contains("Secure"), "plain HTTP: {header}");
    clock.advance(29 * MINUTE);
    assert_eq!(read(idle.clone()).await, 200, "29 idle minutes");
    clock.advance(29 * MINUTE);
    assert_eq!(
        read(idle.clone()).await,
        200,
        "idle is counted from the last use"
    );
    clock.advance(30 * MINUTE);
    assert_eq!(read(idle).await, 401, "30 idle minutes end it");

    let (busy, _) = session(site, "shop-secret", &[]).await;
    let mut used = Duration::ZERO;
    while used + 25 * MINUTE < HOUR * 12 {
        clock.advance(25 * MINUTE);
        used += 25 * MINUTE;
        assert_eq!(
            read(busy.clone()).await,
            200,
            "used every 25 minutes, at {used:?}"
        );
    }
    clock.advance((HOUR * 12).saturating_sub(used));
    assert_eq!(read(busy).await, 401, "12 hours end it, however busy");
}

/// A request is answered only when its `Host` is one of the console's own names
/// (loopback names, its address, `--console-host` names, with their port or
/// without); sent to another name, as a page whose DNS name was pointed at the
/// console sends it, it is 421 and reads nothing, `/health` and the login
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_answers_only_to_its_own_names() {
    let db = TestDb::new();
    let config = Config {
        console: true,
        console_hosts: vec!["ledger.internal".parse().unwrap()],
        ..Config::default()
    };
    let app = TestApp::spawn_with(&db, config).await;
    let site = app.console.unwrap();
    let account = app.funded_account("USD", 100).await;
    let port = site.port();
    let own = [
        "localhost".to_owned(),
        format!("localhost:{port}"),
        "127.0.0.1".to_owned(),
        format!("127.0.0.1:{port}"),
        "[::1]".to_owned(),
        format!("[::1]:{port}"),
        site.to_string(),
        "ledger.internal".to_owned(),
        format!("LEDGER.internal:{port}"),
    ];
    let foreign = [
        "attacker.example".to_owned(),
        format!("attacker.example:{port}"),
        format!("localhost.attacker.example:{port}"),
        format!("ledger.internal.attacker.example:{port}"),
    ];
    for path in ["/health".to_owned(), format!("/accounts/{account}")] {
        for host in &own {
            let answer = http::get(site, &path, &[("Host", host)]).await;
            assert_eq!(answer.status, 200, "{host} {path}: {}", answer.body);
        }
        for host in &foreign {
            let answer = http::get(site, &path, &[("Host", host)]).await;
            assert_eq!(answer.status, 421, "{host} {path}");
            assert!(answer.body.contains("<h1>421 Misdirected Request</h1>"));
            assert!(
                answer.field("balance").is_none(),
                "{host} {path} reads nothing"
            );
        }
    }
    let login = [("Host", foreign[1].as_str())];
    let refused = http::send(site, "POST", "/login", &login, "token=x&next=/").await;
    assert_eq!(refused.status, 421);
    assert!(refused.header("set-cookie").is_none());
}

/// The HTML of the table row of entry `id`.
fn entry_row(body: &str, id: u64) -> &str {
    let marker = format!("<tr data-entry=\"{id}\"");
    let (_, row) = body.split_once(&marker).expect(&marker);
    row.split_once("</tr>").map_or(row, |(row, _)| row)
}

/// Two clients write under the same key, alice a credit to her account and bob
/// a transfer into it. On the account's journal, the tail and an entry's page,
/// each sees every row's client, and a row's key linked only when the call was
/// theirs: the link opens their own call, never the other's under that key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_is_linked_only_from_the_viewers_own_rows() {
    let db = TestDb::new();
    let tokens = token_line("alice", "alice-secret") + &token_line("bob", "bob-secret");
    let app = console(&db, Some(Tokens::parse(&tokens).unwrap())).await;
    let site = app.console.unwrap();
    let channel = app.channel().await;
    let (mut alice, mut bob) = (
        with_token(channel.clone(), "alice-secret"),
        with_token(channel, "bob-secret"),
    );
    let open = |key: &str| pb::OpenAccountRequest {
        idempotency_key: key.into(),
        currency: "USD".into(),
        ..Default::default()
    };
    let theirs = alice.open_account(open("open")).await.unwrap().into_inner();
    let account = theirs.account.unwrap().account_id;
    let bobs = bob.open_account(open("open")).await.unwrap().into_inner();
    let source = bobs.account.unwrap().account_id;
    bob.credit(credit("fund", source, 50)).await.unwrap();
    let credited = alice.credit(credit("same", account, 100)).await.unwrap();
    let credited = credited.into_inner().entry.unwrap().entry_id;
    let moved = bob
        .transfer(transfer("same", source, account, 20))
        .await
        .unwrap();
    let moved = moved.into_inner().credit.unwrap().entry_id;

    let link = "href=\"/keys?key=same\"";
    let journal = format!("/accounts/{account}");
    for (token, own, others, method) in [
        ("alice-secret", credited, moved, "Credit"),
        ("bob-secret", moved, credited, "Transfer"),
    ] {
        let (cookie, _) = session(site, token, &[]).await;
        let cookie = [("Cookie", cookie.as_str())];
        let page = http::get(site, &journal, &cookie).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let clients = page.rows("entry", &["client"]);
        assert_eq!(clients.len(), 2, "{clients:?}");
        assert!(
            entry_row(&page.body, own).contains(link),
            "{token}: own row"
        );
        assert!(
            !entry_row(&page.body, others).contains(link),
            "{token}: other's row"
        );
        let key = http::get(site, "/keys?key=same", &cookie).await;
        let called = format!("/ledger.v1.Ledger/{method}");
        assert_eq!(
            key.field("method"),
            Some(called),
            "{token}: the link opens its own call"
        );
        let entry = http::get(site, &format!("/entries/{others}"), &cookie).await;
        assert!(!entry.body.contains(link), "{token}: other's entry page");
        assert!(entry.body.contains("data-field=\"idempotency_key\">same<"));
    }
    let by_client: Vec<(u64, Vec<String>)> = [credited, moved]
        .into_iter()
        .zip(["alice", "bob"])
        .map(|(id, client)| (id, vec![client.to_owned()]))
        .collect();
    let (cookie, _) = session(site, "alice-secret", &[]).await;
    let page = http::get(site, &journal, &[("Cookie", &cookie)]).await;
    let mut shown = page.rows("entry", &["client"]);
    shown.sort();
    assert_eq!(shown, by_client, "each row shows its client");

    let path = format!("/tail/events?after=0&account_id={account}");
    let mut events = Events::open(site, &path, &[("Cookie", &cookie)]).await;
    let first = events.next(EVENT_WAIT).await.expect("the credit");
    let second = events.next(EVENT_WAIT).await.expect("the transfer");
    assert!(
        first.data.contains(link) && first.data.contains(">alice<"),
        "{}",
        first.data
    );
    assert!(
        !second.data.contains(link) && second.data.contains(">bob<"),
        "{}",
        second.data
    );
}

/// A key's stored reply is shown as the pages show what it holds: a post's
/// entries as one journal table (two legs, four rows, a balance of 0 and a leg
/// 0 shown), a capture's hold with its hold page's figures beside its entry, an
/// opened account with its account page's figures, each amount in its
/// currency's units with the API's number beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_page_shows_a_reply_as_the_pages_show_what_it_holds() {
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let mut client = app.client().await;
    let (funding, account) = (
        app.funded_account("USD", 1000).await,
        app.funded_account("USD", 0).await,
    );
    let legs = vec![leg(funding, account, 300), leg(account, funding, 300)];
    let posted = client.post(post("two-legs", legs)).await.unwrap();
    let posted = posted.into_inner().entries;

    let page = http::get(site, "/keys?key=two-legs", &[]).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let names = ["account_id", "kind", "amount", "balance_after", "leg"];
    let expected: Vec<(u64, Vec<String>)> = posted
        .iter()
        .map(|e| {
            let kind = pb::EntryKind::try_from(e.kind).unwrap().as_str_name();
            let fields = [
                e.account_id.to_string(),
                kind.trim_start_matches("ENTRY_KIND_").to_owned(),
                money::format(e.amount, "USD"),
                money::format(e.balance_after, "USD"),
                e.leg.to_string(),
            ];
            (e.entry_id, fields.to_vec())
        })
        .collect();
    assert_eq!(expected.len(), 4, "two legs, two entries each");
    assert_eq!(page.rows("entry", &names), expected);
    let zero = &page.rows("entry", &names)[2].1;
    assert_eq!(zero[1..], ["TRANSFER_OUT", "3.00 USD", "0.00 USD", "1"]);
    assert_eq!(
        page.attrs("#reply-fields", "id").len(),
        0,
        "nothing field by field"
    );
    let emptied = &posted[2];
    let entry = http::get(site, &format!("/entries/{}", emptied.entry_id), &[]).await;
    assert_eq!(entry.value("balance_after"), Some(0));
    assert_eq!(entry.field("leg").as_deref(), Some("1"));
    let first = http::get(site, &format!("/entries/{}", posted[0].entry_id), &[]).await;
    assert_eq!(first.field("leg").as_deref(), Some("0"), "leg 0 shown");

    let hold = client
        .place_hold(place_hold("hotel", funding, 70, HOUR))
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap();
    client
        .capture_hold(capture("checkout", hold.hold_id, 55))
        .await
        .unwrap();
    let page = http::get(site, "/keys?key=checkout", &[]).await;
    let section = format!("#reply [data-hold=\"{}\"]", hold.hold_id);
    let figures = ["state", "amount", "captured_amount"]
        .map(|f| page.texts(&format!("{section} [data-field={f}]")).concat());
    assert_eq!(figures, ["CAPTURED", "0.70 USD", "0.55 USD"]);
    let captured = page.attrs(&format!("{section} [data-field=captured_amount]"), "value");
    assert_eq!(captured, [Some("55".to_owned())]);
    assert_eq!(
        page.rows("entry", &["kind", "amount"])[0].1,
        ["CAPTURE", "0.55 USD"]
    );

    let kwd = pb::OpenAccountRequest {
        currency: "KWD".into(),
        ..open_account("open-kwd", None)
    };
    client.open_account(kwd).await.unwrap();
    let page = http::get(site, "/keys?key=open-kwd", &[]).await;
    assert_eq!(page.field("balance").as_deref(), Some("0.000 KWD"));
    assert_eq!(page.field("floor").as_deref(), Some("0.000 KWD"));
    assert_eq!(page.field("ceiling").as_deref(), Some("none"));
}

/// Amounts read in their currency's decimals (none for JPY, three for KWD), in
/// minor units, marked, for a code ISO 4217 does not know; a stored decline's
/// amounts in the currency of the account or hold it names, its hold state as
/// a word, the API's values beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amounts_read_in_their_currencys_units_a_declines_too() {
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let mut client = app.client().await;
    for (currency, balance, shown) in [
        ("JPY", 1000, "1000 JPY"),
        ("KWD", 1005, "1.005 KWD"),
        ("ABC", 1000, "1000 ABC (minor units)"),
    ] {
        let account = app.funded_account(currency, balance).await;
        let page = http::get(site, &format!("/accounts/{account}"), &[]).await;
        assert_eq!(page.field("balance").as_deref(), Some(shown), "{currency}");
        assert_eq!(page.value("balance"), Some(balance), "{currency}");
        let amount = page.rows("entry", &["amount"]);
        assert_eq!(amount[0].1, [shown], "{currency}: the credit");
    }

    let account = app.funded_account("USD", 100).await;
    let refused = client.charge(charge("too-much", account, 250)).await;
    assert_eq!(refused.unwrap_err().code(), tonic::Code::FailedPrecondition);
    let page = http::get(site, "/keys?key=too-much", &[]).await;
    assert_eq!(page.field("reason").as_deref(), Some("INSUFFICIENT_FUNDS"));
    let detail = |name: &str| {
        let row = format!("#metadata tr[data-name=\"{name}\"] [data-field=value]");
        (page.texts(&row), page.attrs(&row, "value"))
    };
    let id = account.to_string();
    for (name, shown, value) in [
        ("amount", "2.50 USD", "250"),
        ("available", "1.00 USD", "100"),
        ("min_balance", "0.00 USD", "0"),
        ("account_id", id.as_str(), id.as_str()),
    ] {
        let expected = (vec![shown.to_owned()], vec![Some(value.to_owned())]);
        assert_eq!(detail(name), expected, "{name}");
    }

    let hold = client
        .place_hold(place_hold("ride", account, 40, HOUR))
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap();
    client
        .void_hold(void("cancel", hold.hold_id))
        .await
        .unwrap();
    let again = client.capture_hold(capture("late", hold.hold_id, 10)).await;
    assert_eq!(again.unwrap_err().code(), tonic::Code::FailedPrecondition);
    let page = http::get(site, "/keys?key=late", &[]).await;
    let state = "#metadata tr[data-name=\"state\"] [data-field=value]";
    assert_eq!(page.texts(state), ["VOIDED"]);
    assert_eq!(
        page.attrs(state, "value"),
        [Some("HOLD_STATE_VOIDED".to_owned())]
    );
}

/// The account page's chart draws the page's running balances and, where the
/// journal goes on past the page, the balances GetBalance answers up to the
/// last entry, ending at the balance now; a reader not granted GetBalance gets
/// the page's line and the balance now alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_balance_chart_runs_past_the_journals_page_to_the_balance() {
    let db = TestDb::new();
    let tokens =
        token_line("shop", "shop-secret") + &granted("paged", "GetAccount,ListEntries,ListHolds");
    let app = console(&db, Some(Tokens::parse(&tokens).unwrap())).await;
    let site = app.console.unwrap();
    let mut shop = with_token(app.channel().await, "shop-secret");
    let open = |key: &str| pb::OpenAccountRequest {
        limits: Some(limits(Some(0), Some(1_000_000))),
        ..open_account(key, None)
    };
    let open = |key: &'static str| {
        let mut shop = shop.clone();
        let request = open(key);
        async move {
            let opened = shop.open_account(request).await.unwrap().into_inner();
            opened.account.unwrap().account_id
        }
    };
    let (funding, account) = (open("funding").await, open("account").await);
    shop.credit(credit("fund", funding, 100_000)).await.unwrap();
    let legs = (1..=120).map(|i| leg(funding, account, i)).collect();
    shop.post(post("many", legs)).await.unwrap();
    shop.charge(charge("later", account, 70)).await.unwrap();
    let (cookie, _) = session(site, "shop-secret", &[]).await;
    let cookie = [("Cookie", cookie.as_str())];
    until_numbered(site, account, 121, &cookie).await;

    let page = http::get(site, &format!("/accounts/{account}"), &cookie).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let balance = page.value("balance").unwrap();
    assert_eq!(balance, (1..=120).sum::<i64>() - 70);
    let points = chart_points(&page);
    let kinds = |kind: &str| points.iter().filter(|(k, _, _)| k == kind).count();
    assert_eq!(
        (kinds("journal"), kinds("now")),
        (100, 1),
        "the page, then now"
    );
    assert!((1..=10).contains(&kinds("beyond")), "{points:?}");
    assert_eq!(
        points.last().unwrap().2,
        balance,
        "the line ends at the balance"
    );
    for (kind, sequence, drawn) in &points {
        if kind == "beyond" {
            let at = shop
                .get_balance(pb::GetBalanceRequest {
                    account_id: account,
                    as_of_sequence: *sequence,
                    as_of_time: None,
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!((at.sequence, at.balance), (*sequence, *drawn));
        }
    }
    assert_eq!(
        page.attrs("#balance-chart [data-limit]", "data-minor"),
        [Some("0".to_owned()), Some("1000000".to_owned())],
        "the floor and the ceiling"
    );

    let (paged, _) = session(site, "paged-secret", &[]).await;
    let page = http::get(site, &format!("/accounts/{account}"), &[("Cookie", &paged)]).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let points = chart_points(&page);
    assert!(
        points.iter().all(|(kind, _, _)| kind != "beyond"),
        "{points:?}"
    );
    assert_eq!(points.last().unwrap().2, balance);
}

/// The balance chart's points: each one's kind, sequence and balance.
fn chart_points(page: &http::Answer) -> Vec<(String, u64, i64)> {
    let css = "#balance-chart [data-point]";
    let read = |name| page.attrs(css, name).into_iter().map(Option::unwrap);
    read("data-point")
        .zip(read("data-sequence"))
        .zip(read("data-balance"))
        .map(|((kind, sequence), balance)| {
            (kind, sequence.parse().unwrap(), balance.parse().unwrap())
        })
        .collect()
}

/// A batch item's key reads on the key page as its call's would: the method
/// it wraps and its stored reply's entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_page_shows_a_batch_items_outcome_as_a_calls() {
    use pb::batch_item::Call;
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let mut client = app.client().await;
    let (a, b) = (
        app.funded_account("USD", 1000).await,
        app.funded_account("USD", 0).await,
    );
    let items = [
        Call::Charge(charge("item-charge", a, 25)),
        Call::Transfer(transfer("item-transfer", a, b, 40)),
    ];
    let request = pb::BatchRequest {
        items: items
            .into_iter()
            .map(|call| pb::BatchItem { call: Some(call) })
            .collect(),
    };
    let results = client.batch(request).await.unwrap().into_inner().results;
    let (
        Some(pb::batch_result::Result::Charge(charged)),
        Some(pb::batch_result::Result::Transfer(moved)),
    ) = (&results[0].result, &results[1].result)
    else {
        panic!("{results:?}");
    };
    let charged = charged.entry.as_ref().unwrap();

    let page = http::get(site, "/keys?key=item-charge", &[]).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        page.field("method").as_deref(),
        Some("/ledger.v1.Ledger/Charge")
    );
    let rows = page.rows("entry", &["account_id", "amount", "balance_after"]);
    let expected = [
        a.to_string(),
        money::format(charged.amount, "USD"),
        money::format(charged.balance_after, "USD"),
    ];
    assert_eq!(rows, [(charged.entry_id, expected.to_vec())]);

    let page = http::get(site, "/keys?key=item-transfer", &[]).await;
    assert_eq!(
        page.field("method").as_deref(),
        Some("/ledger.v1.Ledger/Transfer")
    );
    let ids: Vec<u64> = page
        .rows("entry", &["account_id"])
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let expected: Vec<u64> = moved
        .debit
        .iter()
        .chain(&moved.credit)
        .map(|e| e.entry_id)
        .collect();
    assert_eq!(ids, expected);
}

/// The subscriptions page shows what ListSubscriptions answers: each one's
/// state, cursor and last error, and how far its cursor is behind the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscriptions_page_shows_what_list_subscriptions_answers() {
    let db = TestDb::new();
    let app = console(&db, None).await;
    let site = app.console.unwrap();
    let mut client = app.client().await;
    let empty = http::get(site, "/subscriptions", &[]).await;
    assert_eq!(empty.status, 200, "{}", empty.body);
    assert_eq!(empty.texts("#no-subscriptions").len(), 1);
    let create = |key: &str, url: &str| pb::CreateSubscriptionRequest {
        idempotency_key: key.into(),
        url: url.into(),
        after_sequence: Some(0),
        ..Default::default()
    };
    // Nothing listens on port 1: every delivery fails, and says why.
    let failing = client
        .create_subscription(create("failing", "http://127.0.0.1:1/hook"))
        .await
        .unwrap()
        .into_inner()
        .subscription
        .unwrap();
    let paused = client
        .create_subscription(create("paused", "https://hooks.invalid/paused"))
        .await
        .unwrap()
        .into_inner()
        .subscription
        .unwrap();
    client
        .pause_subscription(pb::SubscriptionRequest {
            idempotency_key: "pause".into(),
            subscription_id: paused.subscription_id,
        })
        .await
        .unwrap();
    let account = app.funded_account("USD", 100).await;
    until_numbered(site, account, 1, &[]).await;
    until("the failure is recorded", async || {
        let mut client = client.clone();
        let read = client
            .get_subscription(pb::GetSubscriptionRequest {
                subscription_id: failing.subscription_id,
            })
            .await
            .unwrap()
            .into_inner();
        !read.last_error.is_empty()
    })
    .await;
    let api = client
        .list_subscriptions(pb::ListSubscriptionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let page = http::get(site, "/subscriptions", &[]).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let head: u64 = page.texts("#head")[0].parse().unwrap();
    assert!(head >= 1, "the stream's head: {head}");
    let expected: Vec<(u64, Vec<String>)> = api
        .subscriptions
        .iter()
        .map(|s| {
            let state = s
                .state()
                .as_str_name()
                .trim_start_matches("SUBSCRIPTION_STATE_");
            let shown = [
                state.to_owned(),
                s.cursor.to_string(),
                (head - s.cursor).to_string(),
                s.last_error.clone(),
            ];
            (s.subscription_id, shown.to_vec())
        })
        .collect();
    assert_eq!(
        page.rows("subscription", &["state", "cursor", "behind", "last-error"]),
        expected
    );
    assert_eq!(expected[0].1[0], "ACTIVE");
    assert!(expected[0].1[3].contains("sending failed"), "{expected:?}");
    assert_eq!(expected[1].1[0], "PAUSED");
}
