//! The command line: global flags, and one subcommand per RPC named as the RPC in
//! kebab-case, with the request's fields as flags (SPEC 5).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ledger_client::pb;

#[derive(Debug, Parser)]
#[command(
    name = "ledgerctl",
    version,
    about = "Calls the ledger: every RPC a subcommand, each keyed call exactly once",
    after_help = "Exit codes: 0 success; 1 a final error (declined, invalid, not found, \
                  permission); 75 the budget (--timeout) was spent with the outcome unknown: \
                  retry with the printed key."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

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
    /// table for people, json for programs (the reply as protobuf JSON).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table, global = true)]
    pub(crate) output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    Table,
    Json,
}

/// A keyed call's key.
#[derive(Debug, Args)]
pub(crate) struct Key {
    /// The operation's idempotency key. Without it one is made and printed
    /// before the first attempt: retry with it, never with a new one.
    #[arg(long = "idempotency-key", visible_alias = "key")]
    pub(crate) idempotency_key: Option<String>,
}

impl Key {
    /// The caller's key, or a new one, printed (to stderr) before the first
    /// attempt so that a caller who loses the answer, or this process, can
    /// retry with it.
    fn resolve(self) -> String {
        self.idempotency_key.unwrap_or_else(|| {
            let key = ledger_client::Client::new_key();
            eprintln!("idempotency key: {key}");
            key
        })
    }
}

#[derive(Debug, Args)]
pub(crate) struct Description {
    /// Stored on the entries; at most 500 characters.
    #[arg(long, default_value = "")]
    description: String,
}

/// A call's business tags (SPEC 3.11), stored on what it writes.
#[derive(Debug, Args)]
pub(crate) struct Metadata {
    /// A tag, KEY=VALUE; repeat for several (at most 50; a key given twice
    /// keeps its last value).
    #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = parse_pair)]
    pairs: Vec<(String, String)>,
}

impl Metadata {
    /// The pairs as the request carries them; a key given twice keeps its last
    /// value.
    fn into_map(self) -> std::collections::BTreeMap<String, String> {
        self.pairs.into_iter().collect()
    }
}

