//! A subcommand into its request, the call through the client, the answer
//! printed, and the exit code: 0 success, 1 a final error, 75 (EX_TEMPFAIL) the
//! budget spent with the outcome unknown.

use std::io::Write as _;
use std::time::Duration;

use clap::CommandFactory as _;
use ledger_client::{Answer, Budget, Client, Error, pb};

use crate::cli::{Cli, Command, Global, Output, WatchEntries};
use crate::render;

pub(crate) const OK: u8 = 0;
pub(crate) const FAILED: u8 = 1;
/// sysexits.h's EX_TEMPFAIL: try again later (with the printed key).
pub(crate) const TEMPFAIL: u8 = 75;

pub(crate) async fn run(cli: Cli) -> u8 {
    let Cli { global, command } = cli;
    if let Command::Completions { shell } = command {
        clap_complete::generate(
            shell,
            &mut Cli::command(),
            "ledgerctl",
            &mut std::io::stdout(),
        );
        return OK;
    }
    let client = match connect(&global) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("ledgerctl: {e}");
            return FAILED;
        }
    };
    call(&client, command, global.output).await
}

/// One line per RPC: the request from the flags (and the key), the typed call,
/// the reply's type for printing. A flat table that grows with the API.
#[allow(clippy::too_many_lines)]
async fn call(client: &Client, command: Command, out: Output) -> u8 {
    match command {
        Command::OpenAccount(c) => {
            let request = c.request();
            show(
                client.open_account(request).await,
                "ledger.v1.OpenAccountReply",
                out,
            )
        }
        Command::Credit(c) => {
            let request = c.credit();
            show(client.credit(request).await, "ledger.v1.CreditReply", out)
        }
        Command::Charge(c) => {
            let request = c.charge();
            show(client.charge(request).await, "ledger.v1.ChargeReply", out)
        }
        Command::GetAccount(c) => show(
            client.get_account(c.request()).await,
            "ledger.v1.Account",
            out,
        ),
        Command::GetBalance(c) => show(
            client.get_balance(c.request()).await,
            "ledger.v1.Balance",
            out,
        ),
        Command::Transfer(c) => {
            let request = c.request();
            show(
                client.transfer(request).await,
                "ledger.v1.TransferReply",
                out,
            )
        }
        Command::Refund(c) => {
            let request = c.request();
            show(client.refund(request).await, "ledger.v1.RefundReply", out)
        }
        Command::PlaceHold(c) => {
            let request = c.request();
            show(
                client.place_hold(request).await,
                "ledger.v1.PlaceHoldReply",
                out,
            )
        }
        Command::CaptureHold(c) => {
            let request = c.request();
            show(
                client.capture_hold(request).await,
                "ledger.v1.CaptureHoldReply",
                out,
            )
        }
        Command::VoidHold(c) => {
            let request = c.request();
            show(
                client.void_hold(request).await,
                "ledger.v1.VoidHoldReply",
                out,
            )
        }
        Command::GetEntry(c) => show(client.get_entry(c.request()).await, "ledger.v1.Entry", out),
        Command::ListEntries(c) => {
            let reply = client.list_entries(c.request()).await;
            show(reply, "ledger.v1.ListEntriesReply", out)
        }
        Command::GetHold(c) => show(client.get_hold(c.request()).await, "ledger.v1.Hold", out),
        Command::LookupKey(c) => lookup(client.lookup_key(c.request()).await, out),
        Command::Post(c) => {
            let request = c.request();
            show(client.post(request).await, "ledger.v1.PostReply", out)
        }
        Command::WatchEntries(c) => watch(client, &c, out).await,
        Command::SearchEntries(c) => show(
            client.search_entries(c.request()).await,
            "ledger.v1.SearchEntriesReply",
            out,
        ),
        Command::ListAccounts(c) => show(
            client.list_accounts(c.request()).await,
            "ledger.v1.ListAccountsReply",
            out,
        ),
        Command::SetLimits(c) => {
            let request = c.request();
            show(
                client.set_limits(request).await,
                "ledger.v1.SetLimitsReply",
                out,
            )
        }
        Command::Reverse(c) => {
            let request = c.request();
            show(client.reverse(request).await, "ledger.v1.ReverseReply", out)
        }
        Command::ListHolds(c) => {
            let reply = client.list_holds(c.request()).await;
            show(reply, "ledger.v1.ListHoldsReply", out)
        }
        Command::Completions { .. } => OK,
    }
}

