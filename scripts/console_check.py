"""The console in a real browser (Debian's Chromium, driven by Playwright), against
a live `ledger serve` with its development database, each number on a page held
against the gRPC answer (`ledgerctl -o json`):

- an account's balance, held, available and limits; its journal's rows and
  running balances on the first page and, through "Next page", the second; an
  open hold; a hold and its capture; a key's stored reply decoded, and a stored
  decline's code, reason, message and metadata; each amount shown in its
  currency's units (10.00 USD), with the API's number as the `value` beside it;
- the account's balance chart: its points past the journal's page are the
  balances GetBalance answers there, and its last point is the balance;
- the entries by metadata, across a page boundary, and through a pair's link on
  an entry's page; the accounts by metadata, through the search form; a balance
  at a sequence (through the account page's form) and at a time;
- the tail shows a new entry within 1 s without a reload, and again after the
  server restarts on the same port, with no entry missed or shown twice;
- an unknown id is a 404 page, a malformed time 400, a point not reached 409, a
  POST is 405 and moves nothing;
- with tokens: no token gets the form, a token without the grants is refused
  (403), a key page shows only its client's keys; the cookie names a random
  session, not the token, and after a logout it reads nothing; a login whose
  `next` leads off the console (a tab browsers drop, `//`, `/\`) ends on the
  console's own home page.

    python3 scripts/console_check.py LEDGER LEDGERCTL [--screenshots DIR] [--measure]

--screenshots writes the main pages as PNG files; --measure prints the weight and
the time to first byte of an account page of 1,000 entries, its first page and its
last. Run by scripts/console-check.sh, which installs what it needs.
"""

import argparse
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ledger:
    """A `ledger serve` on fixed ports and a data directory, restartable."""

    def __init__(self, binary, ctl, data, tokens_file=None):
        self.binary, self.ctl, self.data = binary, ctl, data
        self.grpc, self.port = free_port(), free_port()
        self.tokens_file = tokens_file
        self.proc = None

    @property
    def site(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        args = [self.binary, "serve", "--listen", f"127.0.0.1:{self.grpc}",
                "--data-dir", os.path.join(self.data, "db"),
                "--console-addr", f"127.0.0.1:{self.port}"]
        if self.tokens_file:
            args += ["--auth-tokens-file", self.tokens_file]
        log = open(os.path.join(self.data, "ledger.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=log,
                                     env={**os.environ, "RUST_LOG": "warn"})
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"console-check: ledger serve exited; see {self.data}/ledger.log")
            ok = subprocess.run([self.binary, "healthcheck", "--listen", f"127.0.0.1:{self.grpc}",
                                 "--timeout", "1s"], capture_output=True).returncode == 0
            if ok:
                return
            time.sleep(0.2)
        sys.exit("console-check: ledger serve never became healthy")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)

    def call(self, *args, token=None):
        """A ledgerctl command's JSON answer."""
        command = [self.ctl, "--server", f"http://127.0.0.1:{self.grpc}", "-o", "json", *args]
        if token:
            command += ["--token", token]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"console-check: ledgerctl {' '.join(args)}: {done.stderr}")
        return json.loads(done.stdout)

    def lookup(self, key, token=None):
        """`lookup-key`, decline or not (exit 1 for a stored decline is an answer)."""
        command = [self.ctl, "--server", f"http://127.0.0.1:{self.grpc}", "-o", "json",
                   "lookup-key", "--key", key]
        if token:
            command += ["--token", token]
        done = subprocess.run(command, capture_output=True, text=True)
        return json.loads(done.stdout)


checks = 0


def check(condition, what):
    global checks
    if not condition:
        sys.exit(f"console-check: FAILED: {what}")
    checks += 1
    print(f"ok: {what}")


def field(page, name, scope="body"):
    return page.locator(f"{scope} [data-field={name}]").first.inner_text().strip()


