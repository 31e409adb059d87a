"""The console in a real browser (Debian's Chromium, driven by Playwright), against
a live `ledger serve` with its development database, each number on a page held
against the gRPC answer (`ledgerctl -o json`):

- an account's balance, held, available and limits; its journal's rows and
  running balances on the first page and, through "Next page", the second; an
  open hold; a hold and its capture; a key's stored reply decoded, and a stored
  decline's code, reason, message and metadata;
- the entries by metadata, across a page boundary, and through a pair's link on
  an entry's page; the accounts by metadata, through the search form; a balance
  at a sequence (through the account page's form) and at a time;
- the tail shows a new entry within 1 s without a reload, and again after the
  server restarts on the same port, with no entry missed or shown twice;
- an unknown id is a 404 page, a malformed time 400, a point not reached 409, a
  POST is 405 and moves nothing;
- with tokens: no token gets the form, a token without the grants is refused
  (403), a key page shows only its client's keys.

    python3 scripts/console_check.py LEDGER LEDGERCTL [--screenshots DIR] [--measure]

--screenshots writes the main pages as PNG files; --measure prints the weight and
the time to first byte of an account page of 1,000 entries. Run by
scripts/console-check.sh, which installs what it needs.
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


def n(value):
    """A JSON number as ledgerctl prints it (64-bit ones as strings; 0 left out)."""
    return int(value or 0)


def populate(ledger):
    """Accounts with a journal of more than a page, holds, a refund, a decline."""
    funding = ledger.call("open-account", "--key", "open-funding", "--currency", "USD",
                          "--no-min-balance", "--metadata", "region=eu")["account"]["accountId"]
    account = ledger.call("open-account", "--key", "open-customer", "--currency", "USD",
                          "--min-balance", "-5000", "--max-balance", "250000",
                          "--metadata", "region=eu", "--metadata",
                          "customer=Zoë & Co: 1/2")["account"]["accountId"]
    ledger.call("open-account", "--key", "open-elsewhere", "--currency", "USD",
                "--metadata", "region=us")
    legs = []
    for i in range(60):
        legs += ["--leg", f"{funding}:{account}:{i + 1}:USD:top-up {i}"]
    ledger.call("post", "--key", "fund-a", "--metadata", "batch=b-1", *legs)
    ledger.call("post", "--key", "fund-b", *legs)
    charge = ledger.call("charge", "--key", "coffee", "--account-id", account, "--amount", "30",
                         "--currency", "USD", "--description", "coffee",
                         "--metadata", "order_id=A-1")["entry"]["entryId"]
    ledger.call("refund", "--key", "coffee-back", "--entry-id", charge, "--amount", "5")
    held = ledger.call("place-hold", "--key", "ride-start", "--account-id", account,
                       "--amount", "40", "--currency", "USD", "--ttl", "600s")["hold"]["holdId"]
    taken = ledger.call("place-hold", "--key", "hotel", "--account-id", account,
                        "--amount", "70", "--currency", "USD", "--ttl", "600s")["hold"]["holdId"]
    ledger.call("capture-hold", "--key", "hotel-checkout", "--hold-id", taken, "--amount", "55")
    declined = subprocess.run([ledger.ctl, "--server", f"http://127.0.0.1:{ledger.grpc}",
                               "charge", "--key", "too-much", "--account-id", account,
                               "--amount", "99999999", "--currency", "USD"], capture_output=True)
    check(declined.returncode == 1, "a charge past the floor is declined (and stored)")
    return funding, account, held, taken


def journal_rows(page):
    rows = page.locator("#journal tbody tr")
    return [(int(rows.nth(i).get_attribute("data-entry")),
             int(rows.nth(i).locator("[data-field=amount]").inner_text()),
             int(rows.nth(i).locator("[data-field=balance_after]").inner_text()))
            for i in range(rows.count())]


def api_rows(entries):
    return [(n(e["entryId"]), n(e.get("amount")), n(e.get("balanceAfter"))) for e in entries]


def check_account(page, ledger, account, held):
    answer = page.goto(f"{ledger.site}/accounts/{account}")
    check(answer.status == 200, "the account page answers 200")
    api = ledger.call("get-account", "--account-id", account)
    for name, key in [("balance", "balance"), ("held", "held"), ("available", "available")]:
        check(int(field(page, name)) == n(api.get(key)), f"{name} equals GetAccount's ({api.get(key)})")
    limits = api.get("limits", {})
    check(field(page, "floor") == str(n(limits.get("minBalance"))), "the floor equals GetAccount's")
    check(field(page, "ceiling") == str(n(limits.get("maxBalance"))), "the ceiling equals GetAccount's")
    holds = ledger.call("list-holds", "--account-id", account)["holds"]
    shown = [int(x) for x in page.locator("#holds tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.hold)")]
    check(shown == [n(h["holdId"]) for h in holds] and n(held) in shown,
          "the open holds equal ListHolds'")
    row = page.locator(f'#holds tr[data-hold="{held}"]')
    check(int(row.locator("[data-field=amount]").inner_text()) == n(holds[0]["amount"]),
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


def search_rows(page):
    rows = page.locator("#found tbody tr")
    return [(int(rows.nth(i).get_attribute("data-entry")),
             int(rows.nth(i).locator("[data-field=account_id]").inner_text()),
             int(rows.nth(i).locator("[data-field=amount]").inner_text()),
             int(rows.nth(i).locator("[data-field=balance_after]").inner_text()))
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
              int(rows.nth(i).locator("[data-field=balance]").inner_text()),
              int(rows.nth(i).locator("[data-field=available]").inner_text()))
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
    return (int(field(page, "balance")) == n(api.get("balance"))
            and field(page, "floor") == str(n(limits.get("minBalance")))
            and field(page, "ceiling") == str(n(limits.get("maxBalance")))
            and field(page, "sequence") == str(n(api.get("sequence"))))


def check_balances(page, ledger, account):
    deadline = time.time() + 20
    while True:
        journal = ledger.call("list-entries", "--account-id", account)["entries"]
        if all(n(e.get("sequence")) for e in journal) or time.time() > deadline:
            break
        time.sleep(0.1)
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
    check(int(field(page, "amount")) == n(api["amount"])
          and int(field(page, "captured_amount")) == n(api["capturedAmount"])
          and field(page, "state") == api["state"].removeprefix("HOLD_STATE_"),
          "a hold's amount, capture and state equal GetHold's")
    capture = ledger.lookup("hotel-checkout")["reply"]["entry"]["entryId"]
    check(page.locator("[data-field=capture_entry_id]").get_attribute("href") == f"/entries/{capture}",
          "a captured hold links to its capture entry")

    page.goto(f"{ledger.site}/keys?key=hotel-checkout")
    record = ledger.lookup("hotel-checkout")
    check(field(page, "method") == record["method"], "a key's method equals LookupKey's")
    reply = record["reply"]
    values = {}
    for row in page.locator("#reply tr").all():
        values.setdefault(row.get_attribute("data-name"), row.locator("[data-field=value]").inner_text())
    check(int(values["captured_amount"]) == n(reply["hold"]["capturedAmount"])
          and int(values["balance_after"]) == n(reply["entry"]["balanceAfter"])
          and int(values["entry_id"]) == n(reply["entry"]["entryId"]),
          "a stored reply, decoded, equals LookupKey's")

    page.goto(f"{ledger.site}/keys?key=too-much")
    declined = ledger.lookup("too-much")["error"]
    check(field(page, "code") == declined["code"] and field(page, "reason") == declined["reason"]
          and field(page, "message") == declined["message"],
          f"a stored decline's code, reason and message equal LookupKey's ({declined['reason']})")
    shown = {row.get_attribute("data-name"): row.locator("[data-field=value]").inner_text()
             for row in page.locator("#metadata tbody tr").all()}
    check(shown == declined["metadata"], "a stored decline's metadata equals LookupKey's")


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
    entry = ledger.call("charge", "--key", key, "--account-id", account, "--amount", "1",
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
        ledger.call("credit", "--key", "shop-only", "--account-id", account, "--amount", "10",
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
        page.click("form[action='/logout'] button")
        page.goto(f"{ledger.site}/accounts/{account}")
        page.fill("#token", "shop-secret")
        page.click("form[action='/login'] button")
        check(int(field(page, "balance")) == 10, "the granted token reads the account")
        cookie = [c for c in page.context.cookies() if c["name"] == "ledger_console_token"][0]
        check(cookie["httpOnly"] and cookie["sameSite"] == "Strict", "the token's cookie is HttpOnly, SameSite=Strict")
        check(page.goto(f"{ledger.site}/keys?key=shop-only").status == 200, "a client sees its own key")
        other = browser.new_context().new_page()
        other.goto(f"{ledger.site}/keys?key=shop-only")
        other.fill("#token", "billing-secret")
        other.click("form[action='/login'] button")
        check(field(other, "reason") == "KEY_NOT_FOUND", "another client's key page shows nothing of it (404)")
    finally:
        ledger.stop()


def measure(browser, binary, ctl, directory):
    """The weight and time to first byte of an account page of 1,000 entries."""
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
        times = []
        size = 0
        for _ in range(30):
            conn = http.client.HTTPConnection("127.0.0.1", ledger.port)
            started = time.perf_counter()
            conn.request("GET", f"/accounts/{account}")
            response = conn.getresponse()
            times.append((time.perf_counter() - started) * 1000)
            size = len(response.read())
            conn.close()
        page = browser.new_context().new_page()
        loaded = []
        page.on("requestfinished", lambda r: loaded.append(r.url))
        page.goto(f"{ledger.site}/accounts/{account}")
        weight = sum(len(page.request.get(url).body()) for url in loaded)
        times.sort()
        print(f"measure: account page of 1,000 entries (100 shown): HTML {size} bytes; with all "
              f"{len(loaded)} requests the browser made, {weight} bytes (uncompressed); time to "
              f"first byte over 30 requests: median {statistics.median(times):.1f} ms, "
              f"p90 {times[26]:.1f} ms, max {times[-1]:.1f} ms")
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
