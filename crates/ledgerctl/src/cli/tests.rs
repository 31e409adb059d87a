//! The command line against the contract: every unary RPC a subcommand whose
//! flags cover its request, keyed as the client's generated methods are, the
//! flag rules of SPEC 5 on real requests, and RPCs the contract does not have
//! yet (SPEC 3.13 to 3.15), compiled here, each a subcommand with no edit.

use std::time::Duration;

use clap_complete::Shell;
use heck::ToKebabCase as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MapKey, MessageDescriptor, ReflectMessage as _, Value,
};

use super::*;
use crate::run::{WATCH_ACCOUNT, WATCH_AFTER};

fn ledger() -> ServiceDescriptor {
    contract::service(contract::pool()).unwrap()
}

fn parse_with(service: &ServiceDescriptor, args: &[&str]) -> Result<Cli, String> {
    let matches = command(service)?
        .try_get_matches_from([&["ledgerctl"], args].concat())
        .map_err(|e| e.render().to_string())?;
    read(service, &matches)
}

fn parse(args: &[&str]) -> Result<Cli, String> {
    parse_with(&ledger(), args)
}

/// The request a unary subcommand would send.
fn request(args: &[&str]) -> DynamicMessage {
    match parse(args).unwrap().command {
        Command::Call { request, .. } => request,
        other => panic!("{args:?}: not a call: {other:?}"),
    }
}

fn field(message: &DynamicMessage, name: &str) -> Value {
    message.get_field_by_name(name).unwrap().into_owned()
}

/// Whether `message` has `name` set (a default scalar counts as unset).
fn has(message: &DynamicMessage, name: &str) -> bool {
    message.has_field_by_name(name)
}

/// The fields of `request` a subcommand's arg ids cover: a field's own flag,
/// or the flags of its message's fields.
fn uncovered(request: &MessageDescriptor, ids: &[String]) -> Vec<String> {
    request
        .fields()
        .map(|field| field.name().to_owned())
        .filter(|name| {
            !ids.iter()
                .any(|id| id == name || id.starts_with(&format!("{name}.")))
        })
        .collect()
}

/// Every unary RPC of `service` has a subcommand named as the RPC in
/// kebab-case, with a flag for every field of its request.
fn assert_every_unary_rpc_is_a_subcommand(service: &ServiceDescriptor) {
    let command = command(service).unwrap();
    command.clone().debug_assert();
    let unary: Vec<MethodDescriptor> = service
        .methods()
        .filter(|m| !m.is_client_streaming() && !m.is_server_streaming())
        .collect();
    assert!(!unary.is_empty());
    for method in unary {
        let name = method.name().to_kebab_case();
        let subcommand = command
            .find_subcommand(&name)
            .unwrap_or_else(|| panic!("no subcommand {name}"));
        let ids: Vec<String> = subcommand
            .get_arguments()
            .map(|arg| arg.get_id().to_string())
            .collect();
        assert_eq!(
            uncovered(&method.input(), &ids),
            Vec::<String>::new(),
            "{name}: fields without a flag"
        );
        let about = subcommand.get_about().map(ToString::to_string);
        assert!(
            about.is_some_and(|about| !about.is_empty()),
            "{name}: its help is the RPC's comment"
        );
    }
}

#[test]
fn every_unary_rpc_of_the_contract_is_a_subcommand() {
    assert_every_unary_rpc_is_a_subcommand(&ledger());
}

#[test]
fn a_command_is_keyed_as_the_clients_method_is() {
    let service = ledger();
    for method in ledger_client::METHODS {
        let described = service
            .methods()
            .find(|m| contract::path(m) == method.path)
            .unwrap_or_else(|| panic!("{} is not in the descriptor", method.path));
        assert_eq!(contract::keyed(&described), method.keyed, "{}", method.name);
    }
}