def value(page, name, scope="body"):
    """The API's number beside a shown amount: the `value` of its element."""
    return int(page.locator(f"{scope} [data-field={name}]").first.get_attribute("value"))


def usd(minor):
    """Minor units of USD as the console shows them (two decimals, integers only)."""
    sign = "-" if minor < 0 else ""
    return f"{sign}{abs(minor) // 100}.{abs(minor) % 100:02d} USD"


def amount(page, name, scope="body"):
    """A shown USD amount's number, once its text was checked to read as it."""
    minor = value(page, name, scope)
    shown = field(page, name, scope)
    check(shown == usd(minor), f"{name} reads {shown!r}, the units of {minor}")
    return minor


def n(value):
    """A JSON number as ledgerctl prints it (64-bit ones as strings; 0 left out)."""
    return int(value or 0)


def populate(ledger):
    """Accounts with a journal of more than a page, holds, a refund, a decline."""
    funding = ledger.call("open-account", "--key", "open-funding", "--currency", "USD",
                          "--no-min-balance", "--metadata", "region=eu")["account"]["accountId"]
    account = ledger.call("open-account", "--key", "open-customer", "--currency", "USD",
                          "--min-balance-minor", "-5000", "--max-balance-minor", "250000",
                          "--metadata", "region=eu", "--metadata",
                          "customer=Zoë & Co: 1/2")["account"]["accountId"]
    ledger.call("open-account", "--key", "open-elsewhere", "--currency", "USD",
                "--metadata", "region=us")
    legs = []
    for i in range(60):
        legs += ["--leg", f"{funding}:{account}:{i + 1}:USD:top-up {i}"]
    ledger.call("post", "--key", "fund-a", "--metadata", "batch=b-1", *legs)
    ledger.call("post", "--key", "fund-b", *legs)
    charge = ledger.call("charge", "--key", "coffee", "--account-id", account, "--amount-minor", "30",
                         "--currency", "USD", "--description", "coffee",
                         "--metadata", "order_id=A-1")["entry"]["entryId"]
    ledger.call("refund", "--key", "coffee-back", "--entry-id", charge, "--amount-minor", "5")
    held = ledger.call("place-hold", "--key", "ride-start", "--account-id", account,
                       "--amount-minor", "40", "--currency", "USD", "--ttl", "600s")["hold"]["holdId"]
    taken = ledger.call("place-hold", "--key", "hotel", "--account-id", account,
                        "--amount-minor", "70", "--currency", "USD", "--ttl", "600s")["hold"]["holdId"]
    ledger.call("capture-hold", "--key", "hotel-checkout", "--hold-id", taken, "--amount-minor", "55")
    declined = subprocess.run([ledger.ctl, "--server", f"http://127.0.0.1:{ledger.grpc}",
                               "charge", "--key", "too-much", "--account-id", account,
                               "--amount-minor", "99999999", "--currency", "USD"], capture_output=True)
    check(declined.returncode == 1, "a charge past the floor is declined (and stored)")
    return funding, account, held, taken


def journal_rows(page):
    rows = page.locator("#journal tbody tr")
    return [(int(rows.nth(i).get_attribute("data-entry")),
             int(rows.nth(i).locator("[data-field=amount]").get_attribute("value")),
             int(rows.nth(i).locator("[data-field=balance_after]").get_attribute("value")))
            for i in range(rows.count())]


def api_rows(entries):
    return [(n(e["entryId"]), n(e.get("amount")), n(e.get("balanceAfter"))) for e in entries]


