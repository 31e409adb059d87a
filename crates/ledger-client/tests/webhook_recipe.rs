//! The Python receiver recipe, docs/webhook_receiver.py, against the signatures
//! the ledger makes (`ledger_proto::webhook::sign`): its `verify` accepts a
//! fresh delivery and refuses a tampered body, another secret and a stale
//! timestamp, and its `http.server` handler answers 204 and 400 accordingly.
//! The recipe is imported by path and run with python3; bodies go to it on
//! stdin, as bytes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use ledger_proto::webhook::sign;

const SECRET: &str = "whsec_recipe";

/// A delivery's body: not ASCII, so that bytes and text must not be confused.
const BODY: &[u8] = r#"{"entries":[{"sequence":"41","memo":"café"},{"sequence":"42"}]}"#.as_bytes();

/// Imports the recipe by path as `recipe`; `sys.argv[1]` is its path.
const IMPORT: &str = "
import importlib.util, sys
spec = importlib.util.spec_from_file_location('recipe', sys.argv[1])
recipe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recipe)
body = sys.stdin.buffer.read()
";

/// Prints `verify(secret, header, body, tolerance)`.
const VERIFY: &str = "
print(recipe.verify(sys.argv[2], sys.argv[3], body, int(sys.argv[4])))
";

/// Serves the recipe's handler on a free port with secret `sys.argv[2]`, posts
/// `body` with each following argument as its signature header (`-`: none),
/// and prints each answer's status.
const SERVE: &str = "
import threading, urllib.request, urllib.error
from http.server import ThreadingHTTPServer
recipe.Receiver.secret = sys.argv[2]
server = ThreadingHTTPServer(('127.0.0.1', 0), recipe.Receiver)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = 'http://127.0.0.1:%d/hook' % server.server_address[1]
for header in sys.argv[3:]:
    headers = {'Content-Type': 'application/json', 'Ledger-Delivery-Id': '7:41-42'}
    if header != '-':
        headers['Ledger-Signature'] = header
    request = urllib.request.Request(url, data=body, headers=headers, method='POST')
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            print(answer.status)
    except urllib.error.HTTPError as answer:
        print(answer.code)
server.shutdown()
";

fn recipe() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/webhook_receiver.py");
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

/// Runs `python3 -c IMPORT+script recipe args…` with `body` on stdin: its
/// stdout's lines.
fn python(script: &str, args: &[&str], body: &[u8]) -> Vec<String> {
    python_of(&recipe(), script, args, body)
}