#[test]
fn global_flags_go_before_or_after_the_subcommand() {
    let before = [
        "--timeout",
        "3s",
        "-o",
        "json",
        "get-account",
        "--account-id",
        "1",
    ];
    let after = [
        "get-account",
        "--account-id",
        "1",
        "--timeout",
        "3s",
        "-o",
        "json",
    ];
    for args in [before, after] {
        let cli = parse(&args).unwrap();
        assert_eq!(cli.global.timeout, Duration::from_secs(3));
        assert_eq!(cli.global.output, Output::Json);
    }
}

#[test]
fn completions_name_every_subcommand() {
    let command = command(&ledger()).unwrap();
    let names: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut command.clone(), "ledgerctl", &mut script);
        let script = String::from_utf8(script).unwrap();
        for name in &names {
            assert!(script.contains(name.as_str()), "{shell}: {name}");
        }
    }
}

#[test]
fn key_is_short_for_idempotency_key_and_is_never_empty() {
    let void = request(&["void-hold", "--hold-id", "4", "--key", "k-1"]);
    assert_eq!(field(&void, "idempotency_key"), Value::String("k-1".into()));
    assert!(!has(
        &request(&["void-hold", "--hold-id", "4"]),
        "idempotency_key"
    ));
    let empty = parse(&["void-hold", "--hold-id", "4", "--key", ""]).unwrap_err();
    assert!(empty.contains("leave the flag out"), "{empty}");
    let lookup = request(&["lookup-key", "--key", "req-42"]);
    assert_eq!(
        field(&lookup, "idempotency_key"),
        Value::String("req-42".into())
    );
}

#[test]
fn legs_are_listed_in_order_and_metadata_is_pairs() {
    let post = request(&[
        "post",
        "--leg",
        "1:2:97:USD",
        "--leg",
        "1:3:3:USD:fee: platform",
        "--metadata",
        "order=A-1",
        "--metadata",
        "order=A-2",
    ]);
    let Value::List(legs) = field(&post, "legs") else {
        panic!("a list");
    };
    let amounts: Vec<Value> = legs
        .iter()
        .map(|leg| {
            leg.as_message()
                .unwrap()
                .get_field_by_name("amount")
                .unwrap()
                .into_owned()
        })
        .collect();
    assert_eq!(amounts, [Value::I64(97), Value::I64(3)]);
    let last = legs[1].as_message().unwrap();
    assert_eq!(
        field(last, "description"),
        Value::String("fee: platform".into())
    );
    let Value::Map(metadata) = field(&post, "metadata") else {
        panic!("a map");
    };
    assert_eq!(
        metadata.get(&MapKey::String("order".into())),
        Some(&Value::String("A-2".into())),
        "a key given twice keeps its last value"
    );
    let error = parse(&["post", "--leg", "1:x:97:USD"]).unwrap_err();
    assert!(error.contains("to_account_id"), "{error}");
}

#[test]
fn limits_are_flattened_and_always_sent() {
    let open = request(&[
        "open-account",
        "--currency",
        "USD",
        "--min-balance",
        "-50.00",
        "--max-balance-minor",
        "250000",
    ]);
    let limits = field(&open, "limits");
    let limits = limits.as_message().unwrap();
    assert_eq!(field(limits, "min_balance"), Value::I64(-5000));
    assert_eq!(field(limits, "max_balance"), Value::I64(250_000));
    assert!(!has(limits, "no_min_balance"));
    let reset = request(&["set-limits", "--account-id", "5"]);
    assert!(
        has(&reset, "limits"),
        "SetLimits needs its limits: empty, the defaults"
    );
    let none = request(&["set-limits", "--account-id", "5", "--no-min-balance"]);
    let limits = field(&none, "limits");
    assert_eq!(
        field(limits.as_message().unwrap(), "no_min_balance"),
        Value::Bool(true)
    );
    assert!(
        !has(limits.as_message().unwrap(), "max_balance"),
        "absent: no ceiling"
    );
}