def check_account(page, ledger, account, held):
    numbered_journal(ledger, account)
    answer = page.goto(f"{ledger.site}/accounts/{account}")
    check(answer.status == 200, "the account page answers 200")
    api = ledger.call("get-account", "--account-id", account)
    for name, key in [("balance", "balance"), ("held", "held"), ("available", "available")]:
        check(amount(page, name) == n(api.get(key)), f"{name} equals GetAccount's ({api.get(key)})")
    limits = api.get("limits", {})
    check(amount(page, "floor") == n(limits.get("minBalance")), "the floor equals GetAccount's")
    check(amount(page, "ceiling") == n(limits.get("maxBalance")), "the ceiling equals GetAccount's")
    check_chart(page, ledger, account, n(api.get("balance")))
    holds = ledger.call("list-holds", "--account-id", account)["holds"]
    shown = [int(x) for x in page.locator("#holds tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.hold)")]
    check(shown == [n(h["holdId"]) for h in holds] and n(held) in shown,
          "the open holds equal ListHolds'")
    row = page.locator(f'#holds tr[data-hold="{held}"]')
    check(amount(page, "amount", f'#holds tr[data-hold="{held}"]') == n(holds[0]["amount"]),
          "an open hold's amount equals ListHolds'")
    check(row.locator("[data-field=expires_at]").inner_text().startswith(holds[0]["expiresAt"][:19]),
          "an open hold's expiry equals ListHolds'")

    first = ledger.call("list-entries", "--account-id", account)
    check(journal_rows(page) == api_rows(first["entries"]),
          f"journal page 1: {len(first['entries'])} rows and running balances equal ListEntries'")
    page.click("#next-page")
    second = ledger.call("list-entries", "--account-id", account, "--page-token", first["nextPageToken"])
    check(journal_rows(page) == api_rows(second["entries"]),
          f"journal page 2 (by Next page): {len(second['entries'])} rows equal ListEntries' next page")
    check("page_token=" in page.url, "the later page has its address (?page_token=)")


def check_chart(page, ledger, account, balance):
    """The chart's points: the page's running balances, then (the journal goes
    on) balances GetBalance answers at their sequences, then the balance now."""
    points = page.locator("#balance-chart [data-point]").evaluate_all(
        "dots => dots.map(d => [d.dataset.point, Number(d.dataset.sequence), Number(d.dataset.balance)])")
    kinds = [kind for kind, _, _ in points]
    check(kinds.count("journal") == len(journal_rows(page)) and kinds[-1] == "now",
          f"the chart draws each entry of the page ({kinds.count('journal')}) and ends now")
    check(points[-1][2] == balance, f"the chart's last point is the balance ({balance})")
    beyond = [(sequence, drawn) for kind, sequence, drawn in points if kind == "beyond"]
    answered = [(n(b.get("sequence")), n(b.get("balance"))) for b in
                (ledger.call("get-balance", "--account-id", account, "--as-of-sequence", str(s))
                 for s, _ in beyond)]
    check(beyond and beyond == answered,
          f"past the page, the chart's {len(beyond)} points are GetBalance's at their sequences")
    limits = page.locator("#balance-chart [data-limit]").evaluate_all(
        "lines => lines.map(l => [l.dataset.limit, Number(l.dataset.minor)])")
    check(limits == [["floor", value(page, "floor")], ["ceiling", value(page, "ceiling")]],
          "the floor and the ceiling are lines across the chart")


def search_rows(page):
    rows = page.locator("#found tbody tr")
    return [(int(rows.nth(i).get_attribute("data-entry")),
             int(rows.nth(i).locator("[data-field=account_id]").inner_text()),
             int(rows.nth(i).locator("[data-field=amount]").get_attribute("value")),
             int(rows.nth(i).locator("[data-field=balance_after]").get_attribute("value")))
            for i in range(rows.count())]


def api_search_rows(entries):
    return [(n(e["entryId"]), n(e["accountId"]), n(e.get("amount")), n(e.get("balanceAfter")))
            for e in entries]