/// `KEY=VALUE`: the key up to the first `=`, the value after it (it may hold `=`).
fn parse_pair(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Opens an account with a zero balance, and its limits (by default a floor
    /// at zero and no ceiling).
    OpenAccount(OpenAccount),
    /// Adds money (minor units) to an account.
    Credit(Credit),
    /// Takes money (minor units) from an account.
    Charge(Charge),
    /// Reads an account.
    GetAccount(GetAccount),
    /// An account's balance and the limits in force at a sequence or a time
    /// (neither: now).
    GetBalance(GetBalance),
    /// Moves money between two accounts of one currency.
    Transfer(Transfer),
    /// Returns money a charge or capture took.
    Refund(Refund),
    /// Reserves money until captured, voided, or the ttl passes.
    PlaceHold(PlaceHold),
    /// Takes up to the held amount and releases the rest.
    CaptureHold(CaptureHold),
    /// Releases a hold.
    VoidHold(VoidHold),
    /// Reads one journal entry.
    GetEntry(GetEntry),
    /// A page of an account's journal, oldest first.
    ListEntries(ListEntries),
    /// Reads one hold.
    GetHold(GetHold),
    /// What happened under a key, with the stored reply decoded; executes
    /// nothing.
    LookupKey(LookupKey),
    /// Several transfers that take effect together or not at all.
    Post(Post),
    /// Prints entries as they commit, in sequence order, resuming after the
    /// last one printed when the stream breaks; until Ctrl-C or --limit.
    WatchEntries(WatchEntries),
    /// Replaces an account's limits (all of them: a flag left out is its
    /// default), recorded as a LIMITS entry in its journal.
    SetLimits(SetLimits),
    /// Entries whose metadata holds every given pair, in sequence order.
    SearchEntries(SearchEntries),
    /// Accounts whose metadata holds every given pair (none: all), by id.
    ListAccounts(ListAccounts),
    /// A page of an account's open holds (still held, not expired), oldest
    /// first.
    ListHolds(ListHolds),
    /// Undoes a Transfer, a Post or a Credit, named by the key it committed
    /// under: every leg mirrored, last leg first; at most once per operation.
    Reverse(Reverse),
    /// Prints a shell completion script.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

// One struct per subcommand: its flags are the request's fields, and `request`
// makes the request (a keyed one with its key resolved).

#[derive(Debug, Args)]
pub(crate) struct OpenAccount {
    #[command(flatten)]
    pub(crate) key: Key,
    #[arg(long)]
    currency: String,
    #[command(flatten)]
    limits: Limits,
    #[command(flatten)]
    metadata: Metadata,
}

impl OpenAccount {
    pub(crate) fn request(self) -> pb::OpenAccountRequest {
        let idempotency_key = self.key.resolve();
        pb::OpenAccountRequest {
            idempotency_key,
            currency: self.currency,
            limits: self.limits.given(),
            metadata: self.metadata.into_map(),
        }
    }
}

/// An account's limits (`AccountLimits`); each flag left out is its default.
/// The flags are named as the message's fields.
#[derive(Debug, Args)]
#[allow(clippy::struct_field_names)]
pub(crate) struct Limits {
    /// The lowest available balance (balance less held) a debit may leave, in
    /// minor units: negative for a credit line. Default 0.
    #[arg(long, allow_negative_numbers = true, conflicts_with = "no_min_balance")]
    min_balance: Option<i64>,
    /// No floor at all: a funding or settlement account.
    #[arg(long)]
    no_min_balance: bool,
    /// The highest balance a credit may leave, in minor units. Default: none.
    #[arg(long, allow_negative_numbers = true)]
    max_balance: Option<i64>,
}

impl Limits {
    /// The limits the flags give, or none when no flag was given.
    fn given(self) -> Option<pb::AccountLimits> {
        let any = self.min_balance.is_some() || self.no_min_balance || self.max_balance.is_some();
        any.then(|| self.message())
    }

    fn message(self) -> pb::AccountLimits {
        pb::AccountLimits {
            min_balance: self.min_balance.unwrap_or(0),
            no_min_balance: self.no_min_balance,
            max_balance: self.max_balance,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct SetLimits {
    #[command(flatten)]
    pub(crate) key: Key,
    #[arg(long)]
    account_id: u64,
    #[command(flatten)]
    limits: Limits,
}

impl SetLimits {
    pub(crate) fn request(self) -> pb::SetLimitsRequest {
        let idempotency_key = self.key.resolve();
        pb::SetLimitsRequest {
            idempotency_key,
            account_id: self.account_id,
            limits: Some(self.limits.message()),
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct Reverse {
    #[command(flatten)]
    pub(crate) key: Key,
    /// The key the operation to undo committed under.
    #[arg(long)]
    original_key: String,
    /// Ignore the floors (held money included): an account may be overdrawn.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    description: Description,
    #[command(flatten)]
    metadata: Metadata,
}

impl Reverse {
    pub(crate) fn request(self) -> pb::ReverseRequest {
        let idempotency_key = self.key.resolve();
        pb::ReverseRequest {
            idempotency_key,
            original_key: self.original_key,
            force: self.force,
            description: self.description.description,
            metadata: self.metadata.into_map(),
        }
    }
}

/// Credit and Charge take the same fields (and PlaceHold, with a ttl).
#[derive(Debug, Args)]
pub(crate) struct Money {
    #[command(flatten)]
    pub(crate) key: Key,
    #[arg(long)]
    account_id: u64,
    /// Minor units (cents).
    #[arg(long, allow_negative_numbers = true)]
    amount: i64,
    #[arg(long)]
    currency: String,
    #[command(flatten)]
    description: Description,
    #[command(flatten)]
    metadata: Metadata,
}

pub(crate) type Credit = Money;
pub(crate) type Charge = Money;

impl Money {
    pub(crate) fn credit(self) -> pb::CreditRequest {
        let idempotency_key = self.key.resolve();
        pb::CreditRequest {
            idempotency_key,
            account_id: self.account_id,
            amount: self.amount,
            currency: self.currency,
            description: self.description.description,
            metadata: self.metadata.into_map(),
        }
    }

    pub(crate) fn charge(self) -> pb::ChargeRequest {
        let idempotency_key = self.key.resolve();
        pb::ChargeRequest {
            idempotency_key,
            account_id: self.account_id,
            amount: self.amount,
            currency: self.currency,
            description: self.description.description,
            metadata: self.metadata.into_map(),
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct GetAccount {
    #[arg(long)]
    account_id: u64,
}

impl GetAccount {
    pub(crate) fn request(self) -> pb::GetAccountRequest {
        pb::GetAccountRequest {
            account_id: self.account_id,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct GetBalance {
    #[arg(long)]
    account_id: u64,
    /// After the account's last entry with a sequence up to this one.
    #[arg(long, conflicts_with = "as_of_time")]
    as_of_sequence: Option<u64>,
    /// After the account's last entry created at or before this time, in
    /// RFC 3339 UTC: 2026-12-31T23:59:59Z (fractions of a second allowed).
    #[arg(long, value_parser = parse_time)]
    as_of_time: Option<prost_types::Timestamp>,
}

impl GetBalance {
    pub(crate) fn request(self) -> pb::GetBalanceRequest {
        pb::GetBalanceRequest {
            account_id: self.account_id,
            as_of_sequence: self.as_of_sequence.unwrap_or(0),
            as_of_time: self.as_of_time,
        }
    }
}

/// An RFC 3339 time in UTC (`Z`).
fn parse_time(raw: &str) -> Result<prost_types::Timestamp, String> {
    humantime::parse_rfc3339(raw)
        .map(prost_types::Timestamp::from)
        .map_err(|e| format!("{e}: give a UTC time like 2026-12-31T23:59:59Z"))
}

#[derive(Debug, Args)]
pub(crate) struct Transfer {
    #[command(flatten)]
    pub(crate) key: Key,
    #[arg(long)]
    from_account_id: u64,
    #[arg(long)]
    to_account_id: u64,
    /// Minor units (cents).
    #[arg(long, allow_negative_numbers = true)]
    amount: i64,
    #[arg(long)]
    currency: String,
    #[command(flatten)]
    description: Description,
    #[command(flatten)]
    metadata: Metadata,
}

impl Transfer {
    pub(crate) fn request(self) -> pb::TransferRequest {
        let idempotency_key = self.key.resolve();
        pb::TransferRequest {
            idempotency_key,
            from_account_id: self.from_account_id,
            to_account_id: self.to_account_id,
            amount: self.amount,
            currency: self.currency,
            description: self.description.description,
            metadata: self.metadata.into_map(),
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct Refund {
    #[command(flatten)]
    pub(crate) key: Key,
    /// The CHARGE or CAPTURE entry.
    #[arg(long)]
    entry_id: u64,
    /// Minor units (cents).
    #[arg(long, allow_negative_numbers = true)]
    amount: i64,
    #[command(flatten)]
    description: Description,
    #[command(flatten)]
    metadata: Metadata,
}

impl Refund {
    pub(crate) fn request(self) -> pb::RefundRequest {
        let idempotency_key = self.key.resolve();
        pb::RefundRequest {
            idempotency_key,
            entry_id: self.entry_id,
            amount: self.amount,
            description: self.description.description,
            metadata: self.metadata.into_map(),
        }
    }
}

/// A charge's fields, and how long the hold lasts.
#[derive(Debug, Args)]
pub(crate) struct PlaceHold {
    #[command(flatten)]
    pub(crate) money: Money,
    /// How long the hold lasts: 30s, 15m, 7days.
    #[arg(long, value_parser = humantime::parse_duration)]
    ttl: Duration,
}

impl PlaceHold {
    pub(crate) fn request(self) -> pb::PlaceHoldRequest {
        let Money {
            key,
            account_id,
            amount,
            currency,
            description,
            metadata,
        } = self.money;
        pb::PlaceHoldRequest {
            idempotency_key: key.resolve(),
            account_id,
            amount,
            currency,
            description: description.description,
            ttl: Some(prost_types::Duration {
                seconds: i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(self.ttl.subsec_nanos()).unwrap_or(0),
            }),
            metadata: metadata.into_map(),
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct CaptureHold {
    #[command(flatten)]
    pub(crate) key: Key,
    #[arg(long)]
    hold_id: u64,
    /// Minor units (cents).
    #[arg(long, allow_negative_numbers = true)]
    amount: i64,
    #[command(flatten)]
    description: Description,
    #[command(flatten)]
    metadata: Metadata,
}

impl CaptureHold {
    pub(crate) fn request(self) -> pb::CaptureHoldRequest {
        let idempotency_key = self.key.resolve();
        pb::CaptureHoldRequest {
            idempotency_key,
            hold_id: self.hold_id,
            amount: self.amount,
            description: self.description.description,
            metadata: self.metadata.into_map(),
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct VoidHold {
    #[command(flatten)]
    pub(crate) key: Key,
    #[arg(long)]
    hold_id: u64,
}

impl VoidHold {
    pub(crate) fn request(self) -> pb::VoidHoldRequest {
        let idempotency_key = self.key.resolve();
        pb::VoidHoldRequest {
            idempotency_key,
            hold_id: self.hold_id,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct GetEntry {
    #[arg(long)]
    entry_id: u64,
}

impl GetEntry {
    pub(crate) fn request(self) -> pb::GetEntryRequest {
        pb::GetEntryRequest {
            entry_id: self.entry_id,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ListEntries {
    #[arg(long)]
    account_id: u64,
    /// 0: 100.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    page_size: i32,
    /// The previous page's next_page_token.
    #[arg(long, default_value = "")]
    page_token: String,
}

impl ListEntries {
    pub(crate) fn request(self) -> pb::ListEntriesRequest {
        pb::ListEntriesRequest {
            account_id: self.account_id,
            page_size: self.page_size,
            page_token: self.page_token,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ListHolds {
    #[arg(long)]
    account_id: u64,
    /// 0: 100.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    page_size: i32,
    /// The previous page's next_page_token.
    #[arg(long, default_value = "")]
    page_token: String,
}

impl ListHolds {
    pub(crate) fn request(self) -> pb::ListHoldsRequest {
        pb::ListHoldsRequest {
            account_id: self.account_id,
            page_size: self.page_size,
            page_token: self.page_token,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct GetHold {
    #[arg(long)]
    hold_id: u64,
}

impl GetHold {
    pub(crate) fn request(self) -> pb::GetHoldRequest {
        pb::GetHoldRequest {
            hold_id: self.hold_id,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct LookupKey {
    /// The key to look up.
    #[arg(long = "idempotency-key", visible_alias = "key")]
    idempotency_key: String,
}

impl LookupKey {
    pub(crate) fn request(self) -> pb::LookupKeyRequest {
        pb::LookupKeyRequest {
            idempotency_key: self.idempotency_key,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct Post {
    #[command(flatten)]
    pub(crate) key: Key,
    /// FROM:TO:AMOUNT:CURRENCY[:DESCRIPTION], once per leg, in order.
    #[arg(long = "leg", value_parser = parse_leg, required = true)]
    legs: Vec<pb::Leg>,
    #[command(flatten)]
    description: Description,
    #[command(flatten)]
    metadata: Metadata,
}

impl Post {
    pub(crate) fn request(self) -> pb::PostRequest {
        let idempotency_key = self.key.resolve();
        pb::PostRequest {
            idempotency_key,
            legs: self.legs,
            description: self.description.description,
            metadata: self.metadata.into_map(),
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct SearchEntries {
    /// A pair every entry found holds, KEY=VALUE; 1 to 4.
    #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = parse_pair, required = true)]
    pairs: Vec<(String, String)>,
    /// Only this account's entries; 0 (the default) every account's.
    #[arg(long, default_value_t = 0)]
    account_id: u64,
    /// 0: 100.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    page_size: i32,
    /// The previous page's next_page_token.
    #[arg(long, default_value = "")]
    page_token: String,
}

impl SearchEntries {
    pub(crate) fn request(self) -> pb::SearchEntriesRequest {
        pb::SearchEntriesRequest {
            metadata: self.pairs.into_iter().collect(),
            account_id: self.account_id,
            page_size: self.page_size,
            page_token: self.page_token,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ListAccounts {
    /// A pair every account listed holds, KEY=VALUE; 0 to 4.
    #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = parse_pair)]
    pairs: Vec<(String, String)>,
    /// 0: 100.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    page_size: i32,
    /// The previous page's next_page_token.
    #[arg(long, default_value = "")]
    page_token: String,
}

impl ListAccounts {
    pub(crate) fn request(self) -> pb::ListAccountsRequest {
        pb::ListAccountsRequest {
            metadata: self.pairs.into_iter().collect(),
            page_size: self.page_size,
            page_token: self.page_token,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct WatchEntries {
    /// The last sequence already processed; 0 starts from the ledger's first entry.
    #[arg(long, default_value_t = 0)]
    pub(crate) after_sequence: u64,
    /// Only this account's entries; 0 (the default) every account's.
    #[arg(long, default_value_t = 0)]
    pub(crate) account_id: u64,
    /// Stops after this many entries (for scripts); without it, runs until Ctrl-C.
    #[arg(long)]
    pub(crate) limit: Option<u64>,
}

/// `FROM:TO:AMOUNT:CURRENCY[:DESCRIPTION]`, e.g. `1:2:97:USD`.
fn parse_leg(text: &str) -> Result<pb::Leg, String> {
    let mut parts = text.splitn(5, ':');
    let mut next = |what: &str| {
        parts
            .next()
            .filter(|part| !part.is_empty())
            .ok_or_else(|| format!("no {what} in {text:?}: FROM:TO:AMOUNT:CURRENCY"))
    };
    let id = |part: &str| part.parse::<u64>().map_err(|e| format!("{part:?}: {e}"));
    let from_account_id = id(next("FROM")?)?;
    let to_account_id = id(next("TO")?)?;
    let amount = next("AMOUNT")?;
    let amount = amount
        .parse::<i64>()
        .map_err(|e| format!("{amount:?}: {e}"))?;
    let currency = next("CURRENCY")?.to_owned();
    let description = parts.next().unwrap_or_default().to_owned();
    Ok(pb::Leg {
        from_account_id,
        to_account_id,
        amount,
        currency,
        description,
    })
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser as _};

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_go_before_or_after_the_subcommand() {
        let before = Cli::try_parse_from([
            "ledgerctl",
            "--timeout",
            "3s",
            "-o",
            "json",
            "get-account",
            "--account-id",
            "1",
        ])
        .unwrap();
        let after = Cli::try_parse_from([
            "ledgerctl",
            "get-account",
            "--account-id",
            "1",
            "--timeout",
            "3s",
            "-o",
            "json",
        ])
        .unwrap();
        for cli in [before, after] {
            assert_eq!(cli.global.timeout, Duration::from_secs(3));
            assert_eq!(cli.global.output, Output::Json);
        }
    }

    #[test]
    fn completions_name_every_subcommand() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "ledgerctl", &mut script);
            let script = String::from_utf8(script).unwrap();
            for name in ["charge", "lookup-key", "place-hold", "post"] {
                assert!(script.contains(name), "{shell}: {name}");
            }
        }
    }

    #[test]
    fn a_leg_reads_from_to_amount_currency() {
        let leg = parse_leg("1:2:97:USD").unwrap();
        assert_eq!(
            (leg.from_account_id, leg.to_account_id, leg.amount),
            (1, 2, 97)
        );
        assert_eq!(leg.currency, "USD");
        assert_eq!(parse_leg("1:2:3:EUR:a:b").unwrap().description, "a:b");
        assert!(parse_leg("1:2:USD").is_err());
    }

    #[test]
    fn key_is_short_for_idempotency_key() {
        let cli = Cli::try_parse_from(["ledgerctl", "void-hold", "--hold-id", "4", "--key", "k-1"])
            .unwrap();
        let Command::VoidHold(void) = cli.command else {
            panic!("void-hold");
        };
        assert_eq!(void.key.idempotency_key.as_deref(), Some("k-1"));
    }
}
