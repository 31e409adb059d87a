//! `ledgerctl batch --file FILE`: a bulk import. Each line of the file (or of
//! standard input, for `-`) is one keyed call as a `BatchItem` in protobuf
//! JSON (`{"charge": {"idempotencyKey": "pay-1", ...}}`), carrying its own key:
//! the lines are sent in batches, every item settled by the client
//! (`batch_settled`), and one result printed a line, in the file's order. The
//! same file run again replays every item that had its outcome and performs the
//! rest: an interrupted import is resumed by running it again.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::Path;

use ledger_client::{Client, Decline, Error, Settled, pb};
use prost::Message as _;
use prost_reflect::{DynamicMessage, MessageDescriptor, ReflectMessage as _};
use serde_json::json;
use tokio::time::Instant;

use crate::contract::{self, KEY_FIELD};
use crate::output::{FAILED, OK, Output, TEMPFAIL, USAGE};

/// The RPC whose subcommand takes `--file`.
pub(crate) const PATH: &str = "/ledger.v1.Ledger/Batch";
/// The most items the ledger takes in one batch.
pub(crate) const MAX_BATCH: usize = 1_000;
pub(crate) const FILE: &str = "file";
pub(crate) const BATCH_SIZE: &str = "batch-size";

/// What the import has done so far.
#[derive(Debug, Default)]
struct Tally {
    ok: u64,
    replayed: u64,
    failed: u64,
    unknown: u64,
}

impl Tally {
    fn done(&self) -> u64 {
        self.ok + self.failed + self.unknown
    }
}

pub(crate) async fn import(client: &Client, source: &Path, batch_size: usize, out: Output) -> u8 {
    let items = match read(source) {
        Ok(items) => items,
        Err(e) => {
            eprintln!("ledgerctl: {e}");
            return USAGE;
        }
    };
    let total = items.len();
    let progress = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut stdout = std::io::stdout().lock();
    let mut refused = false;
    for chunk in items.chunks(batch_size.clamp(1, MAX_BATCH)) {
        let sent: Vec<pb::BatchItem> = chunk.iter().map(|(_, item)| item.clone()).collect();
        let lines: Vec<String> = match client.batch_settled(sent).await {
            Ok(settled) => chunk
                .iter()
                .zip(&settled)
                .map(|((line, _), settled)| result_line(*line, settled, out, &mut tally))
                .collect(),
            Err(Error::Declined(decline)) => {
                refused = true;
                refused_lines(chunk, &decline, out, &mut tally)
            }
            Err(e) => {
                let status = tonic::Status::unavailable(e.to_string());
                let settled = Settled::Unknown(status);
                chunk
                    .iter()
                    .map(|(line, _)| result_line(*line, &settled, out, &mut tally))
                    .collect()
            }
        };
        if lines.iter().any(|text| writeln!(stdout, "{text}").is_err()) {
            return FAILED;
        }
        let _ = stdout.flush();
        if progress {
            let secs = started.elapsed().as_secs_f64().max(0.001);
            #[allow(clippy::cast_precision_loss)]
            let rate = tally.done() as f64 / secs;
            eprint!(
                "\r{} of {total} items, {rate:.0}/s, {} failed or declined, {} unknown ",
                tally.done(),
                tally.failed,
                tally.unknown
            );
        }
    }
    if progress {
        eprintln!();
    }
    let hint = if tally.unknown > 0 {
        "; run the same file again to settle them"
    } else {
        ""
    };
    eprintln!(
        "{total} items: {} succeeded ({} replayed), {} failed or declined, {} unknown{hint}",
        tally.ok, tally.replayed, tally.failed, tally.unknown,
    );
    if tally.unknown > 0 {
        TEMPFAIL
    } else if refused {
        FAILED
    } else {
        OK
    }
}

/// The lines of a batch the server refused whole (too large, not permitted):
/// none of its items ran, and the same batch would be refused again.
fn refused_lines(
    chunk: &[(usize, pb::BatchItem)],
    decline: &Decline,
    out: Output,
    tally: &mut Tally,
) -> Vec<String> {
    eprintln!(
        "ledgerctl: lines {} to {} refused as a batch, none of them run: {}{}",
        chunk.first().map_or(0, |(line, _)| *line),
        chunk.last().map_or(0, |(line, _)| *line),
        decline.message,
        if decline.code == tonic::Code::ResourceExhausted {
            " (a smaller --batch-size sends smaller batches)"
        } else {
            ""
        }
    );
    let code = ledger_client::code_name(decline.code);
    chunk
        .iter()
        .map(|(line, _)| {
            tally.failed += 1;
            if out == Output::Json {
                json!({ "line": line, "state": "refused", "result": null, "code": code })
                    .to_string()
            } else {
                format!("line {line}: refused: {code}: {}", decline.message)
            }
        })
        .collect()
}