def check_searches(page, ledger, account):
    page.goto(f"{ledger.site}/entries?metadata=batch%3Ab-1")
    first = ledger.call("search-entries", "--metadata", "batch=b-1")
    check(search_rows(page) == api_search_rows(first["entries"]),
          f"entries by metadata, page 1: {len(first['entries'])} rows equal SearchEntries'")
    page.click("#next-page")
    second = ledger.call("search-entries", "--metadata", "batch=b-1",
                         "--page-token", first["nextPageToken"])
    check(search_rows(page) == api_search_rows(second["entries"]) and len(second["entries"]) > 0,
          f"entries by metadata, page 2 (by Next page): {len(second['entries'])} rows equal "
          "SearchEntries' next page")

    coffee = ledger.lookup("coffee")["reply"]["entry"]["entryId"]
    page.goto(f"{ledger.site}/entries/{coffee}")
    page.click('#metadata tr[data-name="order_id"] a')
    found = ledger.call("search-entries", "--metadata", "order_id=A-1")["entries"]
    check(search_rows(page) == api_search_rows(found) and len(found) == 1,
          "an entry's pair links to the search for it, which equals SearchEntries'")

    page.goto(f"{ledger.site}/accounts")
    page.locator("form.search input[name=metadata]").first.fill("region:eu")
    page.click("form.search button")
    check(page.url.endswith("/accounts?metadata=region%3Aeu"),
          "the search form's address names only the pair asked for")
    listed = ledger.call("list-accounts", "--metadata", "region=eu")["accounts"]
    rows = page.locator("#accounts tbody tr")
    shown = [(int(rows.nth(i).get_attribute("data-account")),
              int(rows.nth(i).locator("[data-field=balance]").get_attribute("value")),
              int(rows.nth(i).locator("[data-field=available]").get_attribute("value")))
             for i in range(rows.count())]
    check(shown == [(n(a["accountId"]), n(a.get("balance")), n(a.get("available"))) for a in listed]
          and len(shown) == 2,
          f"the accounts by metadata, by the search form: {len(shown)} rows equal ListAccounts'")
    page.goto(f"{ledger.site}/accounts/{account}")
    page.click('#metadata tr[data-name="customer"] a')
    listed = ledger.call("list-accounts", "--metadata", "customer=Zoë & Co: 1/2")["accounts"]
    check([int(x) for x in page.locator("#accounts tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.account)")] == [n(a["accountId"]) for a in listed] == [n(account)],
          "an account's pair (escaped in its address) links to the accounts that hold it")


def balance_matches(page, api):
    limits = api.get("limits", {})
    return (amount(page, "balance") == n(api.get("balance"))
            and amount(page, "floor") == n(limits.get("minBalance"))
            and amount(page, "ceiling") == n(limits.get("maxBalance"))
            and field(page, "sequence") == str(n(api.get("sequence"))))


def numbered_journal(ledger, account):
    """The journal's first page once each of its entries has its sequence (the
    change stream numbers an entry shortly after its commit), polled for 20 s."""
    deadline = time.time() + 20
    while True:
        journal = ledger.call("list-entries", "--account-id", account)["entries"]
        if all(n(e.get("sequence")) for e in journal) or time.time() > deadline:
            return journal
        time.sleep(0.1)


