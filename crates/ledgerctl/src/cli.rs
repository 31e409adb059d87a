//! The command line, built at run time from the contract (SPEC 5): the global
//! flags, and a subcommand per unary RPC of the service, named as the RPC in
//! kebab-case, with its request's fields as flags (`flags`) and its help from
//! the proto's comments. Two more: `watch-entries`, the stream the client's
//! resuming watcher follows (its request's fields, and `--limit`), and
//! `completions`. An RPC added to the proto is a subcommand with no edit here.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Arg, ArgMatches, Args, FromArgMatches as _};
use heck::ToKebabCase as _;
use ledger_client::Watcher;
use prost_reflect::{DynamicMessage, MethodDescriptor, ServiceDescriptor};

use crate::contract;
use crate::flags;
use crate::import;
use crate::output::Output;

/// Accepted before or after the subcommand.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// The ledger's address; several, comma-separated, are tried in turn when one
    /// fails (unreachable, no answer, at its limit of calls).
    #[arg(
        long,
        env = "LEDGER_SERVER",
        default_value = "http://127.0.0.1:50051",
        value_delimiter = ',',
        global = true
    )]
    pub(crate) server: Vec<String>,
    /// A bearer token, sent with every call.
    #[arg(long, env = "LEDGER_TOKEN", hide_env_values = true, global = true)]
    pub(crate) token: Option<String>,
    /// The CA certificate (PEM) to trust for an https:// server.
    #[arg(long, global = true)]
    pub(crate) cacert: Option<PathBuf>,
    /// The whole call's budget, retries included: 3s, 500ms.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, global = true)]
    pub(crate) timeout: Duration,
    /// table for people (amounts in their currency's units, a list a row per
    /// item), wide the same with every field a column, json for programs (the
    /// reply as protobuf JSON, amounts in minor units).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table, global = true)]
    pub(crate) output: Output,
}

/// What the command line asks for.
#[derive(Debug)]
pub(crate) struct Cli {
    pub(crate) global: Global,
    pub(crate) command: Command,
}

#[derive(Debug)]
pub(crate) enum Command {
    /// A unary RPC, with the request its flags give.
    Call {
        method: MethodDescriptor,
        request: DynamicMessage,
    },
    /// The change stream from the point the request gives, through the
    /// client's resuming watcher, until Ctrl-C or `limit` entries.
    Watch {
        request: DynamicMessage,
        limit: Option<u64>,
    },
    Completions {
        shell: clap_complete::Shell,
    },
    /// `batch --file`: a file of batch items, one a line, sent in batches.
    Import {
        file: PathBuf,
        batch_size: usize,
    },
}

const LIMIT: &str = "limit";
const SHELL: &str = "shell";

/// The whole command line of `service`.
pub(crate) fn command(service: &ServiceDescriptor) -> Result<clap::Command, String> {
    let mut top = Global::augment_args(clap::Command::new("ledgerctl"))
        .version(env!("CARGO_PKG_VERSION"))
        .about("Calls the ledger: every RPC a subcommand, each keyed call exactly once")
        .after_help(
            "Exit codes: 0 success; 1 a final error (declined, invalid, not found, \
             permission); 2 a usage error (flags that make no request); 75 the budget \
             (--timeout) was spent with the outcome unknown: retry with the printed key.",
        )
        .subcommand_required(true);
    let reserved = reserved(&top);
    // Apart from a subcommand's own flags, in its help.
    let globals: Vec<String> = top
        .get_arguments()
        .map(|arg| arg.get_id().to_string())
        .collect();
    for id in globals {
        top = top.mut_arg(id, |arg| arg.help_heading("Global options"));
    }
    let mut subcommands = Vec::new();
    for method in service.methods() {
        if let Some(subcommand) = subcommand(&method, &reserved)? {
            subcommands.push(subcommand);
        }
    }
    subcommands.push(
        clap::Command::new("completions")
            .about("Prints a shell completion script.")
            .arg(
                Arg::new(SHELL)
                    .required(true)
                    .value_parser(clap::value_parser!(clap_complete::Shell)),
            ),
    );
    Ok(top.subcommands(subcommands))
}