#[test]
fn durations_times_and_switches() {
    let hold = request(&[
        "place-hold",
        "--account-id",
        "1",
        "--amount-minor",
        "5",
        "--currency",
        "USD",
        "--ttl",
        "10m",
    ]);
    let ttl: prost_types::Duration = field(&hold, "ttl")
        .as_message()
        .unwrap()
        .transcode_to()
        .unwrap();
    assert_eq!(ttl.seconds, 600);
    let balance = request(&[
        "get-balance",
        "--account-id",
        "1",
        "--as-of-time",
        "2026-12-31T23:59:59Z",
    ]);
    assert!(has(&balance, "as_of_time"));
    let error = parse(&[
        "get-balance",
        "--account-id",
        "1",
        "--as-of-time",
        "yesterday",
    ])
    .unwrap_err();
    assert!(
        error.contains("'--as-of-time <AS_OF_TIME>'") && error.contains("2026-12-31T23:59:59Z"),
        "{error}"
    );
    let reverse = request(&["reverse", "--original-key", "k", "--force"]);
    assert_eq!(field(&reverse, "force"), Value::Bool(true));
}

#[test]
fn help_comes_from_the_protos_comments() {
    let command = command(&ledger()).unwrap();
    let charge = command.find_subcommand("charge").unwrap();
    let about = charge.get_about().unwrap().to_string();
    assert!(about.starts_with("Takes money from an account"), "{about}");
    let amount = charge
        .get_arguments()
        .find(|arg| arg.get_id() == "amount")
        .unwrap();
    let help = amount.get_help().unwrap().to_string();
    assert!(
        help.starts_with("In its currency's units")
            && help.ends_with("The field: Minor units; must be positive."),
        "{help}"
    );
}

#[test]
fn watch_entries_follows_the_stream_with_its_request_and_a_limit() {
    let cli = parse(&[
        "watch-entries",
        "--after-sequence",
        "4",
        "--account-id",
        "2",
        "--limit",
        "3",
    ])
    .unwrap();
    let Command::Watch { request, limit } = cli.command else {
        panic!("a watch");
    };
    assert_eq!(limit, Some(3));
    assert_eq!(field(&request, WATCH_AFTER), Value::U64(4));
    assert_eq!(field(&request, WATCH_ACCOUNT), Value::U64(2));
    // The watcher takes these two fields; one added to the request would need
    // the watcher to send it, not a flag that is silently dropped.
    let fields: Vec<String> = request
        .descriptor()
        .fields()
        .map(|f| f.name().to_owned())
        .collect();
    assert_eq!(fields, [WATCH_AFTER, WATCH_ACCOUNT]);
}

/// The RPCs of SPEC 3.14 added to the proto as they are specified.
const FUTURE: &str = r"
message CreateAccountSetRequest { string idempotency_key = 1; string currency = 2;
  map<string, string> metadata = 3; }
message CreateAccountSetReply { AccountSet set = 1; }
message AccountSet { uint64 set_id = 1; string currency = 2; repeated uint64 account_ids = 4; }
message SetMemberRequest { string idempotency_key = 1; uint64 set_id = 2;
  uint64 account_id = 3; uint64 member_set_id = 4; }
message SetMemberReply { AccountSet set = 1; }
message GetSetBalanceRequest { uint64 set_id = 1; uint64 as_of_sequence = 2;
  google.protobuf.Timestamp as_of_time = 3; }
message SetBalance { int64 balance = 1; }
";

const FUTURE_RPCS: &str = "service Ledger {
  // A set of accounts whose balances roll up.
  rpc CreateAccountSet(CreateAccountSetRequest) returns (CreateAccountSetReply);
  // Adds an account or a set to a set.
  rpc AddToSet(SetMemberRequest) returns (SetMemberReply);
  // A set's balance at a point.
  rpc GetSetBalance(GetSetBalanceRequest) returns (SetBalance);