def check_balances(page, ledger, account):
    journal = numbered_journal(ledger, account)
    middle = journal[len(journal) // 2]
    check(n(middle.get("sequence")) > 0, "the journal is numbered (a sequence of 0 would ask for now)")
    sequence = middle["sequence"]
    page.goto(f"{ledger.site}/accounts/{account}")
    page.fill("#as_of_sequence", str(sequence))
    page.click("form[action$='/balance'] button")
    api = ledger.call("get-balance", "--account-id", account, "--as-of-sequence", str(sequence))
    check(page.url.endswith(f"/accounts/{account}/balance?as_of_sequence={sequence}")
          and balance_matches(page, api) and n(api["balance"]) == n(middle["balanceAfter"]),
          f"a balance at sequence {sequence} (by the account page's form) equals GetBalance's "
          f"({api['balance']})")
    at = middle["createdAt"]
    page.goto(f"{ledger.site}/accounts/{account}/balance?as_of_time={quote(at, safe='')}")
    api = ledger.call("get-balance", "--account-id", account, "--as-of-time", at)
    check(balance_matches(page, api), f"a balance at {at} equals GetBalance's ({api['balance']})")
    answer = page.goto(f"{ledger.site}/accounts/{account}/balance?as_of_time=yesterday")
    check(answer.status == 400 and field(page, "reason") == "INVALID_REQUEST",
          "a malformed time is a 400 page")
    answer = page.goto(f"{ledger.site}/accounts/{account}/balance?as_of_sequence=999999999")
    check(answer.status == 409 and field(page, "reason") == "POINT_NOT_REACHED",
          "a point not reached is a 409 page")


def check_hold_and_keys(page, ledger, taken):
    page.goto(f"{ledger.site}/holds/{taken}")
    api = ledger.call("get-hold", "--hold-id", taken)
    check(amount(page, "amount") == n(api["amount"])
          and amount(page, "captured_amount") == n(api["capturedAmount"])
          and field(page, "state") == api["state"].removeprefix("HOLD_STATE_"),
          "a hold's amount, capture and state equal GetHold's")
    capture = ledger.lookup("hotel-checkout")["reply"]["entry"]["entryId"]
    check(page.locator("[data-field=capture_entry_id]").get_attribute("href") == f"/entries/{capture}",
          "a captured hold links to its capture entry")

    page.goto(f"{ledger.site}/keys?key=hotel-checkout")
    record = ledger.lookup("hotel-checkout")
    check(field(page, "method") == record["method"], "a key's method equals LookupKey's")
    reply = record["reply"]
    hold = f'#reply [data-hold="{n(reply["hold"]["holdId"])}"]'
    entries = page.locator("#reply-entries tbody tr")
    check(amount(page, "captured_amount", hold) == n(reply["hold"]["capturedAmount"])
          and field(page, "state", hold) == reply["hold"]["state"].removeprefix("HOLD_STATE_")
          and entries.count() == 1
          and int(entries.first.get_attribute("data-entry")) == n(reply["entry"]["entryId"])
          and amount(page, "balance_after", "#reply-entries") == n(reply["entry"]["balanceAfter"])
          and field(page, "kind", "#reply-entries") == "CAPTURE",
          "a stored reply, its hold as the hold page shows one and its entry as a journal row, "
          "equals LookupKey's")

    page.goto(f"{ledger.site}/keys?key=too-much")
    declined = ledger.lookup("too-much")["error"]
    check(field(page, "code") == declined["code"] and field(page, "reason") == declined["reason"]
          and field(page, "message") == declined["message"],
          f"a stored decline's code, reason and message equal LookupKey's ({declined['reason']})")
    shown = {row.get_attribute("data-name"): row.locator("[data-field=value]").get_attribute("value")
             for row in page.locator("#metadata tbody tr").all()}
    check(shown == declined["metadata"], "a stored decline's metadata equals LookupKey's")
    asked = int(declined["metadata"]["amount"])
    check(field(page, "value", '#metadata tr[data-name="amount"]') == usd(asked),
          f"and its amounts read in the account's currency ({usd(asked)})")


def check_refusals(page, ledger, account):
    answer = page.goto(f"{ledger.site}/accounts/999999")
    check(answer.status == 404 and "404" in page.locator("h1").inner_text(),
          "an unknown account is a 404 page")
    check(page.goto(f"{ledger.site}/entries/999999").status == 404, "an unknown entry is a 404 page")
    before = ledger.call("get-account", "--account-id", account)
    for path in [f"/accounts/{account}", "/keys?key=coffee", "/", "/tail", "/accounts",
                 f"/accounts/{account}/balance", "/entries?metadata=order_id%3AA-1"]:
        answer = page.request.post(f"{ledger.site}{path}", form={"amount": "100"})
        check(answer.status == 405 and "changes nothing" in answer.text(), f"POST {path} is 405")
    check(ledger.call("get-account", "--account-id", account) == before, "the POSTs moved nothing")


def tail_rows(page):
    return page.locator("#tail-rows tr").evaluate_all(
        "rows => rows.map(r => [Number(r.dataset.sequence), Number(r.dataset.entry)])")


def charge_shows(page, ledger, account, key):
    entry = ledger.call("charge", "--key", key, "--account-id", account, "--amount-minor", "1",
                        "--currency", "USD")["entry"]["entryId"]
    started = time.monotonic()
    page.wait_for_selector(f'#tail-rows tr[data-entry="{entry}"]', timeout=1000)
    return time.monotonic() - started


def until_following(page, within):
    """Waits until the tail's script says its stream is open (polled from here:
    the page's policy lets no test code be evaluated in it)."""
    deadline = time.monotonic() + within
    while not page.locator("#tail-status").inner_text().startswith("following"):
        if time.monotonic() > deadline:
            sys.exit("console-check: FAILED: the tail never followed")
        time.sleep(0.05)


def check_tail(page, ledger, account):
    page.goto(f"{ledger.site}/tail")
    until_following(page, 10)
    took = charge_shows(page, ledger, account, "tail-1")
    check(took < 1.0, f"the tail shows a new entry within 1 s without a reload ({took * 1000:.0f} ms)")
    ledger.stop()
    ledger.start()
    until_following(page, 30)
    took = charge_shows(page, ledger, account, "tail-2")
    check(took < 1.0, f"and again after the server restarted on the same port ({took * 1000:.0f} ms)")
    for i in range(3, 6):
        charge_shows(page, ledger, account, f"tail-{i}")
    rows = tail_rows(page)
    sequences = [s for s, _ in rows]
    check(sequences == list(range(sequences[0], sequences[0] + len(sequences))),
          f"the tail's {len(rows)} rows run on without a gap or a repeat across the restart")


def token_file(directory, clients):
    path = os.path.join(directory, "tokens")
    with open(path, "w") as f:
        for client, token, grants in clients:
            digest = hashlib.sha256(token.encode()).hexdigest()
            f.write(f"{client} {digest} {grants}\n".rstrip() + "\n")
    return path


def check_auth(browser, binary, ctl, directory, shots):
    tokens = token_file(directory, [("shop", "shop-secret", ""), ("billing", "billing-secret", ""),
                                    ("reports", "reports-secret", "GetAccount,GetEntry")])
    ledger = Ledger(binary, ctl, directory, tokens)
    ledger.start()
    try:
        account = ledger.call("open-account", "--key", "shop-open", "--currency", "USD",
                              token="shop-secret")["account"]["accountId"]
        ledger.call("credit", "--key", "shop-only", "--account-id", account, "--amount-minor", "10",
                    "--currency", "USD", token="shop-secret")
        page = browser.new_context().new_page()
        answer = page.goto(f"{ledger.site}/accounts/{account}")
        check(answer.status == 401 and page.locator("form[action='/login']").count() == 1,
              "with tokens, no token gets the form (401)")
        if shots:
            page.screenshot(path=os.path.join(shots, "console-login.png"))
        page.fill("#token", "reports-secret")
        page.click("form[action='/login'] button")
        check(page.url.endswith(f"/accounts/{account}") and field(page, "reason") == "METHOD_NOT_ALLOWED",
              "a token without the page's grants is refused (403)")
        check(page.request.get(f"{ledger.site}/accounts/{account}").status == 403, "403 it is")
        for path in ["/accounts", f"/accounts/{account}/balance", "/entries?metadata=k%3Av"]:
            check(page.request.get(f"{ledger.site}{path}").status == 403,
                  f"and {path} without its grant")
        ended = [c for c in page.context.cookies() if c["name"] == "ledger_console_session"][0]
        page.click("form[action='/logout'] button")
        replay = browser.new_context()
        replay.add_cookies([ended])
        check(replay.request.get(f"{ledger.site}/accounts/{account}").status == 401,
              "after a logout, the session's old cookie reads nothing (401)")
        page.goto(f"{ledger.site}/accounts/{account}")
        page.fill("#token", "shop-secret")
        page.click("form[action='/login'] button")
        check(value(page, "balance") == 10, "the granted token reads the account")
        cookie = [c for c in page.context.cookies() if c["name"] == "ledger_console_session"][0]
        check(cookie["httpOnly"] and cookie["sameSite"] == "Strict" and not cookie["secure"],
              "the session's cookie is HttpOnly, SameSite=Strict (not Secure over plain HTTP)")
        check("shop-secret" not in cookie["value"] and len(cookie["value"]) == 43,
              "the cookie names a random session (32 bytes, base64url), not the token")
        check(page.goto(f"{ledger.site}/keys?key=shop-only").status == 200, "a client sees its own key")
        other = browser.new_context().new_page()
        other.goto(f"{ledger.site}/keys?key=shop-only")
        other.fill("#token", "billing-secret")
        other.click("form[action='/login'] button")
        check(field(other, "reason") == "KEY_NOT_FOUND", "another client's key page shows nothing of it (404)")
        check_login_redirects(browser, ledger)
    finally:
        ledger.stop()


def check_login_redirects(browser, ledger):
    """A login sends the browser only to a page of the console: a `next` that a
    browser would read as another site's address, asked for in the form's own
    address or posted in its field, ends on the console's home page."""
    home = f"{ledger.site}/"
    sent = []
    page = browser.new_context().new_page()
    page.on("request", lambda r: sent.append(r.url))
    page.goto(f"{ledger.site}/login?next=/%09/evil.example/")
    page.fill("#token", "shop-secret")
    page.click("form[action='/login'] button")
    check(page.url == home, f"next=/%09/evil.example/ in the form's address ends on the console ({page.url})")
    # The form's hidden field set as another page could post it: the page's
    # policy lets no script run in it, so this context is told to disregard it.
    posted = browser.new_context(bypass_csp=True).new_page()
    posted.on("request", lambda r: sent.append(r.url))
    for next_field in ["/\t/evil.example/", "//evil.example/", "/\\evil.example/", "/\x01x"]:
        posted.goto(f"{ledger.site}/login")
        posted.locator("input[name=next]").evaluate("(field, next) => field.value = next", next_field)
        posted.fill("#token", "shop-secret")
        posted.click("form[action='/login'] button")
        check(posted.url == home, f"next={next_field!r} posted ends on the console ({posted.url})")
    elsewhere = [url for url in sent if not url.startswith(f"{ledger.site}/")]
    check(not elsewhere and len(sent) >= 10, f"no request of those {len(sent)} left the console {elsewhere}")


def timed(ledger, path):
    """The size of the page at `path`, and the times to its first byte over 30
    requests one after another, sorted."""
    times = []
    size = 0
    for _ in range(30):
        conn = http.client.HTTPConnection("127.0.0.1", ledger.port)
        started = time.perf_counter()
        conn.request("GET", path)
        response = conn.getresponse()
        times.append((time.perf_counter() - started) * 1000)
        size = len(response.read())
        conn.close()
    return size, sorted(times)


def measure(browser, binary, ctl, directory):
    """The weight and time to first byte of an account page of 1,000 entries,
    its first page (whose chart reads ten balances past it) and its last."""
    ledger = Ledger(binary, ctl, directory)
    ledger.start()
    try:
        funding = ledger.call("open-account", "--key", "m-funding", "--currency", "USD",
                              "--no-min-balance")["account"]["accountId"]
        account = ledger.call("open-account", "--key", "m-account", "--currency", "USD")["account"]["accountId"]
        for post in range(4):
            legs = []
            for i in range(250):
                legs += ["--leg", f"{funding}:{account}:{i + 1}:USD:entry {post * 250 + i}"]
            ledger.call("post", "--key", f"m-post-{post}", *legs)
        count = 0
        token = ""
        while True:
            listed = ledger.call("list-entries", "--account-id", account, "--page-size", "1000",
                                 "--page-token", token)
            count += len(listed.get("entries", []))
            token = listed.get("nextPageToken", "")
            if not token:
                break
        check(count == 1000, "the measured account has 1,000 entries")
        numbered_journal(ledger, account)
        page = browser.new_context().new_page()
        loaded = []
        page.on("requestfinished", lambda r: loaded.append(r.url))
        page.goto(f"{ledger.site}/accounts/{account}")
        weight = sum(len(page.request.get(url).body()) for url in loaded)
        requests = len(loaded)
        while page.locator("#next-page").count():
            page.click("#next-page")
        last = page.url.removeprefix(ledger.site)
        size, times = timed(ledger, f"/accounts/{account}")
        print(f"measure: account page of 1,000 entries (100 shown): HTML {size} bytes; with all "
              f"{requests} requests the browser made, {weight} bytes (uncompressed); time to "
              f"first byte over 30 requests: median {statistics.median(times):.1f} ms, "
              f"p90 {times[26]:.1f} ms, max {times[-1]:.1f} ms")
        size, times = timed(ledger, last)
        print(f"measure: its last page (100 shown, the chart reads nothing past it): HTML {size} "
              f"bytes; time to first byte over 30 requests: median "
              f"{statistics.median(times):.1f} ms, p90 {times[26]:.1f} ms, max {times[-1]:.1f} ms")
    finally:
        ledger.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("ledgerctl")
    parser.add_argument("--screenshots")
    parser.add_argument("--measure", action="store_true")
    args = parser.parse_args()
    shots = args.screenshots
    if shots:
        os.makedirs(shots, exist_ok=True)
    work = tempfile.mkdtemp(prefix="console-check-")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        ledger = Ledger(args.ledger, args.ledgerctl, os.path.join(work, "open"))
        os.makedirs(ledger.data)
        ledger.start()
        try:
            funding, account, held, taken = populate(ledger)
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            check_account(page, ledger, account, held)
            check_hold_and_keys(page, ledger, taken)
            check_searches(page, ledger, account)
            check_balances(page, ledger, account)
            check_refusals(page, ledger, account)
            if shots:
                take_screenshots(browser, ledger, account, taken, shots)
            check_tail(page, ledger, account)
            if shots:
                page.screenshot(path=os.path.join(shots, "console-tail.png"))
        finally:
            ledger.stop()
        auth_dir = os.path.join(work, "auth")
        os.makedirs(auth_dir)
        check_auth(browser, args.ledger, args.ledgerctl, auth_dir, shots)
        if args.measure:
            measure_dir = os.path.join(work, "measure")
            os.makedirs(measure_dir)
            measure(browser, args.ledger, args.ledgerctl, measure_dir)
        browser.close()
    shutil.rmtree(work, ignore_errors=True)
    print(f"{checks} passed, 0 failed")


def take_screenshots(browser, ledger, account, taken, shots):
    desktop = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    for name, path in [("home", "/"), ("account", f"/accounts/{account}"),
                       ("hold", f"/holds/{taken}"), ("key", "/keys?key=hotel-checkout"),
                       ("decline", "/keys?key=too-much"),
                       ("search", "/entries?metadata=batch%3Ab-1"),
                       ("balance", f"/accounts/{account}/balance")]:
        desktop.goto(f"{ledger.site}{path}")
        desktop.screenshot(path=os.path.join(shots, f"console-{name}.png"))
    phone = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2,
                                is_mobile=True).new_page()
    phone.goto(f"{ledger.site}/accounts/{account}")
    phone.screenshot(path=os.path.join(shots, "console-account-phone.png"))


if __name__ == "__main__":
    main()
