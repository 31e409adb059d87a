//! The output people and programs read, as golden files: every keyed command's
//! reply (limits included), a replay, a decline, and `lookup-key` of a stored reply and of a stored
//! decline, and `watch-entries` of every account and of one, as a table and as
//! protobuf JSON. Timestamps, ids and made keys are
//! redacted (they differ per run); the rest must match byte for byte.

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
        "credit --key g-credit --account-id $A --amount 50 --currency USD --description top-up",
        "charge --key g-charge --account-id $A --amount 30 --currency USD --description coffee",
        "charge --key g-charge --account-id $A --amount 30 --currency USD --description coffee",
        "charge --key g-decline --account-id $A --amount 1000 --currency USD",
        "charge --key g-decline --account-id $A --amount 1000 --currency USD",
        "charge --key g-invalid --account-id $A --amount 0 --currency US",
        "transfer --key g-transfer --from-account-id $A --to-account-id $B --amount 7 --currency USD",
        "post --key g-post --leg $A:$B:97:USD --leg $A:$B:3:USD",
        "reverse --key g-reverse --original-key g-post --description refunded-sale",
        "reverse --key g-reverse-again --original-key g-post",
        "place-hold --key g-hold --account-id $A --amount 5 --currency USD --ttl 30s",
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
        "charge --account-id $A --amount 1 --currency USD",
        "watch-entries --after-sequence 0 --limit 10",
        "watch-entries --after-sequence 4 --account-id $B --limit 2",
        "open-account --key g-line --currency USD --min-balance -5000 --max-balance 250000",
        "set-limits --key g-limits --account-id $B --no-min-balance",
        "set-limits --key g-bad --account-id $B --min-balance 5 --max-balance 4",
        "charge --key g-tagged --account-id $A --amount 2 --currency USD --metadata order_id=A-1 --metadata channel=web",
        "search-entries --metadata order_id=A-1",
        "charge --key g-bad-tag --account-id $A --amount 2 --currency USD --metadata a/b=1",
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
            r"(?m)^(\d+ +)\d+ +\d+ +(ENTRY_KIND_)",
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
