//! The output people and programs read, as golden files: every keyed command's
//! reply (limits included), a replay, a decline, and `lookup-key` of a stored reply and of a stored
//! decline, and `watch-entries` of every account and of one, as a table and as
//! protobuf JSON. Timestamps, ids and made keys are
//! redacted (they differ per run); the rest must match byte for byte. And the
//! help the command line derives from the proto, with its errors for bad flags.

use std::fmt::Write as _;

use crate::support::{TestApp, TestDb};
use crate::{Run, ledgerctl};

/// One command of a transcript: what it shows (ids as `$A`, `$B`), and its
/// arguments.
struct Step<'a> {
    shown: &'a str,
    args: Vec<String>,
}

fn step<'a>(shown: &'a str, ids: &[(&str, u64)]) -> Step<'a> {
    let mut line = shown.to_owned();
    for (name, id) in ids {
        line = line.replace(name, &id.to_string());
    }
    Step {
        shown,
        args: line.split_whitespace().map(str::to_owned).collect(),
    }
}

fn transcript_entry(out: &mut String, shown: &str, run: &Run) {
    let _ = writeln!(
        out,
        "$ ledgerctl {shown}\n[exit {}]",
        run.code.unwrap_or(-1)
    );
    if !run.stdout.is_empty() {
        let _ = write!(out, "--- stdout\n{}", run.stdout);
    }
    if !run.stderr.is_empty() {
        let _ = write!(out, "--- stderr\n{}", run.stderr);
    }
    out.push('\n');
}

/// Opens two accounts ($A funded with 100, $B), then runs `steps`; the
/// transcript of the whole.
async fn transcript(output: &str) -> String {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let a = app.funded_account("USD", 100).await;
    let b = app.funded_account("USD", 0).await;
    let ids = [("$A", a), ("$B", b)];
    let steps = [
        "open-account --key g-open --currency EUR",
        "credit --key g-credit --account-id $A --amount 0.50 --currency USD --description top-up",
        "charge --key g-charge --account-id $A --amount 0.30 --currency USD --description coffee",
        "charge --key g-charge --account-id $A --amount 0.30 --currency USD --description coffee",
        "charge --key g-decline --account-id $A --amount 10.00 --currency USD",
        "charge --key g-decline --account-id $A --amount 10.00 --currency USD",
        "charge --key g-invalid --account-id $A --amount-minor 0 --currency US",
        "transfer --key g-transfer --from-account-id $A --to-account-id $B --amount-minor 7 --currency USD",
        "post --key g-post --leg $A:$B:97:USD --leg $A:$B:3:USD",
        "reverse --key g-reverse --original-key g-post --description refunded-sale",
        "reverse --key g-reverse-again --original-key g-post",
        "place-hold --key g-hold --account-id $A --amount 0.05 --currency USD --ttl 30s",
        "list-holds --account-id $A",
        "get-account --account-id $A",
        "get-balance --account-id $A",
        "get-balance --account-id $A --as-of-sequence 3",
        "get-balance --account-id $A --as-of-sequence 999999",
        "get-balance --account-id $A --as-of-time 2000-01-01T00:00:00Z",
        "get-balance --account-id $A --as-of-time yesterday",
        "lookup-key --key g-charge",
        "lookup-key --key g-decline",
        "lookup-key --key never-used",
        "charge --account-id $A --amount-minor 1 --currency USD",
        "watch-entries --after-sequence 0 --limit 10",
        "watch-entries --after-sequence 4 --account-id $B --limit 2",
        "open-account --key g-line --currency USD --min-balance -50.00 --max-balance 2500.00",
        "set-limits --key g-limits --account-id $B --no-min-balance",
        "set-limits --key g-bad --account-id $B --min-balance-minor 5 --max-balance-minor 4",
        "charge --key g-tagged --account-id $A --amount 0.02 --currency USD --metadata order_id=A-1 --metadata channel=web",
        "search-entries --metadata order_id=A-1",
        "list-entries --account-id $A",
        "list-accounts",
        "charge --key g-bad-tag --account-id $A --amount-minor 2 --currency USD --metadata a/b=1",
    ];
    let mut out = String::new();
    for shown in steps {
        let step = step(shown, &ids);
        let mut args: Vec<&str> = step.args.iter().map(String::as_str).collect();
        args.extend(["-o", output]);
        let run = ledgerctl(&app.url(), &args).await;
        transcript_entry(&mut out, step.shown, &run);
    }
    out
}