";

/// The contract with [`FUTURE`]'s RPCs, compiled as ledger-proto compiles it.
fn future_contract() -> ServiceDescriptor {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    let proto = std::fs::read_to_string(format!("{root}/ledger/v1/ledger.proto")).unwrap();
    assert!(proto.contains("service Ledger {\n"));
    let proto = proto.replacen("service Ledger {\n", FUTURE_RPCS, 1) + FUTURE;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("ledger/v1")).unwrap();
    std::fs::create_dir_all(dir.path().join("google/rpc")).unwrap();
    std::fs::write(dir.path().join("ledger/v1/ledger.proto"), proto).unwrap();
    std::fs::copy(
        format!("{root}/google/rpc/status.proto"),
        dir.path().join("google/rpc/status.proto"),
    )
    .unwrap();
    let set = protox::compile(["ledger/v1/ledger.proto"], [dir.path()]).unwrap();
    let pool = DescriptorPool::from_file_descriptor_set(set).unwrap();
    contract::service(&pool).unwrap()
}

#[test]
fn rpcs_added_to_the_proto_are_subcommands_with_no_edit() {
    let service = future_contract();
    assert_every_unary_rpc_is_a_subcommand(&service);
    let call = |args: &[&str]| match parse_with(&service, args).unwrap().command {
        Command::Call { method, request } => (contract::keyed(&method), request),
        other => panic!("{args:?}: {other:?}"),
    };

    let (keyed, set) = call(&[
        "create-account-set",
        "--currency",
        "USD",
        "--metadata",
        "team=ops",
    ]);
    assert!(keyed);
    assert_eq!(field(&set, "currency"), Value::String("USD".into()));

    // SPEC 3.15's, which the contract has: repeated fields and enums by name,
    // an optional field present when given.
    let real = |args: &[&str]| match parse(args).unwrap().command {
        Command::Call { method, request } => (contract::keyed(&method), request),
        other => panic!("{args:?}: {other:?}"),
    };
    let (keyed, subscription) = real(&[
        "create-subscription",
        "--url",
        "https://example.test/hook",
        "--account-id",
        "1",
        "--account-id",
        "2",
        "--kind",
        "CHARGE",
        "--kind",
        "ENTRY_KIND_CREDIT",
        "--after-sequence",
        "0",
    ]);
    assert!(keyed);
    assert_eq!(
        field(&subscription, "account_ids"),
        Value::List(vec![Value::U64(1), Value::U64(2)])
    );
    assert_eq!(
        field(&subscription, "kinds"),
        Value::List(vec![Value::EnumNumber(1), Value::EnumNumber(2)])
    );
    assert!(
        has(&subscription, "after_sequence"),
        "given 0: present, the whole journal"
    );
    let (_, from_now) = real(&["create-subscription", "--url", "https://example.test/hook"]);
    assert!(!has(&from_now, "after_sequence"), "absent: from now");

    let (keyed, batch) = call(&[
        "batch",
        "--item",
        r#"{"charge": {"idempotencyKey": "b-1", "accountId": "5", "amount": "3"}}"#,
    ]);
    assert!(
        !keyed,
        "a batch carries its items' keys, not one of its own"
    );
    let Value::List(items) = field(&batch, "items") else {
        panic!("a list");
    };
    let charge = field(items[0].as_message().unwrap(), "charge");
    assert_eq!(
        field(charge.as_message().unwrap(), "account_id"),
        Value::U64(5)
    );
    let error = parse_with(&service, &["batch", "--item", "{\"charge\": 5}"]).unwrap_err();
    assert!(error.contains("BatchItem"), "{error}");

    let (_, balance) = call(&["get-set-balance", "--set-id", "3", "--as-of-sequence", "9"]);
    assert_eq!(field(&balance, "set_id"), Value::U64(3));
}