/// The file's items by line number (from 1), blank lines skipped; every line
/// checked before anything is sent.
fn read(source: &Path) -> Result<Vec<(usize, pb::BatchItem)>, String> {
    let reader: Box<dyn std::io::BufRead> = if source == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(source).map_err(|e| format!("{}: {e}", source.display()))?;
        Box::new(std::io::BufReader::new(file))
    };
    let descriptor = item_descriptor()?;
    let mut items = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let number = i + 1;
        let line = line.map_err(|e| format!("{}: line {number}: {e}", source.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let item = parse(&descriptor, &line).map_err(|e| format!("line {number}: {e}"))?;
        items.push((number, item));
    }
    Ok(items)
}

fn item_descriptor() -> Result<MessageDescriptor, String> {
    contract::pool()
        .get_message_by_name("ledger.v1.BatchItem")
        .ok_or_else(|| "the contract has no ledger.v1.BatchItem".to_owned())
}

/// One line as a batch item: protobuf JSON naming one call, with its key.
fn parse(descriptor: &MessageDescriptor, line: &str) -> Result<pb::BatchItem, String> {
    let mut reader = serde_json::Deserializer::from_str(line);
    let item = DynamicMessage::deserialize(descriptor.clone(), &mut reader)
        .and_then(|item| reader.end().map(|()| item))
        .map_err(|e| format!("not a BatchItem in protobuf JSON: {e}"))?;
    let call = item
        .fields()
        .find_map(|(_, value)| value.as_message().cloned())
        .ok_or("names no call (e.g. {\"charge\": {...}})")?;
    let key = call
        .get_field_by_name(KEY_FIELD)
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_default();
    if key.is_empty() {
        return Err(format!(
            "the {} has no idempotencyKey: each line carries its own, so that running the \
             file again replays it",
            call.descriptor().name()
        ));
    }
    pb::BatchItem::decode(item.encode_to_vec().as_slice()).map_err(|e| e.to_string())
}

/// A result's line: JSON for programs, a short line for people.
fn result_line(line: usize, settled: &Settled, out: Output, tally: &mut Tally) -> String {
    let (state, detail, replayed) = match settled {
        Settled::Done(result) => {
            if let Some(pb::batch_result::Result::Error(status)) = &result.result {
                tally.failed += 1;
                let code = ledger_client::code_name(tonic::Code::from_i32(status.code));
                (
                    "failed",
                    format!("{code}: {}", status.message),
                    result.replayed,
                )
            } else {
                tally.ok += 1;
                tally.replayed += u64::from(result.replayed);
                ("ok", String::new(), result.replayed)
            }
        }
        Settled::Unknown(status) => {
            tally.unknown += 1;
            ("unknown", status.message().to_owned(), false)
        }
    };
    if out == Output::Json {
        let result = match settled {
            Settled::Done(result) => result_json(result),
            Settled::Unknown(_) => serde_json::Value::Null,
        };
        return json!({ "line": line, "state": state, "result": result }).to_string();
    }
    let replay = if replayed { " (replayed)" } else { "" };
    format!(
        "line {line}: {state}{replay}{}",
        if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        }
    )
}

/// A result as JSON: the reply as protobuf JSON, or the error as a decline
/// prints (code, reason, message, metadata); `replayed` when it was.
fn result_json(result: &pb::BatchResult) -> serde_json::Value {
    if let Some(pb::batch_result::Result::Error(status)) = &result.result {
        let status = tonic::Status::with_details(
            tonic::Code::from_i32(status.code),
            status.message.clone(),
            status.encode_to_vec().into(),
        );
        let decline = Decline::from_status(&status, None);
        let mut error = serde_json::Map::new();
        error.insert("code".into(), json!(ledger_client::code_name(decline.code)));
        error.insert("reason".into(), json!(decline.reason.as_str()));
        error.insert("message".into(), json!(decline.message));
        if !decline.metadata.is_empty() {
            error.insert("metadata".into(), json!(decline.metadata));
        }
        let mut json = serde_json::Map::new();
        json.insert("error".into(), serde_json::Value::Object(error));
        if result.replayed {
            json.insert("replayed".into(), json!(true));
        }
        return serde_json::Value::Object(json);
    }
    contract::pool()
        .get_message_by_name("ledger.v1.BatchResult")
        .and_then(|descriptor| {
            DynamicMessage::decode(descriptor, result.encode_to_vec().as_slice()).ok()
        })
        .and_then(|message| {
            message
                .serialize_with_options(
                    serde_json::value::Serializer,
                    &prost_reflect::SerializeOptions::new(),
                )
                .ok()
        })
        .unwrap_or(serde_json::Value::Null)
}