/// [`python`] of the module at `module`.
fn python_of(module: &std::path::Path, script: &str, args: &[&str], body: &[u8]) -> Vec<String> {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(format!("{IMPORT}{script}"))
        .arg(module)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python3 failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The recipe's `verify(secret, header, body, tolerance)`.
fn verify(secret: &str, header: &str, body: &[u8], tolerance: u32) -> bool {
    let printed = python(VERIFY, &[secret, header, &tolerance.to_string()], body);
    match printed.as_slice() {
        [answer] if answer == "True" => true,
        [answer] if answer == "False" => false,
        other => panic!("verify printed {other:?}"),
    }
}

/// The Python snippet docs/api.md shows under "Verifying a delivery", as a
/// module file of its own.
fn snippet() -> PathBuf {
    let api = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/api.md");
    let api = std::fs::read_to_string(api).expect("docs/api.md reads");
    let section = api
        .split_once("### Verifying a delivery")
        .expect("docs/api.md has the section")
        .1;
    let code = section
        .split_once("```python\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .expect("the section holds a python block")
        .0;
    let path = std::env::temp_dir().join(format!("ledger-api-snippet-{}.py", std::process::id()));
    std::fs::write(&path, code).unwrap();
    path
}

#[test]
fn the_snippet_in_the_api_docs_verifies_as_the_recipe_does() {
    let module = snippet();
    let verify = |secret: &str, header: &str, body: &[u8]| {
        let printed = python_of(&module, VERIFY, &[secret, header, "300"], body);
        printed.as_slice() == ["True"]
    };
    let header = sign(SECRET, now(), BODY);
    assert!(verify(SECRET, &header, BODY));
    assert!(!verify(SECRET, &header, &[BODY, b" "].concat()), "tampered");
    assert!(!verify("whsec_other", &header, BODY), "another secret");
    assert!(
        !verify(SECRET, &sign(SECRET, now() - 400, BODY), BODY),
        "stale"
    );
    let (t, v1) = header.split_once(',').unwrap();
    assert!(!verify(SECRET, v1, BODY), "no t");
    assert!(!verify(SECRET, t, BODY), "no v1");
    assert!(verify(SECRET, &format!("{v1}, v0=ab, {t}"), BODY));
    let _ = std::fs::remove_file(module);
}

#[test]
fn the_recipe_accepts_a_fresh_signature() {
    let header = sign(SECRET, now(), BODY);
    assert!(verify(SECRET, &header, BODY, 300));
}

#[test]
fn the_recipe_agrees_on_the_known_vector() {
    // The vector of ledger-proto's own test, its timestamp long past: any
    // tolerance that reaches back to it accepts it.
    let header = sign("whsec_test", 1_700_000_000, br#"{"entries":[]}"#);
    assert!(header.ends_with("0393e59650c2ea140b5d083981d04de69f397366f816959a20d0b6b4e6b7333b"));
    assert!(verify(
        "whsec_test",
        &header,
        br#"{"entries":[]}"#,
        u32::MAX
    ));
    assert!(!verify("whsec_test", &header, br#"{"entries":[]}"#, 300));
}

#[test]
fn the_recipe_refuses_a_tampered_body() {
    let header = sign(SECRET, now(), BODY);
    let tampered = String::from_utf8(BODY.to_vec())
        .unwrap()
        .replace("42", "43");
    assert!(!verify(SECRET, &header, tampered.as_bytes(), 300));
    // One byte more at the end.
    assert!(!verify(SECRET, &header, &[BODY, b" "].concat(), 300));
}

#[test]
fn the_recipe_refuses_another_secret() {
    let header = sign("whsec_other", now(), BODY);
    assert!(!verify(SECRET, &header, BODY, 300));
}

#[test]
fn the_recipe_refuses_a_stale_or_future_timestamp() {
    let stale = sign(SECRET, now() - 301 - 5, BODY);
    assert!(!verify(SECRET, &stale, BODY, 300));
    let future = sign(SECRET, now() + 301 + 5, BODY);
    assert!(!verify(SECRET, &future, BODY, 300));
    // Within the tolerance, either way.
    assert!(verify(SECRET, &sign(SECRET, now() - 60, BODY), BODY, 300));
    assert!(verify(SECRET, &sign(SECRET, now() + 60, BODY), BODY, 300));
}

#[test]
fn the_recipe_refuses_malformed_headers() {
    let header = sign(SECRET, now(), BODY);
    let (t, v1) = header.split_once(',').unwrap();
    assert!(!verify(SECRET, v1, BODY, 300), "no t");
    assert!(!verify(SECRET, t, BODY, 300), "no v1");
    assert!(
        !verify(SECRET, &format!("{t},{t},{v1}"), BODY, 300),
        "two t"
    );
    assert!(!verify(SECRET, "", BODY, 300), "empty");
    // Order, spaces and unknown keys do not matter, as in Rust.
    assert!(verify(SECRET, &format!("{v1}, v0=ab, {t}"), BODY, 300));
}

#[test]
fn the_recipe_accepts_any_matching_v1() {
    let t = now();
    let old = sign("whsec_old", t, BODY);
    let old = old.split_once(",v1=").unwrap().1;
    let new = sign(SECRET, t, BODY);
    let new = new.split_once(",v1=").unwrap().1;
    assert!(verify(
        SECRET,
        &format!("t={t},v1={old},v1={new}"),
        BODY,
        300
    ));
    assert!(!verify(SECRET, &format!("t={t},v1={old}"), BODY, 300));
}

#[test]
fn the_recipe_server_answers_204_to_a_verified_delivery_and_400_otherwise() {
    let good = sign(SECRET, now(), BODY);
    let other = sign("whsec_other", now(), BODY);
    let stale = sign(SECRET, now() - 3600, BODY);
    let statuses = python(SERVE, &[SECRET, &good, &other, &stale, "-", &good], BODY);
    assert_eq!(statuses, ["204", "400", "400", "400", "204"]);
}
