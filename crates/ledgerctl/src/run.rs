//! A parsed command line into its call, the answer printed, and the exit code:
//! 0 success, 1 a final error, 2 a usage error, 75 (EX_TEMPFAIL) the budget
//! spent with the outcome unknown. Every unary RPC takes the one path: its
//! request encoded and called by method through the client (the typed calls'
//! loop), its reply decoded through the method's reply type.

use std::io::Write as _;
use std::time::Duration;

use ledger_client::{Budget, Client, Error};
use prost::Message as _;
use prost_reflect::{DynamicMessage, MethodDescriptor, Value};

use crate::cli::{Cli, Command, Global};
use crate::contract::{self, KEY_FIELD};
use crate::output::{FAILED, OK, Output, TEMPFAIL};
use crate::render;

pub(crate) async fn run(cli: Cli, mut command_line: clap::Command) -> u8 {
    let Cli { global, command } = cli;
    if let Command::Completions { shell } = command {
        clap_complete::generate(
            shell,
            &mut command_line,
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
    match command {
        Command::Call { method, request } => call(&client, &method, request, global.output).await,
        Command::Watch { request, limit } => watch(&client, &request, limit, global.output).await,
        Command::Import { file, batch_size } => {
            crate::import::import(&client, &file, batch_size, global.output).await
        }
        Command::Completions { .. } => OK,
    }
}

/// Any unary RPC: its request (with its key, for a keyed one) encoded and
/// called by method through the client, its reply read through the method's
/// reply type.
async fn call(
    client: &Client,
    method: &MethodDescriptor,
    mut request: DynamicMessage,
    out: Output,
) -> u8 {
    let key = if contract::keyed(method) {
        match key(&mut request) {
            Ok(key) => Some(key),
            Err(e) => {
                eprintln!("ledgerctl: {e}");
                return FAILED;
            }
        }
    } else {
        None
    };
    let bytes = request.encode_to_vec().into();
    let answer = match client
        .call_encoded(&contract::path(method), key, bytes)
        .await
    {
        Ok(answer) => answer,
        Err(e) => return failed(&e, out),
    };
    if answer.replayed {
        eprintln!("replayed: the answer stored under this key by an earlier call");
    }
    match DynamicMessage::decode(method.output(), answer.reply)
        .map_err(|e| format!("{}: {e}", method.output().full_name()))
        .and_then(|reply| render::reply(&reply, out))
    {
        Ok(text) => print(&text),
        Err(e) => {
            eprintln!("ledgerctl: {e}");
            FAILED
        }
    }
}

/// The call's key: the one given, or a new one, printed (to stderr) before
/// the first attempt so that a caller who loses the answer, or this process,
/// can retry with it.
fn key(request: &mut DynamicMessage) -> Result<String, String> {
    let given = request
        .get_field_by_name(KEY_FIELD)
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_default();
    if !given.is_empty() {
        return Ok(given);
    }
    let key = Client::new_key();
    eprintln!("idempotency key: {key}");
    request
        .try_set_field_by_name(KEY_FIELD, Value::String(key.clone()))
        .map_err(|e| e.to_string())?;
    Ok(key)
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

/// The fields of the watched stream's request that the watcher takes; a test
/// holds the request to them, so a field added to it cannot go unsent.
pub(crate) const WATCH_AFTER: &str = "after_sequence";
pub(crate) const WATCH_ACCOUNT: &str = "account_id";

/// Prints each entry as it arrives, through the resuming watcher, until Ctrl-C,
/// `--limit` entries, or a final error.
async fn watch(client: &Client, request: &DynamicMessage, limit: Option<u64>, out: Output) -> u8 {
    let field = |name: &str| {
        request
            .get_field_by_name(name)
            .and_then(|value| value.as_u64())
            .unwrap_or_default()
    };
    let mut watcher = client.watch(field(WATCH_AFTER), field(WATCH_ACCOUNT));
    if out != Output::Json && print(&render::entry_header()) != OK {
        return FAILED;
    }
    let mut printed = 0_u64;
    while limit.is_none_or(|limit| printed < limit) {
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
