"""A minimal receiver of the ledger's webhook deliveries (SPEC 3.15), standard
library only: copy `verify` into your own service.

Each delivery is a POST of a JSON body with the headers

    Ledger-Delivery-Id: <subscription_id>:<first sequence>-<last sequence>
    Ledger-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">

where the HMAC is keyed with the UTF-8 bytes of the subscription's secret and
fed the decimal timestamp, a ".", then the raw body bytes. `verify` refuses a
signature that does not match, and one whose t is further than `tolerance`
seconds from this clock (a replayed delivery). Verify the raw bytes as they
arrived, before parsing them: JSON parsed and printed again is other bytes.

Run it as a server (answers 204 to a verified delivery, 400 to any other):

    LEDGER_WEBHOOK_SECRET=whsec_... python3 webhook_receiver.py [port]

The Rust equivalent is `ledger_client::verify_signature`; the test
crates/ledger-client/tests/webhook_recipe.rs checks this file against it.
"""

import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SIGNATURE_HEADER = "Ledger-Signature"
DELIVERY_ID_HEADER = "Ledger-Delivery-Id"


def verify(secret: str, header: str, body: bytes, tolerance: int = 300) -> bool:
    """True when `header` (the Ledger-Signature value) signs `body` (the raw
    request bytes) under `secret`, and its t lies within `tolerance` seconds
    of now, either way."""
    timestamps, signatures = [], []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            return False
        if key == "t":
            timestamps.append(value)
        elif key == "v1":
            signatures.append(value)
        # Other keys are ignored: later schemes may stand beside v1.
    if len(timestamps) != 1 or not signatures:
        return False
    t = timestamps[0]
    # ASCII digits only: int() would also take "+5", " 5" or "５".
    if not (t.isascii() and t.isdigit()):
        return False
    expected = hmac.new(
        secret.encode("utf-8"), t.encode("ascii") + b"." + body, hashlib.sha256
    ).hexdigest()
    # Any v1 may match (several while a secret is rotated); compared in
    # constant time.
    if not any(
        hmac.compare_digest(expected.encode("ascii"), s.lower().encode("utf-8"))
        for s in signatures
    ):
        return False
    return abs(time.time() - int(t)) <= tolerance


class Receiver(BaseHTTPRequestHandler):
    """Answers 204 to a verified delivery and 400 to any other."""

    secret = os.environ.get("LEDGER_WEBHOOK_SECRET", "")

    def do_POST(self):
        try:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            header = self.headers.get(SIGNATURE_HEADER, "")
            if not self.secret or not verify(self.secret, header, body):
                raise ValueError("signature refused")
            entries = json.loads(body)["entries"]
        except (ValueError, KeyError, TypeError) as refused:
            self.log_message("400: %s", refused)
            self.send_response(400)
            self.end_headers()
            return
        # A delivery may come again (a retry after a lost answer): its id, or
        # each entry's sequence, tells a repeat from a new one.
        self.log_message(
            "%s: %d entries", self.headers.get(DELIVERY_ID_HEADER), len(entries)
        )
        self.send_response(204)
        self.end_headers()


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
    ThreadingHTTPServer(("127.0.0.1", port), Receiver).serve_forever()