fn connect(global: &Global) -> Result<Client, String> {
    let mut builder = Client::builder().budget(budget(global.timeout));
    // An empty LEDGER_SERVER names no endpoint rather than an empty one.
    for server in global.server.iter().filter(|server| !server.is_empty()) {
        builder = builder.endpoint(server.clone());
    }
    if let Some(path) = &global.cacert {
        let pem = std::fs::read(path).map_err(|e| format!("--cacert {}: {e}", path.display()))?;
        builder = builder.ca_certificate(pem);
    }
    if let Some(token) = &global.token {
        builder = builder.token(token.clone());
    }
    builder.build().map_err(|e| e.to_string())
}

/// The whole call within `timeout`: an attempt gets at most 3 s of it (a third
/// of a shorter one), and the last quarter (at most 1 s) is kept for the
/// look-up.
fn budget(timeout: Duration) -> Budget {
    Budget {
        timeout,
        attempt_timeout: (timeout / 3).min(Duration::from_secs(3)),
        lookup_reserve: (timeout / 4).min(Duration::from_secs(1)),
        ..Budget::default()
    }
}

fn show<M: prost::Message>(result: Result<Answer<M>, Error>, name: &str, out: Output) -> u8 {
    match result {
        Ok(answer) => {
            if answer.replayed {
                eprintln!("replayed: the answer stored under this key by an earlier call");
            }
            match render::dynamic(&answer.reply, name) {
                Ok(reply) => print(&render::reply(&reply, out)),
                Err(e) => {
                    eprintln!("ledgerctl: {e}");
                    FAILED
                }
            }
        }
        Err(e) => failed(&e, out),
    }
}

fn lookup(result: Result<Answer<pb::KeyRecord>, Error>, out: Output) -> u8 {
    match result {
        Ok(answer) => match render::key_record(&answer.reply, out) {
            Ok(text) => print(&text),
            Err(e) => {
                eprintln!("ledgerctl: {e}");
                FAILED
            }
        },
        Err(e) => failed(&e, out),
    }
}

/// Prints each entry as it arrives, through the resuming watcher, until Ctrl-C,
/// `--limit` entries, or a final error.
async fn watch(client: &Client, c: &WatchEntries, out: Output) -> u8 {
    let mut watcher = client.watch(c.after_sequence, c.account_id);
    if out == Output::Table && print(&render::entry_header()) != OK {
        return FAILED;
    }
    let mut printed = 0_u64;
    while c.limit.is_none_or(|limit| printed < limit) {
        let entry = tokio::select! {
            entry = watcher.next() => entry,
            _ = tokio::signal::ctrl_c() => return OK,
        };
        let line = match entry.map(|entry| render::entry_line(&entry, out)) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => {
                eprintln!("ledgerctl: {e}");
                return FAILED;
            }
            Err(e) => return failed(&e, out),
        };
        if print(&line) != OK {
            return FAILED;
        }
        printed += 1;
    }
    OK
}

fn print(text: &str) -> u8 {
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return FAILED;
    }
    OK
}

fn failed(error: &Error, out: Output) -> u8 {
    match error {
        Error::Declined(decline) => {
            if decline.replayed {
                eprintln!("replayed: the answer stored under this key by an earlier call");
            }
            eprint!("{}", render::decline(decline, out));
            FAILED
        }
        Error::Unknown { key } => {
            eprintln!(
                "ledgerctl: no answer within --timeout; the outcome is unknown. \
                 Retry with the same key: --key {key}"
            );
            TEMPFAIL
        }
        Error::Unavailable { .. } => {
            eprintln!("ledgerctl: {error}");
            TEMPFAIL
        }
        other => {
            eprintln!("ledgerctl: {other}");
            FAILED
        }
    }
}