/// The names a request's flags may not take: the global flags' and clap's own.
fn reserved(top: &clap::Command) -> HashSet<String> {
    let mut names: HashSet<String> = ["help", "version"].map(str::to_owned).into();
    for arg in top.get_arguments() {
        names.extend(arg.get_long().map(str::to_owned));
        names.extend(
            arg.get_all_aliases()
                .into_iter()
                .flatten()
                .map(str::to_owned),
        );
    }
    names
}

/// A unary RPC's subcommand, or the watcher's for the stream it follows; none
/// for another stream (the client has no call for it).
fn subcommand(
    method: &MethodDescriptor,
    reserved: &HashSet<String>,
) -> Result<Option<clap::Command>, String> {
    let watched = is_watched(method);
    let streams = method.is_client_streaming() || method.is_server_streaming();
    if streams && !watched {
        return Ok(None);
    }
    let mut reserved = reserved.clone();
    if watched {
        reserved.insert(LIMIT.to_owned());
    }
    let flags = flags::flags(&method.input(), contract::keyed(method), &reserved)?;
    let comment = contract::comment(&method.parent_file(), method.path()).unwrap_or_default();
    let mut subcommand = clap::Command::new(method.name().to_kebab_case())
        .about(contract::summary(&comment).to_owned())
        .long_about(comment.clone())
        .args(flags.args)
        .groups(flags.groups);
    if contract::path(method) == import::PATH {
        subcommand = subcommand
            .arg(
                Arg::new(import::FILE)
                    .long(import::FILE)
                    .value_name("FILE")
                    .value_parser(clap::value_parser!(PathBuf))
                    .help(
                        "Imports a file of items, one a line in protobuf JSON, each with its \
                         idempotencyKey ({\"charge\": {...}}; - for standard input), sent in \
                         batches: one result printed a line; exit 0 when every item has its \
                         outcome, 75 when some remain unknown (run the file again).",
                    ),
            )
            .arg(
                Arg::new(import::BATCH_SIZE)
                    .long(import::BATCH_SIZE)
                    .value_name("N")
                    .default_value("1000")
                    .value_parser(clap::value_parser!(u16).range(1..=1000))
                    .help("Items sent in one batch with --file."),
            );
    }
    if watched {
        subcommand = subcommand
            .long_about(format!(
                "{comment}\n\nResumes after the last entry printed when the stream \
                 breaks, on the next server when that one failed."
            ))
            .arg(
                Arg::new(LIMIT)
                    .long(LIMIT)
                    .value_name("LIMIT")
                    .value_parser(clap::value_parser!(u64))
                    .help("Stops after this many entries (for scripts); without it, runs until Ctrl-C."),
            );
    }
    Ok(Some(subcommand))
}

/// The stream the client's resuming watcher follows.
fn is_watched(method: &MethodDescriptor) -> bool {
    method.is_server_streaming() && contract::path(method) == Watcher::PATH
}

/// What the parsed command line asks for.
pub(crate) fn read(service: &ServiceDescriptor, matches: &ArgMatches) -> Result<Cli, String> {
    let global = Global::from_arg_matches(matches).map_err(|e| e.to_string())?;
    let (name, sub) = matches
        .subcommand()
        .ok_or_else(|| "no subcommand".to_owned())?;
    if name == "completions" {
        let shell = sub
            .get_one::<clap_complete::Shell>(SHELL)
            .copied()
            .ok_or_else(|| "no shell".to_owned())?;
        return Ok(Cli {
            global,
            command: Command::Completions { shell },
        });
    }
    let method = service
        .methods()
        .find(|method| method.name().to_kebab_case() == name)
        .ok_or_else(|| format!("no RPC for {name}"))?;
    let request = flags::request(&method.input(), sub)?;
    let file = if contract::path(&method) == import::PATH {
        sub.get_one::<PathBuf>(import::FILE).cloned()
    } else {
        None
    };
    let command = if let Some(file) = file {
        if request.fields().next().is_some() {
            return Err("--file takes the items from the file: give no --item".to_owned());
        }
        let batch_size = sub
            .get_one::<u16>(import::BATCH_SIZE)
            .copied()
            .unwrap_or(1000);
        Command::Import {
            file,
            batch_size: usize::from(batch_size),
        }
    } else if is_watched(&method) {
        Command::Watch {
            request,
            limit: sub.get_one::<u64>(LIMIT).copied(),
        }
    } else {
        Command::Call { method, request }
    };
    Ok(Cli { global, command })
}

#[cfg(test)]
mod tests;