/// The request's amount, given as `flags` to `charge --account-id 1`.
fn charged(flags: &[&str]) -> Result<Value, String> {
    let cli = parse(&[&["charge", "--account-id", "1"], flags].concat())?;
    match cli.command {
        Command::Call { request, .. } => Ok(field(&request, "amount")),
        other => Err(format!("not a call: {other:?}")),
    }
}

#[test]
fn an_amount_is_read_in_its_currencys_units_or_given_in_minor_units() {
    for (amount, currency, minor) in [
        ("10.00", "USD", 1000),
        ("0.05", "USD", 5),
        ("1000", "JPY", 1000),
        ("1.000", "KWD", 1000),
        ("0.007", "KWD", 7),
    ] {
        assert_eq!(
            charged(&["--amount", amount, "--currency", currency]),
            Ok(Value::I64(minor)),
            "{amount} {currency}"
        );
    }
    for currency in ["USD", "JPY", "ABC"] {
        assert_eq!(
            charged(&["--amount-minor", "1000", "--currency", currency]),
            Ok(Value::I64(1000)),
            "{currency}"
        );
    }
}

#[test]
fn an_amount_with_other_decimals_names_the_currencys_exponent() {
    for (amount, currency, exponent) in [
        ("10", "USD", 2),
        ("10.5", "USD", 2),
        ("10.000", "USD", 2),
        ("1000.0", "JPY", 0),
        ("1.00", "KWD", 3),
    ] {
        let error = charged(&["--amount", amount, "--currency", currency]).unwrap_err();
        assert!(
            error.contains(&format!(
                "{currency} is written with exactly {exponent} decimals"
            )),
            "{amount} {currency}: {error}"
        );
    }
    let unknown = charged(&["--amount", "10.00", "--currency", "ABC"]).unwrap_err();
    assert!(
        unknown.contains("ABC has no decimals known") && unknown.contains("--amount-minor"),
        "{unknown}"
    );
    let no_currency = charged(&["--amount", "10.00"]).unwrap_err();
    assert!(no_currency.contains("give --currency"), "{no_currency}");
}

#[test]
fn an_amount_takes_exactly_one_of_its_two_flags() {
    let both = charged(&[
        "--amount",
        "1.00",
        "--amount-minor",
        "100",
        "--currency",
        "USD",
    ])
    .unwrap_err();
    assert!(both.contains("cannot be used with"), "{both}");
    let neither = charged(&["--currency", "USD"]).unwrap_err();
    assert!(
        neither.contains("required") && neither.contains("--amount"),
        "{neither}"
    );
}

#[test]
fn a_call_without_a_currency_reads_its_amount_in_the_one_given() {
    let refund = |flags: &[&str]| {
        let cli = parse(&[&["refund", "--entry-id", "7"], flags].concat())?;
        match cli.command {
            Command::Call { request, .. } => Ok(request),
            other => Err(format!("not a call: {other:?}")),
        }
    };
    let refunded = refund(&["--amount", "2.50", "--currency", "USD"]).unwrap();
    assert_eq!(field(&refunded, "amount"), Value::I64(250));
    assert!(
        refunded
            .descriptor()
            .get_field_by_name("currency")
            .is_none(),
        "not sent: the request has no currency"
    );
    let minor = refund(&["--amount-minor", "250"]).unwrap();
    assert_eq!(field(&minor, "amount"), Value::I64(250));
    let unknown = refund(&["--amount", "2.50"]).unwrap_err();
    assert!(
        unknown.contains("give --currency") && unknown.contains("--amount-minor"),
        "{unknown}"
    );
    let limits = request(&[
        "set-limits",
        "--account-id",
        "5",
        "--min-balance",
        "-1000",
        "--currency",
        "JPY",
    ]);
    let limits = field(&limits, "limits");
    assert_eq!(
        field(limits.as_message().unwrap(), "min_balance"),
        Value::I64(-1000)
    );
}