fn redacted() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    for (pattern, replacement) in [
        (r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z", "[time]"),
        (
            r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}",
            "[made key]",
        ),
        // Ids in tables, JSON (camelCase, as strings) and decline metadata.
        (r"(?m)^(\s*\w*_id\s+)\d+", "$1[id]"),
        (r#""(\w*Id|\w*_id)":( ?)"\d+""#, r#""$1":$2"[id]""#),
        (r"account \d+", "account [id]"),
        // A watch-entries row: the sequence, then the entry's and the account's ids.
        (
            r"(?m)^(\d+ +)\d+ +\d+ +([A-Z_]+ )",
            "$1[id]      [id]        $2",
        ),
    ] {
        settings.add_filter(pattern, replacement);
    }
    settings.set_prepend_module_to_snapshot(false);
    settings
}

#[tokio::test(flavor = "multi_thread")]
async fn table_output() {
    let text = transcript("table").await;
    redacted().bind(|| insta::assert_snapshot!("table", text));
}

#[tokio::test(flavor = "multi_thread")]
async fn json_output() {
    let text = transcript("json").await;
    redacted().bind(|| insta::assert_snapshot!("json", text));
}

/// `-o wide`: every field of a list's items a column, empty ones too; an
/// empty list says so. (A list's rows keep their ids: a fresh database and
/// one call at a time hand them out in order.)
#[tokio::test(flavor = "multi_thread")]
async fn wide_output() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let a = app.funded_account("JPY", 5000).await;
    let steps = [
        "charge --key w-charge --account-id $A --amount 1200 --currency JPY --metadata k=v",
        "list-entries --account-id $A -o wide",
        "list-holds --account-id $A",
    ];
    let mut out = String::new();
    for shown in steps {
        let step = step(shown, &[("$A", a)]);
        let args: Vec<&str> = step.args.iter().map(String::as_str).collect();
        let run = ledgerctl(&app.url(), &args).await;
        transcript_entry(&mut out, step.shown, &run);
    }
    redacted().bind(|| insta::assert_snapshot!("wide", out));
}

/// The help and the usage errors, which need no server: what the proto's
/// comments and the flag rules make of the command line.
#[tokio::test(flavor = "multi_thread")]
async fn help_and_usage() {
    let steps = [
        "--help",
        "charge --help",
        "post -h",
        "set-limits -h",
        "watch-entries -h",
        "lookup-key -h",
        "post --leg 1:x:97:USD",
        "charge --account-id 1 --amount-minor 5 --currency USD --key=",
        "void-hold --hold-id 1 --amount-minor 5",
        "get-balance --account-id 1 --as-of-time 2026-12-31",
        "place-hold --account-id 1 --amount 0.05 --currency USD --ttl soon",
        "charge --account-id -1",
        "charge --account-id 1 --amount 10 --currency USD",
        "charge --account-id 1 --amount 10.00 --amount-minor 1000 --currency USD",
        "charge --account-id 1 --currency USD",
        "refund --entry-id 1 --amount 2.50",
        "capture-hold --hold-id 1 --amount 2.50 --currency ABC",
    ];
    let mut out = String::new();
    for shown in steps {
        let args: Vec<&str> = shown.split_whitespace().collect();
        let run = ledgerctl("http://127.0.0.1:50051", &args).await;
        transcript_entry(&mut out, shown, &run);
    }
    redacted().bind(|| insta::assert_snapshot!("usage", out));
}
